#include "model/networks/calibration_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace ts {
namespace {

constexpr char kHeader[] = "taylorshift-calibration 1";

absl::StatusOr<std::map<std::string, std::string>> ParseFields(
    const std::vector<std::string>& words, const std::string& where) {
  std::map<std::string, std::string> fields;
  for (std::size_t i = 1; i < words.size(); ++i) {
    const auto eq = words[i].find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected key=value, got '", words[i], "'"));
    }
    fields[std::string(words[i].substr(0, eq))] = std::string(words[i].substr(eq + 1));
  }
  return fields;
}

}  // namespace

absl::Status SaveCalibration(const std::string& path,
                             const std::vector<CalibrationResult>& results) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
    out << kHeader << "\n";
    out.precision(9);
    for (const auto& r : results) {
      const std::string key =
          absl::StrCat("head_dim=", r.head_dim, " heads=", r.heads, " batch=", r.batch,
                       " precision=", PrecisionName(r.precision));
      out << "crossover " << key << " tokens=" << r.crossover_tokens
          << " crossed=" << (r.crossed ? 1 : 0) << " device=" << r.device
          << " threads=" << r.threads << "\n";
      for (const auto& p : r.points) {
        out << "point " << key << " tokens=" << p.tokens << " direct_s=" << p.direct_seconds
            << " efficient_s=" << p.efficient_seconds << "\n";
      }
    }
    if (!out.flush()) return absl::DataLossError(absl::StrCat("write failed: ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CalibrationResult>> LoadCalibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("calibration file not found: ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return ParseCalibration(text.str(), path);
}

absl::StatusOr<std::vector<CalibrationResult>> ParseCalibration(const std::string& text,
                                                                const std::string& source) {
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines[0] != kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a calibration file (first line must be '", kHeader, "')"));
  }
  std::vector<CalibrationResult> results;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(source, ":", i + 1);
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;  // spaces only
    TS_ASSIGN_OR_RETURN(auto fields, ParseFields(words, where));
    const bool crossover = words[0] == "crossover";
    if (!crossover && words[0] != "point") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown record '", words[0], "' (expected crossover or point)"));
    }
    const std::vector<absl::string_view> known =
        crossover ? std::vector<absl::string_view>{"head_dim",  "heads",   "batch",  "tokens",
                                                   "precision", "crossed", "device", "threads"}
                  : std::vector<absl::string_view>{"head_dim",  "heads",    "batch",      "tokens",
                                                   "precision", "direct_s", "efficient_s"};
    for (const auto& [key, value] : fields) {
      if (absl::c_find(known, key) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key '", key, "' in a ",
                                                       words[0], " line (expected one of ",
                                                       absl::StrJoin(known, ", "), ")"));
      }
    }
    const auto integer = [&](const std::string& key) -> absl::StatusOr<std::int64_t> {
      std::int64_t value = 0;
      const auto it = fields.find(key);
      if (it == fields.end() || !absl::SimpleAtoi(it->second, &value) || value < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": missing or invalid non-negative integer '", key, "'"));
      }
      return value;
    };
    const auto real = [&](const std::string& key) -> absl::StatusOr<double> {
      double value = 0;
      const auto it = fields.find(key);
      if (it == fields.end() || !absl::SimpleAtod(it->second, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": missing or invalid number '", key, "'"));
      }
      return value;
    };
    TS_ASSIGN_OR_RETURN(const std::int64_t head_dim, integer("head_dim"));
    TS_ASSIGN_OR_RETURN(const std::int64_t heads, integer("heads"));
    TS_ASSIGN_OR_RETURN(const std::int64_t batch, integer("batch"));
    TS_ASSIGN_OR_RETURN(const std::int64_t tokens, integer("tokens"));
    Precision precision = Precision::kFp32;
    if (const auto it = fields.find("precision"); it != fields.end()) {
      const auto parsed = ParsePrecision(it->second);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
      }
      precision = *parsed;
    }
    if (crossover) {
      CalibrationResult r;
      r.head_dim = head_dim;
      r.heads = heads;
      r.batch = batch;
      r.precision = precision;
      r.crossover_tokens = tokens;
      r.crossed = fields["crossed"] == "1";
      r.device = fields["device"];
      if (const auto it = fields.find("threads"); it != fields.end()) {
        std::int32_t threads = 0;
        if (!absl::SimpleAtoi(it->second, &threads) || threads < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": invalid thread count 'threads=", it->second, "'"));
        }
        r.threads = threads;
      }
      results.push_back(std::move(r));
    } else {
      if (results.empty() || results.back().head_dim != head_dim || results.back().heads != heads ||
          results.back().batch != batch || results.back().precision != precision) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": point line without a matching crossover line before it"));
      }
      TS_ASSIGN_OR_RETURN(const double direct, real("direct_s"));
      TS_ASSIGN_OR_RETURN(const double efficient, real("efficient_s"));
      results.back().points.push_back({tokens, direct, efficient});
    }
  }
  return results;
}

void CrossoverTable::Add(std::int64_t batch, std::int64_t tokens) {
  const auto it =
      std::lower_bound(entries_.begin(), entries_.end(), batch,
                       [](const auto& entry, std::int64_t b) { return entry.first < b; });
  if (it != entries_.end() && it->first == batch) {
    it->second = tokens;
  } else {
    entries_.insert(it, {batch, tokens});
  }
}

std::optional<std::int64_t> CrossoverTable::For(std::int64_t batch) const {
  if (entries_.empty()) return std::nullopt;
  if (batch <= entries_.front().first) return entries_.front().second;
  if (batch >= entries_.back().first) return entries_.back().second;
  const auto hi =
      std::lower_bound(entries_.begin(), entries_.end(), batch,
                       [](const auto& entry, std::int64_t b) { return entry.first < b; });
  if (hi->first == batch) return hi->second;
  const auto lo = hi - 1;
  const auto log = [](std::int64_t x) { return std::log(static_cast<double>(x)); };
  const double t = (log(batch) - log(lo->first)) / (log(hi->first) - log(lo->first));
  return static_cast<std::int64_t>(
      std::llround(std::exp(log(lo->second) + t * (log(hi->second) - log(lo->second)))));
}

std::string CrossoverTable::Describe() const {
  std::string text;
  for (const auto& [batch, tokens] : entries_) {
    absl::StrAppend(&text, text.empty() ? "" : ", ", "batch ", batch, ": ", tokens, " tokens");
  }
  return text.empty() ? "none" : text;
}

CrossoverTable LookupCrossovers(const std::vector<CalibrationResult>& results,
                                std::int64_t head_dim, std::int64_t heads, Precision precision) {
  CrossoverTable table;
  for (const auto& r : results) {
    if (r.head_dim == head_dim && r.heads == heads && r.precision == precision && r.batch > 0 &&
        r.crossover_tokens > 0) {
      table.Add(r.batch, r.crossover_tokens);
    }
  }
  return table;
}

absl::StatusOr<CrossoverTable> LoadCrossovers(const std::string& path, std::int64_t head_dim,
                                              std::int64_t heads, Precision precision) {
  TS_ASSIGN_OR_RETURN(const auto results, LoadCalibration(path));
  CrossoverTable table = LookupCrossovers(results, head_dim, heads, precision);
  if (table.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "calibration file ", path, " has no crossover for head_dim ", head_dim, " with ", heads,
        " heads at precision ", PrecisionName(precision), " (measure one with `tsmodel calibrate",
        " --precision ", PrecisionName(precision), "`)"));
  }
  return table;
}

}  // namespace ts

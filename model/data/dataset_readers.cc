#include "model/data/dataset_readers.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/data_root.h"
#include "common/file_io.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "model/api/inputs.h"
#include "model/data/listops_generator.h"

namespace ts {
namespace {

// "[neg, pos]", at most 20 shown: an error names the labels without growing with them.
std::string ShownLabels(const std::vector<std::string>& labels) {
  constexpr std::size_t kShown = 20;
  if (labels.size() <= kShown) return absl::StrCat("[", absl::StrJoin(labels, ", "), "]");
  return absl::StrCat("[", absl::StrJoin(labels.begin(), labels.begin() + kShown, ", "), ", …]");
}

namespace fs = std::filesystem;

constexpr std::int64_t kMaxInferredIntegerLabel = 65535;
constexpr std::int64_t kCifarImageBytes = 3 * 1024;
constexpr std::int64_t kCifarRecordBytes = 1 + kCifarImageBytes;

// A malformed record: the INVALID_ARGUMENT to return in fail mode; with skip_malformed, OK and
// counted in `dataset` (its reason kept while there are fewer than max_skip_reasons).
absl::Status ReportMalformed(const DatasetReadOptions& options, Dataset& dataset,
                             const std::string& where, const std::string& why) {
  std::string message = absl::StrCat(where, ": ", why);
  if (!options.skip_malformed) return absl::InvalidArgumentError(message);
  ++dataset.skipped;
  if (static_cast<std::int64_t>(dataset.skip_reasons.size()) < options.max_skip_reasons) {
    dataset.skip_reasons.push_back(std::move(message));
  }
  return absl::OkStatus();
}

absl::Status OpenError(const std::string& path, int error_number) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat("no such file: ", path));
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a file"));
  }
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat("cannot read ", path, ": ", std::strerror(error_number)));
}

// Line-by-line reader over a file opened for a text format; strips CR and a leading BOM.
class LineReader {
 public:
  static absl::StatusOr<LineReader> Open(const std::string& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return OpenError(path, ENOENT);
    errno = 0;
    LineReader reader;
    reader.in_.open(path, std::ios::binary);
    if (!reader.in_) return OpenError(path, errno != 0 ? errno : EACCES);
    return reader;
  }
  // False at the end of the file.
  bool Next(std::string* line) {
    if (!std::getline(in_, *line)) return false;
    ++line_number_;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    if (line_number_ == 1 && line->rfind("\xEF\xBB\xBF", 0) == 0) line->erase(0, 3);
    return true;
  }
  bool failed() const { return in_.bad(); }
  std::int64_t line_number() const { return line_number_; }

 private:
  std::ifstream in_;
  std::int64_t line_number_ = 0;
};

bool IsBlank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// ABORTED when the read's stop_requested says so (asked before each record).
absl::Status CheckStop(const DatasetReadOptions& options, const std::string& path,
                       const Dataset& dataset) {
  if (!options.stop_requested || !options.stop_requested()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("stopped while reading ", path, " after ",
                                         dataset.examples.size(), " examples"));
}

absl::Status NoExamplesError(const std::string& path, const Dataset& dataset) {
  return absl::InvalidArgumentError(absl::StrCat("no usable examples in ", path, " (",
                                                 dataset.skipped, " malformed records skipped)"));
}

// One JSON Lines record: a JSON object, strictly (RFC 8259: UTF-8, no comments or trailing
// commas); a key twice at the top level is refused rather than silently taking the last.
absl::StatusOr<nlohmann::json> ParseJsonLine(const std::string& line) {
  std::string duplicate;
  std::vector<std::string> keys;
  const nlohmann::json::parser_callback_t top_level_keys =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (std::find(keys.begin(), keys.end(), key) != keys.end()) duplicate = key;
          keys.push_back(key);
        }
        return true;
      };
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line, top_level_keys);
  } catch (const nlohmann::json::parse_error& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 9: <detail>".
    const std::string what = e.what();
    const std::size_t detail = what.find(": ");
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", e.byte, ": ",
                     Capped(detail == std::string::npos ? what : what.substr(detail + 2))));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range (1e400, a 400-digit integer) is reported this way, not as
    // a parse_error: "[json.exception.out_of_range.406] number overflow parsing '1e400'". It
    // is in the value of the last top-level key read.
    const std::string what = e.what();
    const std::size_t detail = what.find("] ");
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: ", keys.empty() ? "" : absl::StrCat(Quoted(keys.back()), ": "),
                     Capped(detail == std::string::npos ? what : what.substr(detail + 2)),
                     " (beyond the range of a double)"));
  }
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a JSON object, got ", object.type_name()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate key \"", duplicate, "\""));
  }
  return object;
}

// The examples of a text file, one per non-blank line: `parse` gives a line's example, or the
// INVALID_ARGUMENT that says why it is malformed.
absl::Status ReadLineRecords(
    LineReader& reader, const std::string& path, const DatasetReadOptions& options,
    Dataset& dataset, const std::function<absl::StatusOr<Example>(const std::string&)>& parse) {
  std::string line;
  while (reader.Next(&line)) {
    TS_RETURN_IF_ERROR(CheckStop(options, path, dataset));
    if (IsBlank(line)) continue;
    absl::StatusOr<Example> example = parse(line);
    if (example.ok()) {
      dataset.examples.push_back(*std::move(example));
    } else {
      TS_RETURN_IF_ERROR(ReportMalformed(options, dataset,
                                         absl::StrCat(path, ":", reader.line_number()),
                                         std::string(example.status().message())));
    }
  }
  if (reader.failed()) return absl::DataLossError(absl::StrCat("error reading ", path));
  if (dataset.examples.empty()) return NoExamplesError(path, dataset);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JsonLinesLabelScan> ScanJsonLinesLabels(const std::string& path,
                                                       const std::vector<std::string>& known,
                                                       std::int64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return OpenError(path, ENOENT);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path, errno != 0 ? errno : EACCES);
  // One bounded read; a last line cut by the bound is left out.
  std::string text(static_cast<std::size_t>(std::max<std::int64_t>(max_bytes, 0)) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  text.resize(static_cast<std::size_t>(in.gcount()));
  JsonLinesLabelScan scan;
  scan.complete = static_cast<std::int64_t>(text.size()) <= max_bytes;
  if (!scan.complete) text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n'));
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  std::int64_t line_number = 0;
  for (absl::string_view view : absl::StrSplit(text, '\n')) {
    ++line_number;
    std::string line(view);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (IsBlank(line)) continue;
    absl::StatusOr<nlohmann::json> object = ParseJsonLine(line);
    if (!object.ok()) continue;
    const auto label = object->find("label");
    if (label == object->end()) continue;
    std::string name;
    bool is_known = false;
    if (label->is_string()) {
      name = label->get<std::string>();
      is_known = std::find(known.begin(), known.end(), name) != known.end();
    } else if (label->is_number_unsigned()) {
      const auto index = label->get<std::uint64_t>();
      name = std::to_string(index);
      is_known = index < known.size();
    } else {
      continue;
    }
    if (!is_known && scan.unknown_line == 0) {
      scan.unknown_line = line_number;
      scan.unknown_label = name;
    }
    if (std::find(scan.labels.begin(), scan.labels.end(), name) == scan.labels.end()) {
      if (scan.labels.size() < kMaxScannedLabels) {
        scan.labels.push_back(std::move(name));
      } else {
        scan.more_labels = true;
      }
    }
  }
  return scan;
}

absl::StatusOr<Dataset> ReadJsonLinesDataset(const std::string& path,
                                             const DatasetReadOptions& options) {
  TS_ASSIGN_OR_RETURN(LineReader reader, LineReader::Open(path));
  Dataset dataset;
  const bool infer = options.labels.empty();
  // Inferred string labels are mapped to indices once every name is known.
  std::vector<std::string> string_labels;
  std::optional<bool> integer_kind;  // inferred labels: the kind the first record set
  std::int64_t max_integer_label = -1;
  const auto parse = [&](const std::string& line) -> absl::StatusOr<Example> {
    TS_ASSIGN_OR_RETURN(nlohmann::json object, ParseJsonLine(line));
    const auto text = object.find("text");
    const auto label = object.find("label");
    if (text == object.end()) return absl::InvalidArgumentError("missing \"text\"");
    if (!text->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"text\" must be a string, got ", text->type_name()));
    }
    if (text->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError("empty \"text\"");
    }
    if (label == object.end()) return absl::InvalidArgumentError("missing \"label\"");
    std::int64_t index = -1;
    if (label->is_string()) {
      const std::string& name = label->get_ref<const std::string&>();
      if (infer) {
        if (integer_kind.value_or(false)) {
          return absl::InvalidArgumentError("string label in a file whose labels are integers");
        }
        integer_kind = false;
        string_labels.push_back(name);
      } else {
        auto it = std::find(options.labels.begin(), options.labels.end(), name);
        if (it == options.labels.end()) {
          return absl::InvalidArgumentError(absl::StrCat("label \"", name, "\" is not one of the ",
                                                         options.labels.size(), " labels ",
                                                         ShownLabels(options.labels)));
        }
        index = it - options.labels.begin();
      }
    } else if (label->is_number_integer()) {
      // Written without fraction or exponent (1.0 and 1e2 are not integers); the parser
      // makes every non-negative one unsigned.
      const std::int64_t limit =
          infer ? kMaxInferredIntegerLabel + 1 : static_cast<std::int64_t>(options.labels.size());
      if (!label->is_number_unsigned() ||
          label->get<std::uint64_t>() >= static_cast<std::uint64_t>(limit)) {
        return absl::InvalidArgumentError(
            absl::StrCat("integer label ", label->dump(), " is outside [0, ", limit, ")"));
      }
      if (infer && integer_kind.has_value() && !*integer_kind) {
        return absl::InvalidArgumentError("integer label in a file whose labels are strings");
      }
      integer_kind = true;
      index = label->get<std::int64_t>();
      max_integer_label = std::max(max_integer_label, index);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("\"label\" must be a string or a non-negative integer, got ",
                       label->is_number() ? label->dump() : label->type_name()));
    }
    return Example{std::move(text->get_ref<std::string&>()), index};
  };
  TS_RETURN_IF_ERROR(ReadLineRecords(reader, path, options, dataset, parse));

  if (!infer) {
    dataset.label_names = options.labels;
  } else if (integer_kind.value_or(false)) {
    for (std::int64_t i = 0; i <= max_integer_label; ++i) {
      dataset.label_names.push_back(std::to_string(i));
    }
  } else {
    std::vector<std::string> names = string_labels;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (std::size_t i = 0; i < dataset.examples.size(); ++i) {
      dataset.examples[i].label =
          std::lower_bound(names.begin(), names.end(), string_labels[i]) - names.begin();
    }
    dataset.label_names = std::move(names);
  }
  return dataset;
}

absl::StatusOr<Dataset> ReadFolderDataset(const std::string& root,
                                          const DatasetReadOptions& options) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return absl::NotFoundError(absl::StrCat("no such folder: ", root));
  if (!fs::is_directory(root, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(root, " is not a folder"));
  }
  TS_RETURN_IF_ERROR(CheckInsideRoot(root, options.confine_to));
  Dataset dataset;

  std::vector<std::string> classes = options.labels;
  if (classes.empty()) {
    for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.' || !entry.is_directory(ec)) continue;
      classes.push_back(name);
    }
    if (ec) return OpenError(root, ec.value());
    std::sort(classes.begin(), classes.end());
    if (classes.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(root, " has no class folders"));
    }
  }

  for (std::size_t label = 0; label < classes.size(); ++label) {
    const fs::path class_dir = fs::path(root) / classes[label];
    if (!fs::is_directory(class_dir, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("class folder ", class_dir.string(), " does not exist"));
    }
    TS_RETURN_IF_ERROR(CheckInsideRoot(class_dir.string(), options.confine_to));
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(class_dir, ec)) {
      if (entry.path().extension() == ".txt") files.push_back(entry.path());
    }
    if (ec) return OpenError(class_dir.string(), ec.value());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      TS_RETURN_IF_ERROR(CheckStop(options, root, dataset));
      TS_RETURN_IF_ERROR(CheckInsideRoot(file.string(), options.confine_to));
      absl::StatusOr<std::string> bytes = ReadFile(file.string());
      if (bytes.ok() && !bytes->empty()) {
        dataset.examples.push_back(Example{std::move(*bytes), static_cast<std::int64_t>(label)});
      } else {
        TS_RETURN_IF_ERROR(ReportMalformed(
            options, dataset, file.string(),
            bytes.ok() ? "empty file" : absl::StrCat("unreadable: ", bytes.status().message())));
      }
    }
  }
  if (dataset.examples.empty()) return NoExamplesError(root, dataset);
  dataset.label_names = std::move(classes);
  return dataset;
}

absl::StatusOr<Dataset> ReadListOpsTsvDataset(const std::string& path,
                                              const DatasetReadOptions& options) {
  TS_ASSIGN_OR_RETURN(LineReader reader, LineReader::Open(path));
  Dataset dataset;
  std::string line;
  if (!reader.Next(&line) || line != "Source\tTarget") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: expected the header line \"Source<TAB>Target\""));
  }
  const auto parse = [](const std::string& record) -> absl::StatusOr<Example> {
    const std::vector<absl::string_view> columns = absl::StrSplit(record, '\t');
    if (columns.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected 2 tab-separated columns (Source, Target), got ", columns.size()));
    }
    if (absl::StripAsciiWhitespace(columns[0]).empty()) {
      return absl::InvalidArgumentError("empty Source");
    }
    const absl::string_view target = absl::StripAsciiWhitespace(columns[1]);
    if (target.size() != 1 || target[0] < '0' || target[0] > '9') {
      return absl::InvalidArgumentError(
          absl::StrCat("Target must be a digit 0-9, got \"", target, "\""));
    }
    return Example{std::string(columns[0]), target[0] - '0'};
  };
  TS_RETURN_IF_ERROR(ReadLineRecords(reader, path, options, dataset, parse));
  dataset.label_names = ListOpsLabelNames();
  return dataset;
}

absl::StatusOr<Dataset> ReadCifar10Dataset(const std::string& path,
                                           const DatasetReadOptions& options) {
  TS_ASSIGN_OR_RETURN(const std::string data, ReadFile(path));
  Dataset dataset;
  const std::int64_t size = static_cast<std::int64_t>(data.size());
  const std::int64_t records = size / kCifarRecordBytes;
  std::string rgb(kCifarImageBytes, '\0');
  for (std::int64_t i = 0; i < records; ++i) {
    TS_RETURN_IF_ERROR(CheckStop(options, path, dataset));
    const char* record = data.data() + i * kCifarRecordBytes;
    const int label = static_cast<unsigned char>(record[0]);
    if (label > 9) {
      TS_RETURN_IF_ERROR(
          ReportMalformed(options, dataset, absl::StrCat(path, ": record ", i),
                          absl::StrCat("label byte ", label, " is not a class 0-9")));
      continue;
    }
    // Planar (all R, all G, all B) → interleaved RGB, the layout ImageToTokens takes.
    const char* planes = record + 1;
    for (int p = 0; p < 1024; ++p) {
      rgb[3 * p] = planes[p];
      rgb[3 * p + 1] = planes[1024 + p];
      rgb[3 * p + 2] = planes[2048 + p];
    }
    TS_ASSIGN_OR_RETURN(std::string gray, ImageToTokens(32, 32, 3, rgb));
    dataset.examples.push_back(Example{std::move(gray), label});
  }
  if (const std::int64_t tail = size % kCifarRecordBytes; tail != 0) {
    TS_RETURN_IF_ERROR(ReportMalformed(
        options, dataset, absl::StrCat(path, ": record ", records),
        absl::StrCat("truncated record: ", tail, " of ", kCifarRecordBytes, " bytes")));
  }
  if (dataset.examples.empty()) return NoExamplesError(path, dataset);
  dataset.label_names = Cifar10LabelNames();
  return dataset;
}

std::vector<std::string> Cifar10LabelNames() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

}  // namespace ts

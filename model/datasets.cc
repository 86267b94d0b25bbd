#include "model/datasets.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "model/inputs.h"
#include "model/quoted.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMaxInferredIntegerLabel = 65535;
constexpr std::int64_t kCifarImageBytes = 3 * 1024;
constexpr std::int64_t kCifarRecordBytes = 1 + kCifarImageBytes;
constexpr int kMaxListOpsDepth = 10;
constexpr std::int64_t kListOpsMinArgs = 2;
constexpr std::int64_t kListOpsMaxArgs = 6;
constexpr int kListOpsAttemptsPerExample = 1000;
constexpr std::array<std::string_view, 6> kListOpsOperators = {"MIN",   "MAX",  "MED",
                                                               "FIRST", "LAST", "SM"};

std::vector<std::string> DigitLabels() {
  std::vector<std::string> names;
  for (int i = 0; i < 10; ++i) names.push_back(std::to_string(i));
  return names;
}

// Records a malformed record: an error in fail mode, a counted skip otherwise.
class MalformedRecords {
 public:
  MalformedRecords(const DatasetReadOptions& options, Dataset* dataset)
      : options_(options), dataset_(dataset) {}

  // OK when the record is skipped; the INVALID_ARGUMENT to return otherwise.
  absl::Status Report(const std::string& where, const std::string& why) {
    std::string message = absl::StrCat(where, ": ", why);
    if (!options_.skip_malformed) return absl::InvalidArgumentError(message);
    ++dataset_->skipped;
    if (static_cast<std::int64_t>(dataset_->skip_reasons.size()) < options_.max_skip_reasons) {
      dataset_->skip_reasons.push_back(std::move(message));
    }
    return absl::OkStatus();
  }

 private:
  const DatasetReadOptions& options_;
  Dataset* dataset_;
};

absl::Status OpenError(const std::string& path, int error_number) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat("no such file: ", path));
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a file"));
  }
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat("cannot read ", path, ": ", std::strerror(error_number)));
}

// The whole file; errors as OpenError (a directory or unreadable file is an error).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return OpenError(path, ENOENT);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path, errno != 0 ? errno : EACCES);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return OpenError(path, errno != 0 ? errno : EIO);
  return data;
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

absl::Status NoExamplesError(const std::string& path, const Dataset& dataset) {
  return absl::InvalidArgumentError(absl::StrCat("no usable examples in ", path, " (",
                                                 dataset.skipped, " malformed records skipped)"));
}

// Whether `path` (canonical) lies in directory `root` (canonical).
bool IsInside(const fs::path& path, const fs::path& root) {
  const std::string p = path.string();
  std::string r = root.string();
  if (p == r) return true;
  if (r.empty() || r.back() != '/') r.push_back('/');
  return p.rfind(r, 0) == 0;
}

// PERMISSION_DENIED when `path` resolves (through symlinks) outside `confine_to`.
absl::Status CheckConfined(const fs::path& path, const std::string& confine_to) {
  if (confine_to.empty()) return absl::OkStatus();
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(path, ec);
  const fs::path root = fs::weakly_canonical(confine_to, ec);
  if (ec || !IsInside(resolved, root)) {
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), " resolves outside the data root"));
  }
  return absl::OkStatus();
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
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid JSON at byte ", e.byte, ": ",
        detail == std::string::npos ? what : what.substr(detail + 2)));
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

}  // namespace

std::int64_t UniformInt(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  const std::uint64_t range = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
  if (range == 0) return static_cast<std::int64_t>(rng());  // the full 64-bit range
  // Reject the top partial bucket so every residue is equally likely.
  const std::uint64_t limit = (std::numeric_limits<std::uint64_t>::max() / range) * range;
  std::uint64_t x = 0;
  do {
    x = rng();
  } while (x >= limit);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x % range);
}

absl::StatusOr<Dataset> ReadJsonLinesDataset(const std::string& path,
                                             const DatasetReadOptions& options) {
  absl::StatusOr<LineReader> reader = LineReader::Open(path);
  if (!reader.ok()) return reader.status();
  Dataset dataset;
  MalformedRecords malformed(options, &dataset);
  const bool infer = options.labels.empty();
  // Inferred string labels are mapped to indices once every name is known.
  std::vector<std::string> string_labels;
  std::optional<bool> integer_kind;  // inferred labels: the kind the first record set
  std::int64_t max_integer_label = -1;

  std::string line;
  while (reader->Next(&line)) {
    if (IsBlank(line)) continue;
    const std::string where = absl::StrCat(path, ":", reader->line_number());
    absl::StatusOr<nlohmann::json> object = ParseJsonLine(line);
    if (!object.ok()) {
      if (absl::Status s = malformed.Report(where, std::string(object.status().message()));
          !s.ok()) {
        return s;
      }
      continue;
    }
    auto text = object->find("text");
    auto label = object->find("label");
    std::string problem;
    if (text == object->end()) {
      problem = "missing \"text\"";
    } else if (!text->is_string()) {
      problem = absl::StrCat("\"text\" must be a string, got ", text->type_name());
    } else if (text->get_ref<const std::string&>().empty()) {
      problem = "empty \"text\"";
    } else if (label == object->end()) {
      problem = "missing \"label\"";
    }
    std::int64_t index = -1;
    if (problem.empty()) {
      const nlohmann::json& value = *label;
      if (value.is_string()) {
        const std::string& name = value.get_ref<const std::string&>();
        if (infer) {
          if (integer_kind.value_or(false)) {
            problem = "string label in a file whose labels are integers";
          } else {
            integer_kind = false;
            string_labels.push_back(name);
          }
        } else {
          auto it = std::find(options.labels.begin(), options.labels.end(), name);
          if (it == options.labels.end()) {
            problem = absl::StrCat("label \"", name, "\" is not one of the ",
                                   options.labels.size(), " labels");
          } else {
            index = it - options.labels.begin();
          }
        }
      } else if (value.is_number_integer()) {
        // Written without fraction or exponent (1.0 and 1e2 are not integers); the parser
        // makes every non-negative one unsigned.
        const std::int64_t limit =
            infer ? kMaxInferredIntegerLabel + 1 : static_cast<std::int64_t>(options.labels.size());
        const bool in_range = value.is_number_unsigned() &&
                              value.get<std::uint64_t>() < static_cast<std::uint64_t>(limit);
        if (!in_range) {
          problem = absl::StrCat("integer label ", value.dump(), " is outside [0, ", limit, ")");
        } else if (infer && integer_kind.has_value() && !*integer_kind) {
          problem = "integer label in a file whose labels are strings";
        } else {
          integer_kind = true;
          index = value.get<std::int64_t>();
          max_integer_label = std::max(max_integer_label, index);
        }
      } else {
        problem = absl::StrCat("\"label\" must be a string or a non-negative integer, got ",
                               value.is_number() ? value.dump() : value.type_name());
      }
    }
    if (!problem.empty()) {
      if (absl::Status s = malformed.Report(where, problem); !s.ok()) return s;
      continue;
    }
    dataset.examples.push_back(
        Example{std::move(text->get_ref<std::string&>()), index});
  }
  if (reader->failed()) return absl::DataLossError(absl::StrCat("error reading ", path));
  if (dataset.examples.empty()) return NoExamplesError(path, dataset);

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
  if (absl::Status s = CheckConfined(root, options.confine_to); !s.ok()) return s;
  Dataset dataset;
  MalformedRecords malformed(options, &dataset);

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
    if (absl::Status s = CheckConfined(class_dir, options.confine_to); !s.ok()) return s;
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(class_dir, ec)) {
      if (entry.path().extension() == ".txt") files.push_back(entry.path());
    }
    if (ec) return OpenError(class_dir.string(), ec.value());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      if (absl::Status s = CheckConfined(file, options.confine_to); !s.ok()) return s;
      absl::StatusOr<std::string> bytes = ReadWholeFile(file.string());
      std::string problem;
      if (!bytes.ok()) {
        problem = absl::StrCat("unreadable: ", std::string(bytes.status().message()));
      } else if (bytes->empty()) {
        problem = "empty file";
      }
      if (!problem.empty()) {
        if (absl::Status s = malformed.Report(file.string(), problem); !s.ok()) return s;
        continue;
      }
      dataset.examples.push_back(Example{std::move(*bytes), static_cast<std::int64_t>(label)});
    }
  }
  if (dataset.examples.empty()) return NoExamplesError(root, dataset);
  dataset.label_names = std::move(classes);
  return dataset;
}

absl::StatusOr<Dataset> ReadListOpsTsvDataset(const std::string& path,
                                              const DatasetReadOptions& options) {
  absl::StatusOr<LineReader> reader = LineReader::Open(path);
  if (!reader.ok()) return reader.status();
  Dataset dataset;
  MalformedRecords malformed(options, &dataset);
  std::string line;
  if (!reader->Next(&line) || line != "Source\tTarget") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: expected the header line \"Source<TAB>Target\""));
  }
  while (reader->Next(&line)) {
    if (IsBlank(line)) continue;
    const std::string where = absl::StrCat(path, ":", reader->line_number());
    const std::vector<absl::string_view> columns = absl::StrSplit(line, '\t');
    std::string problem;
    absl::string_view target;
    if (columns.size() != 2) {
      problem =
          absl::StrCat("expected 2 tab-separated columns (Source, Target), got ", columns.size());
    } else if (absl::StripAsciiWhitespace(columns[0]).empty()) {
      problem = "empty Source";
    } else {
      target = absl::StripAsciiWhitespace(columns[1]);
      if (target.size() != 1 || target[0] < '0' || target[0] > '9') {
        problem = absl::StrCat("Target must be a digit 0-9, got \"", target, "\"");
      }
    }
    if (!problem.empty()) {
      if (absl::Status s = malformed.Report(where, problem); !s.ok()) return s;
      continue;
    }
    dataset.examples.push_back(Example{std::string(columns[0]), target[0] - '0'});
  }
  if (reader->failed()) return absl::DataLossError(absl::StrCat("error reading ", path));
  if (dataset.examples.empty()) return NoExamplesError(path, dataset);
  dataset.label_names = DigitLabels();
  return dataset;
}

absl::StatusOr<Dataset> ReadCifar10Dataset(const std::string& path,
                                           const DatasetReadOptions& options) {
  absl::StatusOr<std::string> data = ReadWholeFile(path);
  if (!data.ok()) return data.status();
  Dataset dataset;
  MalformedRecords malformed(options, &dataset);
  const std::int64_t size = static_cast<std::int64_t>(data->size());
  const std::int64_t records = size / kCifarRecordBytes;
  std::string rgb(kCifarImageBytes, '\0');
  for (std::int64_t i = 0; i < records; ++i) {
    const char* record = data->data() + i * kCifarRecordBytes;
    const int label = static_cast<unsigned char>(record[0]);
    if (label > 9) {
      const std::string where = absl::StrCat(path, ": record ", i);
      if (absl::Status s =
              malformed.Report(where, absl::StrCat("label byte ", label, " is not a class 0-9"));
          !s.ok()) {
        return s;
      }
      continue;
    }
    // Planar (all R, all G, all B) → interleaved RGB, the layout ImageToTokens takes.
    const char* planes = record + 1;
    for (int p = 0; p < 1024; ++p) {
      rgb[3 * p] = planes[p];
      rgb[3 * p + 1] = planes[1024 + p];
      rgb[3 * p + 2] = planes[2048 + p];
    }
    absl::StatusOr<std::string> gray = ImageToTokens(32, 32, 3, rgb);
    if (!gray.ok()) return gray.status();
    dataset.examples.push_back(Example{std::move(*gray), label});
  }
  if (const std::int64_t tail = size % kCifarRecordBytes; tail != 0) {
    const std::string where = absl::StrCat(path, ": record ", records);
    if (absl::Status s = malformed.Report(
            where, absl::StrCat("truncated record: ", tail, " of ", kCifarRecordBytes, " bytes"));
        !s.ok()) {
      return s;
    }
  }
  if (dataset.examples.empty()) return NoExamplesError(path, dataset);
  dataset.label_names = {"airplane", "automobile", "bird",  "cat",  "deer",
                         "dog",      "frog",       "horse", "ship", "truck"};
  return dataset;
}

namespace {

// Appends one operator expression of about `budget` characters with at most `depth_left`
// levels of brackets. Each argument gets a random share of what is left of the budget, and the
// last one all of it, so the result lands near the budget unless the depth bound stops it.
void AppendListOpsExpression(std::mt19937_64& rng, int depth_left, std::int64_t budget,
                             std::string* out) {
  const std::size_t start = out->size();
  out->push_back('[');
  out->append(kListOpsOperators[UniformInt(rng, 0, kListOpsOperators.size() - 1)]);
  const std::int64_t args = UniformInt(rng, kListOpsMinArgs, kListOpsMaxArgs);
  for (std::int64_t i = 0; i < args; ++i) {
    // What the remaining arguments may use, keeping 2 characters for " ]".
    const std::int64_t remaining = budget - static_cast<std::int64_t>(out->size() - start) - 2;
    const std::int64_t args_left = args - i;
    std::int64_t share = remaining;
    if (args_left > 1) {
      share = UniformInt(rng, std::max<std::int64_t>(1, remaining / (2 * args_left)),
                         std::max<std::int64_t>(1, 3 * remaining / (2 * args_left)));
    }
    out->push_back(' ');
    // 10 characters fit the shortest nested expression; a quarter of arguments stay digits
    // even when a nested one would fit, so trees vary in shape.
    if (depth_left > 1 && share - 1 >= 10 && UniformInt(rng, 0, 3) != 0) {
      AppendListOpsExpression(rng, depth_left - 1, share - 1, out);
    } else {
      out->push_back(static_cast<char>('0' + UniformInt(rng, 0, 9)));
    }
  }
  out->append(" ]");
}

int ApplyListOpsOperator(std::string_view op, std::vector<int> args) {
  if (op == "MIN") return *std::min_element(args.begin(), args.end());
  if (op == "MAX") return *std::max_element(args.begin(), args.end());
  if (op == "FIRST") return args.front();
  if (op == "LAST") return args.back();
  if (op == "SM") {
    int sum = 0;
    for (int a : args) sum = (sum + a) % 10;
    return sum;
  }
  // MED: the lower median.
  std::sort(args.begin(), args.end());
  return args[(args.size() - 1) / 2];
}

}  // namespace

absl::StatusOr<Dataset> GenerateListOpsDataset(const ListOpsGeneratorOptions& options) {
  if (options.count < 0 || options.count > 10'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate.count must be in [0, 10000000], got ", options.count));
  }
  if (options.min_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate.min_length must be >= 1, got ", options.min_length));
  }
  if (options.max_length < std::max<std::int64_t>(options.min_length, 10) ||
      options.max_length > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate.max_length must be in [max(min_length, 10), 1000000], got ",
                     options.max_length, " with min_length ", options.min_length));
  }
  Dataset dataset;
  dataset.label_names = DigitLabels();
  dataset.examples.reserve(options.count);
  std::mt19937_64 rng(options.seed);
  for (std::int64_t n = 0; n < options.count; ++n) {
    std::string expression;
    for (int attempt = 0;; ++attempt) {
      if (attempt == kListOpsAttemptsPerExample) {
        return absl::InvalidArgumentError(absl::StrCat(
            "could not generate a ListOps expression of ", options.min_length, "-",
            options.max_length, " characters in ", kListOpsAttemptsPerExample, " attempts"));
      }
      expression.clear();
      AppendListOpsExpression(rng, kMaxListOpsDepth,
                              UniformInt(rng, options.min_length, options.max_length), &expression);
      const auto length = static_cast<std::int64_t>(expression.size());
      if (length >= options.min_length && length <= options.max_length) break;
    }
    absl::StatusOr<int> label = EvaluateListOps(expression);
    if (!label.ok()) return label.status();  // a generator bug; never expected
    dataset.examples.push_back(Example{std::move(expression), *label});
  }
  return dataset;
}

absl::StatusOr<int> EvaluateListOps(std::string_view expression) {
  struct Frame {
    std::string_view op;
    std::vector<int> args;
  };
  std::vector<Frame> stack;  // explicit, so deep input cannot overflow the call stack
  std::optional<int> result;
  const std::vector<absl::string_view> tokens =
      absl::StrSplit(absl::string_view(expression.data(), expression.size()),
                     absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
  for (const absl::string_view token_view : tokens) {
    const std::string_view token(token_view.data(), token_view.size());
    if (token == "(" || token == ")") continue;
    if (result.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ListOps: unexpected token \"", std::string(token), "\" after the end"));
    }
    std::optional<int> value;
    if (token.size() > 1 && token[0] == '[') {
      const std::string_view op = token.substr(1);
      if (std::find(kListOpsOperators.begin(), kListOpsOperators.end(), op) ==
          kListOpsOperators.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ListOps: unknown operator \"", std::string(op), "\""));
      }
      stack.push_back(Frame{op, {}});
      continue;
    }
    if (token == "]") {
      if (stack.empty()) return absl::InvalidArgumentError("ListOps: unbalanced ']'");
      Frame frame = std::move(stack.back());
      stack.pop_back();
      if (frame.args.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ListOps: operator ", std::string(frame.op), " without arguments"));
      }
      value = ApplyListOpsOperator(frame.op, std::move(frame.args));
    } else if (token.size() == 1 && token[0] >= '0' && token[0] <= '9') {
      value = token[0] - '0';
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("ListOps: unexpected token \"", std::string(token), "\""));
    }
    if (stack.empty()) {
      result = value;
    } else {
      stack.back().args.push_back(*value);
    }
  }
  if (!stack.empty()) return absl::InvalidArgumentError("ListOps: missing ']'");
  if (!result.has_value()) return absl::InvalidArgumentError("ListOps: empty expression");
  return *result;
}

int ListOpsDepth(std::string_view expression) {
  int depth = 0;
  int max_depth = 0;
  for (char c : expression) {
    if (c == '[') max_depth = std::max(max_depth, ++depth);
    if (c == ']') --depth;
  }
  return max_depth;
}

absl::StatusOr<DatasetSplit> SplitDataset(std::vector<Example> examples, double fraction,
                                          std::uint64_t seed) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation split must be in (0, 1), got ", fraction));
  }
  const auto n = static_cast<std::int64_t>(examples.size());
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a validation split needs at least 2 examples, got ", n));
  }
  const std::int64_t held_out =
      std::clamp<std::int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n - 1);
  std::vector<std::int64_t> order(n);
  for (std::int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[UniformInt(rng, 0, i)]);
  std::vector<bool> in_validation(n, false);
  for (std::int64_t i = 0; i < held_out; ++i) in_validation[order[i]] = true;
  DatasetSplit split;
  split.validation.reserve(held_out);
  split.train.reserve(n - held_out);
  for (std::int64_t i = 0; i < n; ++i) {
    (in_validation[i] ? split.validation : split.train).push_back(std::move(examples[i]));
  }
  return split;
}

absl::StatusOr<DataRoot> DataRoot::Create(const std::string& root) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(root, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("data root ", root, ": ", ec.message()));
  }
  if (!fs::is_directory(canonical, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("data root ", root, " is not a folder"));
  }
  return DataRoot(canonical.string());
}

absl::StatusOr<std::string> DataRoot::Resolve(std::string_view relative) const {
  const std::string path(relative);
  if (path.empty()) return absl::InvalidArgumentError("empty data path");
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("data path contains a NUL byte");
  }
  if (path[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("data path ", Quoted(path), " is absolute; give it relative to the data root"));
  }
  for (const absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("data path ", Quoted(path), " contains \"..\"; it must stay in the data root"));
    }
  }
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::path(root_) / path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("data path ", Quoted(path), " cannot be resolved: ", ec.message()));
  }
  if (!IsInside(resolved, root_)) {
    return absl::PermissionDeniedError(
        absl::StrCat("data path ", Quoted(path), " leads outside the data root"));
  }
  // weakly_canonical resolves every link that exists; one left in the path dangles, and could
  // later point anywhere.
  fs::path prefix(root_);
  for (const fs::path& part : resolved.lexically_relative(root_)) {
    if (part == ".") continue;
    prefix /= part;
    if (fs::is_symlink(fs::symlink_status(prefix, ec))) {
      return absl::PermissionDeniedError(
          absl::StrCat("data path ", Quoted(path), " goes through a symlink that does not resolve"));
    }
  }
  return resolved.string();
}

}  // namespace ts

#include "model/data/listops_generator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace ts {
namespace {

constexpr int kMaxListOpsDepth = 10;
constexpr std::int64_t kListOpsMinArgs = 2;
constexpr std::int64_t kListOpsMaxArgs = 6;
constexpr int kListOpsAttemptsPerExample = 1000;
constexpr std::array<std::string_view, 6> kListOpsOperators = {"MIN",   "MAX",  "MED",
                                                               "FIRST", "LAST", "SM"};

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
  if (op == "SM") return static_cast<int>(std::accumulate(args.begin(), args.end(), 0L) % 10);
  // MED: the lower median.
  std::sort(args.begin(), args.end());
  return args[(args.size() - 1) / 2];
}

}  // namespace

std::vector<std::string> ListOpsLabelNames() {
  return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
}

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
  dataset.label_names = ListOpsLabelNames();
  dataset.examples.reserve(options.count);
  std::mt19937_64 rng(options.seed);
  for (std::int64_t n = 0; n < options.count; ++n) {
    if (options.stop_requested && options.stop_requested()) {
      return absl::AbortedError(absl::StrCat("stopped while generating ListOps examples, after ", n,
                                             " of ", options.count));
    }
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
    // An error here is a generator bug; never expected.
    TS_ASSIGN_OR_RETURN(const int label, EvaluateListOps(expression));
    dataset.examples.push_back(Example{std::move(expression), label});
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

}  // namespace ts

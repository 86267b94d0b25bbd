// The ListOps task (LRA): the procedural generator, so the task trains with no data set on disk,
// and the evaluator that labels an expression. Torch-free; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/dataset.h"

namespace ts {

// The procedural ListOps task: `[OP arg … ]` with OP one of MIN, MAX, MED, FIRST, LAST, SM (sum
// mod 10), arguments digits 0-9 or nested expressions, rendered like LRA without its
// parentheses (`[MAX 4 3 [MIN 2 3 ] 1 0 ]`), bracket nesting ≤ 10, 2-6 arguments per operator.
struct ListOpsGeneratorOptions {
  std::int64_t count = 1000;       // examples; 0 ≤ count ≤ 10,000,000
  std::int64_t min_length = 500;   // characters, ≥ 1
  std::int64_t max_length = 2000;  // characters, ≥ max(min_length, 10) and ≤ 1,000,000
  std::uint64_t seed = 1;          // same seed (and options) → the same examples on any platform
  StopRequested stop_requested;    // asked before each example (model/data/dataset.h)
};

// INVALID_ARGUMENT naming the option for out-of-range options; ABORTED when stop_requested stops
// it.
absl::StatusOr<Dataset> GenerateListOpsDataset(const ListOpsGeneratorOptions& options);

// The value (0-9) of a ListOps expression: whitespace-separated tokens `[OP`, `]` and digits;
// LRA's `(` and `)` tokens are ignored. MED of an even number of arguments is the lower median
// (the smaller of the two middle values; LRA's int(np.median) can differ). INVALID_ARGUMENT for
// an unknown token, an operator without arguments, unbalanced brackets or trailing tokens.
absl::StatusOr<int> EvaluateListOps(std::string_view expression);

// Bracket nesting depth of a ListOps expression (a bare digit is 0).
int ListOpsDepth(std::string_view expression);

// The task's label names, "0".."9" (the value of an expression).
std::vector<std::string> ListOpsLabelNames();

}  // namespace ts

// Calibration: measures direct vs efficient attention on this machine and finds the number of
// tokens above which the efficient path is faster (the crossover kAuto uses), for one head
// shape, precision and batch size. The results are saved as a small text file that `tsserver`
// and `tsmodel` load; a model takes the crossovers of its head shape and precision as a
// CrossoverTable, which interpolates between the measured batch sizes (the file and the table:
// model/networks/calibration_file.h, torch-free).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "model/api/precision.h"
#include "model/networks/calibration_file.h"

namespace ts {

struct CalibrationOptions {
  std::int64_t head_dim = 32;
  std::int64_t heads = 8;
  std::int64_t batch = 1;
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  // The efficient path's feature products run in bfloat16 at kBf16 as a bf16 model runs them
  // (model/api/precision.h); the direct path is float32 at both. FAILED_PRECONDITION where the
  // device lacks bf16 (CheckPrecisionSupported).
  Precision precision = Precision::kFp32;
  // Sequence lengths tried: a geometric grid (factor √2) from min_tokens to max_tokens. The
  // sweep stops once the efficient path has won at two consecutive lengths.
  std::int64_t min_tokens = 32;
  std::int64_t max_tokens = 16384;
  int repeats = 3;  // timed runs per point and path (after one warm-up); the median counts
  // Noise: when a point's timed runs differ by more than `tolerance` (slowest/fastest - 1), the
  // point is measured again, up to `max_rounds` rounds of `repeats` runs, and the round that
  // agrees best counts. The whole sweep runs `sweeps` times; when the sweeps' crossovers differ
  // by more than `tolerance`, more sweeps run, up to `max_sweeps`, and the crossover is their
  // median. What still disagrees at the end is reported in CalibrationResult::warnings.
  double tolerance = 0.2;
  int max_rounds = 3;
  int sweeps = 2;
  int max_sweeps = 4;
  double a = 0.5, b = 1.0, c = 1.0;
  std::int64_t direct_block_elements = std::int64_t{1} << 19;
  std::int64_t efficient_chunk_tokens = 512;
  // Tests: the seconds of one run of `path` at `tokens` tokens (`sweep`: 0, 1, ...), returned
  // instead of running it. Empty: the kernels run and are timed.
  std::function<double(AttentionPath path, std::int64_t tokens, int sweep)> timer;
};

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options);

}  // namespace ts

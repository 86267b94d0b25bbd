// Calibration: measures direct vs efficient attention on this machine and finds the number of
// tokens above which the efficient path is faster (the crossover kAuto uses), for one head
// shape, precision and batch size. The results are saved as a small text file that `tsserver`
// and `tsmodel` load; a model takes the crossovers of its head shape and precision as a
// CrossoverTable, which interpolates between the measured batch sizes (the file and the table:
// model/calibration_file.h, torch-free).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/calibration_file.h"
#include "model/precision.h"

namespace ts {

struct CalibrationOptions {
  std::int64_t head_dim = 32;
  std::int64_t heads = 8;
  std::int64_t batch = 1;
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  // The efficient path's feature products run in bfloat16 at kBf16 as a bf16 model runs them
  // (model/precision.h); the direct path is float32 at both. FAILED_PRECONDITION where the
  // device lacks bf16 (CheckPrecisionSupported).
  Precision precision = Precision::kFp32;
  // Sequence lengths tried: a geometric grid (factor √2) from min_tokens to max_tokens. The
  // sweep stops once the efficient path has won at two consecutive lengths.
  std::int64_t min_tokens = 32;
  std::int64_t max_tokens = 16384;
  int repeats = 3;  // timed runs per point (after one warm-up); the median counts
  double a = 0.5, b = 1.0, c = 1.0;
  std::int64_t direct_block_elements = std::int64_t{1} << 19;
  std::int64_t efficient_chunk_tokens = 512;
};

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options);

}  // namespace ts

// Calibration: measures direct vs efficient attention on this machine and finds the number of
// tokens above which the efficient path is faster (the crossover the server's kAuto uses).
// The result is saved as a small text file that `tsserver` and `tsmodel` load. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts {

struct CalibrationOptions {
  std::int64_t head_dim = 32;
  std::int64_t heads = 8;
  std::int64_t batch = 1;
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  // Sequence lengths tried: a geometric grid (factor √2) from min_tokens to max_tokens. The
  // sweep stops once the efficient path has won at two consecutive lengths.
  std::int64_t min_tokens = 32;
  std::int64_t max_tokens = 16384;
  int repeats = 3;  // timed runs per point (after one warm-up); the median counts
  double a = 0.5, b = 1.0, c = 1.0;
  std::int64_t direct_block_elements = std::int64_t{1} << 19;
  std::int64_t efficient_chunk_tokens = 512;
};

struct CalibrationPoint {
  std::int64_t tokens = 0;
  double direct_seconds = 0;
  double efficient_seconds = 0;
};

struct CalibrationResult {
  std::int64_t head_dim = 0;
  std::int64_t heads = 0;
  std::int64_t batch = 0;
  std::string device;
  int threads = 0;
  // Tokens above which efficient is faster (interpolated between the grid points).
  std::int64_t crossover_tokens = 0;
  // False when direct won everywhere up to max_tokens (crossover_tokens = max_tokens then).
  bool crossed = false;
  std::vector<CalibrationPoint> points;
};

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options);

// Text format, one record per line ("taylorshift-calibration 1" header, then `crossover` and
// `point` lines of key=value pairs). Unknown keys or malformed lines are errors.
absl::Status SaveCalibration(const std::string& path,
                             const std::vector<CalibrationResult>& results);
absl::StatusOr<std::vector<CalibrationResult>> LoadCalibration(const std::string& path);

// The crossover for (head_dim, heads) measured at the batch size closest to `batch`.
std::optional<std::int64_t> LookupCrossover(const std::vector<CalibrationResult>& results,
                                            std::int64_t head_dim, std::int64_t heads,
                                            std::int64_t batch);

}  // namespace ts

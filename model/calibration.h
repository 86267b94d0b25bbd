// Calibration: measures direct vs efficient attention on this machine and finds the number of
// tokens above which the efficient path is faster (the crossover kAuto uses), for one head
// shape, precision and batch size. The results are saved as a small text file that `tsserver`
// and `tsmodel` load; a model takes the crossovers of its head shape and precision as a
// CrossoverTable, which interpolates between the measured batch sizes. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  Precision precision = Precision::kFp32;
  // Tokens above which efficient is faster (interpolated between the grid points).
  std::int64_t crossover_tokens = 0;
  // False when direct won everywhere up to max_tokens (crossover_tokens = max_tokens then).
  bool crossed = false;
  std::vector<CalibrationPoint> points;
};

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options);

// Text format, one record per line ("taylorshift-calibration 1" header, then `crossover` and
// `point` lines of key=value pairs; `precision=fp32|bf16`, fp32 when absent as in files written
// before it existed). Unknown keys or malformed lines are errors.
absl::Status SaveCalibration(const std::string& path,
                             const std::vector<CalibrationResult>& results);
absl::StatusOr<std::vector<CalibrationResult>> LoadCalibration(const std::string& path);

// Crossovers measured at several batch sizes, for one head shape and precision. For(batch)
// is the measured crossover at a measured batch size, interpolated linearly in
// (log batch, log tokens) between two measured sizes, and the nearest measurement's outside
// them. Empty: nothing measured (the model then uses its own crossover_tokens or the formula).
class CrossoverTable {
 public:
  // Replaces an earlier entry for the same batch size. Batch and tokens must be positive.
  void Add(std::int64_t batch, std::int64_t tokens);
  bool empty() const { return entries_.empty(); }
  std::optional<std::int64_t> For(std::int64_t batch) const;
  // "batch 1: 1450 tokens, batch 8: 1210 tokens" (for logs and errors).
  std::string Describe() const;
  // (batch, tokens) in ascending batch order.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> entries_;
};

// The crossovers measured for (head_dim, heads) at `precision`, over every batch size in
// `results` (empty when none match).
CrossoverTable LookupCrossovers(const std::vector<CalibrationResult>& results,
                                std::int64_t head_dim, std::int64_t heads, Precision precision);

// LookupCrossovers from the file at `path`; NOT_FOUND naming the head shape and precision when
// the file has no crossover for them.
absl::StatusOr<CrossoverTable> LoadCrossovers(const std::string& path, std::int64_t head_dim,
                                              std::int64_t heads, Precision precision);

}  // namespace ts

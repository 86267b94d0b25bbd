// The calibration file (what `tsmodel calibrate` measures, model/networks/calibration.h) and the
// crossover table a model takes from it: reading, writing and looking up. Torch-free, so the
// server's torch-free code and the fuzz targets (tests/fuzz/) read the file without LibTorch.
// Stateless and thread-safe (a CrossoverTable is a value).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/api/precision.h"

namespace ts {

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
  // The points of the sweep whose crossover is nearest the median of all sweeps.
  std::vector<CalibrationPoint> points;
  // Not in the file: each sweep's crossover, in the order measured, and what disagreed by more
  // than the tolerance after re-measuring (model/networks/calibration.h), for the caller to show.
  std::vector<std::int64_t> sweep_crossovers;
  std::vector<std::string> warnings;
};

// Text format, one record per line ("taylorshift-calibration 1" header, then `crossover` and
// `point` lines of key=value pairs; `precision=fp32|bf16`, fp32 when absent as in files written
// before it existed). Unknown keys or malformed lines are errors.
absl::Status SaveCalibration(const std::string& path,
                             const std::vector<CalibrationResult>& results);
absl::StatusOr<std::vector<CalibrationResult>> LoadCalibration(const std::string& path);
// The file's text; errors start with "`source`:LINE: " (`source`: the path LoadCalibration read).
absl::StatusOr<std::vector<CalibrationResult>> ParseCalibration(const std::string& text,
                                                                const std::string& source);

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

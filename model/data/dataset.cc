#include "model/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ts {

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

}  // namespace ts

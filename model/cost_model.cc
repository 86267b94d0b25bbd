#include "model/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace ts {

double DirectOps(double n, double d) { return 4 * n * n * d + 6 * n * n; }

double EfficientOps(double n, double d) { return n * (4 * d * d * d + 10 * d * d + 9 * d + 4); }

double DirectMemoryEntries(double n, double d) { return d * n + 2 * n * n; }

double EfficientMemoryEntries(double n, double d) {
  return d * d * (d + 1) + 2 * d * n + (d + 1) * n + d * d * n;
}

std::int64_t SpeedCrossoverN0(std::int64_t head_dim) {
  const double d = static_cast<double>(head_dim);
  return static_cast<std::int64_t>(
      std::ceil((4 * d * d * d + 10 * d * d + 9 * d + 4) / (4 * d + 6)));
}

std::int64_t MemoryCrossoverN1(std::int64_t head_dim) {
  const double d = static_cast<double>(head_dim);
  const double root = std::sqrt(d * d * d * d + 12 * d * d * d + 14 * d * d + 4 * d + 1);
  return static_cast<std::int64_t>(std::ceil(0.25 * (d * d + 2 * d + 1 + root)));
}

std::int64_t TrainingCrossoverTokens(std::int64_t head_dim) {
  // {d, tokens}: the log-interpolated crossovers L of bench/run_train_bench (run of
  // 2026-11-23T07:14, --threads=1; docs/train_bench.md), plus one for CLS.
  constexpr std::array<std::pair<double, double>, 3> kMeasured = {{
      {8, 73},
      {16, 177},
      {32, 444},
  }};
  const double d = static_cast<double>(std::max<std::int64_t>(head_dim, 1));
  const auto& first = kMeasured.front();
  const auto& last = kMeasured.back();
  double tokens = 0;
  if (d <= first.first) {
    tokens = SpeedCrossoverN0(head_dim) * first.second /
             SpeedCrossoverN0(static_cast<std::int64_t>(first.first));
  } else if (d >= last.first) {
    tokens = SpeedCrossoverN0(head_dim) * last.second /
             SpeedCrossoverN0(static_cast<std::int64_t>(last.first));
  } else {
    for (std::size_t i = 1; i < kMeasured.size(); ++i) {
      const auto& [d_lo, n_lo] = kMeasured[i - 1];
      const auto& [d_hi, n_hi] = kMeasured[i];
      if (d > d_hi) continue;
      if (d == d_hi) {
        tokens = n_hi;
        break;
      }
      const double t = std::log(d / d_lo) / std::log(d_hi / d_lo);
      tokens = std::exp(std::log(n_lo) + t * std::log(n_hi / n_lo));
      break;
    }
  }
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(tokens)));
}

}  // namespace ts

#include "model/cost_model.h"

#include <cmath>

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

}  // namespace ts

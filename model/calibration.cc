#include "model/calibration.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/mixed_linear.h"
#include "model/taylor_attention.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"

namespace ts {
namespace {

double MedianSeconds(const std::function<void()>& run, const torch::Device& device, int repeats) {
  run();  // warm-up: allocator, thread pool, caches
  compat::Synchronize(device);
  std::vector<double> seconds;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    compat::Synchronize(device);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

absl::StatusOr<CalibrationResult> Calibrate(const CalibrationOptions& options) {
  const torch::Device device(options.device);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration: device ", options.device, " requested but CUDA is absent"));
  }
  TS_RETURN_IF_ERROR(CheckPrecisionSupported(options.precision, device));
  torch::NoGradGuard no_grad;
  TaylorKernelOptions kernel;
  kernel.bf16_products = options.precision == Precision::kBf16;
  kernel.a = options.a;
  kernel.b = options.b;
  kernel.c = options.c;
  kernel.direct_block_elements = options.direct_block_elements;
  kernel.efficient_chunk_tokens = options.efficient_chunk_tokens;

  CalibrationResult result;
  result.head_dim = options.head_dim;
  result.heads = options.heads;
  result.batch = options.batch;
  result.device = options.device;
  result.threads = at::get_num_threads();
  result.precision = options.precision;
  torch::manual_seed(0);
  int consecutive_wins = 0;
  for (double n = static_cast<double>(options.min_tokens);
       n <= static_cast<double>(options.max_tokens) * 1.0001; n *= std::sqrt(2.0)) {
    const auto tokens = static_cast<std::int64_t>(std::llround(n));
    const auto make = [&] {
      return torch::randn({options.batch, options.heads, tokens, options.head_dim},
                          torch::TensorOptions().device(device));
    };
    // Not a structured binding: C++17 lambdas cannot capture one.
    torch::Tensor q, k;
    std::tie(q, k) = NormalizeQueryKey(make(), make(), {});
    const auto v = make();
    CalibrationPoint point;
    point.tokens = tokens;
    point.direct_seconds =
        MedianSeconds([&] { TaylorDirect(q, k, v, {}, kernel); }, device, options.repeats);
    point.efficient_seconds =
        MedianSeconds([&] { TaylorEfficient(q, k, v, {}, kernel); }, device, options.repeats);
    result.points.push_back(point);
    consecutive_wins = point.efficient_seconds < point.direct_seconds ? consecutive_wins + 1 : 0;
    if (consecutive_wins >= 2) break;
  }
  // The crossover lies between the last point direct won and the first of the final run of
  // efficient wins; interpolate where log(t_direct/t_efficient) changes sign.
  const auto& points = result.points;
  result.crossover_tokens = options.max_tokens;
  std::size_t first_win = points.size();
  for (std::size_t i = points.size(); i-- > 0;) {
    if (points[i].efficient_seconds < points[i].direct_seconds) {
      first_win = i;
    } else {
      break;
    }
  }
  if (first_win < points.size()) {
    result.crossed = true;
    if (first_win == 0) {
      result.crossover_tokens = points[0].tokens;
    } else {
      const auto& lo = points[first_win - 1];
      const auto& hi = points[first_win];
      const double r_lo = std::log(lo.direct_seconds / lo.efficient_seconds);  // ≤ 0
      const double r_hi = std::log(hi.direct_seconds / hi.efficient_seconds);  // > 0
      const double t = r_hi - r_lo > 0 ? -r_lo / (r_hi - r_lo) : 0.5;
      const double log_n =
          std::log(static_cast<double>(lo.tokens)) +
          t * (std::log(static_cast<double>(hi.tokens)) - std::log(static_cast<double>(lo.tokens)));
      result.crossover_tokens = static_cast<std::int64_t>(std::llround(std::exp(log_n)));
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options) {
  if (options.head_dim <= 0 || options.heads <= 0 || options.batch <= 0 ||
      options.min_tokens <= 0 || options.max_tokens < options.min_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration: need head_dim, heads, batch, min_tokens > 0 and max_tokens >= "
                     "min_tokens; got head_dim=",
                     options.head_dim, " heads=", options.heads, " batch=", options.batch,
                     " min_tokens=", options.min_tokens, " max_tokens=", options.max_tokens));
  }
  try {
    return Calibrate(options);
  } catch (const std::exception& e) {
    return StatusFromException(e, "calibration");
  }
}

}  // namespace ts

#include "model/networks/calibration.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/kernels/mixed_linear.h"
#include "model/kernels/taylor_attention.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"

namespace ts {
namespace {

// One point's timings for one path: the median of the round of runs that agreed best.
struct Measurement {
  double median = 0;
  double spread = 0;  // slowest/fastest - 1 within that round
};

Measurement Measure(const std::function<double()>& time_one_run,
                    const CalibrationOptions& options) {
  Measurement best;
  const int rounds = std::max(1, options.max_rounds);
  for (int round = 1; round <= rounds; ++round) {
    std::vector<double> seconds;
    for (int i = 0; i < std::max(1, options.repeats); ++i) seconds.push_back(time_one_run());
    std::sort(seconds.begin(), seconds.end());
    const double spread = seconds.front() > 0 ? seconds.back() / seconds.front() - 1 : 0;
    if (round == 1 || spread < best.spread) best = {seconds[seconds.size() / 2], spread};
    if (spread <= options.tolerance) break;
  }
  return best;
}

// One sweep over the token grid; `noisy` collects the points whose runs still disagreed.
struct Sweep {
  std::vector<CalibrationPoint> points;
  std::int64_t crossover_tokens = 0;
  bool crossed = false;
  int noisy = 0, measured = 0;
  double worst_spread = 0;
  std::int64_t worst_tokens = 0;
  AttentionPath worst_path = AttentionPath::kDirect;
};

// The crossover lies between the last point direct won and the first of the final run of
// efficient wins; interpolate where log(t_direct/t_efficient) changes sign.
void FindCrossover(std::int64_t max_tokens, Sweep& sweep) {
  const auto& points = sweep.points;
  sweep.crossover_tokens = max_tokens;
  std::size_t first_win = points.size();
  for (std::size_t i = points.size(); i-- > 0;) {
    if (points[i].efficient_seconds < points[i].direct_seconds) {
      first_win = i;
    } else {
      break;
    }
  }
  if (first_win == points.size()) return;
  sweep.crossed = true;
  if (first_win == 0) {
    sweep.crossover_tokens = points[0].tokens;
    return;
  }
  const auto& lo = points[first_win - 1];
  const auto& hi = points[first_win];
  const double r_lo = std::log(lo.direct_seconds / lo.efficient_seconds);  // ≤ 0
  const double r_hi = std::log(hi.direct_seconds / hi.efficient_seconds);  // > 0
  const double t = r_hi - r_lo > 0 ? -r_lo / (r_hi - r_lo) : 0.5;
  const double log_n =
      std::log(static_cast<double>(lo.tokens)) +
      t * (std::log(static_cast<double>(hi.tokens)) - std::log(static_cast<double>(lo.tokens)));
  sweep.crossover_tokens = static_cast<std::int64_t>(std::llround(std::exp(log_n)));
}

Sweep RunSweep(const CalibrationOptions& options, const torch::Device& device,
               const TaylorKernelOptions& kernel, int index) {
  Sweep sweep;
  int consecutive_wins = 0;
  for (double n = static_cast<double>(options.min_tokens);
       n <= static_cast<double>(options.max_tokens) * 1.0001; n *= std::sqrt(2.0)) {
    const auto tokens = static_cast<std::int64_t>(std::llround(n));
    CalibrationPoint point;
    point.tokens = tokens;
    for (const AttentionPath path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
      std::function<double()> time_one_run;
      torch::Tensor q, k, v;
      if (options.timer) {
        time_one_run = [&] { return options.timer(path, tokens, index); };
      } else {
        const auto make = [&] {
          return torch::randn({options.batch, options.heads, tokens, options.head_dim},
                              torch::TensorOptions().device(device));
        };
        std::tie(q, k) = NormalizeQueryKey(make(), make(), {});
        v = make();
        const auto run = [&, path] { RunAttentionPath(path, q, k, v, {}, kernel); };
        run();  // warm-up: allocator, thread pool, caches
        compat::Synchronize(device);
        time_one_run = [&, run] {
          const auto start = std::chrono::steady_clock::now();
          run();
          compat::Synchronize(device);
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        };
      }
      const Measurement m = Measure(time_one_run, options);
      (path == AttentionPath::kDirect ? point.direct_seconds : point.efficient_seconds) = m.median;
      ++sweep.measured;
      if (m.spread > options.tolerance) {
        ++sweep.noisy;
        if (m.spread > sweep.worst_spread) {
          sweep.worst_spread = m.spread;
          sweep.worst_tokens = tokens;
          sweep.worst_path = path;
        }
      }
    }
    sweep.points.push_back(point);
    consecutive_wins = point.efficient_seconds < point.direct_seconds ? consecutive_wins + 1 : 0;
    if (consecutive_wins >= 2) break;
  }
  FindCrossover(options.max_tokens, sweep);
  return sweep;
}

std::int64_t Median(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  if (values.size() % 2 == 1) return values[mid];
  // Even count: the geometric mean of the middle two (crossovers live on a log scale).
  return static_cast<std::int64_t>(std::llround(
      std::sqrt(static_cast<double>(values[mid - 1]) * static_cast<double>(values[mid]))));
}

double Disagreement(const std::vector<std::int64_t>& values) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return *lo > 0 ? static_cast<double>(*hi) / static_cast<double>(*lo) - 1 : 0;
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
  std::vector<Sweep> sweeps;
  const int first = std::max(1, options.sweeps);
  const int most = std::max(first, options.max_sweeps);
  while (static_cast<int>(sweeps.size()) < most) {
    sweeps.push_back(RunSweep(options, device, kernel, static_cast<int>(sweeps.size())));
    result.sweep_crossovers.push_back(sweeps.back().crossover_tokens);
    if (static_cast<int>(sweeps.size()) >= first &&
        Disagreement(result.sweep_crossovers) <= options.tolerance) {
      break;
    }
  }
  result.crossover_tokens = Median(result.sweep_crossovers);
  // The representative sweep: the one whose crossover is nearest the median (on a log scale).
  const auto distance = [&](const Sweep& s) {
    return std::abs(std::log(static_cast<double>(s.crossover_tokens) /
                             static_cast<double>(result.crossover_tokens)));
  };
  const Sweep& chosen =
      *std::min_element(sweeps.begin(), sweeps.end(),
                        [&](const Sweep& a, const Sweep& b) { return distance(a) < distance(b); });
  result.points = chosen.points;
  result.crossed = chosen.crossed;
  const std::string where =
      absl::StrCat("batch ", options.batch, ", ", PrecisionName(options.precision));
  const auto percent = [](double x) { return absl::StrCat(std::llround(x * 100), " %"); };
  if (const double spread = Disagreement(result.sweep_crossovers); spread > options.tolerance) {
    result.warnings.push_back(absl::StrCat(
        where, ": the crossovers of ", sweeps.size(), " sweeps disagree by ", percent(spread), " (",
        absl::StrJoin(result.sweep_crossovers, ", "), " tokens; more than ",
        percent(options.tolerance), "): using their median, ", result.crossover_tokens,
        " tokens. Timings on this machine are noisy (other load, frequency scaling?); "
        "calibrate again when it is idle."));
  }
  int noisy = 0, measured = 0;
  const Sweep* worst = nullptr;
  for (const Sweep& s : sweeps) {
    noisy += s.noisy;
    measured += s.measured;
    if (s.noisy > 0 && (worst == nullptr || s.worst_spread > worst->worst_spread)) worst = &s;
  }
  if (worst != nullptr) {
    result.warnings.push_back(absl::StrCat(
        where, ": ", noisy, " of ", measured, " measurements still disagreed by more than ",
        percent(options.tolerance), " after ", std::max(1, options.max_rounds), " rounds of ",
        std::max(1, options.repeats), " runs (worst ", percent(worst->worst_spread), ", ",
        std::string(AttentionPathName(worst->worst_path)), " at ", worst->worst_tokens,
        " tokens)"));
  }
  return result;
}

}  // namespace

absl::StatusOr<CalibrationResult> CalibrateCrossover(const CalibrationOptions& options) {
  if (options.head_dim <= 0 || options.heads <= 0 || options.batch <= 0 ||
      options.min_tokens <= 0 || options.max_tokens < options.min_tokens ||
      !(options.tolerance >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration: need head_dim, heads, batch, min_tokens > 0, max_tokens >= "
        "min_tokens and tolerance >= 0; got head_dim=",
        options.head_dim, " heads=", options.heads, " batch=", options.batch, " min_tokens=",
        options.min_tokens, " max_tokens=", options.max_tokens, " tolerance=", options.tolerance));
  }
  try {
    return Calibrate(options);
  } catch (const std::exception& e) {
    return StatusFromException(e, "calibration");
  }
}

}  // namespace ts

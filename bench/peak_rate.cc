#include "bench/peak_rate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "model/kernels/bf16_feature_products.h"
#include "model/kernels/cpu_features.h"

namespace ts::bench {
namespace {

constexpr int kChains = 12;  // independent accumulators: enough to cover the latency on 2 pipes
constexpr std::int64_t kSteps = 1 << 16;

#if defined(__x86_64__)
// Both loops return a value derived from every accumulator, so nothing is optimised away.
__attribute__((target("avx512f"))) float Fp32Loop(std::int64_t steps) {
  __m512 acc[kChains];  // NOLINT(modernize-avoid-c-arrays): registers
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (std::int64_t s = 0; s < steps; ++s) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  float lanes[16];  // NOLINT(modernize-avoid-c-arrays)
  _mm512_storeu_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx2,fma"))) float Fp32LoopAvx2(std::int64_t steps) {
  __m256 acc[kChains];  // NOLINT(modernize-avoid-c-arrays): registers
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (std::int64_t s = 0; s < steps; ++s) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];  // NOLINT(modernize-avoid-c-arrays)
  _mm256_storeu_ps(lanes, sum);
  return lanes[0] + lanes[7];
}

__attribute__((target("avx512f,avx512bf16"))) float Bf16Loop(std::int64_t steps) {
  __m512 acc[kChains];  // NOLINT(modernize-avoid-c-arrays): registers
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const auto a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));  // 1.0
  const auto b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3A83));  // ≈ 1e-3
  for (std::int64_t s = 0; s < steps; ++s) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  float lanes[16];  // NOLINT(modernize-avoid-c-arrays)
  _mm512_storeu_ps(lanes, sum);
  return lanes[0] + lanes[15];
}
#endif

// FLOP/s of `loop` on `threads` threads at once, `flops_per_step` per thread and step.
template <typename Loop>
double Rate(int threads, double seconds, double flops_per_step, Loop loop) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::atomic<std::int64_t> steps{0};
    std::atomic<float> sink{0};
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + std::chrono::duration<double>(seconds);
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        float local = 0;
        while (std::chrono::steady_clock::now() < until) {
          local += loop(kSteps);
          steps += kSteps;
        }
        sink = sink + local;
      });
    }
    for (auto& thread : pool) thread.join();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(steps.load()) * flops_per_step / elapsed);
  }
  return best;
}

}  // namespace

PeakRates MeasurePeakRates(int threads, double seconds) {
  PeakRates rates;
#if defined(__x86_64__)
  if (HaveAvx512F()) {
    constexpr double kLanes = 16;
    rates.fp32_fma = Rate(threads, seconds, kChains * kLanes * 2, Fp32Loop);
    if (HaveAvx512Bf16()) rates.bf16_dot = Rate(threads, seconds, kChains * kLanes * 4, Bf16Loop);
  } else if (HaveAvx2()) {
    constexpr double kLanes = 8;
    rates.fp32_fma = Rate(threads, seconds, kChains * kLanes * 2, Fp32LoopAvx2);
  }
#else
  (void)threads;
  (void)seconds;
#endif
  return rates;
}

}  // namespace ts::bench

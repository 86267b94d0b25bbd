#include "model/direct_tile.h"

#include <algorithm>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>

// The build targets generic x86-64: the kernel carries its own target, and callers check
// DirectTileWidth() first.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define TS_AVX512 __attribute__((target("avx512f")))

namespace ts {
namespace {

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
}

constexpr std::int64_t kChunk = 64;  // keys whose squared scores are kept at once
constexpr std::int64_t kKeysAtOnce = kDirectTileKeyPadding + 1;  // score chains in flight

// squares[j·16 + r] = (Σ_i queries[i·16 + r]·keys[j·W + i] + beta)² for j < m (m ≤ kChunk),
// computed kKeysAtOnce keys at a time: W query registers and 8 scores, so that 8 independent
// chains of W FMAs hide the FMA latency. Reads keys up to m rounded up to 8 (zero rows past m).
template <int W>
__attribute__((noinline)) TS_AVX512 void SquaredScores(const float* queries, float beta,
                                                       const float* keys, std::int64_t m,
                                                       float* squares) {
  __m512 q[W];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
  for (int i = 0; i < W; ++i) q[i] = _mm512_loadu_ps(queries + i * kDirectTileRows);
  for (std::int64_t j = 0; j < m; j += kKeysAtOnce) {
    const float* key = keys + j * W;
    __m512 score[kKeysAtOnce];  // NOLINT(modernize-avoid-c-arrays)
    for (int u = 0; u < kKeysAtOnce; ++u) score[u] = _mm512_set1_ps(beta);
    for (int i = 0; i < W; ++i) {
      for (int u = 0; u < kKeysAtOnce; ++u) {
        score[u] = _mm512_fmadd_ps(q[i], _mm512_set1_ps(key[u * W + i]), score[u]);
      }
    }
    for (int u = 0; u < kKeysAtOnce; ++u) {
      _mm512_storeu_ps(squares + (j + u) * kDirectTileRows, _mm512_mul_ps(score[u], score[u]));
    }
  }
}

// sums[c·16 + r] += Σ_{j<m} squares[j·16 + r]·values'_j[c] for c ≤ W (values'_j[W] = 1): the
// W + 1 sums in registers, one squared score loaded per key.
template <int W>
__attribute__((noinline)) TS_AVX512 void AddWeightedValues(const float* squares,
                                                           const float* values, std::int64_t m,
                                                           float* sums) {
  __m512 acc[W + 1];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
  for (int c = 0; c <= W; ++c) acc[c] = _mm512_loadu_ps(sums + c * kDirectTileRows);
  for (std::int64_t j = 0; j < m; ++j) {
    const __m512 square = _mm512_loadu_ps(squares + j * kDirectTileRows);
    const float* value = values + j * W;
    for (int c = 0; c < W; ++c) acc[c] = _mm512_fmadd_ps(square, _mm512_set1_ps(value[c]), acc[c]);
    acc[W] = _mm512_add_ps(acc[W], square);
  }
  for (int c = 0; c <= W; ++c) _mm512_storeu_ps(sums + c * kDirectTileRows, acc[c]);
}

template <int W>
void Tile(const float* queries, float beta, const float* keys, const float* values, std::int64_t m,
          float* sums) {
  alignas(64) float squares[kChunk * kDirectTileRows];  // NOLINT(modernize-avoid-c-arrays)
  std::fill(sums, sums + (W + 1) * kDirectTileRows, 0.0f);
  for (std::int64_t first = 0; first < m; first += kChunk) {
    const std::int64_t n = std::min(kChunk, m - first);
    SquaredScores<W>(queries, beta, keys + first * W, n, squares);
    AddWeightedValues<W>(squares, values + first * W, n, sums);
  }
}

}  // namespace

std::int64_t DirectTileWidth(std::int64_t d) {
  if (d < 1 || d > 16 || !HaveAvx512()) return 0;
  if (d <= 4) return 4;
  if (d <= 8) return 8;
  return 16;
}

void DirectTile(std::int64_t width, const float* queries, float beta, const float* keys,
                const float* values, std::int64_t m, float* sums) {
  if (DirectTileWidth(width) != width) {
    throw std::logic_error("DirectTile: width must be 4, 8 or 16 on a CPU with AVX-512F");
  }
  switch (width) {
    case 4:
      return Tile<4>(queries, beta, keys, values, m, sums);
    case 8:
      return Tile<8>(queries, beta, keys, values, m, sums);
    default:
      return Tile<16>(queries, beta, keys, values, m, sums);
  }
}

}  // namespace ts

#else  // not x86-64: the direct path keeps its GEMMs

namespace ts {

std::int64_t DirectTileWidth(std::int64_t) { return 0; }

void DirectTile(std::int64_t, const float*, float, const float*, const float*, std::int64_t,
                float*) {
  throw std::logic_error("DirectTile needs an x86-64 CPU with AVX-512F");
}

}  // namespace ts

#endif

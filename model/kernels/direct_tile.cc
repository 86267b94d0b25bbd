#include "model/kernels/direct_tile.h"

#include <algorithm>
#include <stdexcept>

#include "model/kernels/cpu_features.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics (sqrt, max, the reductions) start from _mm512_undefined_ps(), a
// self-initialised variable that -Wmaybe-uninitialized reports where they are inlined (GCC bug
// 105593); the value is never read. (Clang has no -Wmaybe-uninitialized; the fuzz build uses it.)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

// The build targets generic x86-64: the kernel carries its own target, and callers check
// DirectTileWidth() first.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define TS_AVX512 __attribute__((target("avx512f")))

namespace ts {
namespace {

constexpr std::int64_t kChunk = 64;  // keys whose squared scores are kept at once
constexpr std::int64_t kKeysAtOnce = kDirectTileKeyPadding + 1;  // score chains in flight

// squares[j·16 + r] = (Σ_i queries[i·16 + r]·keys[j·W + i] + beta)² for j < m (m ≤ kChunk),
// computed kKeysAtOnce keys at a time: W query registers and 12 scores, so that 12 independent
// chains of W FMAs hide the FMA latency. Reads keys (and writes squares) up to m rounded up to a
// multiple of 12: finite rows past m, their squares unused.
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
  alignas(64) float squares[(kChunk + kDirectTileKeyPadding) *
                            kDirectTileRows];  // NOLINT(modernize-avoid-c-arrays)
  std::fill(sums, sums + (W + 1) * kDirectTileRows, 0.0f);
  for (std::int64_t first = 0; first < m; first += kChunk) {
    const std::int64_t n = std::min(kChunk, m - first);
    SquaredScores<W>(queries, beta, keys + first * W, n, squares);
    AddWeightedValues<W>(squares, values + first * W, n, sums);
  }
}

}  // namespace

std::int64_t DirectTileWidth(std::int64_t d) {
  if (d < 1 || d > 16 || !HaveAvx512F()) return 0;
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

namespace {

constexpr float kNormEps = 1e-12f;  // torch::nn::functional::normalize's default

// 1 / max(‖x‖, 1e-12) lane by lane from the squared norms, times factor.
TS_AVX512 __m512 Scales(__m512 squared_norms, float factor) {
  const __m512 norms = _mm512_max_ps(_mm512_sqrt_ps(squared_norms), _mm512_set1_ps(kNormEps));
  return _mm512_div_ps(_mm512_set1_ps(factor), norms);
}

TS_AVX512 __mmask16 FirstLanes(std::int64_t n) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u);
}

}  // namespace

TS_AVX512 std::int64_t DirectTileKeys(const DirectTileInput& in, std::int64_t width, float* keys,
                                      float* values, float* value_sums) {
  const __mmask16 lanes = FirstLanes(in.d);
  const __mmask16 row = FirstLanes(width);
  __m512 sums = _mm512_setzero_ps();
  std::int64_t m = 0;
  for (std::int64_t t = 0; t < in.tokens; ++t) {
    if (in.padded != nullptr && in.padded[t]) continue;
    const __m512 k = _mm512_maskz_loadu_ps(lanes, in.k + t * in.k_stride);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, in.v + t * in.v_stride);
    const float scale = in.normalize
                            ? _mm512_cvtss_f32(Scales(
                                  _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_mul_ps(k, k))), 1.0f))
                            : 1.0f;
    _mm512_mask_storeu_ps(keys + m * width, row, _mm512_mul_ps(k, _mm512_set1_ps(scale)));
    _mm512_mask_storeu_ps(values + m * width, row, v);
    sums = _mm512_add_ps(sums, v);
    ++m;
  }
  std::fill(keys + m * width, keys + (m + kDirectTileKeyPadding) * width, 0.0f);
  _mm512_mask_storeu_ps(value_sums, lanes, sums);
  return m;
}

TS_AVX512 void DirectTileQueries(const DirectTileInput& in, std::int64_t width,
                                 const std::int32_t* rows, std::int64_t count, float factor,
                                 float* queries) {
  const __mmask16 lanes = FirstLanes(count);
  const __m512i offsets = _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(lanes, rows),
                                             _mm512_set1_epi32(static_cast<int>(in.q_stride)));
  __m512 columns[16];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
  __m512 squared = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < in.d; ++i) {
    columns[i] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, offsets, in.q + i, 4);
    squared = _mm512_fmadd_ps(columns[i], columns[i], squared);
  }
  const __m512 scale = in.normalize ? Scales(squared, factor) : _mm512_set1_ps(factor);
  for (std::int64_t i = 0; i < width; ++i) {
    _mm512_storeu_ps(queries + i * kDirectTileRows,
                     i < in.d ? _mm512_mul_ps(columns[i], scale) : _mm512_setzero_ps());
  }
}

TS_AVX512 void DirectTileOutput(const DirectTileInput& in, std::int64_t width, const float* sums,
                                const float* constant, float factor, const std::int32_t* rows,
                                std::int64_t count, float* y, std::int64_t y_stride) {
  const __mmask16 lanes = FirstLanes(count);
  const __m512i offsets = _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(lanes, rows),
                                             _mm512_set1_epi32(static_cast<int>(y_stride)));
  const __m512 denominators = _mm512_add_ps(_mm512_loadu_ps(sums + width * kDirectTileRows),
                                            _mm512_set1_ps(constant[in.d]));
  const __m512 scale = _mm512_div_ps(_mm512_set1_ps(factor), denominators);
  for (std::int64_t i = 0; i < in.d; ++i) {
    const __m512 nom =
        _mm512_add_ps(_mm512_loadu_ps(sums + i * kDirectTileRows), _mm512_set1_ps(constant[i]));
    _mm512_mask_i32scatter_ps(y + i, lanes, offsets, _mm512_mul_ps(nom, scale), 4);
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
std::int64_t DirectTileKeys(const DirectTileInput&, std::int64_t, float*, float*, float*) {
  throw std::logic_error("DirectTileKeys needs an x86-64 CPU with AVX-512F");
}
void DirectTileQueries(const DirectTileInput&, std::int64_t, const std::int32_t*, std::int64_t,
                       float, float*) {
  throw std::logic_error("DirectTileQueries needs an x86-64 CPU with AVX-512F");
}
void DirectTileOutput(const DirectTileInput&, std::int64_t, const float*, const float*, float,
                      const std::int32_t*, std::int64_t, float*, std::int64_t) {
  throw std::logic_error("DirectTileOutput needs an x86-64 CPU with AVX-512F");
}

}  // namespace ts

#endif

#include "model/kernels/bf16_feature_products.h"

#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <array>

#include "model/kernels/cpu_features.h"
#include "model/kernels/taylor_features.h"

// Every function that uses AVX-512 intrinsics carries this target; callers check
// HaveAvx512Bf16() first. (The build targets generic x86-64.)
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define TS_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace ts {
namespace {

constexpr std::int64_t kLanes = 16;     // floats per zmm register
constexpr std::int64_t kGroup = 11;     // output columns per tile: 2 × 11 accumulators
constexpr std::int64_t kTileRows = 32;  // two register rows of 16 lanes per tile

// [e0 o0 e1 o1 … e15 o15] in bfloat16 (rounded to nearest even): the pairs vdpbf16ps sums.
TS_AVX512_BF16 inline __m512i PackPairs(__m512 even, __m512 odd) {
  const __m512i low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i high =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512 first = _mm512_permutex2var_ps(even, low, odd);
  const __m512 second = _mm512_permutex2var_ps(even, high, odd);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(second, first));
}

// out[g] (16 floats at out0 + g·stride and out1 + g·stride) = or += Σ_s a0|a1[s] · b[s, g]
// for g < G: a0 and a1 hold `steps` packed pairs of 16 lanes (32 bfloat16 per step), b holds
// one bfloat16 pair per (step, column) with `width` columns per step. 2·G accumulators stay in
// registers for the whole reduction.
template <int G, bool kAdd>
TS_AVX512_BF16 void Tile(const std::uint16_t* a0, const std::uint16_t* a1, std::int64_t steps,
                         const std::uint32_t* b, std::int64_t width, float* out0, float* out1,
                         std::int64_t stride) {
  __m512 acc0[G], acc1[G];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
  for (int g = 0; g < G; ++g) acc0[g] = acc1[g] = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < steps; ++s) {
    const auto x0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a0 + s * 2 * kLanes));
    const auto x1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a1 + s * 2 * kLanes));
    const std::uint32_t* row = b + s * width;
    for (int g = 0; g < G; ++g) {
      const auto y = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(row[g])));
      acc0[g] = _mm512_dpbf16_ps(acc0[g], x0, y);
      acc1[g] = _mm512_dpbf16_ps(acc1[g], x1, y);
    }
  }
  for (int g = 0; g < G; ++g) {
    float* o0 = out0 + g * stride;
    float* o1 = out1 + g * stride;
    if (kAdd) {
      acc0[g] = _mm512_add_ps(acc0[g], _mm512_loadu_ps(o0));
      acc1[g] = _mm512_add_ps(acc1[g], _mm512_loadu_ps(o1));
    }
    _mm512_storeu_ps(o0, acc0[g]);
    _mm512_storeu_ps(o1, acc1[g]);
  }
}

using TileFn = void (*)(const std::uint16_t*, const std::uint16_t*, std::int64_t,
                        const std::uint32_t*, std::int64_t, float*, float*, std::int64_t);

template <bool kAdd>
TileFn TileFor(std::int64_t columns) {
  static constexpr std::array<TileFn, kGroup + 1> kTiles = {
      nullptr,       Tile<1, kAdd>, Tile<2, kAdd>, Tile<3, kAdd>, Tile<4, kAdd>,  Tile<5, kAdd>,
      Tile<6, kAdd>, Tile<7, kAdd>, Tile<8, kAdd>, Tile<9, kAdd>, Tile<10, kAdd>, Tile<11, kAdd>};
  return kTiles[static_cast<std::size_t>(columns)];
}

// The features of one row, φ(s·x) in float32, into out (F floats; model/kernels/taylor_features.h):
// each run x_i·x_{i..d-1} with whole-register and masked stores.
TS_AVX512_BF16 void RowFeatures(const float* __restrict x, float s, std::int64_t d,
                                float* __restrict scaled, float* __restrict out) {
  for (std::int64_t i = 0; i < d; ++i) scaled[i] = s * x[i];
  for (std::int64_t i = 0; i < d; ++i) {
    const __m512 xi = _mm512_set1_ps(scaled[i]);
    for (std::int64_t j = i; j < d; j += kLanes) {
      const std::int64_t left = d - j;
      const __mmask16 mask =
          left >= kLanes ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1u);
      _mm512_mask_storeu_ps(out + (j - i), mask,
                            _mm512_mul_ps(xi, _mm512_maskz_loadu_ps(mask, scaled + j)));
    }
    out += d - i;
  }
  for (std::int64_t i = 0; i < d; ++i) out[i] = scaled[i];
  out[d] = 1.0f;
}

// Writes 16-lane feature vectors in order as bfloat16 pairs of consecutive features.
class PairWriter {
 public:
  explicit PairWriter(std::uint16_t* out) : out_(out) {}
  TS_AVX512_BF16 void Add(__m512 v) {
    if (!have_even_) {
      even_ = v;
      have_even_ = true;
      return;
    }
    _mm512_storeu_si512(out_, PackPairs(even_, v));
    out_ += 2 * kLanes;
    have_even_ = false;
  }

 private:
  std::uint16_t* out_;
  __m512 even_{};
  bool have_even_ = false;
};

}  // namespace

bool HaveAvx512Bf16() { return ActiveCpuCapability() >= CpuCapability::kAvx512Bf16; }

Bf16FeatureProducts::Bf16FeatureProducts(std::int64_t chunk, std::int64_t d)
    : d_(d),
      features_(FeatureCount(d)),
      padded_features_((FeatureCount(d) + kTileRows - 1) / kTileRows * kTileRows),
      width_(d + 1) {
  const std::int64_t key_pairs = (chunk + 1) / 2;
  const std::int64_t query_rows = (chunk + kTileRows - 1) / kTileRows * kTileRows;
  packed_.resize(static_cast<std::size_t>(padded_features_ * std::max(2 * key_pairs, query_rows)));
  row_features_.assign(static_cast<std::size_t>(2 * padded_features_), 0.0f);
  value_pairs_.resize(static_cast<std::size_t>(key_pairs * width_));
  sums_.resize(static_cast<std::size_t>(width_ * padded_features_));
  kv_pairs_.resize(static_cast<std::size_t>(padded_features_ / 2 * width_));
  columns_.resize(static_cast<std::size_t>((d + 1) * kLanes));  // row d: the scaled scratch
  nom_.resize(static_cast<std::size_t>(width_ * kTileRows));
}

void Bf16FeatureProducts::ClearSums() { std::fill(sums_.begin(), sums_.end(), 0.0f); }

TS_AVX512_BF16 void Bf16FeatureProducts::AddKeys(const float* k, std::int64_t stride,
                                                 const float* scale, const float* values,
                                                 std::int64_t n) {
  const std::int64_t pairs = (n + 1) / 2;
  const std::int64_t blocks = padded_features_ / kLanes;
  float* first = row_features_.data();
  float* second = first + padded_features_;
  float* scaled = columns_.data();
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int64_t r0 = 2 * p, r1 = 2 * p + 1;
    RowFeatures(k + r0 * stride, scale[r0], d_, scaled, first);
    if (r1 < n) {
      RowFeatures(k + r1 * stride, scale[r1], d_, scaled, second);
    } else {
      std::fill(second, second + features_, 0.0f);
    }
    // Layout [block of 16 features][pair][16 features × 2 rows].
    for (std::int64_t block = 0; block < blocks; ++block) {
      _mm512_storeu_si512(packed_.data() + (block * pairs + p) * 2 * kLanes,
                          PackPairs(_mm512_loadu_ps(first + block * kLanes),
                                    _mm512_loadu_ps(second + block * kLanes)));
    }
    std::uint32_t* out = value_pairs_.data() + p * width_;
    for (std::int64_t w = 0; w < width_; w += kLanes) {
      const std::int64_t left = std::min(kLanes, width_ - w);
      const auto mask = static_cast<__mmask16>((1u << left) - 1u);
      const __m512 low = _mm512_maskz_loadu_ps(mask, values + r0 * width_ + w);
      const __m512 high =
          r1 < n ? _mm512_maskz_loadu_ps(mask, values + r1 * width_ + w) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(out + w, mask, PackPairs(low, high));
    }
  }
  for (std::int64_t block = 0; block < blocks; block += 2) {
    const std::uint16_t* a0 = packed_.data() + block * pairs * 2 * kLanes;
    const std::uint16_t* a1 = a0 + pairs * 2 * kLanes;
    for (std::int64_t w0 = 0; w0 < width_; w0 += kGroup) {
      float* out0 = sums_.data() + w0 * padded_features_ + block * kLanes;
      TileFor<true>(std::min(kGroup, width_ - w0))(a0, a1, pairs, value_pairs_.data() + w0, width_,
                                                   out0, out0 + kLanes, padded_features_);
    }
  }
}

void Bf16FeatureProducts::FinishSums(const float* coefficients) {
  for (std::int64_t w = 0; w < width_; ++w) {
    float* column = sums_.data() + w * padded_features_;
    for (std::int64_t f = 0; f < features_; ++f) column[f] *= coefficients[f];
  }
  for (std::int64_t f = 0; f < padded_features_; f += 2) {
    for (std::int64_t w = 0; w < width_; ++w) {
      const float* column = sums_.data() + w * padded_features_;
      kv_pairs_[static_cast<std::size_t>(f / 2 * width_ + w)] =
          Bf16Bits(column[f]) | (std::uint32_t{Bf16Bits(column[f + 1])} << 16);
    }
  }
}

TS_AVX512_BF16 void Bf16FeatureProducts::Queries(const float* q, std::int64_t stride,
                                                 const float* scale, std::int64_t n, float* y,
                                                 std::int64_t y_stride) {
  const std::int64_t feature_pairs = padded_features_ / 2;
  const std::int64_t tiles = (n + kTileRows - 1) / kTileRows;
  // Layout [block of 16 rows][feature pair][16 rows × 2 features], built 16 rows at a time
  // from the transposed scaled rows (padding rows are zero).
  for (std::int64_t block = 0; block < 2 * tiles; ++block) {
    // Column i of 16 rows by one gather; rows past n are zero.
    const std::int64_t first = block * kLanes;
    const std::int64_t left = std::max<std::int64_t>(0, std::min(kLanes, n - first));
    const __mmask16 valid =
        left >= kLanes ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1u);
    const __m512i offsets =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(static_cast<int>(stride)));
    const __m512 scales = _mm512_maskz_loadu_ps(valid, scale + first);
    const float* rows = q + first * stride;
    for (std::int64_t i = 0; i < d_; ++i) {
      const __m512 column =
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, offsets, rows + i, sizeof(float));
      _mm512_storeu_ps(columns_.data() + i * kLanes, _mm512_mul_ps(scales, column));
    }
    PairWriter writer(packed_.data() + block * feature_pairs * 2 * kLanes);
    const float* c = columns_.data();
    for (std::int64_t i = 0; i < d_; ++i) {
      const __m512 ci = _mm512_loadu_ps(c + i * kLanes);
      for (std::int64_t j = i; j < d_; ++j) {
        writer.Add(_mm512_mul_ps(ci, _mm512_loadu_ps(c + j * kLanes)));
      }
    }
    for (std::int64_t i = 0; i < d_; ++i) writer.Add(_mm512_loadu_ps(c + i * kLanes));
    writer.Add(_mm512_set1_ps(1.0f));
    for (std::int64_t f = features_; f < padded_features_; ++f) writer.Add(_mm512_setzero_ps());
  }
  for (std::int64_t tile = 0; tile < tiles; ++tile) {
    const std::uint16_t* a0 = packed_.data() + 2 * tile * feature_pairs * 2 * kLanes;
    const std::uint16_t* a1 = a0 + feature_pairs * 2 * kLanes;
    for (std::int64_t w0 = 0; w0 < width_; w0 += kGroup) {
      float* out0 = nom_.data() + w0 * kTileRows;
      TileFor<false>(std::min(kGroup, width_ - w0))(a0, a1, feature_pairs, kv_pairs_.data() + w0,
                                                    width_, out0, out0 + kLanes, kTileRows);
    }
    // nom[1:] / nom[0], 16 rows per division, then written row by row.
    for (std::int64_t half = 0; half < kTileRows; half += kLanes) {
      const __m512 den = _mm512_loadu_ps(nom_.data() + half);
      for (std::int64_t i = 1; i < width_; ++i) {
        float* column = nom_.data() + i * kTileRows + half;
        _mm512_storeu_ps(column, _mm512_div_ps(_mm512_loadu_ps(column), den));
      }
    }
    const std::int64_t rows = std::min(kTileRows, n - tile * kTileRows);
    for (std::int64_t lane = 0; lane < rows; ++lane) {
      float* out = y + (tile * kTileRows + lane) * y_stride;
      for (std::int64_t i = 0; i < d_; ++i) {
        out[i] = nom_[static_cast<std::size_t>((i + 1) * kTileRows + lane)];
      }
    }
  }
}

}  // namespace ts

#else  // not x86-64: no AVX512-BF16, and EfficientInference keeps float32 products.

namespace ts {

bool HaveAvx512Bf16() { return false; }

Bf16FeatureProducts::Bf16FeatureProducts(std::int64_t, std::int64_t)
    : d_(0), features_(0), padded_features_(0), width_(0) {
  throw std::logic_error("Bf16FeatureProducts needs an x86-64 CPU with AVX512-BF16");
}
void Bf16FeatureProducts::ClearSums() {}
void Bf16FeatureProducts::AddKeys(const float*, std::int64_t, const float*, const float*,
                                  std::int64_t) {}
void Bf16FeatureProducts::FinishSums(const float*) {}
void Bf16FeatureProducts::Queries(const float*, std::int64_t, const float*, std::int64_t, float*,
                                  std::int64_t) {}

}  // namespace ts

#endif

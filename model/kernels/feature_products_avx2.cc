#include "model/kernels/feature_products_avx2.h"

#include <cstdint>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <array>

#include "model/kernels/cpu_dispatch.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/taylor_features.h"

namespace ts {
namespace {

constexpr std::int64_t kLanes = 8;         // floats per ymm register
constexpr std::int64_t kTile = 16;         // tile rows: two ymm registers
constexpr std::int64_t kColumns = 6;       // tile columns: 2 × 6 accumulators
constexpr std::int64_t kKeyRows = 256;     // key rows per packed piece (their features stay in L2)
constexpr std::int64_t kLine = 16;         // floats per 64-byte cache line
constexpr std::int64_t kPrefetchRows = 2;  // how far ahead AddKeys fetches its feature lines

// Two accumulators (16 lanes) per tile column, as named variables: GCC keeps an array of
// __m256 in registers but also stores it to the stack on every step.
struct Column {
  __m256 low, high;
};

// acc += x · b[g] for column g < G (a no-op for the others, removed at compile time).
template <int G, int g>
TS_ALWAYS_INLINE TS_TARGET_AVX2 void Accumulate(Column& acc, __m256 x0, __m256 x1, const float* b) {
  if constexpr (g < G) {
    const __m256 y = _mm256_broadcast_ss(b + g);
    acc.low = _mm256_fmadd_ps(x0, y, acc.low);
    acc.high = _mm256_fmadd_ps(x1, y, acc.high);
  }
}

template <int G, int g, bool kAdd>
TS_ALWAYS_INLINE TS_TARGET_AVX2 void Store(Column acc, float* out, std::int64_t stride) {
  if constexpr (g < G) {
    float* o = out + g * stride;
    if (kAdd) {
      acc.low = _mm256_add_ps(acc.low, _mm256_loadu_ps(o));
      acc.high = _mm256_add_ps(acc.high, _mm256_loadu_ps(o + kLanes));
    }
    _mm256_storeu_ps(o, acc.low);
    _mm256_storeu_ps(o + kLanes, acc.high);
  }
}

// out[g] (16 floats at out + g·stride) = or += Σ_s a[s] · b[s, g] for g < G ≤ 6: a holds
// `steps` rows of 16 floats, a_stride floats apart, b `steps` rows of kColumns floats. The 2·G
// accumulators stay in registers for the whole reduction, the a rows are loaded once per step and
// each b value broadcast once.
template <int G, bool kAdd>
TS_TARGET_AVX2 void Tile(const float* __restrict a, std::int64_t a_stride, std::int64_t steps,
                         const float* __restrict b, float* __restrict out, std::int64_t stride) {
  static_assert(G >= 1 && G <= kColumns);
  const __m256 zero = _mm256_setzero_ps();
  Column c0{zero, zero}, c1{zero, zero}, c2{zero, zero}, c3{zero, zero}, c4{zero, zero},
      c5{zero, zero};
  for (std::int64_t s = 0; s < steps; ++s) {
    const __m256 x0 = _mm256_loadu_ps(a + s * a_stride);
    const __m256 x1 = _mm256_loadu_ps(a + s * a_stride + kLanes);
    const float* row = b + s * kColumns;
    Accumulate<G, 0>(c0, x0, x1, row);
    Accumulate<G, 1>(c1, x0, x1, row);
    Accumulate<G, 2>(c2, x0, x1, row);
    Accumulate<G, 3>(c3, x0, x1, row);
    Accumulate<G, 4>(c4, x0, x1, row);
    Accumulate<G, 5>(c5, x0, x1, row);
  }
  Store<G, 0, kAdd>(c0, out, stride);
  Store<G, 1, kAdd>(c1, out, stride);
  Store<G, 2, kAdd>(c2, out, stride);
  Store<G, 3, kAdd>(c3, out, stride);
  Store<G, 4, kAdd>(c4, out, stride);
  Store<G, 5, kAdd>(c5, out, stride);
}

using TileFn = void (*)(const float*, std::int64_t, std::int64_t, const float*, float*,
                        std::int64_t);

template <bool kAdd>
TileFn TileFor(std::int64_t columns) {
  static constexpr std::array<TileFn, kColumns + 1> kTiles = {
      nullptr,       Tile<1, kAdd>, Tile<2, kAdd>, Tile<3, kAdd>,
      Tile<4, kAdd>, Tile<5, kAdd>, Tile<6, kAdd>};
  return kTiles[static_cast<std::size_t>(columns)];
}

// φ(s·x) of one row into out (F floats, then zeros up to `padded`;
// model/kernels/taylor_features.h). `scaled` has d + 8 floats, zero past d. Each run x_i·x_{i..d-1}
// is written in whole vectors: what a vector writes past its run is overwritten by the runs after
// it, and up to 7 floats past `padded` may be written (the next row's, written after this one, or
// slack).
TS_TARGET_AVX2 void RowFeatures(const float* __restrict x, float s, std::int64_t d,
                                std::int64_t padded, float* __restrict scaled,
                                float* __restrict out) {
  for (std::int64_t i = 0; i < d; ++i) scaled[i] = s * x[i];
  float* o = out;
  for (std::int64_t i = 0; i < d; ++i) {
    const __m256 xi = _mm256_broadcast_ss(scaled + i);
    for (std::int64_t j = i; j < d; j += kLanes) {
      _mm256_storeu_ps(o + (j - i), _mm256_mul_ps(xi, _mm256_loadu_ps(scaled + j)));
    }
    o += d - i;
  }
  for (std::int64_t j = 0; j < d; j += kLanes) _mm256_storeu_ps(o + j, _mm256_loadu_ps(scaled + j));
  o[d] = 1.0f;
  std::fill(o + d + 1, out + padded, 0.0f);
}

// Rows r[0..7] of an 8 × 8 block become its columns.
TS_ALWAYS_INLINE TS_TARGET_AVX2 void Transpose8x8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

}  // namespace

bool UseAvx2FeatureProducts() { return ActiveCpuCapability() == CpuCapability::kAvx2; }

Avx2FeatureProducts::Avx2FeatureProducts(std::int64_t chunk, std::int64_t d)
    : d_(d),
      features_(FeatureCount(d)),
      padded_features_((FeatureCount(d) + kTile - 1) / kTile * kTile),
      width_(d + 1),
      groups_((d + 1 + kColumns - 1) / kColumns),
      // One line more than the rows: a row's 36 lines, one per block, then fall into different
      // sets of the L1 cache instead of one (a power-of-two stride).
      block_stride_((std::min(chunk, kKeyRows) + 1) * kTile) {
  const std::int64_t key_rows = std::min(chunk, kKeyRows);
  scaled_.assign(static_cast<std::size_t>(d + kLanes), 0.0f);
  row_.Resize(static_cast<std::size_t>(padded_features_ + kLanes));
  packed_.Resize(static_cast<std::size_t>(block_stride_ * (padded_features_ / kTile)));
  values_.resize(static_cast<std::size_t>(groups_ * key_rows * kColumns));
  sums_.Resize(static_cast<std::size_t>(width_ * padded_features_));
  kv_.resize(static_cast<std::size_t>(groups_ * features_ * kColumns));
  columns_.Resize(static_cast<std::size_t>(d * kTile));
  query_.Resize(static_cast<std::size_t>(features_ * kTile));
  nom_.Resize(static_cast<std::size_t>(groups_ * kColumns * kTile));
}

void Avx2FeatureProducts::ClearSums() {
  std::fill(sums_.data(), sums_.data() + width_ * padded_features_, 0.0f);
}

TS_TARGET_AVX2 void Avx2FeatureProducts::AddKeys(const float* k, std::int64_t stride,
                                                 const float* scale, const float* v,
                                                 std::int64_t v_stride, float first_column,
                                                 const bool* padded, std::int64_t n) {
  const std::int64_t blocks = padded_features_ / kTile;
  for (std::int64_t first = 0; first < n; first += kKeyRows) {
    const std::int64_t rows = std::min(kKeyRows, n - first);
    // Features as [block of 16][row][16], v' as [group of 6 columns][row][6] (zero past width_).
    // The features are written once and read only by the tiles below, long after.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (std::int64_t r = 0; r < rows; ++r) {
      // Built in one row that stays in L1 (its overlapping stores never leave it), then copied
      // into the blocks line by line: whole aligned lines, each block's rows one stream.
      RowFeatures(k + (first + r) * stride, scale[first + r], d_, padded_features_, scaled_.data(),
                  row_.data());
      const float* from = row_.data();
      float* to = packed_.data() + r * kTile;
      for (std::int64_t block = 0; block < blocks; ++block) {
        // The lines two rows on, last read by the tiles and since gone from L1: fetched now, the
        // stores to them later need not wait for them in the store buffer.
        _mm_prefetch(reinterpret_cast<const char*>(to + kPrefetchRows * kTile), _MM_HINT_T0);
        _mm256_store_ps(to, _mm256_load_ps(from));
        _mm256_store_ps(to + kLanes, _mm256_load_ps(from + kLanes));
        from += kTile;
        to += block_stride_;
      }
      // v'_r's columns w0 … w0 + columns - 1 are v_r[w0 - 1 …], but column 0 is first_column.
      const float* vr = v + (first + r) * v_stride - 1;
      const bool real = padded == nullptr || !padded[first + r];
      for (std::int64_t group = 0; group < groups_; ++group) {
        float* out = values_.data() + (group * rows + r) * kColumns;
        const std::int64_t w0 = GroupStart(group), columns = GroupColumns(group);
        __m256i mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(real ? static_cast<int>(columns) : 0), lane);
        if (w0 == 0) mask = _mm256_andnot_si256(_mm256_setr_epi32(-1, 0, 0, 0, 0, 0, 0, 0), mask);
        __m256 x = _mm256_maskload_ps(vr + w0, mask);
        if (w0 == 0 && real) x = _mm256_blend_ps(x, _mm256_set1_ps(first_column), 1);
        // Six floats: four, then two.
        _mm_storeu_ps(out, _mm256_castps256_ps128(x));
        _mm_storel_pi(reinterpret_cast<__m64*>(out + 4), _mm256_extractf128_ps(x, 1));
      }
    }
    for (std::int64_t block = 0; block < blocks; ++block) {
      for (std::int64_t group = 0; group < groups_; ++group) {
        const std::int64_t w0 = GroupStart(group);
        TileFor<true>(GroupColumns(group))(packed_.data() + block * block_stride_, kTile, rows,
                                           values_.data() + group * rows * kColumns,
                                           sums_.data() + w0 * padded_features_ + block * kTile,
                                           padded_features_);
      }
    }
  }
}

void Avx2FeatureProducts::FinishSums(const float* coefficients, float count) {
  for (std::int64_t group = 0; group < groups_; ++group) {
    for (std::int64_t f = 0; f < features_; ++f) {
      float* out = kv_.data() + (group * features_ + f) * kColumns;
      const std::int64_t w0 = GroupStart(group), columns = GroupColumns(group);
      for (std::int64_t c = 0; c < kColumns; ++c) {
        out[c] = c < columns
                     ? coefficients[f] * sums_.data()[(w0 + c) * padded_features_ + f] / count
                     : 0.0f;
      }
    }
  }
}

TS_TARGET_AVX2 void Avx2FeatureProducts::Queries(const float* q, std::int64_t stride,
                                                 const float* scale, std::int64_t n, float* y,
                                                 std::int64_t y_stride) {
  for (std::int64_t first = 0; first < n; first += kTile) {
    const std::int64_t rows = std::min(kTile, n - first);
    // The scaled rows as columns of 16 lanes (rows past n are zero), then the features of the
    // 16 rows feature by feature: x_i·x_j for i ≤ j, x_i, 1.
    // Eight rows × eight columns at a time by a transposition; the last d % 8 columns one by one.
    const std::int64_t full = d_ / kLanes * kLanes;
    for (std::int64_t half = 0; half < kTile; half += kLanes) {
      __m256 block[kLanes];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
      const std::int64_t real = std::clamp<std::int64_t>(rows - half, 0, kLanes);
      // Loaded straight from `scale` (zero past the real rows): a vector assembled through
      // memory would wait for those stores to leave the store buffer.
      const __m256 scales =
          real == kLanes
              ? _mm256_loadu_ps(scale + first + half)
              : _mm256_maskload_ps(scale + first + std::min(half, rows - 1),
                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(real)),
                                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
      std::array<const float*, kLanes> row_start{};
      for (std::int64_t r = 0; r < kLanes; ++r) {
        // Rows past n read row 0 again, times 0.
        row_start[r] = q + (r < real ? first + half + r : first) * stride;
      }
      for (std::int64_t i = 0; i < full; i += kLanes) {
        for (std::int64_t r = 0; r < kLanes; ++r) block[r] = _mm256_loadu_ps(row_start[r] + i);
        Transpose8x8(block);
        for (std::int64_t c = 0; c < kLanes; ++c) {
          _mm256_storeu_ps(columns_.data() + (i + c) * kTile + half,
                           _mm256_mul_ps(block[c], scales));
        }
      }
      for (std::int64_t i = full; i < d_; ++i) {
        for (std::int64_t r = 0; r < kLanes; ++r) {
          columns_.data()[i * kTile + half + r] =
              r < real ? scale[first + half + r] * row_start[r][i] : 0.0f;
        }
      }
    }
    float* out = query_.data();
    const float* c = columns_.data();
    // The y rows of this block are written after its tiles: fetched now, one row per step of the
    // loop below, their stores then find them in cache instead of queueing in the store buffer,
    // in front of the next block's feature stores, while their lines come from memory.
    for (std::int64_t i = 0; i < d_; ++i) {
      for (std::int64_t r = i; r < rows; r += d_) {
        const float* row = y + (first + r) * y_stride;
        for (std::int64_t j = 0; j < d_; j += kLine) {
          _mm_prefetch(reinterpret_cast<const char*>(row + j), _MM_HINT_T0);
        }
        _mm_prefetch(reinterpret_cast<const char*>(row + d_ - 1), _MM_HINT_T0);
      }
      const __m256 low = _mm256_loadu_ps(c + i * kTile);
      const __m256 high = _mm256_loadu_ps(c + i * kTile + kLanes);
      for (std::int64_t j = i; j < d_; ++j) {
        _mm256_storeu_ps(out, _mm256_mul_ps(low, _mm256_loadu_ps(c + j * kTile)));
        _mm256_storeu_ps(out + kLanes,
                         _mm256_mul_ps(high, _mm256_loadu_ps(c + j * kTile + kLanes)));
        out += kTile;
      }
    }
    std::copy(c, c + d_ * kTile, out);
    std::fill(out + d_ * kTile, out + (d_ + 1) * kTile, 1.0f);
    for (std::int64_t group = 0; group < groups_; ++group) {
      const std::int64_t w0 = GroupStart(group);
      TileFor<false>(GroupColumns(group))(query_.data(), kTile, features_,
                                          kv_.data() + group * features_ * kColumns,
                                          nom_.data() + w0 * kTile, kTile);
    }
    // y = nom[1:] / nom[0]: eight rows × eight columns at a time, divided and transposed back
    // into rows; the last d % 8 columns one by one.
    const float* nom = nom_.data();
    for (std::int64_t half = 0; half < rows; half += kLanes) {
      const std::int64_t count = std::min(kLanes, rows - half);
      const __m256 den = _mm256_loadu_ps(nom + half);
      for (std::int64_t i = 0; i < full; i += kLanes) {
        __m256 block[kLanes];  // NOLINT(modernize-avoid-c-arrays): registers, not memory
        for (std::int64_t c = 0; c < kLanes; ++c) {
          block[c] = _mm256_div_ps(_mm256_loadu_ps(nom + (i + c + 1) * kTile + half), den);
        }
        Transpose8x8(block);
        for (std::int64_t r = 0; r < count; ++r) {
          _mm256_storeu_ps(y + (first + half + r) * y_stride + i, block[r]);
        }
      }
      for (std::int64_t r = 0; r < count; ++r) {
        float* row = y + (first + half + r) * y_stride;
        for (std::int64_t i = full; i < d_; ++i)
          row[i] = nom[(i + 1) * kTile + half + r] / nom[half + r];
      }
    }
  }
}

}  // namespace ts

#else  // not x86-64: no AVX2, and EfficientInference keeps its GEMMs.

namespace ts {

bool UseAvx2FeatureProducts() { return false; }

Avx2FeatureProducts::Avx2FeatureProducts(std::int64_t, std::int64_t)
    : d_(0), features_(0), padded_features_(0), width_(0), groups_(0), block_stride_(0) {
  throw std::logic_error("Avx2FeatureProducts needs an x86-64 CPU with AVX2 and FMA");
}
void Avx2FeatureProducts::ClearSums() {}
void Avx2FeatureProducts::AddKeys(const float*, std::int64_t, const float*, const float*,
                                  std::int64_t, float, const bool*, std::int64_t) {}
void Avx2FeatureProducts::FinishSums(const float*, float) {}
void Avx2FeatureProducts::Queries(const float*, std::int64_t, const float*, std::int64_t, float*,
                                  std::int64_t) {}

}  // namespace ts

#endif

namespace ts {

void LineAlignedFloats::Resize(std::size_t size) {
  constexpr std::size_t kLine = 64 / sizeof(float);
  storage_.assign(size + kLine, 0.0f);
  const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
  offset_ = (kLine - address / sizeof(float) % kLine) % kLine;
}

}  // namespace ts

// The efficient path's two feature products in float32 on CPUs whose best level is AVX2 + FMA,
// without a GEMM library: KV = Σ_j ψ(k̂_j) v'_jᵀ and nom_i = φ(q̂_i)·KV in register tiles of
// 16 lanes × 6 columns (12 ymm accumulators, the shape of the classic Haswell sgemm kernel),
// with the features built into the layouts the tiles read: blocks of 16 features per key row
// (each block's rows one contiguous stream), 16 query rows per lane vector. Everything is float32,
// as the float32 kernel's GEMMs; only the order of the sums differs. Used by EfficientInference
// (model/kernels/efficient_inference.cc) where ActiveCpuCapability() is exactly kAvx2: there
// oneDNN's sgemm, capped at AVX2, runs these skinny shapes ([n × F]ᵀ·[n × (d + 1)] and back) well
// below its rate on square products (docs/PERFORMANCE.md, "Efficient attention on AVX2"), while
// with AVX-512 it runs them at that rate. Torch-free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ts {

// Whether EfficientInference's float32 kernel takes Avx2FeatureProducts: the active CPU level
// (model/kernels/cpu_features.h) is AVX2 + FMA without AVX-512. Always false on other
// architectures, where the class below throws std::logic_error on construction.
bool UseAvx2FeatureProducts();

// `size` floats starting on a 64-byte line, so that a row of 16 is one cache line.
class LineAlignedFloats {
 public:
  void Resize(std::size_t size);
  float* data() { return storage_.data() + offset_; }
  const float* data() const { return storage_.data() + offset_; }

 private:
  std::vector<float> storage_;
  std::size_t offset_ = 0;
};

// One head at a time, one thread per object. Feature order is model/kernels/taylor_features.h's:
// x_i·x_j for i ≤ j (row-major), then x_i, then 1.
class Avx2FeatureProducts {
 public:
  // `chunk`: the most rows passed to one AddKeys or Queries call; `d`: the head dimension.
  Avx2FeatureProducts(std::int64_t chunk, std::int64_t d);

  // Starts a head's key sums at zero.
  void ClearSums();
  // Adds Σ_r ψ(scale_r · k_r) v'_rᵀ over n ≤ chunk rows: k_r at k + r·stride (d floats),
  // v'_r = [first_column | v_r] with v_r at v + r·v_stride (d floats), or 0 where padded[r]
  // (padded may be null: no row padded).
  void AddKeys(const float* k, std::int64_t stride, const float* scale, const float* v,
               std::int64_t v_stride, float first_column, const bool* padded, std::int64_t n);
  // KV = coefficients ⊙ the sums / count (coefficients: one per feature), laid out for Queries.
  void FinishSums(const float* coefficients, float count);
  // y_r = nom_r[1:] / nom_r[0] with nom_r = φ(scale_r · q_r)·KV for n ≤ chunk rows: q_r at
  // q + r·stride, y_r (d floats) at y + r·y_stride.
  void Queries(const float* q, std::int64_t stride, const float* scale, std::int64_t n, float* y,
               std::int64_t y_stride);

 private:
  // The output columns in groups_ tiles of at most 6, their widths at most one apart (33 columns:
  // 6, 6, 6, 5, 5, 5): where group g starts, and its width.
  std::int64_t GroupStart(std::int64_t g) const {
    return g * (width_ / groups_) + std::min(g, width_ % groups_);
  }
  std::int64_t GroupColumns(std::int64_t g) const {
    return width_ / groups_ + (g < width_ % groups_ ? 1 : 0);
  }

  std::int64_t d_, features_, padded_features_, width_, groups_;
  std::int64_t block_stride_;  // floats from one block of 16 key features to the next
  std::vector<float> scaled_;  // d_ + 8 floats: one scaled row, zero past d_
  LineAlignedFloats row_;      // one key row's features (+ 8 floats of slack)
  LineAlignedFloats packed_;   // key features [padded_features_ / 16][row][16]
  std::vector<float> values_;  // v' [group of 6 columns][row][6]
  LineAlignedFloats sums_;     // [width_, padded_features_]: KVᵀ
  std::vector<float> kv_;      // KV [group of 6 columns][feature][6]
  LineAlignedFloats columns_;  // [d_, 16] scaled query rows, transposed
  LineAlignedFloats query_;    // [features_, 16] the features of 16 query rows
  LineAlignedFloats nom_;      // [groups_ · 6, 16] their nominators, transposed
};

}  // namespace ts

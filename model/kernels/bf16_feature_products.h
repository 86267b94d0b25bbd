// The efficient path's two feature products in bfloat16 on CPUs with AVX512-BF16, without a
// GEMM library: KV = Σ_j ψ(k̂_j) v'_jᵀ and nom_i = φ(q̂_i)·KV, with the features built straight
// into the layouts `vdpbf16ps` reads (pairs of tokens for the key sums, pairs of features for
// the queries) and float32 sums in registers. Rounding is the bf16 path's everywhere else: the
// features, v' and the coefficient-scaled KV are rounded to bfloat16 (to nearest even), the
// products are summed in float32, and the denominators and the division stay float32
// (model/api/precision.h). Torch-free; used by EfficientInference
// (model/kernels/efficient_inference.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace ts {

// float → bfloat16 bits exactly as c10::BFloat16 rounds (to nearest even; NaN stays NaN), in a
// form the compiler vectorises.
__attribute__((always_inline)) inline std::uint16_t Bf16Bits(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return value != value ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>(rounded);
}

// Whether this CPU runs AVX512-BF16 (and AVX512F/BW/VL/DQ); the class below needs it (built for
// another architecture, its constructor throws std::logic_error).
bool HaveAvx512Bf16();

// One head at a time, one thread per object. Feature order is model/kernels/taylor_features.h's:
// x_i·x_j for i ≤ j (row-major), then x_i, then 1.
class Bf16FeatureProducts {
 public:
  // `chunk`: the most rows passed to one AddKeys or Queries call; `d`: the head dimension.
  Bf16FeatureProducts(std::int64_t chunk, std::int64_t d);

  // Starts a head's key sums at zero.
  void ClearSums();
  // Adds Σ_r ψ(scale_r · k_r) v'_rᵀ over n ≤ chunk rows: k_r at k + r·stride (d floats),
  // v'_r at values + r·(d + 1).
  void AddKeys(const float* k, std::int64_t stride, const float* scale, const float* values,
               std::int64_t n);
  // KV = coefficients ⊙ the sums (coefficients: one per feature), rounded to bfloat16 for
  // Queries.
  void FinishSums(const float* coefficients);
  // y_r = nom_r[1:] / nom_r[0] with nom_r = φ(scale_r · q_r)·KV for n ≤ chunk rows: q_r at
  // q + r·stride, y_r (d floats) at y + r·y_stride.
  void Queries(const float* q, std::int64_t stride, const float* scale, std::int64_t n, float* y,
               std::int64_t y_stride);

 private:
  std::int64_t d_, features_, padded_features_, width_;
  std::vector<std::uint16_t> packed_;       // the current chunk's features, in a product layout
  std::vector<float> row_features_;         // [2, padded_features_] floats of two key rows
  std::vector<std::uint32_t> value_pairs_;  // [chunk / 2, width_] bf16 pairs of v'
  std::vector<float> sums_;                 // [width_, padded_features_]: KVᵀ in float32
  std::vector<std::uint32_t> kv_pairs_;     // [padded_features_ / 2, width_] bf16 pairs of KV
  std::vector<float> columns_;              // [d, 16] scaled query rows, transposed
  std::vector<float> nom_;                  // [width_, 32] one tile's nominators, transposed
};

}  // namespace ts

// The direct path's inner loop for small heads (d ≤ 16) on CPUs with AVX-512, without a GEMM
// library: 16 query rows at a time, one per vector lane, their scaled queries and all d + 1
// output sums held in registers while the keys stream past. For each key the score
// (q̂·k̂ + β) is built, squared and multiplied into the sums at once, so no [rows, N] score
// block is written and read back. Two GEMMs of inner or outer width d + 1 ≤ 17 ran far below
// the machine's rate (docs/PERFORMANCE.md, "Small heads"). Torch-free; used by DirectInference
// (model/kernels/direct_inference.cc).
#pragma once

#include <cstdint>

namespace ts {

inline constexpr std::int64_t kDirectTileRows = 16;        // query rows per tile: one per lane
inline constexpr std::int64_t kDirectTileKeyPadding = 11;  // key rows read past m

// The widths DirectTile runs (the head dimension rounded up to one of them, unused columns
// zero), or 0 where it does not: d > 16, or a CPU without AVX-512F (or not x86-64).
std::int64_t DirectTileWidth(std::int64_t d);

// For r < 16 and c ≤ width, with width = DirectTileWidth(d):
//   sums[c·16 + r] = Σ_{j<m} (Σ_i queries[i·16 + r]·keys[j·width + i] + beta)² · values'_j[c]
// where values'_j = [values[j·width .. j·width + width) | 1]. queries holds the 16 rows'
// scaled queries transposed ([width][16], zero past d), keys and values one row of `width` per
// key (zero past d). keys must hold kDirectTileKeyPadding more finite rows past m: the scores
// are computed 12 keys at a time. Throws std::logic_error where DirectTileWidth(width) != width.
void DirectTile(std::int64_t width, const float* queries, float beta, const float* keys,
                const float* values, std::int64_t m, float* sums);

// One head's inputs as DirectTileKeys and DirectTileQueries read them: token t's q, k and v at
// q + t·q_stride, …; it is padding where `padded` (null: none) has padded[t]. Rows are scaled
// by factor / max(‖x‖₂, 1e-12) with `normalize` (keys: factor 1), else by factor. Every
// row offset t·stride must be below 2³¹ (DirectTileFits).
struct DirectTileInput {
  std::int64_t d = 0, tokens = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t q_stride = 0, k_stride = 0, v_stride = 0;
  const bool* padded = nullptr;
  bool normalize = true;
};

// Whether row offsets of `tokens` rows `stride` floats apart fit the tiles' 32-bit indices.
inline bool DirectTileFits(std::int64_t tokens, std::int64_t stride) {
  return tokens * stride < (std::int64_t{1} << 31);
}

// The head's real keys in token order for DirectTile: keys and values rows of `width` (scaled
// k and v, zero past d), kDirectTileKeyPadding zero key rows after them, and value_sums[i] =
// Σ_j v_j[i] for i < d. Returns m, the number of real keys.
std::int64_t DirectTileKeys(const DirectTileInput& in, std::int64_t width, float* keys,
                            float* values, float* value_sums);

// DirectTile's queries ([width][16], transposed) for up to 16 rows (token indices `rows`,
// count ≤ 16), scaled as DirectTileInput says with `factor`; lanes past count are zero.
void DirectTileQueries(const DirectTileInput& in, std::int64_t width, const std::int32_t* rows,
                       std::int64_t count, float factor, float* queries);

// y rows from DirectTile's sums: for r < count and i < d,
//   y[rows[r]·y_stride + i] = (sums[i·16 + r] + constant[i]) · factor /
//                             (sums[width·16 + r] + constant[d]).
void DirectTileOutput(const DirectTileInput& in, std::int64_t width, const float* sums,
                      const float* constant, float factor, const std::int32_t* rows,
                      std::int64_t count, float* y, std::int64_t y_stride);

}  // namespace ts

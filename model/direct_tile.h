// The direct path's inner loop for small heads (d ≤ 16) on CPUs with AVX-512, without a GEMM
// library: 16 query rows at a time, one per vector lane, their scaled queries and all d + 1
// output sums held in registers while the keys stream past. For each key the score
// (q̂·k̂ + β) is built, squared and multiplied into the sums at once, so no [rows, N] score
// block is written and read back. Two GEMMs of inner or outer width d + 1 ≤ 17 ran far below
// the machine's rate (docs/PERFORMANCE.md, "Small heads"). Torch-free; used by DirectInference
// (model/direct_inference.cc).
#pragma once

#include <cstdint>

namespace ts {

inline constexpr std::int64_t kDirectTileRows = 16;       // query rows per tile: one per lane
inline constexpr std::int64_t kDirectTileKeyPadding = 7;  // key rows read past m

// The widths DirectTile runs (the head dimension rounded up to one of them, unused columns
// zero), or 0 where it does not: d > 16, or a CPU without AVX-512F (or not x86-64).
std::int64_t DirectTileWidth(std::int64_t d);

// For r < 16 and c ≤ width, with width = DirectTileWidth(d):
//   sums[c·16 + r] = Σ_{j<m} (Σ_i queries[i·16 + r]·keys[j·width + i] + beta)² · values'_j[c]
// where values'_j = [values[j·width .. j·width + width) | 1]. queries holds the 16 rows'
// scaled queries transposed ([width][16], zero past d), keys and values one row of `width` per
// key (zero past d). keys must hold kDirectTileKeyPadding more finite rows past m: the scores
// are computed 8 keys at a time. Throws std::logic_error where DirectTileWidth(width) != width.
void DirectTile(std::int64_t width, const float* queries, float beta, const float* keys,
                const float* values, std::int64_t m, float* sums);

}  // namespace ts

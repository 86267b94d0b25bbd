// The fused CUDA kernels of TaylorShift attention's backward; what they compute is in
// taylor_kernels_cuda.h (BackwardArgs) and docs/MODEL.md. Like the forward: WMMA bf16 16×16×16
// fragments with float32 accumulators, 128 threads (4 warps) per block, each warp owning 16 rows
// of the block's tile; scores and features are recomputed tile by tile and never reach global
// memory. The blocks that need more than 48 KiB of shared memory ask for it at launch.
#include "model/kernels/taylor_kernels_cuda_tiles.cuh"

namespace ts::cuda_kernels {
namespace {

using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Converts a warp's 16×16 float accumulator to bfloat16 at `target` (row stride `ldm`) through the
// warp's float scratch tile (16 × (16 + kPad32)).
__device__ __forceinline__ void StoreBf16(const Accumulator& x, float* scratch, Bf16* target,
                                          int ldm, int lane) {
  wmma::store_matrix_sync(scratch, x, 16 + kPad32, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 256; e += 32) {
    target[(e / 16) * ldm + e % 16] = __float2bfloat16(scratch[(e / 16) * (16 + kPad32) + e % 16]);
  }
  __syncwarp();
}

// Shared memory of FeatureGradKernel<D, ...>: the rows x̃ (float), the right factor R, one group of
// the state, and w or the features (one region, used in turn).
template <int D>
struct FeatureGradSmem {
  static constexpr int kWidth = Dims<D>::kWidth;
  static constexpr int kRows = kTile * (D + 1) * 4;
  static constexpr int kRight = kTile * (kWidth + kPad16) * 2;
  static constexpr int kState = kGroup * kWidth * 2;
  static constexpr int kScratch =
      RoundUp(Max(kTile * (kGroup + kPad32) * 4, kTile*(kGroup + kPad16) * 2), 128);
  static constexpr int kOut = kTile * (kWidth + kPad32) * 4;  // keys' ∂L/∂v', at the end
  static constexpr int kRightAt = RoundUp(kRows, 128);
  static constexpr int kStateAt = kRightAt + RoundUp(kRight, 128);
  static constexpr int kScratchAt = kStateAt + RoundUp(kState, 128);
  static constexpr int kBytes = Max(kScratchAt + kScratch, kOut);
};

// The backward of one side of the efficient path. Block (tile, bh) takes kTile rows x̃ = [α·x | 1]
// (x = q̂, or k̂ with padded keys zero) and a state M (bfloat16 [features][width], coefficients
// applied), feature group by feature group:
//   w = R·Mᵀ, the gradient of each row's features: ∂L/∂φ(q̃_i) = KV·dnom_i for queries
//   (R = dnom, M = KV), ∂L/∂ψ(k̃_j) = dKV₀·v'_j for keys (R = v' = [v/N | κ], M = dKV₀);
//   ∂L/∂x̃_a = Σ_f w_f·∂(x̃_i x̃_j)/∂x̃_a over the group's pairs (i, j) that hold a, summed per
//   thread in registers (each thread owns the same D/2 (row, a) entries in every group);
// keys also sum ∂L/∂v'_j = ψ(k̃_j)ᵀ·dKV₀. Writes ∂L/∂x = α·∂L/∂x̃[:d] and, for keys,
// ∂L/∂v = ∂L/∂v'[:d]/N.
template <int D, bool kKeys>
__global__ void __launch_bounds__(kThreads)
    FeatureGradKernel(BackwardArgs args, const Bf16* state) {
  using S = Dims<D>;
  using Smem = FeatureGradSmem<D>;
  constexpr int kWidth = S::kWidth;
  constexpr int kPerThread = kTile * D / kThreads;
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ unsigned char pair_i[kGroup];
  __shared__ unsigned char pair_j[kGroup];
  auto* rows = reinterpret_cast<float(*)[D + 1]>(shared);
  auto* right = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + Smem::kRightAt);
  auto* kv = reinterpret_cast<Bf16(*)[kWidth]>(shared + Smem::kStateAt);
  auto* w = reinterpret_cast<float(*)[kGroup + kPad32]>(shared + Smem::kScratchAt);
  auto* features = reinterpret_cast<Bf16(*)[kGroup + kPad16]>(shared + Smem::kScratchAt);
  auto* out = reinterpret_cast<float(*)[kWidth + kPad32]>(shared);

  const AttentionArgs& f = args.forward;
  const int t0 = static_cast<int>(blockIdx.x) * kTile;
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / f.heads;
  const int head = bh % f.heads;
  const int length = SequenceRows(f, batch);
  if (t0 >= length) return;  // a tile past a short sequence's end (the whole block)
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const float alpha = sqrtf(sqrtf(static_cast<float>(D)));
  const std::int64_t offset = HeadOffset(f.in_layout, f.starts, batch, head);
  LoadExtendedRows<D>(f, (kKeys ? f.k : f.q) + offset, f.in_layout.token, batch, t0, length, kKeys,
                      alpha, rows);
  if constexpr (kKeys) {
    const SequenceScales scales = ScalesOf(f, batch, D);
    LoadValueRows<D>(f, f.v + HeadOffset(f.value_layout, f.starts, batch, head),
                     f.value_layout.token, batch, t0, length, scales.inverse, scales.constant,
                     right);
  } else {
    LoadRawRows<D>(args.dnom + HeadOffset(args.dnom_layout, f.starts, batch, head),
                   args.dnom_layout.token, t0, length, right);
  }

  float grad[kPerThread];
  for (float& g : grad) g = 0.0F;
  Accumulator dv[kKeys ? kWidth / 16 : 1];
  for (auto& x : dv) wmma::fill_fragment(x, 0.0F);
  const Bf16* head_state = state + static_cast<std::size_t>(bh) * S::kFeaturesPadded * kWidth;
  for (int g = 0; g < S::kGroups; ++g) {
    __syncthreads();  // the previous group's state rows, w and features are consumed
    const int first = g * kGroup;
    LoadPairs<D>(first, pair_i, pair_j);
    const auto* source =
        reinterpret_cast<const uint4*>(head_state + static_cast<std::size_t>(first) * kWidth);
    auto* target = reinterpret_cast<uint4*>(kv);
    for (int e = static_cast<int>(threadIdx.x); e < Smem::kState / 16; e += kThreads) {
      target[e] = source[e];
    }
    __syncthreads();
    // w = R·Mᵀ for the warp's 16 rows: Mᵀ (width × features) is `kv` read column-major.
    for (int n = 0; n < kGroup / 16; ++n) {
      Accumulator acc;
      wmma::fill_fragment(acc, 0.0F);
      for (int c = 0; c < kWidth / 16; ++c) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> r;
        wmma::load_matrix_sync(r, &right[warp * 16][c * 16], kWidth + kPad16);
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> m;
        wmma::load_matrix_sync(m, &kv[n * 16][c * 16], kWidth);
        wmma::mma_sync(acc, r, m, acc);
      }
      wmma::store_matrix_sync(&w[warp * 16][n * 16], acc, kGroup + kPad32, wmma::mem_row_major);
    }
    __syncthreads();
    const int last = min(first + kGroup, S::kFeatures);
    const int row_first = pair_i[0];
    const int row_last = pair_i[last - first - 1];
#pragma unroll
    for (int p = 0; p < kPerThread; ++p) {  // unrolled: grad stays in registers
      const int e = static_cast<int>(threadIdx.x) + p * kThreads;
      grad[p] += FeatureGradContraction(rows[e / D], w[e / D], e % D, D + 1, first, last, row_first,
                                        row_last);
    }
    if constexpr (kKeys) {
      __syncthreads();  // w is consumed: the features take its place
      BuildFeatures<D>(rows, pair_i, pair_j, features);
      __syncthreads();
      for (int kk = 0; kk < kGroup / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> psi;
        wmma::load_matrix_sync(psi, &features[warp * 16][kk * 16], kGroup + kPad16);
        for (int c = 0; c < kWidth / 16; ++c) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> m;
          wmma::load_matrix_sync(m, &kv[kk * 16][c * 16], kWidth);
          wmma::mma_sync(dv[c], psi, m, dv[c]);
        }
      }
    }
  }
  float* dx = (kKeys ? args.dk : args.dq) + HeadOffset(args.grad_layout, f.starts, batch, head);
#pragma unroll
  for (int p = 0; p < kPerThread; ++p) {
    const int e = static_cast<int>(threadIdx.x) + p * kThreads;
    const int token = t0 + e / D;
    if (token < length) dx[token * args.grad_layout.token + e % D] = alpha * grad[p];
  }
  if constexpr (kKeys) {
    __syncthreads();  // `out` overwrites the rows, R and the state
    for (int c = 0; c < kWidth / 16; ++c) {
      wmma::store_matrix_sync(&out[warp * 16][c * 16], dv[c], kWidth + kPad32, wmma::mem_row_major);
    }
    __syncthreads();
    const float inverse = 1.0F / f.counts[batch];
    float* v = args.dv + HeadOffset(args.grad_layout, f.starts, batch, head);
    for (int e = static_cast<int>(threadIdx.x); e < kTile * D; e += kThreads) {
      const int t = e / D;
      const int col = e % D;
      const int token = t0 + t;
      if (token < length) {
        v[token * args.grad_layout.token + col] =
            KeyReal(f, batch, token) ? out[t][col] * inverse : 0.0F;
      }
    }
  }
}

// Shared memory of the direct path's backward kernels: the block's own rows (keys and [v | 1]
// for DirectKeyGradKernel, queries and dnom for DirectQueryGradKernel), the other side's tile
// (the same two shapes), two bfloat16 tiles of kTile × kTile, and a float scratch tile per warp.
template <int D>
struct DirectGradSmem {
  static constexpr int kDim = Dims<D>::kDimPadded;
  static constexpr int kWidth = Dims<D>::kWidth;
  static constexpr int kDimRows = RoundUp(kTile * (kDim + kPad16) * 2, 128);
  static constexpr int kWidthRows = RoundUp(kTile * (kWidth + kPad16) * 2, 128);
  static constexpr int kSquare = RoundUp(kTile * (kTile + kPad16) * 2, 128);
  static constexpr int kScratch = (kThreads / 32) * 16 * (16 + kPad32) * 4;
  static constexpr int kOwnDimAt = 0;
  static constexpr int kOwnWidthAt = kDimRows;
  static constexpr int kOtherDimAt = kOwnWidthAt + kWidthRows;
  static constexpr int kOtherWidthAt = kOtherDimAt + kDimRows;
  static constexpr int kFirstSquareAt = kOtherWidthAt + kWidthRows;
  static constexpr int kSecondSquareAt = kFirstSquareAt + kSquare;
  static constexpr int kScratchAt = kSecondSquareAt + kSquare;
  static constexpr int kOut = kTile * (Max(kDim, kWidth) + kPad32) * 4;  // at the end
  static constexpr int kBytes = Max(kScratchAt + kScratch, kOut);
};

// The warp's two products against rows n·16 .. n·16 + 15 of the other side's tiles:
// s = own_dim[warp's rows]·other_dim[those rows]ᵀ (scores) and
// da = own_width[warp's rows]·other_width[those rows]ᵀ (the scores' gradient, dnom·v''ᵀ or its
// transpose). Both sides' [rows][cols] tiles read column-major are the transposes.
template <int D>
__device__ __forceinline__ void PairedProducts(
    const Bf16 (*own_dim)[Dims<D>::kDimPadded + kPad16],
    const Bf16 (*own_width)[Dims<D>::kWidth + kPad16],
    const Bf16 (*other_dim)[Dims<D>::kDimPadded + kPad16],
    const Bf16 (*other_width)[Dims<D>::kWidth + kPad16], int warp, int n, Accumulator& s,
    Accumulator& da) {
  constexpr int kDim = Dims<D>::kDimPadded;
  constexpr int kWidth = Dims<D>::kWidth;
  wmma::fill_fragment(s, 0.0F);
  wmma::fill_fragment(da, 0.0F);
  for (int kk = 0; kk < kDim / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> a;
    wmma::load_matrix_sync(a, &own_dim[warp * 16][kk * 16], kDim + kPad16);
    wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> b;
    wmma::load_matrix_sync(b, &other_dim[n * 16][kk * 16], kDim + kPad16);
    wmma::mma_sync(s, a, b, s);
  }
  for (int c = 0; c < kWidth / 16; ++c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> a;
    wmma::load_matrix_sync(a, &own_width[warp * 16][c * 16], kWidth + kPad16);
    wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> b;
    wmma::load_matrix_sync(b, &other_width[n * 16][c * 16], kWidth + kPad16);
    wmma::mma_sync(da, a, b, da);
  }
}

// Writes the warp's 16 rows of `acc` (cols [0, d)) at rows t0 + warp·16 + r of `target` through
// `out`; rows past `end` are skipped, and rows `zero` says are written as zeros.
template <int D, int kCols, typename Zero>
__device__ __forceinline__ void WriteRows(const Accumulator (&acc)[kCols / 16],
                                          float (*out)[kCols + kPad32], float* target,
                                          std::int64_t stride, int t0, int end, Zero zero) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int c = 0; c < kCols / 16; ++c) {
    wmma::store_matrix_sync(&out[warp * 16][c * 16], acc[c], kCols + kPad32, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int t = warp * 16 + e / D;
    const int col = e % D;
    const int token = t0 + t;
    if (token < end) target[token * stride + col] = zero(token) ? 0.0F : out[t][col];
  }
}

// ∂L/∂q̂ of the direct path: block (tile, bh) runs kTile queries against every key tile. With
// S' = q̂k̂ᵀ + β: dA = dnom·v''ᵀ, dS = 2·S' ⊙ dA (rounded to bfloat16 in shared memory), and
// ∂L/∂q̂ += dS·k̂, accumulated in float32.
template <int D>
__global__ void __launch_bounds__(kThreads) DirectQueryGradKernel(BackwardArgs args, float beta) {
  using Smem = DirectGradSmem<D>;
  constexpr int kDim = Smem::kDim;
  constexpr int kWidth = Smem::kWidth;
  extern __shared__ __align__(128) unsigned char shared[];
  auto* queries = reinterpret_cast<Bf16(*)[kDim + kPad16]>(shared + Smem::kOwnDimAt);
  auto* dnom = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + Smem::kOwnWidthAt);
  auto* keys = reinterpret_cast<Bf16(*)[kDim + kPad16]>(shared + Smem::kOtherDimAt);
  auto* values = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + Smem::kOtherWidthAt);
  auto* ds = reinterpret_cast<Bf16(*)[kTile + kPad16]>(shared + Smem::kFirstSquareAt);
  auto* out = reinterpret_cast<float(*)[kDim + kPad32]>(shared);

  const AttentionArgs& f = args.forward;
  const int q0 = static_cast<int>(blockIdx.x) * kTile;
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / f.heads;
  const int head = bh % f.heads;
  const int length = SequenceRows(f, batch);
  if (q0 >= length) return;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float* scratch = reinterpret_cast<float*>(shared + Smem::kScratchAt) + warp * 16 * (16 + kPad32);
  const std::int64_t offset = HeadOffset(f.in_layout, f.starts, batch, head);
  const float* v = f.v + HeadOffset(f.value_layout, f.starts, batch, head);
  LoadDimRows<D>(f.q + offset, f.in_layout.token, q0, length, queries);
  LoadRawRows<D>(args.dnom + HeadOffset(args.dnom_layout, f.starts, batch, head),
                 args.dnom_layout.token, q0, length, dnom);

  Accumulator dq[kDim / 16];
  for (auto& x : dq) wmma::fill_fragment(x, 0.0F);
  for (int k0 = 0; k0 < length; k0 += kTile) {
    __syncthreads();  // the previous key tile is consumed (and the own rows are loaded)
    LoadDimRows<D>(f.k + offset, f.in_layout.token, k0, length, keys);
    LoadValueRows<D>(f, v, f.value_layout.token, batch, k0, length, 1.0F, 1.0F, values);
    __syncthreads();
    for (int n = 0; n < kTile / 16; ++n) {
      Accumulator s;
      Accumulator da;
      PairedProducts<D>(queries, dnom, keys, values, warp, n, s, da);
      // s and da are fragments of one type: their elements lie at the same positions.
      for (int i = 0; i < s.num_elements; ++i) s.x[i] = 2.0F * (s.x[i] + beta) * da.x[i];
      StoreBf16(s, scratch, &ds[warp * 16][n * 16], kTile + kPad16, lane);
    }
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> a;
      wmma::load_matrix_sync(a, &ds[warp * 16][kk * 16], kTile + kPad16);
      for (int c = 0; c < kDim / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> k;
        wmma::load_matrix_sync(k, &keys[kk * 16][c * 16], kDim + kPad16);
        wmma::mma_sync(dq[c], a, k, dq[c]);
      }
    }
  }
  __syncthreads();  // `out` overlaps every warp's tiles
  WriteRows<D, kDim>(dq, out, args.dq + HeadOffset(args.grad_layout, f.starts, batch, head),
                     args.grad_layout.token, q0, length, [](int) { return false; });
}

// ∂L/∂k̂ and ∂L/∂v of the direct path: block (tile, bh) runs kTile keys against every query tile.
// With S'ᵀ = k̂q̂ᵀ + β: Aᵀ = S'ᵀ² + γ, dAᵀ = v''·dnomᵀ, dSᵀ = 2·S'ᵀ ⊙ dAᵀ (both rounded to
// bfloat16 in shared memory), ∂L/∂k̂ += dSᵀ·q̂ and ∂L/∂v'' += Aᵀ·dnom, accumulated in float32;
// padded keys get zero rows.
template <int D>
__global__ void __launch_bounds__(kThreads)
    DirectKeyGradKernel(BackwardArgs args, float beta, float gamma) {
  using Smem = DirectGradSmem<D>;
  constexpr int kDim = Smem::kDim;
  constexpr int kWidth = Smem::kWidth;
  extern __shared__ __align__(128) unsigned char shared[];
  auto* keys = reinterpret_cast<Bf16(*)[kDim + kPad16]>(shared + Smem::kOwnDimAt);
  auto* values = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + Smem::kOwnWidthAt);
  auto* queries = reinterpret_cast<Bf16(*)[kDim + kPad16]>(shared + Smem::kOtherDimAt);
  auto* dnom = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + Smem::kOtherWidthAt);
  auto* at = reinterpret_cast<Bf16(*)[kTile + kPad16]>(shared + Smem::kFirstSquareAt);
  auto* ds = reinterpret_cast<Bf16(*)[kTile + kPad16]>(shared + Smem::kSecondSquareAt);

  const AttentionArgs& f = args.forward;
  const int k0 = static_cast<int>(blockIdx.x) * kTile;
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / f.heads;
  const int head = bh % f.heads;
  const int length = SequenceRows(f, batch);
  if (k0 >= length) return;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float* scratch = reinterpret_cast<float*>(shared + Smem::kScratchAt) + warp * 16 * (16 + kPad32);
  const std::int64_t offset = HeadOffset(f.in_layout, f.starts, batch, head);
  const float* dnom_head = args.dnom + HeadOffset(args.dnom_layout, f.starts, batch, head);
  LoadDimRows<D>(f.k + offset, f.in_layout.token, k0, length, keys);
  LoadValueRows<D>(f, f.v + HeadOffset(f.value_layout, f.starts, batch, head), f.value_layout.token,
                   batch, k0, length, 1.0F, 1.0F, values);

  Accumulator dk[kDim / 16];
  Accumulator dv[kWidth / 16];
  for (auto& x : dk) wmma::fill_fragment(x, 0.0F);
  for (auto& x : dv) wmma::fill_fragment(x, 0.0F);
  for (int q0 = 0; q0 < length; q0 += kTile) {
    __syncthreads();  // the previous query tile is consumed (and the own rows are loaded)
    LoadDimRows<D>(f.q + offset, f.in_layout.token, q0, length, queries);
    LoadRawRows<D>(dnom_head, args.dnom_layout.token, q0, length, dnom);
    __syncthreads();
    for (int n = 0; n < kTile / 16; ++n) {
      Accumulator s;
      Accumulator da;
      PairedProducts<D>(keys, values, queries, dnom, warp, n, s, da);
      for (int i = 0; i < s.num_elements; ++i) {
        const float shifted = s.x[i] + beta;
        s.x[i] = shifted * shifted + gamma;
        da.x[i] *= 2.0F * shifted;
      }
      StoreBf16(s, scratch, &at[warp * 16][n * 16], kTile + kPad16, lane);
      StoreBf16(da, scratch, &ds[warp * 16][n * 16], kTile + kPad16, lane);
    }
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> a;
      wmma::load_matrix_sync(a, &ds[warp * 16][kk * 16], kTile + kPad16);
      for (int c = 0; c < kDim / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> q;
        wmma::load_matrix_sync(q, &queries[kk * 16][c * 16], kDim + kPad16);
        wmma::mma_sync(dk[c], a, q, dk[c]);
      }
      wmma::load_matrix_sync(a, &at[warp * 16][kk * 16], kTile + kPad16);
      for (int c = 0; c < kWidth / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> g;
        wmma::load_matrix_sync(g, &dnom[kk * 16][c * 16], kWidth + kPad16);
        wmma::mma_sync(dv[c], a, g, dv[c]);
      }
    }
  }
  __syncthreads();  // `out` overlaps every warp's tiles
  const std::int64_t grad_offset = HeadOffset(args.grad_layout, f.starts, batch, head);
  WriteRows<D, kDim>(dk, reinterpret_cast<float(*)[kDim + kPad32]>(shared), args.dk + grad_offset,
                     args.grad_layout.token, k0, length, [](int) { return false; });
  __syncthreads();  // the two outputs' rows have different strides: other warps' rows overlap
  WriteRows<D, kWidth>(dv, reinterpret_cast<float(*)[kWidth + kPad32]>(shared),
                       args.dv + grad_offset, args.grad_layout.token, k0, length,
                       [&](int token) { return !KeyReal(f, batch, token); });
}

// Kernels with more than the default 48 KiB of dynamic shared memory must say so first.
template <typename Kernel>
cudaError_t AllowShared(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <int D>
cudaError_t LaunchEfficientBackwardFor(const BackwardArgs& args, const EfficientPlan& plan,
                                       void* workspace, cudaStream_t stream) {
  using S = Dims<D>;
  const AttentionArgs& f = args.forward;
  const int bh = f.batch * f.heads;
  const std::size_t heads = static_cast<std::size_t>(bh);
  auto* bytes = static_cast<unsigned char*>(workspace);
  auto* partial = reinterpret_cast<float*>(bytes);
  const std::size_t state_bytes = AlignUp(heads * StateElements(D) * sizeof(Bf16));
  auto* kv = reinterpret_cast<Bf16*>(
      bytes + AlignUp(heads * plan.slices * StateElements(D) * sizeof(float)));
  auto* dkv = reinterpret_cast<Bf16*>(reinterpret_cast<unsigned char*>(kv) + state_bytes);
  const dim3 state_grid(S::kGroups, plan.slices, bh);
  const std::size_t total = heads * StateElements(D);
  const int reduce_blocks = static_cast<int>(std::min<std::size_t>((total + 255) / 256, 1 << 16));
  // KV as the forward summed it, then dKV₀ = coef ⊙ Σ_i φ(q̃_i)·dnom_iᵀ in the same buffers.
  EfficientStateKernel<D><<<state_grid, kThreads, 0, stream>>>(
      f, StateSides{}, plan.tiles_per_slice, plan.slices, partial);
  EfficientReduceKernel<D><<<reduce_blocks, 256, 0, stream>>>(f, plan.slices, partial, kv);
  EfficientStateKernel<D>
      <<<state_grid, kThreads, 0, stream>>>(f, StateSides{false, args.dnom, args.dnom_layout},
                                            plan.tiles_per_slice, plan.slices, partial);
  EfficientReduceKernel<D><<<reduce_blocks, 256, 0, stream>>>(f, plan.slices, partial, dkv);
  constexpr int kShared = FeatureGradSmem<D>::kBytes;
  for (const cudaError_t error : {AllowShared(FeatureGradKernel<D, false>, kShared),
                                  AllowShared(FeatureGradKernel<D, true>, kShared)}) {
    if (error != cudaSuccess) return error;
  }
  const dim3 tiles(Tiles(f.tokens), bh);
  FeatureGradKernel<D, false><<<tiles, kThreads, kShared, stream>>>(args, kv);
  FeatureGradKernel<D, true><<<tiles, kThreads, kShared, stream>>>(args, dkv);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchDirectBackwardFor(const BackwardArgs& args, cudaStream_t stream) {
  const AttentionArgs& f = args.forward;
  const float beta = f.b / (2.0F * f.a);
  const float gamma = f.c / f.a - f.b * f.b / (4.0F * f.a * f.a);
  constexpr int kShared = DirectGradSmem<D>::kBytes;
  for (const cudaError_t error : {AllowShared(DirectQueryGradKernel<D>, kShared),
                                  AllowShared(DirectKeyGradKernel<D>, kShared)}) {
    if (error != cudaSuccess) return error;
  }
  const dim3 tiles(Tiles(f.tokens), f.batch * f.heads);
  DirectQueryGradKernel<D><<<tiles, kThreads, kShared, stream>>>(args, beta);
  DirectKeyGradKernel<D><<<tiles, kThreads, kShared, stream>>>(args, beta, gamma);
  return cudaGetLastError();
}

bool BackwardFits(const BackwardArgs& args) {
  return ShapeFits(args.forward) && args.forward.starts == nullptr && args.dnom != nullptr &&
         args.dq != nullptr && args.dk != nullptr && args.dv != nullptr;
}

}  // namespace

std::size_t EfficientBackwardWorkspace(const AttentionArgs& args, const EfficientPlan& plan) {
  if (!ShapeFits(args)) return 0;
  const std::size_t heads = static_cast<std::size_t>(args.batch) * args.heads;
  return AlignUp(heads * plan.slices * StateElements(args.head_dim) * sizeof(float)) +
         2 * AlignUp(heads * StateElements(args.head_dim) * sizeof(Bf16));
}

cudaError_t LaunchEfficientBackward(const BackwardArgs& args, const EfficientPlan& plan,
                                    void* workspace, cudaStream_t stream) {
  if (!BackwardFits(args) || plan.workspace_bytes == 0 || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  return WithHeadDim(args.forward.head_dim, [&](auto dim) {
    return LaunchEfficientBackwardFor<decltype(dim)::value>(args, plan, workspace, stream);
  });
}

cudaError_t LaunchDirectBackward(const BackwardArgs& args, cudaStream_t stream) {
  if (!BackwardFits(args)) return cudaErrorInvalidValue;
  return WithHeadDim(args.forward.head_dim, [&](auto dim) {
    return LaunchDirectBackwardFor<decltype(dim)::value>(args, stream);
  });
}

}  // namespace ts::cuda_kernels

// The building blocks the fused CUDA kernels share (model/kernels/taylor_kernels_cuda.cu, the
// forward; taylor_kernels_cuda_backward.cu, the backward): tile sizes, loads of rows into shared
// memory, the feature table, the efficient path's state pass and its reduction, and the host-side
// sizes. Included by .cu files only; everything is internal to each one.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/kernels/taylor_kernels_cuda.h"

namespace ts::cuda_kernels {
namespace {

namespace wmma = nvcuda::wmma;
using Bf16 = __nv_bfloat16;

constexpr int kThreads = 128;
constexpr int kTile = 64;   // tokens per tile: keys of the state pass and of the direct path,
                            // queries of a block
constexpr int kGroup = 64;  // features per group
// Shared-memory rows of 16-bit values are padded by 8 (16 bytes) and float rows by 4 so that
// the fragment loads of consecutive rows fall on different banks; fragment origins stay
// 32-byte aligned.
constexpr int kPad16 = 8;
constexpr int kPad32 = 4;

__host__ __device__ constexpr int RoundUp(int x, int m) { return (x + m - 1) / m * m; }
__host__ __device__ constexpr int Max(int x, int y) { return x > y ? x : y; }

template <int D>
struct Dims {
  static constexpr int kExt = D + 1;                       // [x | 1]
  static constexpr int kFeatures = kExt * (kExt + 1) / 2;  // x̃_i x̃_j for i ≤ j of x̃ = [x | 1]
  static constexpr int kFeaturesPadded = RoundUp(kFeatures, kGroup);
  static constexpr int kGroups = kFeaturesPadded / kGroup;
  static constexpr int kWidth = RoundUp(D + 1, 16);  // [v | 1] padded with zero columns
  static constexpr int kDimPadded = RoundUp(D, 16);  // q, k padded to k-steps of 16
};

// 255 marks a padding feature (f ≥ the feature count): its value is 0.
constexpr unsigned char kNoPair = 255;

__device__ __forceinline__ bool KeyReal(const AttentionArgs& args, int batch, int token) {
  return token < SequenceRows(args, batch) &&
         (args.key_padding == nullptr ||
          !args.key_padding[static_cast<std::size_t>(batch) * args.tokens + token]);
}

// x̃ = [α·x | 1] of tile rows [t0, t0 + kTile) into rows[kTile][ext], from x (a head's token 0,
// rows `stride` apart); rows that are not `real` (past the end, or padded keys when `keys`) are
// all zero, the 1 included.
template <int D>
__device__ __forceinline__ void LoadExtendedRows(const AttentionArgs& args, const float* x,
                                                 std::int64_t stride, int batch, int t0, int end,
                                                 bool keys, float alpha, float (*rows)[D + 1]) {
  for (int e = static_cast<int>(threadIdx.x); e < kTile * (D + 1); e += kThreads) {
    const int t = e / (D + 1);
    const int col = e % (D + 1);
    const int token = t0 + t;
    const bool real = token < end && (!keys || KeyReal(args, batch, token));
    float value = 0.0F;
    if (real) value = col < D ? x[token * stride + col] * alpha : 1.0F;
    rows[t][col] = value;
  }
}

// v' rows of keys [t0, t0 + kTile): [v/N | κ] with κ = √(d/N)/N (1/N without output
// normalisation) and zero padding columns; zero rows for padded keys and past the end.
template <int D>
__device__ __forceinline__ void LoadValueRows(const AttentionArgs& args, const float* v,
                                              std::int64_t stride, int batch, int t0, int end,
                                              float value_scale, float constant,
                                              Bf16 (*rows)[Dims<D>::kWidth + kPad16]) {
  constexpr int kWidth = Dims<D>::kWidth;
  for (int e = static_cast<int>(threadIdx.x); e < kTile * kWidth; e += kThreads) {
    const int t = e / kWidth;
    const int col = e % kWidth;
    const int token = t0 + t;
    float value = 0.0F;
    if (token < end && KeyReal(args, batch, token)) {
      if (col < D) {
        value = v[token * stride + col] * value_scale;
      } else if (col == D) {
        value = constant;
      }
    }
    rows[t][col] = __float2bfloat16(value);
  }
}

// The pairs of features [first, first + kGroup) into pair_i / pair_j (threads 0..kGroup-1).
template <int D>
__device__ __forceinline__ void LoadPairs(int first, unsigned char* pair_i, unsigned char* pair_j) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < kGroup) {
    int i = kNoPair;
    int j = kNoPair;
    if (first + t < Dims<D>::kFeatures) FeaturePair(first + t, D + 1, i, j);
    pair_i[t] = static_cast<unsigned char>(i);
    pair_j[t] = static_cast<unsigned char>(j);
  }
}

// features[t][f] = x̃_t[i_f]·x̃_t[j_f] in bfloat16 for the kTile rows and the kGroup features.
template <int D>
__device__ __forceinline__ void BuildFeatures(const float (*rows)[D + 1],
                                              const unsigned char* pair_i,
                                              const unsigned char* pair_j,
                                              Bf16 (*features)[kGroup + kPad16]) {
  for (int e = static_cast<int>(threadIdx.x); e < kTile * kGroup; e += kThreads) {
    const int t = e / kGroup;
    const int f = e % kGroup;
    const int i = pair_i[f];
    features[t][f] = __float2bfloat16(i == kNoPair ? 0.0F : rows[t][i] * rows[t][pair_j[f]]);
  }
}

// Per sequence b: real-token count N_b, 1/N_b and the constant column κ.
struct SequenceScales {
  float count, inverse, constant;
};
__device__ __forceinline__ SequenceScales ScalesOf(const AttentionArgs& args, int batch, int d) {
  const float count = args.counts[batch];
  const float inverse = 1.0F / count;
  const float constant =
      args.output_normalize ? sqrtf(static_cast<float>(d) / count) * inverse : inverse;
  return {count, inverse, constant};
}

// Rows [t0, t0 + kTile) of d+1 floats (rows `stride` apart from `x`) into bfloat16 rows with zero
// padding columns; zero rows past `end`.
template <int D>
__device__ __forceinline__ void LoadRawRows(const float* x, std::int64_t stride, int t0, int end,
                                            Bf16 (*rows)[Dims<D>::kWidth + kPad16]) {
  constexpr int kWidth = Dims<D>::kWidth;
  for (int e = static_cast<int>(threadIdx.x); e < kTile * kWidth; e += kThreads) {
    const int t = e / kWidth;
    const int col = e % kWidth;
    const int token = t0 + t;
    rows[t][col] = __float2bfloat16(token < end && col <= D ? x[token * stride + col] : 0.0F);
  }
}

// Rows [t0, t0 + kTile) of q̂ or k̂ (d values, rows `stride` apart) as bfloat16 with zero padding
// columns; zero rows past `end`.
template <int D>
__device__ __forceinline__ void LoadDimRows(const float* x, std::int64_t stride, int t0, int end,
                                            Bf16 (*rows)[Dims<D>::kDimPadded + kPad16]) {
  constexpr int kDim = Dims<D>::kDimPadded;
  for (int e = static_cast<int>(threadIdx.x); e < kTile * kDim; e += kThreads) {
    const int t = e / kDim;
    const int col = e % kDim;
    const int token = t0 + t;
    rows[t][col] = __float2bfloat16(token < end && col < D ? x[token * stride + col] : 0.0F);
  }
}

// What the state pass sums, Σ_j ψ(x̃_j)·r_jᵀ: x̃ from the keys (padded keys left out) and
// r = v' = [v/N | κ] from args.v for the forward's KV; or x̃ from the queries (every row) and
// r = a given row of d+1 floats at `layout` (backward: ∂L/∂nom, for the queries' dKV).
struct StateSides {
  bool keys = true;
  const float* right = nullptr;  // null: v' from args.v
  TokenLayout layout;
};

// Pass 1 of the efficient path: block (group, slice, bh) sums ψ(x̃_j)·r_jᵀ for the kGroup
// features of `group` over the rows of `slice` into partial[bh][slice][features][width].
template <int D>
__global__ void __launch_bounds__(kThreads)
    EfficientStateKernel(AttentionArgs args, StateSides sides, int tiles_per_slice, int slices,
                         float* partial) {
  using S = Dims<D>;
  constexpr int kWidth = S::kWidth;
  __shared__ float rows[kTile][D + 1];
  __shared__ __align__(32) Bf16 values[kTile][kWidth + kPad16];
  __shared__ __align__(32) Bf16 features[kTile][kGroup + kPad16];
  __shared__ unsigned char pair_i[kGroup];
  __shared__ unsigned char pair_j[kGroup];

  const int group = static_cast<int>(blockIdx.x);
  const int slice = static_cast<int>(blockIdx.y);
  const int bh = static_cast<int>(blockIdx.z);
  const int batch = bh / args.heads;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  LoadPairs<D>(group * kGroup, pair_i, pair_j);
  const SequenceScales scales = ScalesOf(args, batch, D);
  const float alpha = sqrtf(sqrtf(static_cast<float>(D)));
  const int head = bh % args.heads;
  const float* x =
      (sides.keys ? args.k : args.q) + HeadOffset(args.in_layout, args.starts, batch, head);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> state[kWidth / 16];
  for (auto& s : state) wmma::fill_fragment(s, 0.0F);

  const int begin = slice * tiles_per_slice * kTile;
  // A slice past a short sequence's end sums nothing and writes zeros.
  const int end = min(SequenceRows(args, batch), begin + tiles_per_slice * kTile);
  for (int t0 = begin; t0 < end; t0 += kTile) {
    LoadExtendedRows<D>(args, x, args.in_layout.token, batch, t0, end, sides.keys, alpha, rows);
    if (sides.right == nullptr) {
      LoadValueRows<D>(args, args.v + HeadOffset(args.value_layout, args.starts, batch, head),
                       args.value_layout.token, batch, t0, end, scales.inverse, scales.constant,
                       values);
    } else {
      LoadRawRows<D>(sides.right + HeadOffset(sides.layout, args.starts, batch, head),
                     sides.layout.token, t0, end, values);
    }
    __syncthreads();
    BuildFeatures<D>(rows, pair_i, pair_j, features);
    __syncthreads();
    // ψᵀ (features × tokens) is `features` read column-major.
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::col_major> psi;
      wmma::load_matrix_sync(psi, &features[kk * 16][warp * 16], kGroup + kPad16);
      for (int c = 0; c < kWidth / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> v;
        wmma::load_matrix_sync(v, &values[kk * 16][c * 16], kWidth + kPad16);
        wmma::mma_sync(state[c], psi, v, state[c]);
      }
    }
    __syncthreads();
  }
  float* out = partial + ((static_cast<std::size_t>(bh) * slices + slice) * S::kFeaturesPadded +
                          group * kGroup + warp * 16) *
                             kWidth;
  for (int c = 0; c < kWidth / 16; ++c) {
    wmma::store_matrix_sync(out + c * 16, state[c], kWidth, wmma::mem_row_major);
  }
}

// Pass 2: KV[bh][f][c] = coefficient(f)·Σ_slices partial, in bfloat16 for the query pass. The
// coefficients are the Taylor polynomial's with Algorithm 1's α powers: a (2a off the diagonal)
// for x̃_i x̃_j, b·α² for the linear features, c·α⁴ for the constant; 0 for padding features.
template <int D>
__global__ void EfficientReduceKernel(AttentionArgs args, int slices, const float* partial,
                                      Bf16* state) {
  using S = Dims<D>;
  constexpr int kPerHead = S::kFeaturesPadded * S::kWidth;
  const std::size_t total = static_cast<std::size_t>(args.batch) * args.heads * kPerHead;
  const float alpha_squared = sqrtf(static_cast<float>(D));
  const float linear = args.b * alpha_squared;
  const float constant = args.c * alpha_squared * alpha_squared;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < total; index += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t bh = index / kPerHead;
    const int within = static_cast<int>(index % kPerHead);
    const int f = within / S::kWidth;
    float coefficient = 0.0F;
    if (f < S::kFeatures) {
      int i = 0;
      int j = 0;
      FeaturePair(f, D + 1, i, j);
      coefficient = j < D ? (i == j ? args.a : 2.0F * args.a) : (i < D ? linear : constant);
    }
    const float* p = partial + bh * slices * kPerHead + within;
    float sum = 0.0F;
    for (int s = 0; s < slices; ++s) sum += p[static_cast<std::size_t>(s) * kPerHead];
    state[index] = __float2bfloat16(sum * coefficient);
  }
}

constexpr int kMaxGridYZ = 65535;

// launch(std::integral_constant<int, D>{}) for the head dimension d with a kernel (8, 16, 32,
// 64); cudaErrorInvalidValue for any other.
template <typename Launch>
cudaError_t WithHeadDim(int d, Launch launch) {
  switch (d) {
    case 8:
      return launch(std::integral_constant<int, 8>{});
    case 16:
      return launch(std::integral_constant<int, 16>{});
    case 32:
      return launch(std::integral_constant<int, 32>{});
    case 64:
      return launch(std::integral_constant<int, 64>{});
    default:
      return cudaErrorInvalidValue;
  }
}

inline int Tiles(int tokens) { return (tokens + kTile - 1) / kTile; }

inline int GroupsOf(int d) {
  switch (d) {
    case 8:
      return Dims<8>::kGroups;
    case 16:
      return Dims<16>::kGroups;
    case 32:
      return Dims<32>::kGroups;
    case 64:
      return Dims<64>::kGroups;
    default:
      return 0;
  }
}

inline std::size_t StateElements(int d) {
  switch (d) {
    case 8:
      return std::size_t{Dims<8>::kFeaturesPadded} * Dims<8>::kWidth;
    case 16:
      return std::size_t{Dims<16>::kFeaturesPadded} * Dims<16>::kWidth;
    case 32:
      return std::size_t{Dims<32>::kFeaturesPadded} * Dims<32>::kWidth;
    case 64:
      return std::size_t{Dims<64>::kFeaturesPadded} * Dims<64>::kWidth;
    default:
      return 0;
  }
}

inline std::size_t AlignUp(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
inline bool ShapeFits(const AttentionArgs& args) {
  return SupportedHeadDim(args.head_dim) && args.batch > 0 && args.heads > 0 && args.tokens > 0 &&
         static_cast<long long>(args.batch) * args.heads <= kMaxGridYZ &&
         (args.starts == nullptr || args.key_padding == nullptr);
}

}  // namespace
}  // namespace ts::cuda_kernels

// The fused CUDA kernels of TaylorShift attention's forward; what they compute is in
// taylor_kernels_cuda.h and docs/MODEL.md. Tensor-core products through WMMA (bf16 16×16×16
// fragments, float32 accumulators: sm_80 and sm_90a alike); 128 threads (4 warps) per block,
// each warp owning 16 rows of the block's output.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

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
__device__ __forceinline__ void LoadPairs(int first, unsigned char* pair_i,
                                          unsigned char* pair_j) {
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

// Pass 1 of the efficient path: block (group, slice, bh) sums ψ(k̃_j)·v'_jᵀ for the kGroup
// features of `group` over the keys of `slice` into partial[bh][slice][features][width].
template <int D>
__global__ void __launch_bounds__(kThreads)
    EfficientStateKernel(AttentionArgs args, int tiles_per_slice, int slices, float* partial) {
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
  const std::int64_t key_head = HeadOffset(args.in_layout, args.starts, batch, bh % args.heads);
  const std::int64_t value_head =
      HeadOffset(args.value_layout, args.starts, batch, bh % args.heads);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> state[kWidth / 16];
  for (auto& s : state) wmma::fill_fragment(s, 0.0F);

  const int begin = slice * tiles_per_slice * kTile;
  // A slice past a short sequence's end sums nothing and writes zeros.
  const int end = min(SequenceRows(args, batch), begin + tiles_per_slice * kTile);
  for (int t0 = begin; t0 < end; t0 += kTile) {
    LoadExtendedRows<D>(args, args.k + key_head, args.in_layout.token, batch, t0, end,
                        /*keys=*/true, alpha, rows);
    LoadValueRows<D>(args, args.v + value_head, args.value_layout.token, batch, t0, end,
                     scales.inverse, scales.constant, values);
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

// Pass 3: block (tile, bh) computes nom = φ(q̃)·KV for kTile queries, feature group by feature
// group, and writes y = nom[:, :d] / nom[:, d].
template <int D>
__global__ void __launch_bounds__(kThreads)
    EfficientQueryKernel(AttentionArgs args, const Bf16* state) {
  using S = Dims<D>;
  constexpr int kWidth = S::kWidth;
  constexpr int kRowsBytes = kTile * (D + 1) * 4;
  constexpr int kFeaturesBytes = kTile * (kGroup + kPad16) * 2;
  constexpr int kOutBytes = kTile * (kWidth + kPad32) * 4;
  // The output rows reuse the space of the query rows and features once the products are done.
  constexpr int kFirstBytes = RoundUp(Max(kRowsBytes + kFeaturesBytes, kOutBytes), 128);
  constexpr int kStateBytes = kGroup * kWidth * 2;
  __shared__ __align__(128) unsigned char shared[kFirstBytes + kStateBytes];
  __shared__ unsigned char pair_i[kGroup];
  __shared__ unsigned char pair_j[kGroup];
  auto* rows = reinterpret_cast<float(*)[D + 1]>(shared);
  auto* features = reinterpret_cast<Bf16(*)[kGroup + kPad16]>(shared + kRowsBytes);
  auto* out = reinterpret_cast<float(*)[kWidth + kPad32]>(shared);
  auto* kv = reinterpret_cast<Bf16(*)[kWidth]>(shared + kFirstBytes);

  const int t0 = static_cast<int>(blockIdx.x) * kTile;
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / args.heads;
  const int length = SequenceRows(args, batch);
  if (t0 >= length) return;  // a tile past a short sequence's end (the whole block)
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const float alpha = sqrtf(sqrtf(static_cast<float>(D)));
  const std::int64_t head = HeadOffset(args.in_layout, args.starts, batch, bh % args.heads);
  LoadExtendedRows<D>(args, args.q + head, args.in_layout.token, batch, t0, length,
                      /*keys=*/false, alpha, rows);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> nom[kWidth / 16];
  for (auto& n : nom) wmma::fill_fragment(n, 0.0F);
  const Bf16* head_state = state + static_cast<std::size_t>(bh) * S::kFeaturesPadded * kWidth;
  for (int g = 0; g < S::kGroups; ++g) {
    __syncthreads();  // the previous group's features and state rows are consumed
    LoadPairs<D>(g * kGroup, pair_i, pair_j);
    const auto* source = reinterpret_cast<const uint4*>(head_state + static_cast<std::size_t>(g) *
                                                                         kGroup * kWidth);
    auto* target = reinterpret_cast<uint4*>(kv);
    for (int e = static_cast<int>(threadIdx.x); e < kStateBytes / 16; e += kThreads) {
      target[e] = source[e];
    }
    __syncthreads();
    BuildFeatures<D>(rows, pair_i, pair_j, features);
    __syncthreads();
    for (int kk = 0; kk < kGroup / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> phi;
      wmma::load_matrix_sync(phi, &features[warp * 16][kk * 16], kGroup + kPad16);
      for (int c = 0; c < kWidth / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> s;
        wmma::load_matrix_sync(s, &kv[kk * 16][c * 16], kWidth);
        wmma::mma_sync(nom[c], phi, s, nom[c]);
      }
    }
  }
  __syncthreads();  // every warp is done with rows and features before `out` overwrites them
  for (int c = 0; c < kWidth / 16; ++c) {
    wmma::store_matrix_sync(&out[warp * 16][c * 16], nom[c], kWidth + kPad32,
                            wmma::mem_row_major);
  }
  __syncthreads();
  float* y = args.y + HeadOffset(args.out_layout, args.starts, batch, bh % args.heads);
  for (int e = static_cast<int>(threadIdx.x); e < kTile * D; e += kThreads) {
    const int t = e / D;
    const int col = e % D;
    const int token = t0 + t;
    if (token < length) y[token * args.out_layout.token + col] = out[t][col] / out[t][D];
  }
}

// The direct path: block (tile, bh) runs kTile queries against every key tile. A/a = (S + β)² + γ
// on the score fragments, A rounded to bfloat16 in shared memory, A·[v | 1] accumulated in
// float32; y = nom[:, :d] / nom[:, d] · √(N/d).
template <int D>
__global__ void __launch_bounds__(kThreads)
    DirectKernel(AttentionArgs args, float beta, float gamma) {
  using S = Dims<D>;
  constexpr int kDim = S::kDimPadded;
  constexpr int kWidth = S::kWidth;
  constexpr int kKeysBytes = kTile * (kDim + kPad16) * 2;
  constexpr int kValuesBytes = kTile * (kWidth + kPad16) * 2;
  constexpr int kScoresBytes = kTile * (kTile + kPad32) * 4;
  constexpr int kWeightsBytes = kTile * (kTile + kPad16) * 2;
  constexpr int kOutBytes = kTile * (kWidth + kPad32) * 4;
  constexpr int kQueriesBytes = kTile * (kDim + kPad16) * 2;
  // Queries (read once into fragments), scores + weights (per key tile) and the output rows (at
  // the end) share one region.
  constexpr int kSharedBytes = RoundUp(Max(Max(kScoresBytes + kWeightsBytes, kOutBytes),
                                           kQueriesBytes),
                                       128);
  __shared__ __align__(128) unsigned char shared[kKeysBytes + kValuesBytes + kSharedBytes];
  auto* keys = reinterpret_cast<Bf16(*)[kDim + kPad16]>(shared);
  auto* values = reinterpret_cast<Bf16(*)[kWidth + kPad16]>(shared + kKeysBytes);
  unsigned char* region = shared + kKeysBytes + kValuesBytes;
  auto* queries = reinterpret_cast<Bf16(*)[kDim + kPad16]>(region);
  auto* scores = reinterpret_cast<float(*)[kTile + kPad32]>(region);
  auto* weights = reinterpret_cast<Bf16(*)[kTile + kPad16]>(region + kScoresBytes);
  auto* out = reinterpret_cast<float(*)[kWidth + kPad32]>(region);

  const int q0 = static_cast<int>(blockIdx.x) * kTile;
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / args.heads;
  const int length = SequenceRows(args, batch);
  if (q0 >= length) return;  // a tile past a short sequence's end (the whole block)
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t head = HeadOffset(args.in_layout, args.starts, batch, bh % args.heads);
  const std::int64_t stride = args.in_layout.token;
  const float* v = args.v + HeadOffset(args.value_layout, args.starts, batch, bh % args.heads);

  for (int e = static_cast<int>(threadIdx.x); e < kTile * kDim; e += kThreads) {
    const int t = e / kDim;
    const int col = e % kDim;
    const int token = q0 + t;
    const float value = token < length && col < D ? args.q[head + token * stride + col] : 0.0F;
    queries[t][col] = __float2bfloat16(value);
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> q[kDim / 16];
  for (int kk = 0; kk < kDim / 16; ++kk) {
    wmma::load_matrix_sync(q[kk], &queries[warp * 16][kk * 16], kDim + kPad16);
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> nom[kWidth / 16];
  for (auto& n : nom) wmma::fill_fragment(n, 0.0F);

  for (int k0 = 0; k0 < length; k0 += kTile) {
    __syncthreads();  // the previous tile (or the queries) is consumed
    for (int e = static_cast<int>(threadIdx.x); e < kTile * kDim; e += kThreads) {
      const int t = e / kDim;
      const int col = e % kDim;
      const int token = k0 + t;
      const float value = token < length && col < D ? args.k[head + token * stride + col] : 0.0F;
      keys[t][col] = __float2bfloat16(value);
    }
    for (int e = static_cast<int>(threadIdx.x); e < kTile * kWidth; e += kThreads) {
      const int t = e / kWidth;
      const int col = e % kWidth;
      const int token = k0 + t;
      float value = 0.0F;
      if (KeyReal(args, batch, token)) {
        if (col < D) {
          value = v[token * args.value_layout.token + col];
        } else if (col == D) {
          value = 1.0F;
        }
      }
      values[t][col] = __float2bfloat16(value);
    }
    __syncthreads();
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
      wmma::fill_fragment(s, 0.0F);
      for (int kk = 0; kk < kDim / 16; ++kk) {
        // kᵀ (dims × keys) is `keys` read column-major.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> k;
        wmma::load_matrix_sync(k, &keys[n * 16][kk * 16], kDim + kPad16);
        wmma::mma_sync(s, q[kk], k, s);
      }
      for (int i = 0; i < s.num_elements; ++i) {
        const float shifted = s.x[i] + beta;
        s.x[i] = shifted * shifted + gamma;
      }
      wmma::store_matrix_sync(&scores[warp * 16][n * 16], s, kTile + kPad32, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * kTile; e += 32) {
      const int r = warp * 16 + e / kTile;
      const int col = e % kTile;
      weights[r][col] = __float2bfloat16(scores[r][col]);
    }
    __syncwarp();
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> a;
      wmma::load_matrix_sync(a, &weights[warp * 16][kk * 16], kTile + kPad16);
      for (int c = 0; c < kWidth / 16; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> v;
        wmma::load_matrix_sync(v, &values[kk * 16][c * 16], kWidth + kPad16);
        wmma::mma_sync(nom[c], a, v, nom[c]);
      }
    }
  }
  __syncthreads();  // `out` overlaps other warps' scores and weights
  for (int c = 0; c < kWidth / 16; ++c) {
    wmma::store_matrix_sync(&out[warp * 16][c * 16], nom[c], kWidth + kPad32,
                            wmma::mem_row_major);
  }
  __syncwarp();
  const float count = args.counts[batch];
  const float scale = args.output_normalize ? sqrtf(count / static_cast<float>(D)) : 1.0F;
  float* y = args.y + HeadOffset(args.out_layout, args.starts, batch, bh % args.heads);
  for (int e = lane; e < 16 * D; e += 32) {
    const int t = warp * 16 + e / D;
    const int col = e % D;
    const int token = q0 + t;
    if (token < length) y[token * args.out_layout.token + col] = out[t][col] / out[t][D] * scale;
  }
}

constexpr int kMaxGridYZ = 65535;

int Tiles(int tokens) { return (tokens + kTile - 1) / kTile; }

int GroupsOf(int d) {
  switch (d) {
    case 8: return Dims<8>::kGroups;
    case 16: return Dims<16>::kGroups;
    case 32: return Dims<32>::kGroups;
    case 64: return Dims<64>::kGroups;
    default: return 0;
  }
}

std::size_t StateElements(int d) {
  switch (d) {
    case 8: return std::size_t{Dims<8>::kFeaturesPadded} * Dims<8>::kWidth;
    case 16: return std::size_t{Dims<16>::kFeaturesPadded} * Dims<16>::kWidth;
    case 32: return std::size_t{Dims<32>::kFeaturesPadded} * Dims<32>::kWidth;
    case 64: return std::size_t{Dims<64>::kFeaturesPadded} * Dims<64>::kWidth;
    default: return 0;
  }
}

std::size_t AlignUp(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

template <int D>
cudaError_t LaunchEfficientFor(const AttentionArgs& args, const EfficientPlan& plan,
                               void* workspace, cudaStream_t stream) {
  using S = Dims<D>;
  const int bh = args.batch * args.heads;
  const std::size_t heads = static_cast<std::size_t>(bh);
  auto* partial = static_cast<float*>(workspace);
  auto* state = reinterpret_cast<Bf16*>(
      static_cast<unsigned char*>(workspace) +
      AlignUp(heads * plan.slices * StateElements(D) * sizeof(float)));
  EfficientStateKernel<D><<<dim3(S::kGroups, plan.slices, bh), kThreads, 0, stream>>>(
      args, plan.tiles_per_slice, plan.slices, partial);
  const std::size_t total = heads * StateElements(D);
  const int reduce_blocks = static_cast<int>(std::min<std::size_t>((total + 255) / 256, 1 << 16));
  EfficientReduceKernel<D><<<reduce_blocks, 256, 0, stream>>>(args, plan.slices, partial, state);
  EfficientQueryKernel<D><<<dim3(Tiles(args.tokens), bh), kThreads, 0, stream>>>(args, state);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchDirectFor(const AttentionArgs& args, cudaStream_t stream) {
  const float beta = args.b / (2.0F * args.a);
  const float gamma = args.c / args.a - args.b * args.b / (4.0F * args.a * args.a);
  DirectKernel<D><<<dim3(Tiles(args.tokens), args.batch * args.heads), kThreads, 0, stream>>>(
      args, beta, gamma);
  return cudaGetLastError();
}

bool ShapeFits(const AttentionArgs& args) {
  return SupportedHeadDim(args.head_dim) && args.batch > 0 && args.heads > 0 &&
         args.tokens > 0 && static_cast<long long>(args.batch) * args.heads <= kMaxGridYZ &&
         (args.starts == nullptr || args.key_padding == nullptr);
}

}  // namespace

bool SupportedHeadDim(int head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64;
}

EfficientPlan PlanEfficient(const AttentionArgs& args, int multiprocessors) {
  EfficientPlan plan;
  if (!ShapeFits(args)) return plan;
  const int tiles = Tiles(args.tokens);
  const long long blocks_per_slice =
      static_cast<long long>(GroupsOf(args.head_dim)) * args.batch * args.heads;
  // About four blocks per multiprocessor in the state pass; each slice at least one tile.
  const long long wanted = (4LL * std::max(multiprocessors, 1) + blocks_per_slice - 1) /
                           blocks_per_slice;
  const int slices = static_cast<int>(std::clamp<long long>(wanted, 1, std::min(tiles, kMaxGridYZ)));
  plan.tiles_per_slice = (tiles + slices - 1) / slices;
  plan.slices = (tiles + plan.tiles_per_slice - 1) / plan.tiles_per_slice;
  const std::size_t heads = static_cast<std::size_t>(args.batch) * args.heads;
  plan.workspace_bytes = AlignUp(heads * plan.slices * StateElements(args.head_dim) * sizeof(float)) +
                         AlignUp(heads * StateElements(args.head_dim) * sizeof(Bf16));
  return plan;
}

cudaError_t LaunchEfficient(const AttentionArgs& args, const EfficientPlan& plan, void* workspace,
                            cudaStream_t stream) {
  if (!ShapeFits(args) || plan.workspace_bytes == 0 || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  switch (args.head_dim) {
    case 8: return LaunchEfficientFor<8>(args, plan, workspace, stream);
    case 16: return LaunchEfficientFor<16>(args, plan, workspace, stream);
    case 32: return LaunchEfficientFor<32>(args, plan, workspace, stream);
    case 64: return LaunchEfficientFor<64>(args, plan, workspace, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchDirect(const AttentionArgs& args, cudaStream_t stream) {
  if (!ShapeFits(args)) return cudaErrorInvalidValue;
  switch (args.head_dim) {
    case 8: return LaunchDirectFor<8>(args, stream);
    case 16: return LaunchDirectFor<16>(args, stream);
    case 32: return LaunchDirectFor<32>(args, stream);
    case 64: return LaunchDirectFor<64>(args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ts::cuda_kernels

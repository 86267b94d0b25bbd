// The fused CUDA kernels of TaylorShift attention's forward; what they compute is in
// taylor_kernels_cuda.h and docs/MODEL.md. Tensor-core products through WMMA (bf16 16×16×16
// fragments, float32 accumulators: sm_80 and sm_90a alike); 128 threads (4 warps) per block,
// each warp owning 16 rows of the block's output.
#include "model/kernels/taylor_kernels_cuda_tiles.cuh"

namespace ts::cuda_kernels {
namespace {

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
    const auto* source =
        reinterpret_cast<const uint4*>(head_state + static_cast<std::size_t>(g) * kGroup * kWidth);
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
    wmma::store_matrix_sync(&out[warp * 16][c * 16], nom[c], kWidth + kPad32, wmma::mem_row_major);
  }
  __syncthreads();
  float* y = args.y + HeadOffset(args.out_layout, args.starts, batch, bh % args.heads);
  for (int e = static_cast<int>(threadIdx.x); e < kTile * D; e += kThreads) {
    const int t = e / D;
    const int col = e % D;
    const int token = t0 + t;
    if (token < length) y[token * args.out_layout.token + col] = out[t][col] / out[t][D];
  }
  if (args.denominators != nullptr) {
    for (int t = static_cast<int>(threadIdx.x); t < kTile && t0 + t < length; t += kThreads) {
      args.denominators[static_cast<std::size_t>(bh) * args.tokens + t0 + t] = out[t][D];
    }
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
  constexpr int kSharedBytes =
      RoundUp(Max(Max(kScoresBytes + kWeightsBytes, kOutBytes), kQueriesBytes), 128);
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

  LoadDimRows<D>(args.q + head, stride, q0, length, queries);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> q[kDim / 16];
  for (int kk = 0; kk < kDim / 16; ++kk) {
    wmma::load_matrix_sync(q[kk], &queries[warp * 16][kk * 16], kDim + kPad16);
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> nom[kWidth / 16];
  for (auto& n : nom) wmma::fill_fragment(n, 0.0F);

  for (int k0 = 0; k0 < length; k0 += kTile) {
    __syncthreads();  // the previous tile (or the queries) is consumed
    LoadDimRows<D>(args.k + head, stride, k0, length, keys);
    // v'' = [v | 1], zero rows for padded keys.
    LoadValueRows<D>(args, v, args.value_layout.token, batch, k0, length, 1.0F, 1.0F, values);
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
    wmma::store_matrix_sync(&out[warp * 16][c * 16], nom[c], kWidth + kPad32, wmma::mem_row_major);
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
  if (args.denominators != nullptr && lane < 16 && q0 + warp * 16 + lane < length) {
    args.denominators[static_cast<std::size_t>(bh) * args.tokens + q0 + warp * 16 + lane] =
        out[warp * 16 + lane][D];
  }
}

template <int D>
cudaError_t LaunchEfficientFor(const AttentionArgs& args, const EfficientPlan& plan,
                               void* workspace, cudaStream_t stream) {
  using S = Dims<D>;
  const int bh = args.batch * args.heads;
  const std::size_t heads = static_cast<std::size_t>(bh);
  auto* partial = static_cast<float*>(workspace);
  auto* state =
      reinterpret_cast<Bf16*>(static_cast<unsigned char*>(workspace) +
                              AlignUp(heads * plan.slices * StateElements(D) * sizeof(float)));
  EfficientStateKernel<D><<<dim3(S::kGroups, plan.slices, bh), kThreads, 0, stream>>>(
      args, StateSides{}, plan.tiles_per_slice, plan.slices, partial);
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
  const long long wanted =
      (4LL * std::max(multiprocessors, 1) + blocks_per_slice - 1) / blocks_per_slice;
  const int slices =
      static_cast<int>(std::clamp<long long>(wanted, 1, std::min(tiles, kMaxGridYZ)));
  plan.tiles_per_slice = (tiles + slices - 1) / slices;
  plan.slices = (tiles + plan.tiles_per_slice - 1) / plan.tiles_per_slice;
  const std::size_t heads = static_cast<std::size_t>(args.batch) * args.heads;
  plan.workspace_bytes =
      AlignUp(heads * plan.slices * StateElements(args.head_dim) * sizeof(float)) +
      AlignUp(heads * StateElements(args.head_dim) * sizeof(Bf16));
  return plan;
}

cudaError_t LaunchEfficient(const AttentionArgs& args, const EfficientPlan& plan, void* workspace,
                            cudaStream_t stream) {
  if (!ShapeFits(args) || plan.workspace_bytes == 0 || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  return WithHeadDim(args.head_dim, [&](auto dim) {
    return LaunchEfficientFor<decltype(dim)::value>(args, plan, workspace, stream);
  });
}

cudaError_t LaunchDirect(const AttentionArgs& args, cudaStream_t stream) {
  if (!ShapeFits(args)) return cudaErrorInvalidValue;
  return WithHeadDim(args.head_dim,
                     [&](auto dim) { return LaunchDirectFor<decltype(dim)::value>(args, stream); });
}

}  // namespace ts::cuda_kernels

// The fused CUDA kernels of TaylorShift attention's forward (model/kernels/taylor_kernels_cuda.cu):
// torch-free launchers over raw device pointers, for model/kernels/fused_cuda_attention.cc. Both
// take float32 q̂, k̂ (already normalised, temperature applied) and v, and write float32 y, either
// as a padded batch ([B, H, N, d] at any strides, an optional key-padding mask [B, N], true =
// padded) or as a packed one (every sequence's rows one after another, [T, H, d] at any strides,
// sequences cut by `starts`), with each sequence's number of real tokens. Products run in bfloat16
// on tensor cores with float32 accumulation; feature maps, scores and denominators never reach
// global memory.
//
// - Efficient path: the state KV = Σ_j ψ(k_j) v'_jᵀ over the (d+1)(d+2)/2 symmetric features of
//   [k | 1] (built tile by tile in shared memory), summed over slices of the sequence by
//   separate blocks and reduced in a fixed order (deterministic), then the query pass
//   φ(q)·KV with the division by the denominator column fused. The paper's α = d^¼ and 1/N,
//   √(d/N) scalings are kept (Algorithm 1).
// - Direct path: flash-style tiles of 64 queries × 64 keys: S = q̂k̂ᵀ, A = (S + β)² + γ
//   (= (aS² + bS + c)/a), and A·[v | 1] accumulated on-chip.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ts::cuda_kernels {

// The features of x̃ = [x | 1] (length m = d + 1): x̃_i·x̃_j for the (d+1)(d+2)/2 pairs i ≤ j in
// row order (0, 0), (0, 1), ..., (0, d), (1, 1), ..., (d, d). Pairs with j < d are the quadratic
// features, (i, d) the linear ones and (d, d) the constant. PairBase(i, m) is the index of (i, i).
__host__ __device__ constexpr int PairBase(int i, int m) { return i * m - i * (i - 1) / 2; }

// The pair (i, j) of feature f < (d+1)(d+2)/2: the row from the quadratic formula, then
// corrected by whole rows (floating-point rounding never leaves it more than one row off).
__host__ __device__ inline void FeaturePair(int f, int m, int& i, int& j) {
  const float b = 2.0F * static_cast<float>(m) + 1.0F;
  int row = static_cast<int>((b - sqrtf(b * b - 8.0F * static_cast<float>(f))) * 0.5F);
  row = row < 0 ? 0 : (row > m - 1 ? m - 1 : row);
  while (row + 1 < m && PairBase(row + 1, m) <= f) ++row;
  while (row > 0 && PairBase(row, m) > f) --row;
  i = row;
  j = row + (f - PairBase(row, m));
}

// The gradient of one group of features with respect to x̃_a: ∂/∂x̃_a of Σ_f w[f − first]·x̃_i x̃_j
// over the features f in [first, last) (pairs (i, j) = FeaturePair(f, m)), for x̃ of length m; the
// group's pairs lie in rows row_first..row_last. The pairs that hold a are row a's (a, j ≥ a), a
// run of consecutive features, and (i, a) for the rows i ≤ a (i = a: the square's second factor).
__host__ __device__ inline float FeatureGradContraction(const float* x, const float* w, int a,
                                                        int m, int first, int last, int row_first,
                                                        int row_last) {
  const int base = PairBase(a, m);
  const int lo = base > first ? base : first;
  const int hi = base + m - a < last ? base + m - a : last;
  float sum = 0.0F;
  for (int f = lo; f < hi; ++f) sum += w[f - first] * x[a + f - base];
  const int top = row_last < a ? row_last : a;
  for (int i = row_first; i <= top; ++i) {
    const int f = PairBase(i, m) + a - i;
    if (f >= first && f < last) sum += w[f - first] * x[i];
  }
  return sum;
}

// Where a head's tokens lie, in elements: token t of head h of sequence b starts at
// First(b) + h·head + t·token, where First(b) is b·batch for a padded batch and starts[b]·token
// for a packed one; a row's d values are contiguous. [B, H, N, d] contiguous is
// {H·N·d, N·d, d}; q of a packed qkv product [T, 3, H, d] is {-, d, 3·H·d}.
struct TokenLayout {
  std::int64_t batch = 0;
  std::int64_t head = 0;
  std::int64_t token = 0;
};

struct AttentionArgs {
  const float* q = nullptr;  // float32 rows at in_layout
  const float* k = nullptr;
  const float* v = nullptr;  // float32 rows at value_layout
  float* y = nullptr;        // float32 rows at out_layout
  TokenLayout in_layout;
  TokenLayout value_layout;
  TokenLayout out_layout;
  // Packed batch: sequence b is rows starts[b] .. starts[b + 1] - 1 ([B + 1] int32 on the
  // device), `tokens` is the longest sequence, and key_padding is null. Null for a padded batch
  // of `tokens` rows per sequence.
  const int* starts = nullptr;
  const bool* key_padding = nullptr;  // padded batch: [B, N], true = padded; null when none is
  const float* counts = nullptr;      // [B]: real tokens per sequence (at least 1)
  int batch = 0;
  int heads = 0;
  int tokens = 0;
  int head_dim = 0;
  // The Taylor polynomial a·x² + b·x + c (a > 0, c ≥ b²/4a).
  float a = 0.5F;
  float b = 1.0F;
  float c = 1.0F;
  bool output_normalize = true;
  // Padded batch: each query's denominator, [B·H·N] (index (b·H + h)·N + t), written when not
  // null: nom[:, d] of the efficient path, Σ_j A_ij/a of the direct one (for the backward).
  float* denominators = nullptr;
};

// The offset of head h of sequence b (its token 0) in a tensor laid out as `layout`.
__host__ __device__ inline std::int64_t HeadOffset(const TokenLayout& layout, const int* starts,
                                                   int b, int h) {
  const std::int64_t first =
      starts != nullptr ? static_cast<std::int64_t>(starts[b]) * layout.token : b * layout.batch;
  return first + h * layout.head;
}

// Rows of sequence b: its own length in a packed batch, `tokens` in a padded one (where the
// mask says which are real).
__host__ __device__ inline int SequenceRows(const AttentionArgs& args, int b) {
  return args.starts != nullptr ? args.starts[b + 1] - args.starts[b] : args.tokens;
}

// Head dimensions with a kernel: 8, 16, 32, 64.
bool SupportedHeadDim(int head_dim);

// How the efficient path splits each sequence's state over blocks, for a GPU of
// `multiprocessors` SMs, and the workspace bytes that split needs.
struct EfficientPlan {
  int slices = 1;
  int tiles_per_slice = 1;
  std::size_t workspace_bytes = 0;
};
EfficientPlan PlanEfficient(const AttentionArgs& args, int multiprocessors);

// Launches on `stream`; `workspace` holds plan.workspace_bytes of device memory. Returns the
// launch error (cudaSuccess when the kernels were queued).
cudaError_t LaunchEfficient(const AttentionArgs& args, const EfficientPlan& plan, void* workspace,
                            cudaStream_t stream);
cudaError_t LaunchDirect(const AttentionArgs& args, cudaStream_t stream);

// The backward of both paths on a padded batch (packed batches have none), recomputing scores and
// features instead of keeping them: memory O(N·d) per head beyond the efficient path's states.
// `forward` is what the forward ran on (its y and denominators are not read). dnom is ∂L/∂nom
// per query, d+1 floats (the last the denominator's), from the forward's y and denominators:
// - efficient (y = nom[:d]/nom[d], nom = φ(q̃)·KV): dnom = [∂L/∂y | −⟨∂L/∂y, y⟩] / nom[d];
// - direct (y = s·nom[:d]/nom[d], nom = Σ_j A_ij/a·[v_j | 1], s = √(N/d) or 1):
//   dnom = [s·∂L/∂y | −⟨∂L/∂y, y⟩] / nom[d].
// Writes ∂L/∂q̂, ∂L/∂k̂ and ∂L/∂v (zero rows for padded keys) at grad_layout.
struct BackwardArgs {
  AttentionArgs forward;
  const float* dnom = nullptr;
  TokenLayout dnom_layout;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  TokenLayout grad_layout;
};

// Device memory the efficient path's backward needs under `plan` (PlanEfficient of the forward
// args): the partial states and the two bfloat16 states KV and dKV.
std::size_t EfficientBackwardWorkspace(const AttentionArgs& args, const EfficientPlan& plan);
cudaError_t LaunchEfficientBackward(const BackwardArgs& args, const EfficientPlan& plan,
                                    void* workspace, cudaStream_t stream);
cudaError_t LaunchDirectBackward(const BackwardArgs& args, cudaStream_t stream);

}  // namespace ts::cuda_kernels

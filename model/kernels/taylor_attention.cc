#include "model/kernels/taylor_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "model/kernels/attention_dispatch.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/kernels/cpu_gemm.h"
#include "model/kernels/direct_inference.h"
#include "model/kernels/efficient_inference.h"
#include "model/kernels/fused_cuda_attention.h"
#include "model/kernels/parallel.h"
#include "model/kernels/taylor_features.h"
#include "model/torch_compat.h"

namespace ts {
namespace {

namespace F = torch::nn::functional;
using torch::indexing::Slice;

struct Shape {
  std::int64_t batch, heads, tokens, head_dim;
};

// The ATen form's bf16 products: on CUDA always (tensor cores sum in float32); on a CPU only where
// LibTorch's bf16 GEMMs sum in float32 (measured once), float32 products elsewhere.
bool Bf16ProductsSumInFloat32(const torch::Tensor& q) {
  return !q.is_cpu() || CpuBf16Matmul().float32_sums();
}

Shape CheckInputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& key_padding_mask) {
  TORCH_CHECK(q.dim() == 4, "attention: q must be [B, H, N, d], got ", q.sizes());
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "attention: q, k, v must have the same shape, got ", q.sizes(), ", ", k.sizes(), ", ",
              v.sizes());
  TORCH_CHECK(q.is_floating_point(), "attention: q, k, v must be floating point");
  const Shape shape{q.size(0), q.size(1), q.size(2), q.size(3)};
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == shape.batch &&
                    key_padding_mask.size(1) == shape.tokens,
                "attention: key_padding_mask must be [B, N] = [", shape.batch, ", ", shape.tokens,
                "], got ", key_padding_mask.sizes());
    TORCH_CHECK(key_padding_mask.scalar_type() == torch::kBool,
                "attention: key_padding_mask must be bool (true = padded)");
  }
  return shape;
}

// [B, 1, N, 1] with 1 for real keys and 0 for padded ones (undefined when nothing is padded).
torch::Tensor KeyKeep(const torch::Tensor& key_padding_mask, const torch::Tensor& like) {
  if (!key_padding_mask.defined()) return {};
  return key_padding_mask.logical_not().to(like.options()).unsqueeze(1).unsqueeze(-1);
}

// [B, 1, 1, 1]: each sequence's own number of real tokens (at least 1).
torch::Tensor TokenCounts(const torch::Tensor& key_padding_mask, const Shape& shape,
                          const torch::Tensor& like) {
  if (!key_padding_mask.defined()) {
    return torch::full({shape.batch, 1, 1, 1}, static_cast<double>(shape.tokens), like.options());
  }
  return key_padding_mask.logical_not()
      .sum(1)
      .clamp_min(1)
      .to(like.options())
      .view({shape.batch, 1, 1, 1});
}

// Multiplies y by sqrt(N/d) per sequence when output normalisation is on.
torch::Tensor OutputNormalize(torch::Tensor y, const torch::Tensor& counts, const Shape& shape,
                              bool output_normalize, bool inplace) {
  if (!output_normalize) return y;
  const auto factor = (counts / static_cast<double>(shape.head_dim)).sqrt();
  return inplace ? y.mul_(factor) : y * factor;
}

// v' = [√(d/N) | v] / N of Algorithm 1 (constant column 1 without output normalisation), with
// zero rows for padded keys. [B, H, N, d+1].
torch::Tensor ScaledValues(const torch::Tensor& v, const torch::Tensor& counts,
                           const torch::Tensor& key_padding_mask, const Shape& s,
                           bool output_normalize) {
  const auto constant_column = output_normalize
                                   ? (static_cast<double>(s.head_dim) / counts)
                                         .sqrt()
                                         .expand({s.batch, s.heads, s.tokens, 1})
                                   : torch::ones({s.batch, s.heads, s.tokens, 1}, v.options());
  auto v_p = torch::cat({constant_column, v}, -1) / counts;
  if (const auto keep = KeyKeep(key_padding_mask, v); keep.defined()) v_p = v_p * keep;
  return v_p;
}

bool NeedsGrad(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::GradMode::is_enabled() &&
         (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// Rows per query block so that B·H·rows·N ≤ budget.
std::int64_t BlockRows(const Shape& shape, std::int64_t budget_elements) {
  const std::int64_t per_row = shape.batch * shape.heads * shape.tokens;
  return std::max<std::int64_t>(1, std::min(shape.tokens, budget_elements / per_row));
}

// φ (model/kernels/taylor_features.h) of each row of x [rows, d] into out [rows, F]. The kernels
// apply the coefficients (a, 2a, b·α², c·α⁴ for the scaled q, k) to the key-side sums, so queries
// and keys share this map.
template <typename T, typename Out = T>
void FillFeatures(const T* __restrict x, Out* __restrict out, std::int64_t rows, std::int64_t d) {
  const std::int64_t width = FeatureCount(d);
  at::parallel_for(0, rows, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T* __restrict xr = x + r * d;
      Out* __restrict o = out + r * width;
      for (std::int64_t i = 0; i < d; ++i) {
        const T xi = xr[i];
        for (std::int64_t j = i; j < d; ++j) *o++ = static_cast<Out>(xi * xr[j]);
      }
      for (std::int64_t i = 0; i < d; ++i) *o++ = static_cast<Out>(xr[i]);
      *o = Out(1);
    }
  });
}

// The index pairs of φ over x' = [x | 1], in FillFeatures' order: (i, j) for i ≤ j < d, then
// (i, d) for the linear features and (d, d) for the constant one, so φ(x) = x'[I] ⊙ x'[J].
// [2, F] int64 on `device`; made once per (d, device) and kept for the process.
torch::Tensor FeaturePairs(std::int64_t d, const torch::Device& device) {
  static absl::Mutex mu(absl::kConstInit);
  // Never destroyed: CUDA tensors must not be freed after the driver has shut down at exit.
  static auto* cache = new std::map<std::pair<std::int64_t, std::string>, torch::Tensor>();
  const auto key = std::make_pair(d, device.str());
  absl::MutexLock lock(&mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  // triu_indices lists the upper triangle row by row, as FillFeatures does.
  const auto linear =
      torch::stack({torch::arange(d + 1, torch::kLong), torch::full({d + 1}, d, torch::kLong)});
  auto pairs = torch::cat({torch::triu_indices(d, d), linear}, 1).to(device);
  cache->emplace(key, pairs);
  return pairs;
}

// x' = [x | 1] for x [..., d].
torch::Tensor WithOnes(const torch::Tensor& x) { return torch::constant_pad_nd(x, {0, 1}, 1.0); }

// φ(x) for x [..., d] with tensor operations: one gather of each side of the index pairs and
// one product, whatever d (the ATen form; the CPU kernels fill one chunk of one head at a time
// with FillFeatures).
torch::Tensor Features(const torch::Tensor& x) {
  const auto pairs = FeaturePairs(x.size(-1), x.device());
  const auto x1 = WithOnes(x);
  return x1.index_select(-1, pairs[0]).mul_(x1.index_select(-1, pairs[1]));
}

// The feature map's Jacobian applied to a feature-space gradient: out = (∂φ(x)/∂x)ᵀ g for each
// row. With g split like φ into g_ij (i ≤ j), g_lin and g_1, out_m = Σ_{i≤j} g_ij (δ_im x_j +
// δ_jm x_i) + g_lin,m: the products' terms are (G + Gᵀ) x with G the upper triangle of g_ij, so a
// row costs O(d²) and nothing wider than g exists.
template <typename T>
void FeatureGradRows(const T* __restrict x, const T* __restrict g, T* __restrict out,
                     std::int64_t rows, std::int64_t d) {
  const std::int64_t width = FeatureCount(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* __restrict xr = x + r * d;
    const T* __restrict gr = g + r * width;
    T* __restrict o = out + r * d;
    for (std::int64_t i = 0; i < d; ++i) o[i] = T(0);
    for (std::int64_t i = 0; i < d; ++i) {
      const T xi = xr[i];
      T acc = T(0);
      for (std::int64_t j = i; j < d; ++j) {
        const T gij = *gr++;
        acc += gij * xr[j];
        o[j] += gij * xi;
      }
      o[i] += acc;
    }
    for (std::int64_t i = 0; i < d; ++i) o[i] += *gr++;
  }
}

// FillFeatures and FeatureGradRows on tensors: out = φ(x) for x [n, d], and out = (∂φ(x)/∂x)ᵀ g
// for g [n, F]; all contiguous, float or double.
void FeaturesInto(const torch::Tensor& x, const torch::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "TaylorFeatures", [&] {
    FillFeatures<scalar_t>(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0), x.size(1));
  });
}

void FeatureGradInto(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "TaylorFeatureGrad", [&] {
    FeatureGradRows<scalar_t>(x.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                              out.data_ptr<scalar_t>(), x.size(0), x.size(1));
  });
}

// The one-hot matrix of the index pairs, [onehot(I); onehot(J)] [2F, d+1] in `like`'s dtype and
// device, for FeatureGrad. Made once per backward pass, not per chunk.
torch::Tensor FeaturePairsOneHot(std::int64_t d, const torch::Tensor& like) {
  const auto pairs = FeaturePairs(d, like.device());
  return torch::one_hot(torch::cat({pairs[0], pairs[1]}), d + 1).to(like.scalar_type());
}

// FeatureGradRows with tensor operations (the ATen form): x [..., n, d], g [..., n, F] →
// [..., n, d]. With φ = x'[I] ⊙ x'[J], ∂L/∂x'_m = Σ_f g_f (δ(I_f = m) x'[J_f] + δ(J_f = m)
// x'[I_f]): one product of [g ⊙ x'[J] | g ⊙ x'[I]] with `onehot` (FeaturePairsOneHot;
// deterministic, unlike a scatter-add), the constant's column dropped.
torch::Tensor FeatureGrad(const torch::Tensor& x, const torch::Tensor& g,
                          const torch::Tensor& onehot) {
  const std::int64_t d = x.size(-1);
  const auto pairs = FeaturePairs(d, x.device());
  const auto x1 = WithOnes(x);
  const auto weighted =
      torch::cat({g * x1.index_select(-1, pairs[1]), g * x1.index_select(-1, pairs[0])}, -1);
  return torch::matmul(weighted, onehot).narrow(-1, 0, d);
}

// Score entries one block of the direct path may hold: the option's budget, or on a CUDA device
// what a third of its available memory holds, so that a block is one batched product.
std::int64_t DirectBudget(const torch::Tensor& like, const TaylorKernelOptions& options) {
  if (!like.is_cuda()) return options.direct_block_elements;
  const std::int64_t entries = compat::CudaAvailableBytes(like.device()) /
                               (3 * static_cast<std::int64_t>(like.element_size()));
  return std::max(options.direct_block_elements, entries);
}

// Tokens per chunk of the efficient path's ATen form: the option's, or on a CUDA device what a
// quarter of its available memory holds for the chunk's features (and their product's inputs).
std::int64_t EfficientChunk(const torch::Tensor& like, std::int64_t bh, std::int64_t d,
                            const TaylorKernelOptions& options) {
  if (!like.is_cuda()) return options.efficient_chunk_tokens;
  const std::int64_t per_token =
      3 * bh * FeatureCount(d) * static_cast<std::int64_t>(like.element_size());
  return std::max(options.efficient_chunk_tokens, compat::CudaAvailableBytes(like.device()) / 4 /
                                                      std::max<std::int64_t>(1, per_token));
}

// The efficient path's CPU kernel for training and float64. Each task owns one head and runs
// single-threaded GEMMs inside ParallelFor: many small multi-threaded BLAS calls cost far more
// in thread hand-offs than they compute on a few cores, while independent heads keep every core
// busy with cache-resident blocks. (Float32 inference takes the fused kernels,
// model/kernels/efficient_inference.h and model/kernels/direct_inference.h.)
// When `kv_out` [BH, F, d+1] and `den_out` [BH, N, 1] are defined, KV (coefficients applied) and
// the denominators are written there for the backward pass; y is the same either way.
void EfficientCpu(const torch::Tensor& q_s, const torch::Tensor& k_s, const torch::Tensor& v_p,
                  const torch::Tensor& coefficients, torch::Tensor& y, std::int64_t chunk,
                  const torch::Tensor& kv_out, const torch::Tensor& den_out) {
  const std::int64_t bh = q_s.size(0), tokens = q_s.size(1), d = q_s.size(2);
  const std::int64_t features = FeatureCount(d);
  ParallelFor(
      0, bh, 1, bh * tokens * features * (d + 1), [&](std::int64_t begin, std::int64_t end) {
        auto buffer = torch::empty({std::min(chunk, tokens), features}, q_s.options());
        auto nom_buffer = torch::empty({std::min(chunk, tokens), d + 1}, q_s.options());
        for (std::int64_t h = begin; h < end; ++h) {
          auto kv =
              kv_out.defined() ? kv_out[h].zero_() : torch::zeros({features, d + 1}, q_s.options());
          for (std::int64_t start = 0; start < tokens; start += chunk) {
            const std::int64_t n = std::min(chunk, tokens - start);
            auto psi = buffer.narrow(0, 0, n);
            FeaturesInto(k_s[h].narrow(0, start, n), psi);
            MatmulInto(kv, psi.t(), v_p[h].narrow(0, start, n), 1.0);
          }
          kv.mul_(coefficients);
          for (std::int64_t start = 0; start < tokens; start += chunk) {
            const std::int64_t n = std::min(chunk, tokens - start);
            auto phi = buffer.narrow(0, 0, n);
            FeaturesInto(q_s[h].narrow(0, start, n), phi);
            auto nom = nom_buffer.narrow(0, 0, n);
            MatmulInto(nom, phi, kv);
            auto out = y[h].narrow(0, start, n);
            at::div_out(out, nom.narrow(1, 1, d), nom.narrow(1, 0, 1));
            if (den_out.defined()) den_out[h].narrow(0, start, n).copy_(nom.narrow(1, 0, 1));
          }
        }
      });
}

// Forward of the efficient path on contiguous scaled inputs q_s, k_s [BH, N, d] and v_p
// [BH, N, d+1]: y [BH, N, d], and optionally KV and the denominators as in EfficientCpu.
// `aten`: the ATen form (AttentionKernel::kAten). `low`: its products in bfloat16 with float32
// accumulation (bf16_products; float32 inputs, no autograd). kv += ψᵀ·v' over one chunk of tokens
// (psi [BH, n, F], v_c [BH, n, d+1]). A GEMM over the token axis in one call keeps one running
// float32 sum per output on cuBLAS: at N = 4099 that was 3e-5 relative off the float64 oracle on an
// H200, where the CPU's blocked BLAS stays near 1e-6. So the chunk is cut into slices of
// kStateSliceTokens, each slice's state is one batched GEMM, and the slices are summed by a
// reduction: the error of a 256-token sum plus a tree's. With bf16 products the inputs' rounding
// (~4e-3) dwarfs the sum's, so there slices are taken only from kLowSliceFromTokens on, where they
// pay as a split-K (scripts/gpu-check's efficient_aten column at 64k tokens); below that they
// would cost a copy of the features for nothing.
constexpr std::int64_t kStateSliceTokens = 256;
constexpr std::int64_t kLowSliceFromTokens = 2048;

void AccumulateState(torch::Tensor& kv, const torch::Tensor& psi, const torch::Tensor& v_c,
                     bool low) {
  const std::int64_t bh = psi.size(0), n = psi.size(1), features = psi.size(2);
  const std::int64_t width = v_c.size(2);
  // bf16 first: a copy below then moves half the bytes.
  const auto a = low ? psi.to(torch::kBFloat16) : psi;
  const auto b = low ? v_c.to(torch::kBFloat16) : v_c;
  const auto product = [low](const torch::Tensor& x, const torch::Tensor& y) {
    return low ? compat::BmmFloat32(x, y) : torch::bmm(x, y);
  };
  const std::int64_t slices = n / kStateSliceTokens;
  std::int64_t done = 0;
  if (slices >= 2 && (!low || n >= kLowSliceFromTokens)) {
    done = slices * kStateSliceTokens;
    const auto p =
        a.narrow(1, 0, done).reshape({bh * slices, kStateSliceTokens, features}).transpose(1, 2);
    const auto v = b.narrow(1, 0, done).reshape({bh * slices, kStateSliceTokens, width});
    kv.add_(product(p, v).view({bh, slices, features, width}).sum(1));
  }
  if (done == n) return;
  const auto p = a.narrow(1, done, n - done).transpose(1, 2);
  const auto v = b.narrow(1, done, n - done);
  if (low) {
    kv.add_(product(p, v));
  } else {
    kv.baddbmm_(p, v);
  }
}

void EfficientForward(const torch::Tensor& q_s, const torch::Tensor& k_s, const torch::Tensor& v_p,
                      const torch::Tensor& coefficients, std::int64_t chunk, bool aten, bool low,
                      torch::Tensor& y, const torch::Tensor& kv_out, const torch::Tensor& den_out) {
  if (!aten) {
    EfficientCpu(q_s, k_s, v_p, coefficients, y, chunk, kv_out, den_out);
    return;
  }
  const std::int64_t bh = q_s.size(0), tokens = q_s.size(1), d = q_s.size(2);
  // KV = Σ_j ψ(k_j) v'_jᵀ, accumulated chunk by chunk: no N×d² tensor ever exists.
  auto kv =
      kv_out.defined() ? kv_out.zero_() : torch::zeros({bh, FeatureCount(d), d + 1}, q_s.options());
  for (std::int64_t start = 0; start < tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, tokens - start);
    AccumulateState(kv, Features(k_s.narrow(1, start, n)), v_p.narrow(1, start, n), low);
  }
  kv.mul_(coefficients);
  const auto kv_low = low ? kv.to(torch::kBFloat16) : torch::Tensor();
  torch::Tensor nom;
  for (std::int64_t start = 0; start < tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, tokens - start);
    const auto phi = Features(q_s.narrow(1, start, n));
    if (low) {
      nom = compat::BmmFloat32(phi.to(torch::kBFloat16), kv_low);
    } else {
      if (!nom.defined() || nom.size(1) != n) nom = torch::empty({bh, n, d + 1}, q_s.options());
      at::bmm_out(nom, phi, kv);
    }
    auto y_c = y.narrow(1, start, n);
    at::div_out(y_c, nom.narrow(-1, 1, d), nom.narrow(-1, 0, 1));
    if (den_out.defined()) den_out.narrow(1, start, n).copy_(nom.narrow(-1, 0, 1));
  }
}

// Backward of the efficient path, given dnom = ∂L/∂nom [BH, N, d+1]. Queries: dKV = Σ φ(q_i)
// dnom_iᵀ and ∂L/∂φ(q_i) = KV dnom_i; keys: with dKV₀ = coef ⊙ dKV, ∂L/∂v'_j = dKV₀ᵀ ψ(k_j) and
// ∂L/∂ψ(k_j) = dKV₀ v'_j. Features are recomputed chunk by chunk, so one head holds two chunks of
// features and dKV besides the O(N·d) inputs and gradients. Writes dq, dk [BH, N, d] and dv
// [BH, N, d+1] (contiguous).
void EfficientBackwardCpu(const torch::Tensor& q_s, const torch::Tensor& k_s,
                          const torch::Tensor& v_p, const torch::Tensor& coefficients,
                          const torch::Tensor& kv, const torch::Tensor& dnom, torch::Tensor& dq,
                          torch::Tensor& dk, torch::Tensor& dv, std::int64_t chunk) {
  const std::int64_t bh = q_s.size(0), tokens = q_s.size(1), d = q_s.size(2);
  const std::int64_t features = FeatureCount(d);
  ParallelFor(0, bh, 1, bh * tokens * features * (d + 1),
              [&](std::int64_t begin, std::int64_t end) {
                const std::int64_t rows = std::min(chunk, tokens);
                auto feature_buffer = torch::empty({rows, features}, q_s.options());
                auto grad_buffer = torch::empty({rows, features}, q_s.options());
                for (std::int64_t h = begin; h < end; ++h) {
                  auto dkv = torch::zeros({features, d + 1}, q_s.options());
                  const auto kv_t = kv[h].t();
                  for (std::int64_t start = 0; start < tokens; start += chunk) {
                    const std::int64_t n = std::min(chunk, tokens - start);
                    auto phi = feature_buffer.narrow(0, 0, n);
                    auto dphi = grad_buffer.narrow(0, 0, n);
                    const auto dnom_c = dnom[h].narrow(0, start, n);
                    FeaturesInto(q_s[h].narrow(0, start, n), phi);
                    MatmulInto(dkv, phi.t(), dnom_c, 1.0);
                    MatmulInto(dphi, dnom_c, kv_t);
                    FeatureGradInto(q_s[h].narrow(0, start, n), dphi, dq[h].narrow(0, start, n));
                  }
                  dkv.mul_(coefficients);
                  const auto dkv_t = dkv.t();
                  for (std::int64_t start = 0; start < tokens; start += chunk) {
                    const std::int64_t n = std::min(chunk, tokens - start);
                    auto psi = feature_buffer.narrow(0, 0, n);
                    auto dpsi = grad_buffer.narrow(0, 0, n);
                    FeaturesInto(k_s[h].narrow(0, start, n), psi);
                    auto dv_c = dv[h].narrow(0, start, n);
                    MatmulInto(dv_c, psi, dkv);
                    MatmulInto(dpsi, v_p[h].narrow(0, start, n), dkv_t);
                    FeatureGradInto(k_s[h].narrow(0, start, n), dpsi, dk[h].narrow(0, start, n));
                  }
                }
              });
}

// EfficientBackwardCpu with batched GEMMs: the ATen form.
void EfficientBackwardBatched(const torch::Tensor& q_s, const torch::Tensor& k_s,
                              const torch::Tensor& v_p, const torch::Tensor& coefficients,
                              const torch::Tensor& kv, const torch::Tensor& dnom, torch::Tensor& dq,
                              torch::Tensor& dk, torch::Tensor& dv, std::int64_t chunk) {
  const std::int64_t tokens = q_s.size(1);
  const auto onehot = FeaturePairsOneHot(q_s.size(2), dnom);
  auto dkv = torch::zeros_like(kv);
  const auto kv_t = kv.transpose(1, 2);
  for (std::int64_t start = 0; start < tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, tokens - start);
    const auto q_c = q_s.narrow(1, start, n);
    const auto dnom_c = dnom.narrow(1, start, n);
    dkv.baddbmm_(Features(q_c).transpose(1, 2), dnom_c);
    dq.narrow(1, start, n).copy_(FeatureGrad(q_c, torch::bmm(dnom_c, kv_t), onehot));
  }
  dkv.mul_(coefficients);
  const auto dkv_t = dkv.transpose(1, 2);
  for (std::int64_t start = 0; start < tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, tokens - start);
    const auto k_c = k_s.narrow(1, start, n);
    auto dv_c = dv.narrow(1, start, n);
    at::bmm_out(dv_c, Features(k_c), dkv);
    dk.narrow(1, start, n)
        .copy_(FeatureGrad(k_c, torch::bmm(v_p.narrow(1, start, n), dkv_t), onehot));
  }
}

// The core of the efficient path under autograd: y = nom[:, 1:] / nom[:, :1] with
// nom = φ(q_s)·KV and KV = coef ⊙ Σ_j ψ(k_j) v'_jᵀ, for q_s, k_s [BH, N, d] (scaled),
// v_p [BH, N, d+1] and coefficients [F, 1] (constant). Saves the inputs, KV, y and the
// denominators — O(N·d + F·d) per head — and recomputes the features chunk by chunk in backward,
// where autograd through the chunk loop would keep every chunk's N×F features alive.
// Not twice differentiable.
class EfficientCore : public torch::autograd::Function<EfficientCore> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_s,
                               const torch::Tensor& k_s, const torch::Tensor& v_p,
                               const torch::Tensor& coefficients, std::int64_t chunk, bool aten) {
    const auto q = q_s.contiguous(), k = k_s.contiguous(), v = v_p.contiguous();
    const std::int64_t bh = q.size(0), tokens = q.size(1), d = q.size(2);
    auto y = torch::empty({bh, tokens, d}, q.options());
    auto kv = torch::empty({bh, FeatureCount(d), d + 1}, q.options());
    auto den = torch::empty({bh, tokens, 1}, q.options());
    EfficientForward(q, k, v, coefficients, chunk, aten, /*low=*/false, y, kv, den);
    ctx->save_for_backward({q, k, v, coefficients, kv, den, y});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["aten"] = aten;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &coefficients = saved[3];
    const auto &kv = saved[4], &den = saved[5], &y = saved[6];
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool aten = ctx->saved_data["aten"].toBool();
    const auto grad_y = grad_outputs[0].contiguous();
    // Quotient rule for y = nom₁:/nom₀: ∂L/∂nom₀ = −⟨∂L/∂y, y⟩/nom₀, ∂L/∂nom₁: = (∂L/∂y)/nom₀.
    const auto dnom = torch::cat({-(grad_y * y).sum(-1, /*keepdim=*/true), grad_y}, -1).div_(den);
    auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    (aten ? EfficientBackwardBatched : EfficientBackwardCpu)(q, k, v, coefficients, kv, dnom, dq,
                                                             dk, dv, chunk);
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The direct path's ATen form on heads q, k [BH, N, d] and v'' = [v | 1] [BH, N, d+1] (zero rows
// for padded keys): nom = ((S + β)² + γ)·v'' with S = q kᵀ, one block of `rows` queries at a time.
struct DirectTerms {
  double beta, gamma;
  std::int64_t rows;
};

torch::Tensor DirectNumerators(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v_aug, const DirectTerms& terms, bool low) {
  const std::int64_t bh = q.size(0), d = q.size(2);
  // β rides in the first GEMM as an extra column ([q | β]·[k | 1]ᵀ = S + β) and γ in the second
  // (γ·Σ_j v''_j), so the only pass over the scores is the square.
  const auto q_aug = torch::constant_pad_nd(q, {0, 1}, terms.beta);
  const auto k_aug_t = WithOnes(k).transpose(1, 2).contiguous();
  const auto constant = v_aug.sum(1, /*keepdim=*/true) * terms.gamma;
  const auto q_op = low ? q_aug.to(torch::kBFloat16) : q_aug;
  const auto k_op = low ? k_aug_t.to(torch::kBFloat16) : k_aug_t;
  const auto v_op = low ? v_aug.to(torch::kBFloat16) : v_aug;
  std::vector<torch::Tensor> blocks;
  for (const auto& q_block : q_op.split(terms.rows, 1)) {
    auto scores = torch::bmm(q_block, k_op).square_();
    if (low) {
      blocks.push_back(compat::BmmFloat32(scores, v_op).add_(constant));
    } else {
      blocks.push_back(
          torch::baddbmm(constant.expand({bh, q_block.size(1), d + 1}), scores, v_aug));
    }
  }
  return blocks.size() == 1 ? blocks.front() : torch::cat(blocks, 1);
}

// y = nom[:, :d] / nom[:, d].
torch::Tensor DirectQuotient(const torch::Tensor& nom) {
  const std::int64_t d = nom.size(-1) - 1;
  return nom.narrow(-1, 0, d) / nom.narrow(-1, d, 1);
}

// Under autograd a block of the direct path has at least this many query rows (or the whole
// sequence): with many heads the score budget alone would leave blocks of a few rows, and
// backward a product per row (2x slower steps at B 16, H 8, N 1025 than blocks of 64 rows).
constexpr std::int64_t kMinTrainingBlockRows = 64;

// The direct path under autograd, flash-style: forward keeps q, k, v'', y and the denominators —
// O(N·d) per head — and backward recomputes the scores block by block, so neither holds more than
// a few blocks of B·H·rows·N scores (autograd through the blocks kept every block's scores and
// their squares: O(N²) per head). With S' = S + β, A = S'² + γ, nom = A·v'' and
// dnom = [∂L/∂y | −⟨∂L/∂y, y⟩] / den: ∂L/∂v''_j = Σ_i A_ij dnom_i, and dS' = 2·S' ⊙ (dnom v''ᵀ)
// gives ∂L/∂q = dS'·k, ∂L/∂k = dS'ᵀ·q. Not twice differentiable.
class DirectCore : public torch::autograd::Function<DirectCore> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v_aug, double beta,
                               double gamma, std::int64_t rows) {
    const DirectTerms terms{beta, gamma, rows};
    const auto nom = DirectNumerators(q, k, v_aug, terms, /*low=*/false);
    const std::int64_t d = q.size(2);
    auto y = DirectQuotient(nom);
    ctx->save_for_backward({q, k, v_aug, y, nom.narrow(-1, d, 1).contiguous()});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["gamma"] = gamma;
    // Backward holds two blocks (S' and dS') where forward held one: a third of the rows each,
    // but not under kMinTrainingBlockRows.
    ctx->saved_data["rows"] = std::max(rows / 3, std::min(kMinTrainingBlockRows, q.size(1)));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v_aug = saved[2], &y = saved[3], &den = saved[4];
    const double beta = ctx->saved_data["beta"].toDouble();
    const double gamma = ctx->saved_data["gamma"].toDouble();
    const std::int64_t rows = ctx->saved_data["rows"].toInt();
    const auto grad_y = grad_outputs[0];
    // Quotient rule for y = nom:d / nom_d, the denominator column last as in nom.
    const auto dnom = torch::cat({grad_y, -(grad_y * y).sum(-1, /*keepdim=*/true)}, -1).div_(den);
    const auto k_aug_t = WithOnes(k).transpose(1, 2).contiguous();
    auto dq = torch::empty_like(q);
    auto dk = torch::zeros_like(k);
    // γ·Σ_j v''_j's gradient: every key gets γ·Σ_i dnom_i.
    auto dv = (dnom.sum(1, /*keepdim=*/true) * gamma).expand_as(v_aug).contiguous();
    const auto v_aug_t = v_aug.transpose(1, 2);
    for (std::int64_t start = 0; start < q.size(1); start += rows) {
      const std::int64_t n = std::min(rows, q.size(1) - start);
      const auto q_block = q.narrow(1, start, n);
      const auto dnom_block = dnom.narrow(1, start, n);
      auto shifted = torch::bmm(torch::constant_pad_nd(q_block, {0, 1}, beta), k_aug_t);
      auto d_shifted = torch::bmm(dnom_block, v_aug_t).mul_(shifted).mul_(2.0);
      auto dq_block = dq.narrow(1, start, n);
      at::bmm_out(dq_block, d_shifted, k);
      dk.baddbmm_(d_shifted.transpose(1, 2), q_block);
      dv.baddbmm_(shifted.square_().transpose(1, 2), dnom_block);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor FeatureCoefficients(std::int64_t d, double a, double b, double c,
                                  const torch::TensorOptions& options) {
  std::vector<double> values;
  values.reserve(FeatureCount(d));
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = i; j < d; ++j) values.push_back(i == j ? a : 2 * a);
  }
  for (std::int64_t i = 0; i < d; ++i) values.push_back(b);
  values.push_back(c);
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64))
      .to(options.device(), options.dtype().toScalarType());
}

std::optional<KernelImplementation> ParseKernelImplementation(std::string_view name) {
  if (name == "auto") return KernelImplementation::kAuto;
  if (name == "aten") return KernelImplementation::kAten;
  if (name == "cuda") return KernelImplementation::kCuda;
  return std::nullopt;
}

void CheckTaylorCoefficients(double a, double b, double c) {
  TORCH_CHECK_VALUE(a > 0 && c >= b * b / (4 * a),
                    "Taylor coefficients must satisfy a > 0 and c >= b^2/(4a) so that "
                    "a*x^2 + b*x + c >= 0 for all x; got a=",
                    a, ", b=", b, ", c=", c);
}

std::pair<torch::Tensor, torch::Tensor> NormalizeQueryKey(const torch::Tensor& q,
                                                          const torch::Tensor& k,
                                                          const torch::Tensor& temperature) {
  const auto options = F::NormalizeFuncOptions().p(2).dim(-1).eps(1e-12);
  auto q_hat = F::normalize(q, options);
  if (temperature.defined()) q_hat = q_hat * temperature;
  return {q_hat, F::normalize(k, options)};
}

torch::Tensor TaylorDirect(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& key_padding_mask,
                           const TaylorKernelOptions& options) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  const AttentionKernel kernel = ChooseAttentionKernel(q, k, v, options);
  if (kernel == AttentionKernel::kFusedCuda) {
    return FusedCudaAttention(AttentionPath::kDirect, q, k, v, key_padding_mask, options);
  }
  if (kernel == AttentionKernel::kFusedCpu) {
    // q and k arrive normalised: the fused kernel's scaling is the identity.
    return DirectInference(q, k, v, key_padding_mask, options, {/*normalize=*/false, {}, 1.0});
  }
  const bool grad = NeedsGrad(q, k, v);
  // The ATen form's bf16: both products in bfloat16 with float32 accumulation, the numerators
  // and denominators (the second product's output) float32.
  const bool low = !grad && options.bf16_products && kernel == AttentionKernel::kAten &&
                   q.scalar_type() == torch::kFloat && Bf16ProductsSumInFloat32(q);
  const std::int64_t bh = s.batch * s.heads;
  // A/a = (S + β)² + γ with β = b/2a, γ = c/a − b²/4a²; the factor a cancels in P = A/rowsum(A).
  DirectTerms terms{options.b / (2 * options.a),
                    options.c / options.a - options.b * options.b / (4 * options.a * options.a),
                    BlockRows(s, DirectBudget(q, options))};
  // v'' = [v | 1], zero rows for padded keys: they drop out of numerator and denominator.
  auto v_aug = WithOnes(v);
  if (const auto keep = KeyKeep(key_padding_mask, v); keep.defined()) v_aug = v_aug * keep;
  v_aug = v_aug.reshape({bh, s.tokens, s.head_dim + 1});
  const auto q_bh = q.reshape({bh, s.tokens, s.head_dim});
  const auto k_bh = k.reshape({bh, s.tokens, s.head_dim});
  auto y = grad ? DirectCore::apply(q_bh, k_bh, v_aug, terms.beta, terms.gamma,
                                    std::max(terms.rows, std::min(kMinTrainingBlockRows, s.tokens)))
                : DirectQuotient(DirectNumerators(q_bh, k_bh, v_aug, terms, low));
  return OutputNormalize(y.view({s.batch, s.heads, s.tokens, s.head_dim}),
                         TokenCounts(key_padding_mask, s, q), s, options.output_normalize, !grad);
}

torch::Tensor TaylorEfficient(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                              const TaylorKernelOptions& options) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  TORCH_CHECK(options.efficient_chunk_tokens > 0, "efficient_chunk_tokens must be positive");
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  const AttentionKernel kernel = ChooseAttentionKernel(q, k, v, options);
  if (kernel == AttentionKernel::kFusedCuda) {
    return FusedCudaAttention(AttentionPath::kEfficient, q, k, v, key_padding_mask, options);
  }
  const bool grad = NeedsGrad(q, k, v);
  const bool aten = kernel == AttentionKernel::kAten;
  if (kernel == AttentionKernel::kFusedCpu) {
    // q and k arrive normalised: the fused kernel's scaling is the identity.
    return EfficientInference(q, k, v, key_padding_mask, options, {/*normalize=*/false, {}, 1.0});
  }
  const std::int64_t bh = s.batch * s.heads;
  const std::int64_t d = s.head_dim;
  const std::int64_t features = FeatureCount(d);
  // Algorithm 1 of the paper: q, k scaled by α = d^¼ and v' = [√(d/N) | v] / N keep every
  // intermediate O(1); the common factor α⁴ of all three terms cancels in the ratio.
  const double alpha = std::pow(static_cast<double>(d), 0.25);
  const auto counts = TokenCounts(key_padding_mask, s, q);
  const auto q_s = (q * alpha).reshape({bh, s.tokens, d});
  const auto k_s = (k * alpha).reshape({bh, s.tokens, d});
  auto v_p = ScaledValues(v, counts, key_padding_mask, s, options.output_normalize);
  v_p = v_p.reshape({bh, s.tokens, d + 1});

  const std::int64_t chunk =
      aten ? EfficientChunk(q, bh, d, options) : options.efficient_chunk_tokens;
  const auto coefficients =
      FeatureCoefficients(d, options.a, options.b * alpha * alpha,
                          options.c * alpha * alpha * alpha * alpha, q.options())
          .view({features, 1});
  if (grad) {
    return EfficientCore::apply(q_s, k_s, v_p, coefficients, chunk, aten)
        .view({s.batch, s.heads, s.tokens, d});
  }
  const bool low = aten && options.bf16_products && q.scalar_type() == torch::kFloat &&
                   Bf16ProductsSumInFloat32(q);
  auto y = torch::empty({bh, s.tokens, d}, q.options());
  EfficientForward(q_s.contiguous(), k_s.contiguous(), v_p.contiguous(), coefficients, chunk, aten,
                   low, y, {}, {});
  return y.view({s.batch, s.heads, s.tokens, d});
}

torch::Tensor TaylorDirectReference(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                    const TaylorKernelOptions& options) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  const double a = options.a, b = options.b, c = options.c;
  auto attn = torch::matmul(q, k.transpose(-2, -1));
  const auto attn_max = std::get<0>(attn.abs().max(-1, /*keepdim=*/true));
  const auto max_val = a * attn_max.square() + b * attn_max + c;
  attn = a * (attn / max_val.sqrt()).square() + b * (attn / max_val) + c / max_val;
  if (key_padding_mask.defined()) {
    attn = attn.masked_fill(key_padding_mask.view({s.batch, 1, 1, s.tokens}), 0.0);
  }
  attn = attn / attn.sum(-1, /*keepdim=*/true);
  auto y = torch::matmul(attn, v);
  return OutputNormalize(y, TokenCounts(key_padding_mask, s, q), s, options.output_normalize,
                         /*inplace=*/false);
}

torch::Tensor TaylorEfficientReference(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& key_padding_mask,
                                       const TaylorKernelOptions& options) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  const std::int64_t d = s.head_dim;
  const double alpha = std::pow(static_cast<double>(d), 0.25);
  const auto counts = TokenCounts(key_padding_mask, s, q);
  auto v_p = ScaledValues(v, counts, key_padding_mask, s, options.output_normalize);
  const auto q_s = q * alpha;
  const auto k_s = k * alpha;
  const auto box = [&](const torch::Tensor& x) {
    return (x.unsqueeze(-1) * x.unsqueeze(-2)).reshape({s.batch, s.heads, s.tokens, d * d});
  };
  const auto kv_mod = torch::matmul(box(k_s).transpose(-1, -2), v_p);
  const auto y =
      options.a * torch::matmul(box(q_s), kv_mod) +
      (alpha * alpha * options.b) * torch::matmul(q_s, torch::matmul(k_s.transpose(-1, -2), v_p)) +
      (std::pow(alpha, 4) * options.c) * v_p.sum(-2, /*keepdim=*/true);
  return y.narrow(-1, 1, d) / y.narrow(-1, 0, 1);
}

torch::Tensor SoftmaxAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                               const TaylorKernelOptions& options) {
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  torch::Tensor keep;
  if (key_padding_mask.defined()) {
    keep = key_padding_mask.logical_not().view({s.batch, 1, 1, s.tokens});
  }
  // On CUDA, SDPA's fused kernels hold no N×N scores: no blocks. With bf16 products, float32
  // inputs run in bfloat16 there: SDPA's flash and cuDNN kernels take no float32.
  if (q.is_cuda() && options.bf16_products && q.scalar_type() == torch::kFloat &&
      !NeedsGrad(q, k, v)) {
    const auto low = [](const torch::Tensor& x) { return x.to(torch::kBFloat16); };
    return compat::ScaledDotProductAttention(low(q), low(k), low(v), keep).to(torch::kFloat);
  }
  const std::int64_t rows = BlockRows(s, options.direct_block_elements);
  if (rows >= s.tokens || q.is_cuda()) return compat::ScaledDotProductAttention(q, k, v, keep);
  std::vector<torch::Tensor> blocks;
  for (const auto& q_block : q.split(rows, 2)) {
    blocks.push_back(compat::ScaledDotProductAttention(q_block, k, v, keep));
  }
  return torch::cat(blocks, 2);
}

torch::Tensor RunAttentionPath(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                               const TaylorKernelOptions& options) {
  switch (path) {
    case AttentionPath::kDirect:
      return TaylorDirect(q, k, v, key_padding_mask, options);
    case AttentionPath::kEfficient:
      return TaylorEfficient(q, k, v, key_padding_mask, options);
    case AttentionPath::kSoftmax:
      return SoftmaxAttention(q, k, v, key_padding_mask, options);
    case AttentionPath::kDirectReference:
      return TaylorDirectReference(q, k, v, key_padding_mask, options);
    case AttentionPath::kEfficientReference:
      return TaylorEfficientReference(q, k, v, key_padding_mask, options);
    case AttentionPath::kAuto:
      break;
  }
  TORCH_CHECK(false, "RunAttentionPath: 'auto' must be resolved to a concrete path first");
}

}  // namespace ts

#include "model/taylor_attention.h"

#include <cmath>
#include <vector>

#include "model/torch_compat.h"

namespace ts {
namespace {

namespace F = torch::nn::functional;
using torch::indexing::Slice;

struct Shape {
  std::int64_t batch, heads, tokens, head_dim;
};

Shape CheckInputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& key_padding_mask) {
  TORCH_CHECK(q.dim() == 4, "attention: q must be [B, H, N, d], got ", q.sizes());
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "attention: q, k, v must have the same shape, got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
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

bool NeedsGrad(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::GradMode::is_enabled() &&
         (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// Rows per query block so that B·H·rows·N ≤ budget.
std::int64_t BlockRows(const Shape& shape, std::int64_t budget_elements) {
  const std::int64_t per_row = shape.batch * shape.heads * shape.tokens;
  return std::max<std::int64_t>(1, std::min(shape.tokens, budget_elements / per_row));
}

// Upper-triangle products x_i·x_j (i ≤ j) of the last dimension: [..., n, d] → [..., n,
// d(d+1)/2], ordered row by row (i = 0: j = 0..d-1, i = 1: j = 1..d-1, ...).
torch::Tensor SymmetricFeatures(const torch::Tensor& x, bool differentiable) {
  const std::int64_t d = x.size(-1);
  const std::int64_t features = d * (d + 1) / 2;
  if (differentiable) {
    const auto idx = torch::triu_indices(d, d, 0, torch::TensorOptions().device(x.device()));
    return x.index_select(-1, idx[0]) * x.index_select(-1, idx[1]);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = features;
  auto out = torch::empty(sizes, x.options());
  std::int64_t offset = 0;
  for (std::int64_t i = 0; i < d; ++i) {
    const std::int64_t len = d - i;
    auto slot = out.narrow(-1, offset, len);
    at::mul_out(slot, x.narrow(-1, i, 1), x.narrow(-1, i, len));
    offset += len;
  }
  return out;
}

// Weights of the symmetric features: 1 on the diagonal (i = j), 2 off it (x_i x_j = x_j x_i).
torch::Tensor SymmetricWeights(std::int64_t d, const torch::TensorOptions& options) {
  std::vector<double> values;
  values.reserve(d * (d + 1) / 2);
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = i; j < d; ++j) values.push_back(i == j ? 1.0 : 2.0);
  }
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64))
      .to(options.device(), options.dtype().toScalarType());
}

}  // namespace

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
  const bool grad = NeedsGrad(q, k, v);
  const std::int64_t bh = s.batch * s.heads;
  // A/a = (S + β)² + γ with β = b/2a, γ = c/a − b²/4a²; the factor a cancels in P = A/rowsum(A).
  // β rides in the first GEMM as an extra column ([q | β]·[k | 1]ᵀ = S + β) and γ in the second
  // (γ·Σ_j v''_j), so the only pass over the scores is the square.
  const double beta = options.b / (2 * options.a);
  const double gamma = options.c / options.a - options.b * options.b / (4 * options.a * options.a);
  const auto ones = torch::ones({s.batch, s.heads, s.tokens, 1}, q.options());
  const auto q_aug = torch::cat({q, ones * beta}, -1).reshape({bh, s.tokens, s.head_dim + 1});
  const auto k_aug_t = torch::cat({k, ones}, -1)
                           .reshape({bh, s.tokens, s.head_dim + 1})
                           .transpose(1, 2)
                           .contiguous();
  // v'' = [v | 1], zero rows for padded keys: they drop out of numerator and denominator.
  auto v_aug = torch::cat({v, ones}, -1);
  if (const auto keep = KeyKeep(key_padding_mask, v); keep.defined()) v_aug = v_aug * keep;
  v_aug = v_aug.reshape({bh, s.tokens, s.head_dim + 1});
  const auto constant = (v_aug.sum(1, /*keepdim=*/true) * gamma);

  const std::int64_t rows = BlockRows(s, options.direct_block_elements);
  std::vector<torch::Tensor> blocks;
  blocks.reserve((s.tokens + rows - 1) / rows);
  for (std::int64_t start = 0; start < s.tokens; start += rows) {
    const std::int64_t n = std::min(rows, s.tokens - start);
    auto scores = torch::bmm(q_aug.narrow(1, start, n), k_aug_t);
    scores = grad ? scores.square() : scores.square_();
    blocks.push_back(torch::baddbmm(constant.expand({bh, n, s.head_dim + 1}), scores, v_aug));
  }
  auto nom = blocks.size() == 1 ? blocks.front() : torch::cat(blocks, 1);
  auto y = (nom.narrow(-1, 0, s.head_dim) / nom.narrow(-1, s.head_dim, 1))
               .view({s.batch, s.heads, s.tokens, s.head_dim});
  return OutputNormalize(y, TokenCounts(key_padding_mask, s, q), s, options.output_normalize,
                         !grad);
}

torch::Tensor TaylorEfficient(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                              const TaylorKernelOptions& options) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  TORCH_CHECK(options.efficient_chunk_tokens > 0, "efficient_chunk_tokens must be positive");
  const Shape s = CheckInputs(q, k, v, key_padding_mask);
  const bool grad = NeedsGrad(q, k, v);
  const std::int64_t bh = s.batch * s.heads;
  const std::int64_t d = s.head_dim;
  const std::int64_t features = d * (d + 1) / 2;
  // Algorithm 1 of the paper: q, k scaled by α = d^¼ and v' = [√(d/N) | v] / N keep every
  // intermediate O(1); the common factor α⁴ of all three terms cancels in the ratio.
  const double alpha = std::pow(static_cast<double>(d), 0.25);
  const auto counts = TokenCounts(key_padding_mask, s, q);
  const auto q_s = (q * alpha).reshape({bh, s.tokens, d});
  const auto k_s = (k * alpha).reshape({bh, s.tokens, d});
  const auto constant_column =
      options.output_normalize
          ? (static_cast<double>(d) / counts).sqrt().expand({s.batch, s.heads, s.tokens, 1})
          : torch::ones({s.batch, s.heads, s.tokens, 1}, q.options());
  auto v_p = torch::cat({constant_column, v}, -1) / counts;
  if (const auto keep = KeyKeep(key_padding_mask, v); keep.defined()) v_p = v_p * keep;
  v_p = v_p.reshape({bh, s.tokens, d + 1});

  const std::int64_t chunk = options.efficient_chunk_tokens;
  // Σ_j ψ(k_j) v'_jᵀ for the three feature groups (squares, linear, constant).
  torch::Tensor kv2 = torch::zeros({bh, features, d + 1}, q.options());
  torch::Tensor kv1 = torch::zeros({bh, d, d + 1}, q.options());
  for (std::int64_t start = 0; start < s.tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, s.tokens - start);
    const auto k_c = k_s.narrow(1, start, n);
    const auto v_c = v_p.narrow(1, start, n);
    const auto psi = SymmetricFeatures(k_c, grad);
    if (grad) {
      kv2 = kv2.baddbmm(psi.transpose(1, 2), v_c);
      kv1 = kv1.baddbmm(k_c.transpose(1, 2), v_c);
    } else {
      kv2.baddbmm_(psi.transpose(1, 2), v_c);
      kv1.baddbmm_(k_c.transpose(1, 2), v_c);
    }
  }
  // Fold the Taylor coefficients (and the factor 2 of off-diagonal features) into the sums.
  const auto weights = SymmetricWeights(d, q.options()).mul_(options.a).view({1, features, 1});
  kv2 = grad ? kv2 * weights : kv2.mul_(weights);
  kv1 = kv1 * (options.b * alpha * alpha);
  const auto kv0 = v_p.sum(1, /*keepdim=*/true) * (options.c * alpha * alpha * alpha * alpha);

  std::vector<torch::Tensor> outputs;
  outputs.reserve((s.tokens + chunk - 1) / chunk);
  for (std::int64_t start = 0; start < s.tokens; start += chunk) {
    const std::int64_t n = std::min(chunk, s.tokens - start);
    const auto q_c = q_s.narrow(1, start, n);
    const auto phi = SymmetricFeatures(q_c, grad);
    auto nom = torch::baddbmm(kv0.expand({bh, n, d + 1}), phi, kv2);
    nom = grad ? nom.baddbmm(q_c, kv1) : nom.baddbmm_(q_c, kv1);
    outputs.push_back(nom.narrow(-1, 1, d) / nom.narrow(-1, 0, 1));
  }
  auto y = outputs.size() == 1 ? outputs.front() : torch::cat(outputs, 1);
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
  const auto constant_column =
      options.output_normalize
          ? (static_cast<double>(d) / counts).sqrt().expand({s.batch, s.heads, s.tokens, 1})
          : torch::ones({s.batch, s.heads, s.tokens, 1}, q.options());
  auto v_p = torch::cat({constant_column, v}, -1) / counts;
  if (const auto keep = KeyKeep(key_padding_mask, v); keep.defined()) v_p = v_p * keep;
  const auto q_s = q * alpha;
  const auto k_s = k * alpha;
  const auto box = [&](const torch::Tensor& x) {
    return (x.unsqueeze(-1) * x.unsqueeze(-2)).reshape({s.batch, s.heads, s.tokens, d * d});
  };
  const auto kv_mod = torch::matmul(box(k_s).transpose(-1, -2), v_p);
  const auto y = options.a * torch::matmul(box(q_s), kv_mod) +
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
  const std::int64_t rows = BlockRows(s, options.direct_block_elements);
  if (rows >= s.tokens) return compat::ScaledDotProductAttention(q, k, v, keep);
  std::vector<torch::Tensor> blocks;
  for (std::int64_t start = 0; start < s.tokens; start += rows) {
    const std::int64_t n = std::min(rows, s.tokens - start);
    blocks.push_back(compat::ScaledDotProductAttention(q.narrow(2, start, n), k, v, keep));
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

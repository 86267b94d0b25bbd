#include "model/networks/attention.h"

#include <cmath>
#include <optional>

#include "model/kernels/attention_dispatch.h"
#include "model/kernels/direct_inference.h"
#include "model/kernels/efficient_inference.h"
#include "model/networks/cost_model.h"
#include "model/torch_compat.h"

namespace ts {
namespace {

// q and k as the Taylor paths take them: q̂ = τ·q/‖q‖ and k̂ = k/‖k‖ with input normalisation,
// else q scaled by C^-½ as the reference does. The softmax path takes them as they are.
void ScaleQueryKey(AttentionPath path, bool normalize, const torch::Tensor& temperature,
                   std::int64_t dim, torch::Tensor& q, torch::Tensor& k) {
  if (path == AttentionPath::kSoftmax) return;
  if (normalize) {
    std::tie(q, k) = NormalizeQueryKey(q, k, temperature);
  } else {
    q = q * (1.0 / std::sqrt(static_cast<double>(dim)));
  }
}

}  // namespace

TaylorShiftAttentionImpl::TaylorShiftAttentionImpl(const TaylorShiftAttentionOptions& options)
    : options_(options) {
  TORCH_CHECK_VALUE(
      options_.dim() > 0 && options_.heads() > 0 && options_.dim() % options_.heads() == 0,
      "attention: heads (", options_.heads(), ") must divide dim (", options_.dim(), ")");
  CheckTaylorCoefficients(options_.a(), options_.b(), options_.c());
  TORCH_CHECK_VALUE(options_.crossover_tokens() >= 0, "attention: crossover_tokens must be >= 0");
  reset();
}

void TaylorShiftAttentionImpl::reset() {
  qkv = register_module(
      "qkv",
      torch::nn::Linear(
          torch::nn::LinearOptions(options_.dim(), 3 * options_.dim()).bias(options_.qkv_bias())));
  proj = register_module("proj", torch::nn::Linear(options_.dim(), options_.dim()));
  if (options_.input_normalize()) {
    temperature = register_parameter("temperature", torch::ones({1, options_.heads(), 1, 1}));
  }
  kernel_options_.a = options_.a();
  kernel_options_.b = options_.b();
  kernel_options_.c = options_.c();
  kernel_options_.output_normalize = options_.output_normalize();
}

std::int64_t TaylorShiftAttentionImpl::crossover_tokens() const {
  return options_.crossover_tokens() > 0 ? options_.crossover_tokens()
                                         : SpeedCrossoverN0(head_dim());
}

void TaylorShiftAttentionImpl::set_precision(Precision precision) {
  qkv_low_ = LowPrecisionWeight(qkv, precision);
  proj_low_ = LowPrecisionWeight(proj, precision);
}

void TaylorShiftAttentionImpl::set_kernel_implementation(KernelImplementation implementation) {
  kernel_options_.implementation = implementation;
}

void TaylorShiftAttentionImpl::set_efficient_tiles(bool on) {
  kernel_options_.efficient_tiles = on;
}

AttentionPath TaylorShiftAttentionImpl::ResolvePath(AttentionPath path, std::int64_t tokens) const {
  return ResolveAuto(path, tokens, crossover_tokens());
}

torch::Tensor TaylorShiftAttentionImpl::forward(const torch::Tensor& x,
                                                const torch::Tensor& key_padding_mask,
                                                AttentionPath path) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.dim(), "attention: x must be [B, N, ",
              options_.dim(), "], got ", x.sizes());
  const std::int64_t batch = x.size(0), tokens = x.size(1), dim = options_.dim();
  const std::int64_t heads = options_.heads(), d = head_dim();
  const bool low = !is_training();
  const auto qkv_heads = MixedLinear(qkv, low ? qkv_low_ : torch::Tensor(), x)
                             .reshape({batch, tokens, 3, heads, d})
                             .permute({2, 0, 3, 1, 4});
  auto q = qkv_heads[0];
  auto k = qkv_heads[1];
  auto v = qkv_heads[2];
  const AttentionPath concrete = ResolvePath(path, tokens);
  TaylorKernelOptions kernel = kernel_options_;
  // set_precision(kBf16); the fused CUDA kernels, when asked for, multiply in bfloat16 always
  // (also in training: they are the one CUDA form with bfloat16 products under autograd).
  kernel.bf16_products =
      (low && qkv_low_.defined()) || kernel.implementation == KernelImplementation::kCuda;
  torch::Tensor y;
  // (On a GPU the choice is made on the scaled float32 q̂, k̂ by the path itself: under autocast
  // q, k, v are still bfloat16 here.)
  const bool fused =
      q.is_cpu() && (concrete == AttentionPath::kEfficient || concrete == AttentionPath::kDirect) &&
      ChooseAttentionKernel(q, k, v, kernel) == AttentionKernel::kFusedCpu;
  if (fused) {
    // One fused kernel: the normalisation, the operands and the output layout inside it.
    const QueryKeyScaling scaling{options_.input_normalize(), temperature,
                                  1.0 / std::sqrt(static_cast<double>(dim))};  // as ScaleQueryKey
    y = concrete == AttentionPath::kEfficient
            ? EfficientInference(q, k, v, key_padding_mask, kernel, scaling)
            : DirectInference(q, k, v, key_padding_mask, kernel, scaling);
  } else {
    // Mixed-precision training (compat::Bf16Autocast): the qkv product ran in bfloat16; the
    // attention runs in float32 with autocast off, since the Taylor terms' squares, their sums
    // and the denominators need float32's mantissa and range.
    std::optional<compat::NoAutocast> no_autocast;
    if (compat::AutocastEnabled(x.device().type())) {
      no_autocast.emplace();
      q = q.to(torch::kFloat);
      k = k.to(torch::kFloat);
      v = v.to(torch::kFloat);
    }
    ScaleQueryKey(concrete, options_.input_normalize(), temperature, dim, q, k);
    y = RunAttentionPath(concrete, q, k, v, key_padding_mask, kernel);
  }
  if (options_.attn_drop() > 0) {
    y = torch::dropout(y, options_.attn_drop(), is_training());
  }
  return MixedLinear(proj, low ? proj_low_ : torch::Tensor(),
                     y.transpose(1, 2).reshape({batch, tokens, dim}));
}

torch::Tensor TaylorShiftAttentionImpl::ForwardPacked(const torch::Tensor& x,
                                                      const PackedBatch& batch,
                                                      AttentionPath path) {
  TORCH_CHECK(!is_training(), "attention: ForwardPacked runs in eval mode only");
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.dim(), "attention: x must be [T, ",
              options_.dim(), "], got ", x.sizes());
  const std::int64_t rows = x.size(0), heads = options_.heads(), d = head_dim();
  // [T, 3, H, d]: q, k and v are views, their rows read in place by the fused CUDA kernels.
  const auto qkv_rows = MixedLinear(qkv, qkv_low_, x).view({rows, 3, heads, d});
  auto q = qkv_rows.select(1, 0);
  auto k = qkv_rows.select(1, 1);
  const auto v = qkv_rows.select(1, 2);
  const AttentionPath concrete = ResolvePath(path, batch.width);
  const auto tau = temperature.defined() ? temperature.view({heads, 1}) : temperature;  // [H, 1]
  ScaleQueryKey(concrete, options_.input_normalize(), tau, options_.dim(), q, k);
  TaylorKernelOptions kernel = kernel_options_;
  kernel.bf16_products = qkv_low_.defined();  // set_precision(kBf16)
  const auto y = RunPackedAttentionPath(concrete, q, k, v, batch, kernel);
  return MixedLinear(proj, proj_low_, y.reshape({rows, options_.dim()}));
}

}  // namespace ts

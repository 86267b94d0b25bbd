// TaylorShiftAttention: the attention layer of the encoder (qkv projection, per-head
// temperature, one of the attention paths, output projection). Parameter names follow the
// reference implementation: qkv.{weight,bias}, temperature [1,H,1,1], proj.{weight,bias}.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "model/api/attention_path.h"
#include "model/kernels/mixed_linear.h"
#include "model/kernels/packed_attention.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

struct TaylorShiftAttentionOptions {
  TaylorShiftAttentionOptions(std::int64_t dim, std::int64_t heads) : dim_(dim), heads_(heads) {}
  TORCH_ARG(std::int64_t, dim);
  TORCH_ARG(std::int64_t, heads);
  TORCH_ARG(bool, qkv_bias) = true;
  // q̂ = τ·q/‖q‖, k̂ = k/‖k‖ (and the `temperature` parameter exists) when true.
  TORCH_ARG(bool, input_normalize) = true;
  TORCH_ARG(bool, output_normalize) = true;
  TORCH_ARG(double, a) = 0.5;
  TORCH_ARG(double, b) = 1.0;
  TORCH_ARG(double, c) = 1.0;
  TORCH_ARG(double, attn_drop) = 0.0;
  // Tokens above which kAuto takes the efficient path; 0 = the formula N0(d).
  TORCH_ARG(std::int64_t, crossover_tokens) = 0;
};

class TaylorShiftAttentionImpl : public torch::nn::Module {
 public:
  explicit TaylorShiftAttentionImpl(const TaylorShiftAttentionOptions& options);

  void reset();

  // x: [B, N, C]; key_padding_mask: [B, N] bool (true = padded) or undefined.
  // `path` may be kAuto (resolved with ResolvePath for this N).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_padding_mask = {},
                        AttentionPath path = AttentionPath::kAuto);

  // Inference (eval mode) on a packed batch (model/kernels/packed_attention.h): x [T, C] holds
  // `batch`'s rows; the qkv and output projections run on those rows alone. kAuto resolves for
  // the batch's padded width. Each sequence's rows equal forward's on its padded row up to the
  // order of floating-point sums.
  torch::Tensor ForwardPacked(const torch::Tensor& x, const PackedBatch& batch,
                              AttentionPath path = AttentionPath::kAuto);

  // The concrete path kAuto means for sequences of `tokens` tokens.
  AttentionPath ResolvePath(AttentionPath path, std::int64_t tokens) const;
  std::int64_t head_dim() const { return options_.dim() / options_.heads(); }
  std::int64_t crossover_tokens() const;
  void set_crossover_tokens(std::int64_t tokens) { options_.crossover_tokens(tokens); }
  const TaylorShiftAttentionOptions& options() const { return options_; }
  // The precision of the qkv and proj products in eval mode (model/api/precision.h). Takes a copy
  // of the current weights: call it again after changing them.
  void set_precision(Precision precision);
  // Which implementation runs the Taylor paths (default kAuto: the dispatcher's choice); for
  // benchmarks and tests that compare implementations on a whole model.
  void set_kernel_implementation(KernelImplementation implementation);
  // KernelChoice::efficient_tiles (default on), for benchmarks that compare the AVX2 level's
  // register tiles with the GEMMs on a whole model.
  void set_efficient_tiles(bool on);

  torch::nn::Linear qkv{nullptr};
  torch::nn::Linear proj{nullptr};
  torch::Tensor temperature;  // [1, H, 1, 1]; undefined without input normalisation

 private:
  TaylorShiftAttentionOptions options_;
  TaylorKernelOptions kernel_options_;  // bf16_products is set per call, from qkv_low_
  torch::Tensor qkv_low_;               // bf16 copies of the weights (undefined at fp32)
  torch::Tensor proj_low_;
};
TORCH_MODULE(TaylorShiftAttention);

}  // namespace ts

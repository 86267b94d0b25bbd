// TaylorShiftEncoder: the byte/pixel sequence classifier of docs/MODEL.md ("Encoder"): token
// embedding (linear on one-hot tokens, or the reference's 3-layer conv embedding), fixed sin/cos
// positions, a CLS token, `depth` pre-norm blocks of TaylorShift attention + GELU MLP, and a
// linear head on the normalised CLS token. Parameter and buffer names follow the reference
// implementation (github.com/tobna/TaylorShift), so its state dicts import one to one.
//
// Padding contract: `forward` takes right-padded tokens and each sequence's real length; a
// sequence's logits are the same (to rounding) whether it runs alone or padded in a batch, on
// every attention path. Errors (bad token ids, shapes) are thrown as c10::Error; callers at the
// model boundary convert them with model/torch_status.h. Not thread-safe for concurrent
// mutation; concurrent `forward` calls in eval mode under NoGradGuard are safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "model/api/stop_check.h"
#include "model/networks/attention.h"
#include "model/networks/calibration.h"

namespace ts {

struct TaylorShiftEncoderOptions {
  TaylorShiftEncoderOptions(std::int64_t embed_dim, std::int64_t depth, std::int64_t heads,
                            std::int64_t max_length, std::int64_t num_classes)
      : embed_dim_(embed_dim),
        depth_(depth),
        heads_(heads),
        max_length_(max_length),
        num_classes_(num_classes) {}

  // Input vocabulary V (256 for bytes and 8-bit pixels).
  TORCH_ARG(std::int64_t, vocab_size) = 256;
  // Model width C; must be even (sin/cos pairs) and divisible by `heads`.
  TORCH_ARG(std::int64_t, embed_dim);
  // Number of transformer blocks.
  TORCH_ARG(std::int64_t, depth);
  // Attention heads H (head dim d = C / H).
  TORCH_ARG(std::int64_t, heads);
  // MLP hidden width L = C · mlp_ratio; 0 means 4·C (timm's default ratio).
  TORCH_ARG(std::int64_t, mlp_hidden) = 0;
  // Rows of the positional table `pe`: the most input tokens (excluding CLS) a sequence may have.
  TORCH_ARG(std::int64_t, max_length);
  // Classes K (rows of `head`).
  TORCH_ARG(std::int64_t, num_classes);
  TORCH_ARG(bool, qkv_bias) = true;
  // Reference `TextConvEmbed` (3 × Conv1d k=3 + GroupNorm(1) + GELU) instead of the linear one.
  TORCH_ARG(bool, conv_embed) = false;
  // Taylor-softmax polynomial a·x² + b·x + c.
  TORCH_ARG(double, a) = 0.5;
  TORCH_ARG(double, b) = 1.0;
  TORCH_ARG(double, c) = 1.0;
  // Normalised q, k with a learned per-head temperature (the `temperature` parameter exists).
  TORCH_ARG(bool, input_normalize) = true;
  // Attention output times sqrt(N/d).
  TORCH_ARG(bool, output_normalize) = true;
  // Dropout after the positional embedding (training only).
  TORCH_ARG(double, drop_rate) = 0.0;
  // Dropout on attention weights (training only).
  TORCH_ARG(double, attn_drop) = 0.0;
  // Stochastic depth of the last block; block i uses drop_path · i/(depth-1) (training only).
  TORCH_ARG(double, drop_path) = 0.0;
  // Tokens (incl. CLS) above which kAuto takes the efficient path; 0 = the formula N0(d).
  TORCH_ARG(std::int64_t, crossover_tokens) = 0;
};

// OK when the options describe a buildable model (positive sizes, C even and divisible by H,
// C divisible by 4 with conv_embed, valid Taylor coefficients, rates in [0, 1)).
absl::Status ValidateEncoderOptions(const TaylorShiftEncoderOptions& options);

// A lower bound, computed without building the model, on the number of elements in the
// parameters and buffers of the encoder `options` describes: the positions `pe`, the blocks'
// attention and MLP weights and the head (the embedding, biases and norms left out). Saturates at
// INT64_MAX. A checkpoint reader compares it with the weights a file holds before it allocates a
// model, so an architecture that a small file only claims cannot make it allocate gigabytes.
std::int64_t MinimumEncoderStateElements(const TaylorShiftEncoderOptions& options);

// The options as named scalar fields (mlp_hidden resolved), in a fixed order. Used for the
// checkpoint's architecture record and for `tsmodel info`.
using EncoderOptionValue = std::variant<std::int64_t, double, bool>;
using EncoderOptionFields = std::vector<std::pair<std::string, EncoderOptionValue>>;
EncoderOptionFields EncoderOptionsToFields(const TaylorShiftEncoderOptions& options);
// Inverse of EncoderOptionsToFields. Structural fields are required; the training-only ones
// (drop_rate, attn_drop, drop_path, crossover_tokens) default when missing. Unknown names, wrong
// value types and invalid combinations are INVALID_ARGUMENT naming the field. An int64 value is
// accepted for a double field.
absl::StatusOr<TaylorShiftEncoderOptions> EncoderOptionsFromFields(
    const EncoderOptionFields& fields);

// One line "embed_dim=256 depth=4 heads=4 ..." (every field, `name=value`, space separated) and
// its inverse (same rules as EncoderOptionsFromFields).
std::string DescribeEncoderOptions(const TaylorShiftEncoderOptions& options);
absl::StatusOr<TaylorShiftEncoderOptions> ParseEncoderOptions(std::string_view description);

// timm's Mlp: fc2(GELU(fc1(x))), exact (erf) GELU.
class TaylorShiftMlpImpl : public torch::nn::Module {
 public:
  TaylorShiftMlpImpl(std::int64_t dim, std::int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  // As TaylorShiftAttentionImpl::set_precision, for fc1 and fc2.
  void set_precision(Precision precision);

  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};

 private:
  torch::Tensor fc1_low_;
  torch::Tensor fc2_low_;
};
TORCH_MODULE(TaylorShiftMlp);

// Pre-norm block: x += drop_path(attn(norm1(x))); x += drop_path(mlp(norm2(x))).
class TaylorShiftBlockImpl : public torch::nn::Module {
 public:
  TaylorShiftBlockImpl(const TaylorShiftAttentionOptions& attention, std::int64_t mlp_hidden,
                       double drop_path);

  // x: [B, N, C]; key_padding_mask [B, N] bool (true = padded) or undefined; `path` concrete or
  // kAuto.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_padding_mask,
                        AttentionPath path);

  torch::nn::LayerNorm norm1{nullptr};
  TaylorShiftAttention attn{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  TaylorShiftMlp mlp{nullptr};

  // norm1 or norm2 applied to x as forward applies it: in float32 CPU inference with AVX-512,
  // model/kernels/inference_ops.h's kernel.
  torch::Tensor Norm(const torch::nn::LayerNorm& norm, const torch::Tensor& x) const;

 private:
  double drop_path_;
};
TORCH_MODULE(TaylorShiftBlock);

// The reference's `TextConvEmbed` on one-hot tokens, made padding invariant: the first conv is
// three embedding lookups, GroupNorm statistics cover real positions only, and positions at or
// beyond a sequence's length enter the next conv as zeros. Registered as `patch_embed`; the
// parameters are `proj.{0,3,6}.weight` (Conv1d, no bias) and `proj.{1,4,7}.{weight,bias}`.
class TextConvEmbedImpl : public torch::nn::Module {
 public:
  TextConvEmbedImpl(std::int64_t vocab_size, std::int64_t embed_dim);

  // tokens [B, N] int64, valid [B, N] bool (true = real token) → [B, N, C], zero where !valid.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& valid);

  torch::nn::Sequential proj{nullptr};

 private:
  std::vector<torch::nn::Conv1d> convs_;
  std::vector<torch::nn::GroupNorm> norms_;
};
TORCH_MODULE(TextConvEmbed);

class TaylorShiftEncoderImpl : public torch::nn::Module {
 public:
  // Throws c10::Error unless ValidateEncoderOptions(options) is OK.
  explicit TaylorShiftEncoderImpl(const TaylorShiftEncoderOptions& options);

  void reset();
  // Initialisation for byte-level models (docs/TRAINING.md): the linear token embedding N(0, 1)
  // (a lookup table, so tokens outweigh the sin/cos positions), other Linear weights LibTorch's
  // Kaiming-uniform (bound 1/√fan_in) with biases 0, norms 1/0, cls_token N(0, 0.02²),
  // temperatures 1, GroupNorm 1/0, conv weights Kaiming-uniform. Imported reference weights
  // replace all of it.
  void reset_parameters();

  // tokens: [B, N] integer ids in [0, vocab_size), right-padded, N ≤ max_length.
  // lengths: [B] real token counts (excl. CLS), 0 ≤ lengths ≤ N; undefined = all N.
  // Returns logits [B, num_classes]. kAuto is resolved once for the batch (N + 1 tokens, B
  // sequences) so every layer runs the same path.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& lengths = {},
                        AttentionPath path = AttentionPath::kAuto);
  // forward, asking `stop` (model/api/stop_check.h) before each block: the first non-OK status
  // it returns ends the pass and is returned instead of the logits, so that a batch nobody waits
  // for frees its thread within one block's time. Throws as forward does.
  absl::StatusOr<torch::Tensor> ForwardUnlessStopped(const torch::Tensor& tokens,
                                                     const torch::Tensor& lengths,
                                                     AttentionPath path, const StopCheck& stop);

  // The concrete path kAuto means for a batch of `batch` sequences of `tokens` tokens
  // (including CLS): efficient above crossover_tokens(batch).
  AttentionPath ResolvePath(AttentionPath path, std::int64_t tokens, std::int64_t batch = 1) const;
  // Crossover (tokens incl. CLS) used by kAuto when no table is set; 0 restores the formula
  // N0(d). Saved in checkpoints.
  void set_crossover_tokens(std::int64_t tokens);
  std::int64_t crossover_tokens() const;
  // Crossovers measured at this model's precision by batch size (model/networks/calibration.h);
  // when not empty they replace crossover_tokens(). Not saved in checkpoints.
  void set_crossover_table(CrossoverTable table) { crossover_table_ = std::move(table); }
  const CrossoverTable& crossover_table() const { return crossover_table_; }
  // The crossover kAuto uses for a batch of `batch` sequences.
  std::int64_t crossover_tokens(std::int64_t batch) const;

  // The precision of the blocks' linear layers in eval mode (model/api/precision.h; default fp32).
  // Copies the current weights: call it after loading them. Does not check the hardware
  // (CheckPrecisionSupported does).
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // Every block's TaylorShiftAttentionImpl::set_kernel_implementation.
  void set_kernel_implementation(KernelImplementation implementation);
  // Every block's TaylorShiftAttentionImpl::set_efficient_tiles.
  void set_efficient_tiles(bool on);

  // Number of trainable scalars (parameters only; `pe` is a buffer).
  std::int64_t CountParameters() const;

  // Options with mlp_hidden resolved.
  const TaylorShiftEncoderOptions& options() const { return options_; }

  // The blocks' input, before the positional dropout: tokens [B, N] int64 and valid [B, N] (true
  // = real token) on the model's device → the token embedding plus pe[:, :N] behind the CLS token,
  // [B, N + 1, C]. Shared by forward and PackedForward.
  torch::Tensor Embed(const torch::Tensor& tokens, const torch::Tensor& valid);
  // forward's and PackedForward's inputs checked (tokens [B, N] integer ids in [0, vocab_size),
  // N ≤ max_length; lengths [B] in [0, N], or undefined: every row N long; c10::ValueError or
  // TypeError naming the limit otherwise) and moved to the model's device as int64: {ids, lens}.
  std::pair<torch::Tensor, torch::Tensor> CheckInputs(const torch::Tensor& tokens,
                                                      const torch::Tensor& lengths) const;

  torch::nn::Linear patch_embed{nullptr};   // linear embedding (conv_embed == false)
  TextConvEmbed patch_embed_conv{nullptr};  // conv embedding (conv_embed == true)
  torch::Tensor cls_token;                  // [1, 1, C]
  torch::Tensor pe;                         // [1, max_length, C] buffer
  torch::nn::ModuleList blocks{nullptr};    // TaylorShiftBlock × depth
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  TaylorShiftEncoderOptions options_;
  Precision precision_ = Precision::kFp32;
  CrossoverTable crossover_table_;
  torch::nn::Dropout pos_drop_{nullptr};
  std::vector<TaylorShiftBlock> block_list_;  // the modules of `blocks`, typed
};
TORCH_MODULE(TaylorShiftEncoder);

}  // namespace ts

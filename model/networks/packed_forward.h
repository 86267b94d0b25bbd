// The encoder's inference forward over a batch packed without padding: every sequence's real
// tokens (and its CLS) stand one after another in one [T, C] tensor, so the per-token work — the
// LayerNorms, the MLPs (two thirds of a block's per-token products) and the residual sums — costs
// nothing for padding, and so do the attention's qkv and output projections
// (TaylorShiftAttentionImpl::ForwardPacked): on a GPU the fused CUDA kernels read the packed rows
// in place, every other kernel spreads them to the padded [B, N + 1] layout and back. The
// embedding runs on the padded layout (the conv embedding's windows must not cross sequences).
// Results equal TaylorShiftEncoderImpl::forward's up to the order of floating-point sums.
//
// Inference only (eval mode, no autograd), read-only on the model: several threads may call it.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "model/api/stop_check.h"
#include "model/networks/encoder.h"

namespace ts {

// tokens [B, N] right-padded ids, lengths [B] real token counts (1 ≤ lengths ≤ N), both on the
// model's device; `path` concrete or kAuto (resolved as forward resolves it, for N + 1 tokens
// and B sequences). Returns logits [B, num_classes]. Throws c10::Error on bad shapes.
torch::Tensor PackedForward(TaylorShiftEncoderImpl& model, const torch::Tensor& tokens,
                            const torch::Tensor& lengths, AttentionPath path);
// PackedForward, asking `stop` before each block as TaylorShiftEncoderImpl::ForwardUnlessStopped.
absl::StatusOr<torch::Tensor> PackedForwardUnlessStopped(TaylorShiftEncoderImpl& model,
                                                         const torch::Tensor& tokens,
                                                         const torch::Tensor& lengths,
                                                         AttentionPath path, const StopCheck& stop);

}  // namespace ts

// Attention over a batch packed without padding: every sequence's rows one after another in one
// [T, ...] tensor, so that the work around the attention (the qkv and output projections, the
// normalisations) costs nothing for padding. On a GPU the fused CUDA kernels read the packed rows
// in place (model/kernels/fused_cuda_attention.h); every other kernel runs on the padded layout
// the batch spreads back to, so each path computes here what it computes on a padded batch.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "model/api/attention_path.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

// Sequence b is packed rows starts[b] .. starts[b + 1] - 1, or slots [b·N, b·N + length) of the
// padded [B·N] layout.
struct PackedBatch {
  std::int64_t sequences = 0;  // B
  std::int64_t width = 0;      // N, the padded layout's rows per sequence
  std::int64_t longest = 0;    // the most rows of any sequence (≤ N)
  torch::Tensor starts;        // int32 [B + 1]
  torch::Tensor rows;          // int64 [T]: each packed row's padded slot
  // int64 [B·N]: each padded slot's packed row; a padding slot takes its sequence's first row
  // (finite values, so that the masked keys' zero weights stay zero).
  torch::Tensor spread;
  torch::Tensor key_padding_mask;  // bool [B, N], true = padding; undefined when none is
};

// The batch of sequences of `lengths` rows ([B], integer, 1 ≤ lengths ≤ width) on lengths'
// device. Throws c10::Error on bad lengths.
PackedBatch PackBatch(const torch::Tensor& lengths, std::int64_t width);

// A concrete path on packed q, k, v [T, H, d] (q̂ and k̂ normalised for the Taylor paths, as
// RunAttentionPath takes them). Returns y [T, H, d].
torch::Tensor RunPackedAttentionPath(AttentionPath path, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const PackedBatch& batch, const TaylorKernelOptions& options);

}  // namespace ts

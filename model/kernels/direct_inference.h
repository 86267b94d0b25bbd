// The direct path for inference on the CPU, fused with what the attention module does around it
// (as model/kernels/efficient_inference.h is for the efficient path): each task reads one head's q,
// k and v where the qkv projection left them, scales q and k (the input normalisation) while
// copying them into its own [rows, d + 1] operands, computes one block of scores with two GEMMs
// into buffers it reuses, and writes y where the output projection reads it. TaylorDirect on
// prepared inputs runs some thirty tensor operations per call and ten per block, each a dispatch
// and an allocation: on short inputs those, not the arithmetic, were most of the attention time
// (docs/PERFORMANCE.md, "Fused direct inference").
#pragma once

#include <torch/torch.h>

#include "model/kernels/inference_problem.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

// TaylorDirect(q̂, k̂, v, mask, options) for q, k, v [B, H, N, d] float32 CPU views with unit
// stride in d, on the real tokens only: rows of padded positions are zero. Returns y
// [B, H, N, d] as a view of a contiguous [B, N, H, d] tensor, so y.transpose(1, 2) is the output
// projection's input without a copy. Heads of d ≤ 16 run register tiles
// (model/kernels/direct_tile.h) where the CPU has AVX-512F and options.direct_tiles is on;
// otherwise two GEMMs per block of rows, with at most options.direct_block_elements score entries
// at once across the intra-op threads. Throws c10::Error on bad shapes or when CanRunFusedInference
// is false.
torch::Tensor DirectInference(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                              const TaylorKernelOptions& options, const QueryKeyScaling& scaling);

}  // namespace ts

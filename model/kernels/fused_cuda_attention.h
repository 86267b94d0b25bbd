// The fused CUDA kernels (model/kernels/taylor_kernels_cuda.cu) on tensors: what TaylorDirect and
// TaylorEfficient run on a GPU for inference at bf16 (docs/GPU.md, "What runs on a GPU").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "model/api/attention_path.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

// Why the fused CUDA kernels cannot run this call, or "" when they can: q, k, v float32 on one
// CUDA device in a build with CUDA, bf16_products, no autograd, d ∈ {8, 16, 32, 64}, at most
// 65,535 sequences × heads and 2³¹ − 1 tokens; q, k, v [B, H, N, d] (a padded batch) or, with
// `packed_sequences` B > 0, [T, H, d] (a packed one).
// (model/kernels/attention_dispatch.h decides with it.)
std::string FusedCudaRefusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const KernelChoice& choice, std::int64_t packed_sequences = 0);

// The direct or efficient path (not the references, not softmax) on normalised q̂, k̂: y
// [B, H, N, d] float32, as TaylorDirect / TaylorEfficient compute it. q, k, v at any strides with
// contiguous rows (views of the qkv product are read in place).
torch::Tensor FusedCudaAttention(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options);

// The same on a packed batch: q, k, v [T, H, d] (any strides, contiguous rows), sequence b is
// rows starts[b] .. starts[b + 1] - 1 (`starts` int32 [B + 1] on q's device, each sequence at
// least one row, `longest` the most rows of any). Returns y [T, H, d]; each sequence's rows equal
// what FusedCudaAttention computes for it alone.
torch::Tensor FusedCudaPackedAttention(AttentionPath path, const torch::Tensor& q,
                                       const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& starts, std::int64_t longest,
                                       const TaylorKernelOptions& options);

}  // namespace ts

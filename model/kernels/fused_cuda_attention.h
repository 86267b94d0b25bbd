// The fused CUDA kernels (model/kernels/taylor_kernels_cuda.cu) on tensors: what TaylorDirect and
// TaylorEfficient run on a GPU for inference at bf16 (docs/GPU.md, "What runs on a GPU").
#pragma once

#include <torch/torch.h>

#include <string>

#include "model/api/attention_path.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

// Why the fused CUDA kernels cannot run this call, or "" when they can: q, k, v float32 on one
// CUDA device in a build with CUDA, bf16_products, no autograd, d ∈ {8, 16, 32, 64}, at most
// 65,535 sequences × heads and 2³¹ − 1 tokens.
// (model/kernels/attention_dispatch.h decides with it.)
std::string FusedCudaRefusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const KernelChoice& choice);

// The direct or efficient path (not the references, not softmax) on normalised q̂, k̂: y
// [B, H, N, d] float32, as TaylorDirect / TaylorEfficient compute it.
torch::Tensor FusedCudaAttention(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options);

}  // namespace ts

// The efficient path for inference on the CPU, fused with what the attention module does around
// it: one pass per head reads q, k and v where the qkv projection left them, scales q and k
// (the input normalisation) while building their features, builds v' itself, and writes y where
// the output projection reads it. TaylorEfficient computes the same on prepared inputs; this
// saves the normalisation, the α scaling, v', the [B, H, N, d] copies and the output transpose —
// several passes over B·N·C floats per block, which are most of the attention time outside the
// two feature products (docs/PERFORMANCE.md, "Fused efficient inference").
#pragma once

#include <torch/torch.h>

#include "model/taylor_attention.h"

namespace ts {

// How q and k are scaled before the feature map: q̂ = τ_h·q/‖q‖₂ and k̂ = k/‖k‖₂ with
// `normalize` (‖x‖ clamped to 1e-12 as torch's normalize does; τ = `temperature` [1, H, 1, 1],
// or 1 when undefined), else q̂ = query_factor·q and k̂ = k.
struct QueryKeyScaling {
  bool normalize = true;
  torch::Tensor temperature;
  double query_factor = 1.0;
};

// Whether EfficientInference can run on these inputs: CPU float32, no autograd.
bool CanRunEfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v);

// TaylorEfficient(q̂, k̂, v, mask, options) for q, k, v [B, H, N, d] float32 CPU views with unit
// stride in d (any other strides, e.g. slices of the qkv projection's output). Returns y
// [B, H, N, d] as a view of a contiguous [B, N, H, d] tensor, so y.transpose(1, 2) is the
// output projection's input without a copy. options.bf16_products runs the two feature products
// in bfloat16 with float32 sums (model/bf16_feature_products.h, where HaveAvx512Bf16()).
// Throws c10::Error on bad shapes or when CanRunEfficientInference is false.
torch::Tensor EfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options,
                                 const QueryKeyScaling& scaling);

}  // namespace ts

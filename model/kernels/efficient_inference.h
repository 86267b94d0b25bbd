// The efficient path for inference on the CPU, fused with what the attention module does around
// it: one pass per head reads q, k and v where the qkv projection left them, scales q and k
// (the input normalisation) while building their features, builds v' itself, and writes y where
// the output projection reads it. TaylorEfficient computes the same on prepared inputs; this
// saves the normalisation, the α scaling, v', the [B, H, N, d] copies and the output transpose —
// several passes over B·N·C floats per block, which are most of the attention time outside the
// two feature products (docs/PERFORMANCE.md, "Fused efficient inference").
#pragma once

#include <torch/torch.h>

#include "model/kernels/inference_problem.h"
#include "model/kernels/taylor_attention.h"

namespace ts {

// TaylorEfficient(q̂, k̂, v, mask, options) for q, k, v [B, H, N, d] float32 CPU views with unit
// stride in d (any other strides, e.g. slices of the qkv projection's output). Returns y
// [B, H, N, d] as a view of a contiguous [B, N, H, d] tensor, so y.transpose(1, 2) is the
// output projection's input without a copy. options.bf16_products runs the two feature products
// in bfloat16 with float32 sums (model/kernels/bf16_feature_products.h, where HaveAvx512Bf16());
// otherwise they run in float32, in AVX2 register tiles where the CPU level is AVX2 without
// AVX-512 and options.efficient_tiles is on (model/kernels/feature_products_avx2.h), else as
// GEMMs (model/kernels/cpu_gemm.h).
// Throws c10::Error on bad shapes or when CanRunFusedInference is false.
torch::Tensor EfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options,
                                 const QueryKeyScaling& scaling);

}  // namespace ts

// The encoder's elementwise operations for float32 inference on the CPU with AVX-512, where
// LibTorch 1.13's are slow for the small models' shapes (docs/PERFORMANCE.md, "Small heads"):
// LayerNorm and GELU applied in place to the first MLP layer's fresh output, which LibTorch's
// operators make a sizeable share of a small model's forward pass (bench/model_profile --preset
// demo prints each part's time and share).
#pragma once

#include <torch/torch.h>

namespace ts {

// Whether LayerNormInference and GeluInference_ run on x: a float32 CPU tensor without autograd, on
// a CPU with AVX-512F (model/kernels/cpu_features.h).
bool CanRunInferenceOps(const torch::Tensor& x);

// torch::layer_norm(x, {C}, weight, bias, eps) for x [..., C] (any contiguity) with float32
// weight and bias [C]: mean and variance per row in float32 (two passes, as LibTorch does),
// y = (x − mean)·(var + eps)^-½·weight + bias. Returns a new contiguous tensor. Throws
// c10::Error where CanRunInferenceOps(x) is false or the shapes disagree.
torch::Tensor LayerNormInference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps);

// x ← GELU(x) = x/2·(1 + erf(x/√2)) in place, for a contiguous x: erf as LibTorch's vectorised
// CPU GELU computes it (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7) with exp to
// about 1 ulp. Returns x. Throws c10::Error where CanRunInferenceOps(x) is false or x is
// not contiguous.
torch::Tensor& GeluInference_(torch::Tensor& x);

}  // namespace ts

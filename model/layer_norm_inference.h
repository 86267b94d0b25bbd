// LayerNorm over the last dimension for float32 inference on the CPU with AVX-512: one pass for
// the mean, one for the variance and one for the output per row, rows split across the
// intra-op threads. LibTorch 1.13's CPU layer_norm took 26 µs for 453 rows of 64 on this
// machine, a quarter of the demo model's attention (docs/PERFORMANCE.md, "Small heads").
#pragma once

#include <torch/torch.h>

namespace ts {

// Whether LayerNormInference runs on x: a float32 CPU tensor without autograd, on a CPU with
// AVX-512F (model/cpu_features.h).
bool CanRunLayerNormInference(const torch::Tensor& x);

// torch::layer_norm(x, {C}, weight, bias, eps) for x [..., C] (any contiguity) with float32
// weight and bias [C]: mean and variance per row in float32 (two passes, as LibTorch does),
// y = (x − mean)·(var + eps)^-½·weight + bias. Returns a new contiguous tensor. Throws
// c10::Error where CanRunLayerNormInference(x) is false or the shapes disagree.
torch::Tensor LayerNormInference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps);

}  // namespace ts

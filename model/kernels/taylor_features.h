// The efficient path's feature map, shared by its kernels (model/kernels/taylor_attention.cc and
// the fused inference kernel, model/kernels/efficient_inference.cc). Internal to model/.
//
// φ(x) = [x_i·x_j for i ≤ j (row by row) | x | 1], so that ⟨φ(q), coef ⊙ φ(k)⟩ = a·S² + b·S + c
// with S = q·k: the coefficients are a on the diagonal squares, 2a off it (x_i x_j = x_j x_i), b on
// the linear features and c on the constant one (docs/MODEL.md, "Efficient path").
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ts {

// d(d+1)/2 + d + 1.
inline std::int64_t FeatureCount(std::int64_t d) { return d * (d + 1) / 2 + d + 1; }

// The coefficient of each feature, [F] in `options`' dtype and device.
torch::Tensor FeatureCoefficients(std::int64_t d, double a, double b, double c,
                                  const torch::TensorOptions& options);

}  // namespace ts

// The float64 oracle of the attention tests: TaylorShift of one sequence straight from the formula
// of docs/MODEL.md (no masks, no chunks, no blocks), and the error measure the tests bound.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace ts::testing {

// Plain float64 TaylorShift of one sequence: q, k, v are [H, n, d] (any device and dtype; the
// result is float64 on the CPU), tau is [H].
inline torch::Tensor PlainTaylor(torch::Tensor q, torch::Tensor k, torch::Tensor v,
                                 const torch::Tensor& tau, double a = 0.5, double b = 1.0,
                                 double c = 1.0) {
  q = q.to(torch::kCPU, torch::kFloat64);
  k = k.to(torch::kCPU, torch::kFloat64);
  v = v.to(torch::kCPU, torch::kFloat64);
  const double n = static_cast<double>(q.size(1));
  const double d = static_cast<double>(q.size(2));
  const auto q_hat =
      q / q.norm(2, -1, true) * tau.to(torch::kCPU, torch::kFloat64).view({-1, 1, 1});
  const auto k_hat = k / k.norm(2, -1, true);
  const auto s = torch::matmul(q_hat, k_hat.transpose(1, 2));
  const auto attn = a * s * s + b * s + c;
  const auto p = attn / attn.sum(-1, true);
  return torch::matmul(p, v) * std::sqrt(n / d);
}

// max |actual − expected| / max |expected|, in float64 on the CPU.
inline double RelativeError(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto e = expected.to(torch::kCPU, torch::kFloat64);
  const double scale = e.abs().max().item<double>();
  return (actual.to(torch::kCPU, torch::kFloat64) - e).abs().max().item<double>() /
         std::max(scale, 1e-300);
}

}  // namespace ts::testing

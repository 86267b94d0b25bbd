#include "model/kernels/inference_problem.h"

#include <algorithm>
#include <cmath>

#include "model/kernels/cpu_dispatch.h"

namespace ts {
namespace {

constexpr float kNormEps = 1e-12f;  // torch::nn::functional::normalize's default

void CheckView(const char* kernel, const torch::Tensor& x, const char* name,
               const torch::Tensor& like) {
  TORCH_CHECK(x.dim() == 4 && x.sizes() == like.sizes(), kernel, ": ", name,
              " must be [B, H, N, d] like q, got ", x.sizes());
  TORCH_CHECK(x.stride(3) == 1, kernel, ": ", name, " needs unit stride in d");
}

}  // namespace

bool CanRunFusedInference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const bool grad = torch::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return !grad && q.is_cpu() && q.scalar_type() == torch::kFloat &&
         k.scalar_type() == torch::kFloat && v.scalar_type() == torch::kFloat;
}

InferenceProblem PrepareInference(const char* kernel, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& key_padding_mask,
                                  const QueryKeyScaling& scaling) {
  TORCH_CHECK(CanRunFusedInference(q, k, v), kernel,
              ": needs float32 CPU tensors without autograd");
  CheckView(kernel, q, "q", q);
  CheckView(kernel, k, "k", q);
  CheckView(kernel, v, "v", q);
  InferenceProblem p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.tokens = q.size(2);
  p.d = q.size(3);
  p.q = q.data_ptr<float>();
  p.k = k.data_ptr<float>();
  p.v = v.data_ptr<float>();
  std::copy_n(q.strides().begin(), 3, p.q_strides.begin());
  std::copy_n(k.strides().begin(), 3, p.k_strides.begin());
  std::copy_n(v.strides().begin(), 3, p.v_strides.begin());
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == p.batch &&
                    key_padding_mask.size(1) == p.tokens &&
                    key_padding_mask.scalar_type() == torch::kBool,
                kernel, ": key_padding_mask must be bool [B, N] = [", p.batch, ", ", p.tokens,
                "], got ", key_padding_mask.sizes());
    p.mask = key_padding_mask.to(torch::kCPU).contiguous();
    p.padded = p.mask.data_ptr<bool>();
  }
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t real = p.tokens;
    if (p.padded != nullptr) {
      real = std::count(p.padded + b * p.tokens, p.padded + (b + 1) * p.tokens, false);
    }
    p.counts.push_back(static_cast<float>(std::max<std::int64_t>(real, 1)));
  }
  p.temperature.assign(static_cast<std::size_t>(p.heads), 1.0f);
  if (scaling.temperature.defined()) {
    const auto tau = scaling.temperature.to(torch::kCPU, torch::kFloat).contiguous();
    TORCH_CHECK(tau.numel() == p.heads, kernel, ": temperature must have H = ", p.heads,
                " values, got ", tau.sizes());
    std::copy(tau.data_ptr<float>(), tau.data_ptr<float>() + p.heads, p.temperature.begin());
  }
  p.scaling = scaling;
  p.output = torch::empty({p.batch, p.tokens, p.heads, p.d}, q.options());
  p.y = p.output.data_ptr<float>();
  return p;
}

InferenceHead::InferenceHead(const InferenceProblem& p, std::int64_t b, std::int64_t h)
    : b(b),
      h(h),
      q(p.q + b * p.q_strides[0] + h * p.q_strides[1]),
      k(p.k + b * p.k_strides[0] + h * p.k_strides[1]),
      v(p.v + b * p.v_strides[0] + h * p.v_strides[1]),
      query_factor(p.scaling.normalize ? p.temperature[static_cast<std::size_t>(h)]
                                       : static_cast<float>(p.scaling.query_factor)) {}

// The squares are summed in 16 interleaved partial sums (then pairwise), so that the loop
// vectorises; one serial sum per row would be a chain of d dependent additions. Compiled for
// AVX-512 and AVX2 besides the baseline and picked by ActiveCpuCapability()
// (model/kernels/cpu_dispatch.h).
namespace {

TS_ALWAYS_INLINE void RowScalesLoop(const float* x, std::int64_t stride, std::int64_t rows,
                                    std::int64_t d, bool normalize, float factor, float* scale) {
  constexpr int kParts = 16;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (!normalize) {
      scale[r] = factor;
      continue;
    }
    const float* xr = x + r * stride;
    float parts[kParts] = {};  // NOLINT(modernize-avoid-c-arrays): vector registers
    std::int64_t i = 0;
    for (; i + kParts <= d; i += kParts) {
      for (int l = 0; l < kParts; ++l) parts[l] += xr[i + l] * xr[i + l];
    }
    for (; i < d; ++i) parts[0] += xr[i] * xr[i];
    for (int width = kParts / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) parts[l] += parts[l + width];
    }
    scale[r] = factor / std::max(std::sqrt(parts[0]), kNormEps);
  }
}

TS_CPU_VARIANTS(RowScalesDispatch, RowScalesLoop,
                (const float* x, std::int64_t stride, std::int64_t rows, std::int64_t d,
                 bool normalize, float factor, float* scale),
                (x, stride, rows, d, normalize, factor, scale))

}  // namespace

void RowScales(const float* x, std::int64_t stride, std::int64_t rows, std::int64_t d,
               bool normalize, float factor, float* scale) {
  RowScalesDispatch(x, stride, rows, d, normalize, factor, scale);
}

}  // namespace ts

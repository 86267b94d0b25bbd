#include "model/layer_norm_inference.h"

#include <cmath>
#include <cstdint>

#include "model/cpu_features.h"
#include "model/parallel.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 reductions start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports where they are inlined (GCC bug 105593); the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace ts {
namespace {

#if defined(__x86_64__)

constexpr std::int64_t kLanes = 16;

__attribute__((target("avx512f"))) void NormalizeRows(const float* x, std::int64_t rows,
                                                      std::int64_t c, const float* weight,
                                                      const float* bias, float eps, float* y) {
  const std::int64_t full = c / kLanes * kLanes;
  const auto tail = static_cast<__mmask16>((1u << static_cast<unsigned>(c - full)) - 1u);
  const float inverse_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    __m512 sum = _mm512_maskz_loadu_ps(tail, xr + full);
    for (std::int64_t i = 0; i < full; i += kLanes)
      sum = _mm512_add_ps(sum, _mm512_loadu_ps(xr + i));
    const __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(sum) * inverse_c);
    const __m512 last = _mm512_maskz_sub_ps(tail, _mm512_maskz_loadu_ps(tail, xr + full), mean);
    __m512 squares = _mm512_mul_ps(last, last);
    for (std::int64_t i = 0; i < full; i += kLanes) {
      const __m512 centered = _mm512_sub_ps(_mm512_loadu_ps(xr + i), mean);
      squares = _mm512_fmadd_ps(centered, centered, squares);
    }
    const float variance = _mm512_reduce_add_ps(squares) * inverse_c;
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(variance + eps));
    for (std::int64_t i = 0; i < full; i += kLanes) {
      const __m512 normed = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + i), mean), scale);
      _mm512_storeu_ps(
          yr + i, _mm512_fmadd_ps(normed, _mm512_loadu_ps(weight + i), _mm512_loadu_ps(bias + i)));
    }
    if (tail != 0) {
      const __m512 normed = _mm512_mul_ps(last, scale);
      _mm512_mask_storeu_ps(yr + full, tail,
                            _mm512_fmadd_ps(normed, _mm512_maskz_loadu_ps(tail, weight + full),
                                            _mm512_maskz_loadu_ps(tail, bias + full)));
    }
  }
}

#else

void NormalizeRows(const float*, std::int64_t, std::int64_t, const float*, const float*, float,
                   float*) {
  TORCH_CHECK(false, "LayerNormInference needs an x86-64 CPU with AVX-512F");
}

#endif

}  // namespace

bool CanRunLayerNormInference(const torch::Tensor& x) {
  const bool grad = torch::GradMode::is_enabled() && x.requires_grad();
  return !grad && x.is_cpu() && x.scalar_type() == torch::kFloat && HaveAvx512F();
}

torch::Tensor LayerNormInference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps) {
  TORCH_CHECK(CanRunLayerNormInference(x),
              "LayerNormInference: needs a float32 CPU tensor without autograd and AVX-512F");
  TORCH_CHECK(x.dim() >= 1, "LayerNormInference: x needs a last dimension");
  const std::int64_t c = x.size(-1);
  TORCH_CHECK(weight.numel() == c && bias.numel() == c && weight.scalar_type() == torch::kFloat &&
                  bias.scalar_type() == torch::kFloat,
              "LayerNormInference: weight and bias must be float32 [", c, "], got ", weight.sizes(),
              " and ", bias.sizes());
  const auto input = x.contiguous();
  const auto w = weight.contiguous();
  const auto b = bias.contiguous();
  auto out = torch::empty_like(input);
  const std::int64_t rows = c == 0 ? 0 : input.numel() / c;
  const float* in = input.data_ptr<float>();
  float* y = out.data_ptr<float>();
  const auto e = static_cast<float>(eps);
  // About 8 floating-point operations per element: small inputs stay on this thread.
  ParallelFor(0, rows, 1, rows * c * 8, [&](std::int64_t begin, std::int64_t end) {
    NormalizeRows(in + begin * c, end - begin, c, w.data_ptr<float>(), b.data_ptr<float>(), e,
                  y + begin * c);
  });
  return out;
}

}  // namespace ts

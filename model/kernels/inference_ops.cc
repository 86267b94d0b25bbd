#include "model/kernels/inference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/kernels/cpu_features.h"
#include "model/kernels/parallel.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics (reductions, max, roundscale, scalef) start from
// _mm512_undefined_ps(), which -W(maybe-)uninitialized reports where they are inlined (GCC bug
// 105593); the value is never read. (Clang has no -Wmaybe-uninitialized; the fuzz build uses it.)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// e^x to about 1 ulp for x ≤ 88: x = n·ln 2 + r with |r| ≤ ln2/2 (ln 2 in two parts), e^r by
// its Taylor series to r⁷ (error below 1e-8), times 2ⁿ by scalef (which also gives 0 far below
// the float range). x is clamped at −104 (e^−104 is below the smallest float); NaN stays NaN.
__attribute__((target("avx512f"))) __m512 Exp(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  constexpr float kInverseFactorials[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                          1.0f / 6,    0.5f,       1.0f,       1.0f};
  __m512 p = _mm512_set1_ps(kInverseFactorials[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kInverseFactorials[i]));
  return _mm512_scalef_ps(p, n);
}

// GELU of 16 floats: erf(z) = sign(z)·(1 − (a1·t + … + a5·t⁵)·e^(−z²)), t = 1/(1 + p·|z|).
__attribute__((target("avx512f"))) __m512 Gelu(__m512 x) {
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f));
  const __m512 magnitude = _mm512_abs_ps(z);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), magnitude, one));
  __m512 poly = _mm512_set1_ps(1.061405429f);
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  poly = _mm512_mul_ps(poly, t);
  const __m512 tail =
      _mm512_mul_ps(poly, Exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z))));
  const __m512 erf_magnitude = _mm512_sub_ps(one, tail);
  // erf takes z's sign: (1 + erf(z)) is 2 − tail for z ≥ 0 and tail for z < 0.
  const __mmask16 negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 one_plus_erf =
      _mm512_mask_blend_ps(negative, _mm512_add_ps(one, erf_magnitude), tail);
  return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), one_plus_erf);
}

__attribute__((target("avx512f"))) void GeluRange(float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(x + i, Gelu(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << static_cast<unsigned>(n - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, tail, Gelu(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

#else

void GeluRange(float*, std::int64_t) {
  TORCH_CHECK(false, "GeluInference_ needs an x86-64 CPU with AVX-512F");
}

void NormalizeRows(const float*, std::int64_t, std::int64_t, const float*, const float*, float,
                   float*) {
  TORCH_CHECK(false, "LayerNormInference needs an x86-64 CPU with AVX-512F");
}

#endif

}  // namespace

bool CanRunInferenceOps(const torch::Tensor& x) {
  const bool grad = torch::GradMode::is_enabled() && x.requires_grad();
  return !grad && x.is_cpu() && x.scalar_type() == torch::kFloat && HaveAvx512F();
}

torch::Tensor LayerNormInference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps) {
  TORCH_CHECK(CanRunInferenceOps(x),
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

torch::Tensor& GeluInference_(torch::Tensor& x) {
  TORCH_CHECK(CanRunInferenceOps(x) && x.is_contiguous(),
              "GeluInference_: needs a contiguous float32 CPU tensor without autograd and "
              "AVX-512F");
  float* data = x.data_ptr<float>();
  constexpr std::int64_t kGrain = 4096;  // floats per task
  const std::int64_t n = x.numel();
  // About 30 operations per element: small tensors stay on this thread.
  ParallelFor(0, (n + kGrain - 1) / kGrain, 1, n * 30, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t first = begin * kGrain;
    GeluRange(data + first, std::min(n, end * kGrain) - first);
  });
  return x;
}

}  // namespace ts

#include "model/efficient_inference.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "model/bf16_feature_products.h"
#include "model/cpu_gemm.h"
#include "model/parallel.h"
#include "model/taylor_features.h"

namespace ts {
namespace {

constexpr float kNormEps = 1e-12f;  // torch::nn::functional::normalize's default

// φ(scale_r · x_r) for `rows` rows of x (row stride `stride`, unit column stride) into out
// [rows, F] (model/taylor_features.h). `scaled` holds d floats of scratch. Compiled for AVX-512
// and AVX2 besides the baseline and picked at load time: the build targets generic x86-64, and
// these loops are most of the float32 kernel outside its two GEMMs.
__attribute__((target_clones("avx512f", "avx2", "default"))) void FeatureRows(
    const float* __restrict x, std::int64_t stride, const float* __restrict scale,
    std::int64_t rows, std::int64_t d, float* __restrict scaled, float* __restrict out) {
  const std::int64_t width = FeatureCount(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * stride;
    const float s = scale[r];
    for (std::int64_t i = 0; i < d; ++i) scaled[i] = s * xr[i];
    float* __restrict o = out + r * width;
    for (std::int64_t i = 0; i < d; ++i) {
      const float xi = scaled[i];
      for (std::int64_t j = i; j < d; ++j) o[j - i] = xi * scaled[j];
      o += d - i;
    }
    for (std::int64_t i = 0; i < d; ++i) o[i] = scaled[i];
    o[d] = 1.0f;
  }
}

// scale_r for `rows` rows of x: factor / max(‖x_r‖, ε) when normalising, else factor. The
// squares are summed in 16 interleaved partial sums (then pairwise), so that the loop
// vectorises; one serial sum per row would be a chain of d dependent additions.
__attribute__((target_clones("avx512f", "avx2", "default"))) void RowScales(
    const float* x, std::int64_t stride, std::int64_t rows, std::int64_t d, bool normalize,
    float factor, float* scale) {
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

// One thread's buffers for one chunk of rows; the features, nominators and KV only for the
// float32 kernel (the bf16 one keeps its own in Bf16FeatureProducts).
struct Buffers {
  Buffers(std::int64_t rows, std::int64_t d, bool float_products) {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
    vals = torch::empty({rows, d + 1}, f32);
    if (float_products) {
      feat = torch::empty({rows, FeatureCount(d)}, f32);
      nom = torch::empty({rows, d + 1}, f32);
      kv = torch::empty({FeatureCount(d), d + 1}, f32);
    }
    scale.resize(static_cast<size_t>(rows));
    scaled.resize(static_cast<size_t>(d));
  }
  torch::Tensor feat, vals, nom, kv;
  std::vector<float> scale, scaled;
};

// What every head shares.
struct Problem {
  std::int64_t batch, heads, tokens, d, chunk;
  const float* q;
  const float* k;
  const float* v;
  std::int64_t q_strides[3], k_strides[3], v_strides[3];  // batch, head, token
  const bool* padded;                                     // [B, N] or null
  std::vector<float> counts;                              // real tokens per sequence (≥ 1)
  std::vector<float> temperature;                         // [H], 1 when not given
  std::vector<float> coefficients;                        // [F]
  QueryKeyScaling scaling;
  bool output_normalize, bf16;
  float* y;  // [B, N, H, d]
};

// v'_j = [c₀ | v_j] / count for real keys and 0 for padded ones, c₀ = √(d/count) with output
// normalisation, else 1 (Algorithm 1 of the paper, as ScaledValues in taylor_attention.cc).
void FillValues(const Problem& p, std::int64_t b, const float* v, std::int64_t start,
                std::int64_t n, float* out) {
  const float count = p.counts[static_cast<size_t>(b)];
  const float first = p.output_normalize ? std::sqrt(static_cast<float>(p.d) / count) : 1.0f;
  const std::int64_t width = p.d + 1;
  for (std::int64_t r = 0; r < n; ++r) {
    float* o = out + r * width;
    const bool padded = p.padded != nullptr && p.padded[b * p.tokens + start + r];
    if (padded) {
      std::fill(o, o + width, 0.0f);
      continue;
    }
    const float* vr = v + (start + r) * p.v_strides[2];
    o[0] = first / count;
    for (std::int64_t i = 0; i < p.d; ++i) o[i + 1] = vr[i] / count;
  }
}

// Where head (b, h)'s rows start, and the factor its queries are scaled by.
struct Head {
  Head(const Problem& p, std::int64_t b, std::int64_t h)
      : b(b),
        h(h),
        q(p.q + b * p.q_strides[0] + h * p.q_strides[1]),
        k(p.k + b * p.k_strides[0] + h * p.k_strides[1]),
        v(p.v + b * p.v_strides[0] + h * p.v_strides[1]),
        query_factor(p.scaling.normalize ? p.temperature[static_cast<size_t>(h)]
                                         : static_cast<float>(p.scaling.query_factor)) {}
  std::int64_t b, h;
  const float *q, *k, *v;
  float query_factor;
};

// The float32 kernel. KV = coef ⊙ Σ_j ψ(k̂_j) v'_jᵀ chunk by chunk in buf.kv, then
// y_i = nom_i[1:] / nom_i[0] with nom_i = φ(q̂_i)·KV, written to y[b, i, h, :].
void HeadFloat(const Problem& p, Buffers& buf, const Head& head) {
  const std::int64_t width = p.d + 1;
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.k + start * p.k_strides[2];
    RowScales(rows, p.k_strides[2], n, p.d, p.scaling.normalize, 1.0f, buf.scale.data());
    FeatureRows(rows, p.k_strides[2], buf.scale.data(), n, p.d, buf.scaled.data(),
                buf.feat.data_ptr<float>());
    FillValues(p, head.b, head.v, start, n, buf.vals.data_ptr<float>());
    MatmulInto(buf.kv, buf.feat.narrow(0, 0, n).t(), buf.vals.narrow(0, 0, n),
               start == 0 ? 0.0 : 1.0);
  }
  float* kv = buf.kv.data_ptr<float>();
  for (std::int64_t f = 0; f < FeatureCount(p.d); ++f) {
    const float c = p.coefficients[static_cast<size_t>(f)];
    for (std::int64_t i = 0; i < width; ++i) kv[f * width + i] *= c;
  }
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.q + start * p.q_strides[2];
    RowScales(rows, p.q_strides[2], n, p.d, p.scaling.normalize, head.query_factor,
              buf.scale.data());
    FeatureRows(rows, p.q_strides[2], buf.scale.data(), n, p.d, buf.scaled.data(),
                buf.feat.data_ptr<float>());
    auto nom = buf.nom.narrow(0, 0, n);
    MatmulInto(nom, buf.feat.narrow(0, 0, n), buf.kv);
    const float* nr = nom.data_ptr<float>();
    for (std::int64_t r = 0; r < n; ++r) {
      float* out = p.y + ((head.b * p.tokens + start + r) * p.heads + head.h) * p.d;
      const float den = nr[r * width];
      for (std::int64_t i = 0; i < p.d; ++i) out[i] = nr[r * width + 1 + i] / den;
    }
  }
}

// The bfloat16 kernel: the same steps with the two products in Bf16FeatureProducts.
void HeadBf16(const Problem& p, Buffers& buf, Bf16FeatureProducts& products, const Head& head) {
  products.ClearSums();
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.k + start * p.k_strides[2];
    RowScales(rows, p.k_strides[2], n, p.d, p.scaling.normalize, 1.0f, buf.scale.data());
    FillValues(p, head.b, head.v, start, n, buf.vals.data_ptr<float>());
    products.AddKeys(rows, p.k_strides[2], buf.scale.data(), buf.vals.data_ptr<float>(), n);
  }
  products.FinishSums(p.coefficients.data());
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.q + start * p.q_strides[2];
    RowScales(rows, p.q_strides[2], n, p.d, p.scaling.normalize, head.query_factor,
              buf.scale.data());
    products.Queries(rows, p.q_strides[2], buf.scale.data(), n,
                     p.y + ((head.b * p.tokens + start) * p.heads + head.h) * p.d, p.heads * p.d);
  }
}

void CheckView(const torch::Tensor& x, const char* name, const torch::Tensor& like) {
  TORCH_CHECK(x.dim() == 4 && x.sizes() == like.sizes(), "EfficientInference: ", name,
              " must be [B, H, N, d] like q, got ", x.sizes());
  TORCH_CHECK(x.stride(3) == 1, "EfficientInference: ", name, " needs unit stride in d");
}

}  // namespace

bool CanRunEfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  const bool grad = torch::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return !grad && q.is_cpu() && q.scalar_type() == torch::kFloat &&
         k.scalar_type() == torch::kFloat && v.scalar_type() == torch::kFloat;
}

torch::Tensor EfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options,
                                 const QueryKeyScaling& scaling) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  TORCH_CHECK(options.efficient_chunk_tokens > 0, "efficient_chunk_tokens must be positive");
  TORCH_CHECK(CanRunEfficientInference(q, k, v),
              "EfficientInference: needs float32 CPU tensors without autograd");
  CheckView(q, "q", q);
  CheckView(k, "k", q);
  CheckView(v, "v", q);
  Problem p{};
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.tokens = q.size(2);
  p.d = q.size(3);
  p.chunk = std::min(options.efficient_chunk_tokens, std::max<std::int64_t>(p.tokens, 1));
  p.q = q.data_ptr<float>();
  p.k = k.data_ptr<float>();
  p.v = v.data_ptr<float>();
  for (int i = 0; i < 3; ++i) {
    p.q_strides[i] = q.stride(i);
    p.k_strides[i] = k.stride(i);
    p.v_strides[i] = v.stride(i);
  }
  torch::Tensor mask;
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == p.batch &&
                    key_padding_mask.size(1) == p.tokens &&
                    key_padding_mask.scalar_type() == torch::kBool,
                "EfficientInference: key_padding_mask must be bool [B, N] = [", p.batch, ", ",
                p.tokens, "], got ", key_padding_mask.sizes());
    mask = key_padding_mask.to(torch::kCPU).contiguous();
    p.padded = mask.data_ptr<bool>();
  }
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t real = p.tokens;
    if (p.padded != nullptr) {
      real = std::count(p.padded + b * p.tokens, p.padded + (b + 1) * p.tokens, false);
    }
    p.counts.push_back(static_cast<float>(std::max<std::int64_t>(real, 1)));
  }
  p.temperature.assign(static_cast<size_t>(p.heads), 1.0f);
  if (scaling.temperature.defined()) {
    const auto tau = scaling.temperature.to(torch::kCPU, torch::kFloat).contiguous();
    TORCH_CHECK(tau.numel() == p.heads, "EfficientInference: temperature must have H = ", p.heads,
                " values, got ", tau.sizes());
    std::copy(tau.data_ptr<float>(), tau.data_ptr<float>() + p.heads, p.temperature.begin());
  }
  // The α = d^¼ scaling of Algorithm 1 multiplies every term of the polynomial by α⁴, which
  // cancels in the ratio: the raw a, b, c serve.
  const auto coefficients =
      FeatureCoefficients(p.d, options.a, options.b, options.c, torch::kFloat).contiguous();
  p.coefficients.assign(coefficients.data_ptr<float>(),
                        coefficients.data_ptr<float>() + coefficients.numel());
  p.scaling = scaling;
  p.output_normalize = options.output_normalize;
  p.bf16 = options.bf16_products && HaveAvx512Bf16();
  auto y = torch::empty({p.batch, p.tokens, p.heads, p.d}, q.options());
  p.y = y.data_ptr<float>();
  if (p.tokens > 0) {
    const std::int64_t work = p.batch * p.heads * p.tokens * FeatureCount(p.d) * (p.d + 1);
    ParallelFor(0, p.batch * p.heads, 1, work, [&](std::int64_t begin, std::int64_t end) {
      Buffers buf(p.chunk, p.d, !p.bf16);
      std::optional<Bf16FeatureProducts> products;
      if (p.bf16) products.emplace(p.chunk, p.d);
      for (std::int64_t index = begin; index < end; ++index) {
        const Head head(p, index / p.heads, index % p.heads);
        if (products) {
          HeadBf16(p, buf, *products, head);
        } else {
          HeadFloat(p, buf, head);
        }
      }
    });
  }
  return y.transpose(1, 2);
}

}  // namespace ts

#include "model/kernels/efficient_inference.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/kernels/bf16_feature_products.h"
#include "model/kernels/cpu_dispatch.h"
#include "model/kernels/cpu_gemm.h"
#include "model/kernels/feature_products_avx2.h"
#include "model/kernels/parallel.h"
#include "model/kernels/taylor_features.h"

namespace ts {
namespace {

// φ(scale_r · x_r) for `rows` rows of x (row stride `stride`, unit column stride) into out
// [rows, F] (model/kernels/taylor_features.h). `scaled` holds d floats of scratch. Inlined into one
// function per instruction set (model/kernels/cpu_dispatch.h) and picked by ActiveCpuCapability():
// the build targets generic x86-64, and these loops are most of the float32 kernel outside its two
// GEMMs.
TS_ALWAYS_INLINE void FeatureRowsLoop(const float* __restrict x, std::int64_t stride,
                                      const float* __restrict scale, std::int64_t rows,
                                      std::int64_t d, float* __restrict scaled,
                                      float* __restrict out) {
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

TS_CPU_VARIANTS(FeatureRows, FeatureRowsLoop,
                (const float* x, std::int64_t stride, const float* scale, std::int64_t rows,
                 std::int64_t d, float* scaled, float* out),
                (x, stride, scale, rows, d, scaled, out))

// One thread's buffers for one chunk of rows; the features, nominators and KV only for the
// GEMM kernel (the register-tile ones keep theirs in Bf16FeatureProducts or Avx2FeatureProducts).
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

// What every head shares: the inputs, and the efficient path's own constants.
struct Problem : InferenceProblem {
  explicit Problem(InferenceProblem base) : InferenceProblem(std::move(base)) {}
  std::int64_t chunk = 0;
  std::vector<float> coefficients;  // [F]
  bool output_normalize = true;
  // Which kernel runs the two feature products: GEMMs (cpu_gemm.h), or our own register tiles.
  enum class Products { kGemm, kBf16, kAvx2 } products = Products::kGemm;
};

// c₀ = √(d/count) with output normalisation, else 1 (Algorithm 1 of the paper).
float FirstValueColumn(const Problem& p, std::int64_t b) {
  const float count = p.counts[static_cast<size_t>(b)];
  return p.output_normalize ? std::sqrt(static_cast<float>(p.d) / count) : 1.0f;
}

// v'_j = [c₀ | v_j] / count for real keys and 0 for padded ones (as ScaledValues in
// taylor_attention.cc).
void FillValues(const Problem& p, std::int64_t b, const float* v, std::int64_t start,
                std::int64_t n, float* out) {
  const float count = p.counts[static_cast<size_t>(b)];
  const float first = FirstValueColumn(p, b);
  const std::int64_t width = p.d + 1;
  for (std::int64_t r = 0; r < n; ++r) {
    float* o = out + r * width;
    if (p.Padded(b, start + r)) {
      std::fill(o, o + width, 0.0f);
      continue;
    }
    const float* vr = v + (start + r) * p.v_strides[2];
    o[0] = first / count;
    for (std::int64_t i = 0; i < p.d; ++i) o[i + 1] = vr[i] / count;
  }
}

// The float32 kernel through GEMMs. KV = coef ⊙ Σ_j ψ(k̂_j) v'_jᵀ chunk by chunk in buf.kv, then
// y_i = nom_i[1:] / nom_i[0] with nom_i = φ(q̂_i)·KV, written to y[b, i, h, :].
void HeadFloat(const Problem& p, Buffers& buf, const InferenceHead& head) {
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
      float* out = p.OutputRow(head.b, start + r, head.h);
      const float den = nr[r * width];
      for (std::int64_t i = 0; i < p.d; ++i) out[i] = nr[r * width + 1 + i] / den;
    }
  }
}

// The same steps with the two products in register tiles: Bf16FeatureProducts (bfloat16) or
// Avx2FeatureProducts (float32). The float32 tiles read v straight from its rows and divide
// by the count once, in KV, instead of in every v'.
template <typename Products>
void HeadTiles(const Problem& p, Buffers& buf, Products& products, const InferenceHead& head) {
  constexpr bool kRawValues = std::is_same_v<Products, Avx2FeatureProducts>;
  products.ClearSums();
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.k + start * p.k_strides[2];
    RowScales(rows, p.k_strides[2], n, p.d, p.scaling.normalize, 1.0f, buf.scale.data());
    if constexpr (kRawValues) {
      products.AddKeys(rows, p.k_strides[2], buf.scale.data(), head.v + start * p.v_strides[2],
                       p.v_strides[2], FirstValueColumn(p, head.b),
                       p.padded == nullptr ? nullptr : p.padded + head.b * p.tokens + start, n);
    } else {
      FillValues(p, head.b, head.v, start, n, buf.vals.data_ptr<float>());
      products.AddKeys(rows, p.k_strides[2], buf.scale.data(), buf.vals.data_ptr<float>(), n);
    }
  }
  if constexpr (kRawValues) {
    products.FinishSums(p.coefficients.data(), p.counts[static_cast<size_t>(head.b)]);
  } else {
    products.FinishSums(p.coefficients.data());
  }
  for (std::int64_t start = 0; start < p.tokens; start += p.chunk) {
    const std::int64_t n = std::min(p.chunk, p.tokens - start);
    const float* rows = head.q + start * p.q_strides[2];
    RowScales(rows, p.q_strides[2], n, p.d, p.scaling.normalize, head.query_factor,
              buf.scale.data());
    products.Queries(rows, p.q_strides[2], buf.scale.data(), n, p.OutputRow(head.b, start, head.h),
                     p.heads * p.d);
  }
}

}  // namespace

torch::Tensor EfficientInference(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options,
                                 const QueryKeyScaling& scaling) {
  CheckTaylorCoefficients(options.a, options.b, options.c);
  TORCH_CHECK(options.efficient_chunk_tokens > 0, "efficient_chunk_tokens must be positive");
  Problem p(PrepareInference("EfficientInference", q, k, v, key_padding_mask, scaling));
  p.chunk = std::min(options.efficient_chunk_tokens, std::max<std::int64_t>(p.tokens, 1));
  // The α = d^¼ scaling of Algorithm 1 multiplies every term of the polynomial by α⁴, which
  // cancels in the ratio: the raw a, b, c serve.
  const auto coefficients =
      FeatureCoefficients(p.d, options.a, options.b, options.c, torch::kFloat).contiguous();
  p.coefficients.assign(coefficients.data_ptr<float>(),
                        coefficients.data_ptr<float>() + coefficients.numel());
  p.output_normalize = options.output_normalize;
  if (options.bf16_products && HaveAvx512Bf16()) {
    p.products = Problem::Products::kBf16;
  } else if (options.efficient_tiles && UseAvx2FeatureProducts()) {
    p.products = Problem::Products::kAvx2;
  }
  if (p.tokens > 0) {
    const std::int64_t work = p.batch * p.heads * p.tokens * FeatureCount(p.d) * (p.d + 1);
    ParallelFor(0, p.batch * p.heads, 1, work, [&](std::int64_t begin, std::int64_t end) {
      Buffers buf(p.chunk, p.d, p.products == Problem::Products::kGemm);
      std::optional<Bf16FeatureProducts> bf16;
      std::optional<Avx2FeatureProducts> avx2;
      if (p.products == Problem::Products::kBf16) bf16.emplace(p.chunk, p.d);
      if (p.products == Problem::Products::kAvx2) avx2.emplace(p.chunk, p.d);
      for (std::int64_t index = begin; index < end; ++index) {
        const InferenceHead head(p, index / p.heads, index % p.heads);
        if (bf16) {
          HeadTiles(p, buf, *bf16, head);
        } else if (avx2) {
          HeadTiles(p, buf, *avx2, head);
        } else {
          HeadFloat(p, buf, head);
        }
      }
    });
  }
  return p.output.transpose(1, 2);
}

}  // namespace ts

// The fused inference kernels (model/kernels/efficient_inference.h,
// model/kernels/direct_inference.h) against a plain float64 evaluation of the formula of
// docs/MODEL.md, on strided slices of a qkv tensor as the attention module passes them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/kernels/bf16_feature_products.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/cpu_gemm.h"
#include "model/kernels/direct_inference.h"
#include "model/kernels/direct_tile.h"
#include "model/kernels/efficient_inference.h"
#include "model/kernels/feature_products_avx2.h"
#include "model/kernels/inference_ops.h"
#include "model/networks/attention.h"

namespace ts {
namespace {

using torch::indexing::None;
using torch::indexing::Slice;

// Plain float64 TaylorShift of one sequence: q̂, k̂, v are [H, n, d] (already scaled).
torch::Tensor PlainTaylor(const torch::Tensor& q_hat, const torch::Tensor& k_hat,
                          const torch::Tensor& v, bool output_normalize, double a = 0.5,
                          double b = 1.0, double c = 1.0) {
  const auto s =
      torch::matmul(q_hat.to(torch::kFloat64), k_hat.to(torch::kFloat64).transpose(1, 2));
  const auto attn = a * s * s + b * s + c;
  const auto y = torch::matmul(attn / attn.sum(-1, true), v.to(torch::kFloat64));
  const double n = static_cast<double>(q_hat.size(1)), d = static_cast<double>(q_hat.size(2));
  return output_normalize ? y * std::sqrt(n / d) : y;
}

double RelativeError(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto e = expected.to(torch::kFloat64);
  const double scale = e.abs().max().item<double>();
  return (actual.to(torch::kFloat64) - e).abs().max().item<double>() / std::max(scale, 1e-300);
}

// q̂ or k̂ in float64 as QueryKeyScaling makes them: unit rows (τ_h for queries) when
// normalising, else queries times 0.3 (the tests' query_factor) and keys as they are.
torch::Tensor ScaledFloat64(const torch::Tensor& x, bool query, bool normalize,
                            const torch::Tensor& tau) {
  const auto x64 = x.to(torch::kFloat64);
  if (!normalize) return query ? x64 * 0.3 : x64;
  const auto unit = x64 / x64.norm(2, -1, true);
  return query ? unit * tau.to(torch::kFloat64)[0] : unit;
}

// q, k, v as the module sees them: [B, H, N, d] slices of one [B, N, 3, H, d] tensor.
struct Qkv {
  torch::Tensor q, k, v;
};
Qkv Slices(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t d) {
  const auto qkv = torch::randn({batch, tokens, 3 * heads * d})
                       .reshape({batch, tokens, 3, heads, d})
                       .permute({2, 0, 3, 1, 4});
  return {qkv[0], qkv[1], qkv[2]};
}

// Two sequences of `tokens` as the module passes them, the second padded after `real`, and the
// scaling the kernels get: τ in [0.5, 2.5) per head, query_factor 0.3 when not normalising.
struct PaddedInputs {
  Qkv qkv;
  torch::Tensor mask, tau;
  QueryKeyScaling scaling;
};
PaddedInputs MakePaddedInputs(std::int64_t tokens, std::int64_t real, std::int64_t heads,
                              std::int64_t d, bool normalize) {
  PaddedInputs in{Slices(2, tokens, heads, d),
                  torch::zeros({2, tokens}, torch::kBool),
                  torch::rand({1, heads, 1, 1}) * 2 + 0.5,
                  {}};
  in.mask.index_put_({1, Slice(real, None)}, true);
  in.scaling.normalize = normalize;
  in.scaling.temperature = in.tau;
  in.scaling.query_factor = 0.3;
  return in;
}

// Each sequence's real rows of y against the float64 formula on its own tokens.
void ExpectSequencesMatchFloat64(const torch::Tensor& y, const PaddedInputs& in, std::int64_t real,
                                 const TaylorKernelOptions& options, double tolerance) {
  ASSERT_EQ(y.sizes(), in.qkv.q.sizes());
  EXPECT_TRUE(y.transpose(1, 2).is_contiguous());
  const bool normalize = in.scaling.normalize;
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t n = b == 0 ? y.size(2) : real;
    const auto rows = [&](const torch::Tensor& x) { return x[b].narrow(1, 0, n); };
    const auto expected =
        PlainTaylor(ScaledFloat64(rows(in.qkv.q), true, normalize, in.tau),
                    ScaledFloat64(rows(in.qkv.k), false, normalize, in.tau), rows(in.qkv.v),
                    options.output_normalize, options.a, options.b, options.c);
    EXPECT_LE(RelativeError(rows(y), expected), tolerance) << "sequence " << b;
  }
}

struct Case {
  bool normalize, output_normalize, bf16;
};

class EfficientInferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EfficientInferenceTest, MatchesFloat64FormulaOnStridedSlicesWithPadding) {
  const Case param = GetParam();
  if (param.bf16 && !HaveAvx512Bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  torch::manual_seed(7);
  const std::int64_t tokens = 1100, real = 700;
  const auto in = MakePaddedInputs(tokens, real, 3, 16, param.normalize);
  const auto& [q, k, v] = in.qkv;
  ASSERT_FALSE(q.is_contiguous());
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 256;  // five chunks, the last one partial
  options.output_normalize = param.output_normalize;
  options.bf16_products = param.bf16;
  torch::NoGradGuard no_grad;
  const auto y = EfficientInference(q, k, v, in.mask, options, in.scaling);
  ExpectSequencesMatchFloat64(y, in, real, options, param.bf16 ? 2e-2 : 1e-4);
  if (param.bf16) {
    // The bf16 kernel really ran: it differs from the float32 one.
    options.bf16_products = false;
    const auto fp32 = EfficientInference(q, k, v, in.mask, options, in.scaling);
    EXPECT_GT(RelativeError(y, fp32), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Scalings, EfficientInferenceTest,
                         ::testing::Values(Case{true, true, false}, Case{true, false, false},
                                           Case{false, true, false}, Case{true, true, true}));

// The bf16 kernel's edges: an odd chunk (a key row without a partner), a row tile of 32 only
// partly used, features padded to a multiple of 32 (d = 7: F = 36) and an output width (d + 1 = 8)
// that fills one partial column group.
TEST(EfficientInferenceBf16Test, OddChunksAndSmallHeadsStayWithinBf16Error) {
  if (!HaveAvx512Bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  torch::manual_seed(13);
  for (const std::int64_t d : {7, 32}) {
    const std::int64_t batch = 2, heads = 2, tokens = 37, real = 21;
    const auto [q, k, v] = Slices(batch, tokens, heads, d);
    auto mask = torch::zeros({batch, tokens}, torch::kBool);
    mask.index_put_({1, Slice(real, None)}, true);
    QueryKeyScaling scaling;  // normalised, τ = 1
    TaylorKernelOptions options;
    options.efficient_chunk_tokens = 16;  // chunks of 16, 16 and 5 rows
    options.bf16_products = true;
    torch::NoGradGuard no_grad;
    const auto y = EfficientInference(q, k, v, mask, options, scaling);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = b == 0 ? tokens : real;
      const auto unit = [&](const torch::Tensor& x) {
        const auto x64 = x.to(torch::kFloat64).narrow(1, 0, n);
        return x64 / x64.norm(2, -1, true);
      };
      const auto expected = PlainTaylor(unit(q[b]), unit(k[b]), v[b].narrow(1, 0, n), true);
      EXPECT_LE(RelativeError(y[b].narrow(1, 0, n), expected), 2e-2) << "d " << d << " seq " << b;
    }
  }
}

class FusedInferenceModuleTest : public ::testing::TestWithParam<AttentionPath> {};

TEST_P(FusedInferenceModuleTest, ModuleOutputEqualsTheUnfusedPath) {
  torch::manual_seed(5);
  auto attention = TaylorShiftAttention(
      TaylorShiftAttentionOptions(64, 4).input_normalize(true).crossover_tokens(1));
  attention->eval();
  {
    torch::NoGradGuard no_grad;
    attention->temperature.uniform_(0.5, 2.0);
  }
  const auto x = torch::randn({2, 600, 64});
  auto mask = torch::zeros({2, 600}, torch::kBool);
  mask.index_put_({0, Slice(450, None)}, true);
  torch::Tensor fused, unfused;
  {
    torch::NoGradGuard no_grad;  // inference: the fused kernel
    fused = attention->forward(x, mask, GetParam());
  }
  // With autograd on, the module takes the unfused kernels on normalised inputs.
  unfused = attention->forward(x, mask, GetParam());
  ASSERT_TRUE(unfused.requires_grad());
  EXPECT_LE(RelativeError(fused.narrow(1, 0, 450)[0], unfused.detach().narrow(1, 0, 450)[0]), 1e-5);
  EXPECT_LE(RelativeError(fused[1], unfused.detach()[1]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Paths, FusedInferenceModuleTest,
                         ::testing::Values(AttentionPath::kEfficient, AttentionPath::kDirect));

// The direct kernel against the float64 formula: normalised or scaled queries, with and without
// output normalisation, the paper's polynomial and another one, one block per head or several
// (the last one partial), a padded sequence.
struct DirectCase {
  bool normalize, output_normalize;
  double a, b, c;
  std::int64_t block_elements;
};

class DirectInferenceTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectInferenceTest, MatchesFloat64FormulaOnStridedSlicesWithPadding) {
  const DirectCase param = GetParam();
  torch::manual_seed(11);
  const std::int64_t real = 170;
  const auto in = MakePaddedInputs(300, real, 3, 16, param.normalize);
  TaylorKernelOptions options;
  options.a = param.a;
  options.b = param.b;
  options.c = param.c;
  options.output_normalize = param.output_normalize;
  options.direct_block_elements = param.block_elements;
  torch::NoGradGuard no_grad;
  const auto y = DirectInference(in.qkv.q, in.qkv.k, in.qkv.v, in.mask, options, in.scaling);
  ExpectSequencesMatchFloat64(y, in, real, options, 1e-5);
  // Rows of padded positions are not computed: zero.
  EXPECT_TRUE(torch::all(y[1].narrow(1, real, 300 - real) == 0).item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Scalings, DirectInferenceTest,
    ::testing::Values(DirectCase{true, true, 0.5, 1.0, 1.0, std::int64_t{1} << 19},
                      DirectCase{true, false, 0.5, 1.0, 1.0, std::int64_t{1} << 19},
                      DirectCase{false, true, 0.5, 1.0, 1.0, std::int64_t{1} << 19},
                      // 2 · 3 · 300 rows of 300 at most 40000 entries: blocks of 22 rows, the
                      // last one of 14 (on one thread; fewer rows per block on more).
                      DirectCase{true, true, 1.0, 0.5, 0.3, 40000}));

// The register tiles (model/kernels/direct_tile.h) at every width they run (d 3 → 4, 8, 12 → 16,
// 16) and the GEMM form beside them (d 24), against the float64 formula on each sequence's real
// tokens, with padding inside a sequence as well as after it; and against the GEMM form
// (direct_tiles off) on the same inputs.
TEST(DirectInferenceTilesTest, EveryWidthMatchesFloat64AndTheGemmForm) {
  torch::manual_seed(17);
  const std::int64_t batch = 2, tokens = 75, heads = 2;
  auto mask = torch::zeros({batch, tokens}, torch::kBool);
  mask.index_put_({0, Slice(5, 9)}, true);  // a gap inside the first sequence
  mask.index_put_({1, Slice(41, None)}, true);
  for (const std::int64_t d : {3, 8, 12, 16, 24}) {
    SCOPED_TRACE("d " + std::to_string(d));
    EXPECT_EQ(DirectTileWidth(d) > 0, d <= 16 && DirectTileWidth(16) == 16);
    const auto [q, k, v] = Slices(batch, tokens, heads, d);
    QueryKeyScaling scaling;  // normalised, τ = 1
    TaylorKernelOptions options;
    torch::NoGradGuard no_grad;
    const auto y = DirectInference(q, k, v, mask, options, scaling);
    options.direct_tiles = false;
    const auto gemm = DirectInference(q, k, v, mask, options, scaling);
    EXPECT_LE(RelativeError(y, gemm), 1e-5);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto real = mask[b].logical_not().nonzero().squeeze(1);
      const auto rows = [&](const torch::Tensor& x) { return x[b].index_select(1, real); };
      const auto unit = [&](const torch::Tensor& x) {
        const auto x64 = rows(x).to(torch::kFloat64);
        return x64 / x64.norm(2, -1, true);
      };
      const auto expected = PlainTaylor(unit(q), unit(k), rows(v), true);
      EXPECT_LE(RelativeError(rows(y), expected), 1e-5) << "sequence " << b;
      EXPECT_TRUE(torch::all(y[b].index({Slice(), mask[b]}) == 0).item<bool>()) << "sequence " << b;
    }
  }
}

// Every variant of the fused kernels' loops (model/kernels/cpu_dispatch.h: AVX-512, AVX2 + FMA,
// generic) that this CPU can run gives the float64 formula's answer, so the fallbacks a CPU without
// AVX-512 takes are held to the same bound as the variant the build machine picks.
TEST(FusedInferenceVariantsTest, EveryCpuLevelMatchesFloat64) {
  torch::manual_seed(31);
  const std::int64_t tokens = 300, real = 170;
  const auto in = MakePaddedInputs(tokens, real, 2, 16, true);
  const auto& [q, k, v] = in.qkv;
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 128;
  torch::NoGradGuard no_grad;
  int variants = 0;
  for (const CpuCapability cap :
       {CpuCapability::kDefault, CpuCapability::kAvx2, CpuCapability::kAvx512}) {
    if (cap > DetectedCpuCapability()) continue;
    ScopedCpuCapability scoped(cap);
    SCOPED_TRACE(std::string(CpuCapabilityName(cap)));
    ++variants;
    ExpectSequencesMatchFloat64(EfficientInference(q, k, v, in.mask, options, in.scaling), in, real,
                                options, 1e-4);
    ExpectSequencesMatchFloat64(DirectInference(q, k, v, in.mask, options, in.scaling), in, real,
                                options, 1e-5);
  }
  EXPECT_GE(variants, 1);
}

// The AVX2 register tiles (model/kernels/feature_products_avx2.h) at their edges: head widths
// whose features (F) and output columns (d + 1) fill no whole tile (d = 1: F = 3, two columns;
// d = 13: F = 105), key chunks longer than one packed piece of 256 rows, query blocks of 16 only
// partly used, and padding; against float64 and against the GEMMs they replace.
TEST(EfficientInferenceAvx2TilesTest, EveryHeadWidthMatchesFloat64AndTheGemms) {
  if (DetectedCpuCapability() < CpuCapability::kAvx2) GTEST_SKIP() << "this CPU has no AVX2";
  const ScopedCpuCapability avx2(CpuCapability::kAvx2);
  ASSERT_TRUE(UseAvx2FeatureProducts());
  torch::NoGradGuard no_grad;
  for (const std::int64_t d : {1, 5, 8, 13, 16, 32, 64}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    torch::manual_seed(d);
    const std::int64_t tokens = 301, real = 170;
    const auto in = MakePaddedInputs(tokens, real, 2, d, true);
    const auto& [q, k, v] = in.qkv;
    TaylorKernelOptions options;
    options.efficient_chunk_tokens = 290;  // chunks of 290 (a piece of 256 and one of 34) and 11
    const auto tiles = EfficientInference(q, k, v, in.mask, options, in.scaling);
    ExpectSequencesMatchFloat64(tiles, in, real, options, 1e-4);
    options.efficient_tiles = false;
    const auto gemms = EfficientInference(q, k, v, in.mask, options, in.scaling);
    EXPECT_LE(RelativeError(tiles, gemms), 1e-5);
  }
}

// The kernels run their heads on LibTorch's OpenMP threads; under InferenceMode (as the server
// classifies) those threads must see it too, or in-place updates of inference tensors throw.
TEST(FusedInferenceThreadsTest, KernelsRunUnderInferenceModeOnTwoThreads) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(9);
  const auto [q, k, v] = Slices(2, 600, 4, 8);  // above kMinParallelWork on every path
  c10::InferenceMode inference;
  const auto [qn, kn] = NormalizeQueryKey(q, k, {});
  const auto direct = TaylorDirect(qn, kn, v, {}, {});
  const auto efficient = TaylorEfficient(qn, kn, v, {}, {});
  QueryKeyScaling scaling;
  const auto fused = EfficientInference(q, k, v, {}, {}, scaling);
  const auto fused_direct = DirectInference(q, k, v, {}, {}, scaling);
  at::set_num_threads(threads);
  EXPECT_LE(RelativeError(efficient, direct), 1e-4);
  EXPECT_LE(RelativeError(fused, direct), 1e-4);
  EXPECT_LE(RelativeError(fused_direct, direct), 1e-5);
}

// LayerNorm for float32 inference against LibTorch's: widths with and without a partial last
// vector (7, 37, 64, 512), a strided input, rows enough to split across two threads.
TEST(LayerNormInferenceTest, MatchesLibTorchOnEveryWidth) {
  if (!HaveAvx512F()) GTEST_SKIP() << "this CPU has no AVX-512F";
  torch::manual_seed(19);
  torch::NoGradGuard no_grad;
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (const std::int64_t c : {7, 37, 64, 512}) {
    const auto x = torch::randn({3, 2100, c}).mul_(3).add_(1).transpose(0, 1);  // strided
    const auto weight = torch::randn({c});
    const auto bias = torch::randn({c});
    const auto y = LayerNormInference(x, weight, bias, 1e-6);
    const auto expected = torch::layer_norm(x, {c}, weight, bias, 1e-6);
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_TRUE(torch::allclose(y, expected, 1e-5, 1e-5)) << "C " << c;
  }
  at::set_num_threads(threads);
  const auto leaf = torch::randn({4, 8}).requires_grad_(true);
  {
    torch::AutoGradMode grad(true);
    EXPECT_FALSE(CanRunInferenceOps(leaf));
    EXPECT_THROW(LayerNormInference(leaf, torch::ones({8}), torch::zeros({8}), 1e-6), c10::Error);
  }
  EXPECT_THROW(LayerNormInference(torch::randn({4, 8}), torch::ones({7}), torch::zeros({8}), 1e-6),
               c10::Error);
  EXPECT_FALSE(CanRunInferenceOps(torch::randn({4, 8}, torch::kFloat64)));
}

// GELU in place against LibTorch's (erf form) on values across its range, the float extremes
// and NaN, a tensor large enough to split across two threads and one with a partial last vector.
TEST(GeluInferenceTest, MatchesLibTorchInPlace) {
  if (!HaveAvx512F()) GTEST_SKIP() << "this CPU has no AVX-512F";
  torch::manual_seed(23);
  torch::NoGradGuard no_grad;
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (const std::int64_t n : {std::int64_t{1} << 20, std::int64_t{37}}) {
    auto x = torch::randn({n}) * 4;
    x.narrow(0, 0, 9).copy_(torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 12.0f, -12.0f, 100.0f,
                                           -100.0f, std::numeric_limits<float>::infinity()}));
    const auto expected = torch::gelu(x);
    auto y = x.clone();
    const float* before = y.data_ptr<float>();
    GeluInference_(y);
    EXPECT_EQ(y.data_ptr<float>(), before);  // in place
    // Within 1e-6 (+ 1e-6 relative) of float64's GELU, and within 2e-6 of LibTorch's on finite
    // values: LibTorch's own differs between versions by about 1e-6 (1.13 and 2.11 take
    // different erf approximations), and 2.11's is not finite at +∞.
    const auto x64 = x.to(torch::kFloat64);
    const auto exact = (0.5 * x64 * (1 + torch::erf(x64 / std::sqrt(2.0)))).to(torch::kFloat32);
    EXPECT_TRUE(torch::allclose(y, exact, 1e-6, 1e-6)) << "n " << n;
    EXPECT_EQ(y[8].item<float>(), std::numeric_limits<float>::infinity());
    const auto finite = torch::cat({torch::arange(8), torch::arange(9, n)});
    EXPECT_LE((y - expected).index_select(0, finite).abs().max().item<float>(), 2e-6f) << "n " << n;
  }
  at::set_num_threads(threads);
  auto nan = torch::full({3}, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(torch::all(torch::isnan(GeluInference_(nan))).item<bool>());
  auto strided = torch::randn({4, 8}).t();
  EXPECT_THROW(GeluInference_(strided), c10::Error);
}

TEST(FusedInferenceErrorTest, RefusesAutogradWrongTypesAndBadMasks) {
  const auto [q, k, v] = Slices(1, 20, 2, 8);
  const auto leaf = q.detach().clone().requires_grad_(true);
  EXPECT_FALSE(CanRunFusedInference(leaf, k, v));
  EXPECT_THROW(EfficientInference(leaf, k, v, {}, {}, {}), c10::Error);
  EXPECT_THROW(DirectInference(leaf, k, v, {}, {}, {}), c10::Error);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(CanRunFusedInference(leaf, k, v));
  EXPECT_THROW(EfficientInference(q, k, v, torch::zeros({1, 19}, torch::kBool), {}, {}),
               c10::Error);
  EXPECT_THROW(EfficientInference(q, k, v, torch::zeros({1, 20}), {}, {}), c10::Error);
  EXPECT_THROW(DirectInference(q, k, v, torch::zeros({1, 19}, torch::kBool), {}, {}), c10::Error);
  EXPECT_THROW(DirectInference(q.to(torch::kFloat64), k, v, {}, {}, {}), c10::Error);
}

}  // namespace
}  // namespace ts

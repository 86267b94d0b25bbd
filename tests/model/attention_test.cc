// Numerical tests of the attention paths against an independent float64 evaluation of the
// formula of docs/MODEL.md (each sequence alone, no mask logic), gradients, and the module.
#include "model/networks/attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "model/kernels/bf16_feature_products.h"
#include "model/kernels/cpu_gemm.h"
#include "model/kernels/taylor_attention.h"
#include "model/networks/cost_model.h"
#include "model/torch_compat.h"
#include "tests/testing/attention_oracle.h"

namespace ts {
namespace {

using torch::indexing::Slice;

using testing::PlainTaylor;
using testing::RelativeError;

class TaylorPathsTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool>> {};

TEST_P(TaylorPathsTest, AllPathsMatchFloat64Formula) {
  const auto [d, n, padded, fp64] = GetParam();
  const auto dtype = fp64 ? torch::kFloat64 : torch::kFloat32;
  torch::manual_seed(1000 * d + n + (padded ? 7 : 0));
  const std::int64_t batch = 2, heads = 2;
  // Padded batches hold a shorter second sequence and extra padding after the first.
  const std::int64_t total = padded ? n + 5 : n;
  const std::vector<std::int64_t> lengths = {n, padded ? std::max<std::int64_t>(1, n / 3) : n};
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto q = torch::randn({batch, heads, total, d}, opts);
  const auto k = torch::randn({batch, heads, total, d}, opts);
  const auto v = torch::randn({batch, heads, total, d}, opts);
  const auto tau = torch::rand({heads}, opts) * 2.5 + 0.5;
  torch::Tensor mask;
  if (padded) {
    mask = torch::arange(total).unsqueeze(0).ge(torch::tensor(lengths, torch::kInt64).unsqueeze(1));
  }
  const auto [q_hat, k_hat] =
      NormalizeQueryKey(q.to(dtype), k.to(dtype), tau.view({1, heads, 1, 1}).to(dtype));
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 128;     // several chunks at N = 300 and 2000
  options.direct_block_elements = 1 << 16;  // several query blocks at N = 300 and 2000
  // float32: the efficient path's state sums N keys, in an order that depends on the BLAS and
  // the CPU (PyPI LibTorch 2.11's on an AMD EPYC gave 1.15e-5 at N = 2000, d = 4); a wrong
  // formula is off by far more.
  const double tolerance = fp64 ? 1e-12 : (n >= 2000 ? 4e-5 : 1e-5);
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient,
                          AttentionPath::kDirectReference, AttentionPath::kEfficientReference}) {
    torch::NoGradGuard no_grad;
    const auto y = RunAttentionPath(path, q_hat, k_hat, v.to(dtype), mask, options);
    ASSERT_EQ(y.scalar_type(), dtype);
    for (std::int64_t i = 0; i < batch; ++i) {
      const auto len = lengths[i];
      const auto own = Slice(0, len);
      const auto expected = PlainTaylor(q[i].index({Slice(), own}), k[i].index({Slice(), own}),
                                        v[i].index({Slice(), own}), tau);
      const auto actual = y[i].index({Slice(), own});
      ASSERT_TRUE(torch::isfinite(actual).all().item<bool>()) << AttentionPathName(path);
      EXPECT_LE(RelativeError(actual, expected), tolerance)
          << AttentionPathName(path) << " d=" << d << " n=" << n << " seq=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, TaylorPathsTest,
                         ::testing::Combine(::testing::Values(4, 8, 16, 32, 64),
                                            ::testing::Values(1, 2, 17, 300, 2000),
                                            ::testing::Bool(), ::testing::Bool()));

TEST(TaylorEfficientTest, LongSequenceFp32StaysFiniteAndAccurate) {
  torch::manual_seed(7);
  const std::int64_t n = 100000, d = 16;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto q = torch::randn({1, 1, n, d}, opts);
  const auto k = torch::randn({1, 1, n, d}, opts);
  const auto v = torch::randn({1, 1, n, d}, opts);
  torch::NoGradGuard no_grad;
  const auto [q32, k32] = NormalizeQueryKey(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                            torch::full({1, 1, 1, 1}, 2.0f));
  const auto y = TaylorEfficient(q32, k32, v.to(torch::kFloat32), {}, {});
  ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
  // Exact float64 rows for a sample of queries (all N keys): O(rows·N), no N×N matrix.
  const auto rows = torch::randint(0, n, {32}, torch::kInt64);
  const auto q_hat =
      q[0][0].index_select(0, rows) / q[0][0].index_select(0, rows).norm(2, -1, true) * 2.0;
  const auto k_hat = k[0][0] / k[0][0].norm(2, -1, true);
  const auto s = torch::matmul(q_hat, k_hat.t());
  const auto attn = 0.5 * s * s + s + 1.0;
  const auto expected =
      torch::matmul(attn / attn.sum(-1, true), v[0][0]) * std::sqrt(double(n) / d);
  EXPECT_LE(RelativeError(y[0][0].index_select(0, rows), expected), 1e-4);
}

// precision: bf16 runs the efficient path's two feature products in bfloat16 with float32 sums.
// Against float64 the error is bfloat16's (≈ 2⁻⁸ relative per product, averaged over the sums),
// padded keys still drop out, and the result differs from the float32 kernel's (so the bf16
// kernel is what ran).
TEST(TaylorEfficientTest, Bf16ProductsStayWithinBf16ErrorOfFloat64) {
  if (!HaveAvx512Bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  torch::manual_seed(11);
  const std::int64_t heads = 4, n = 1300, d = 32, real = 1100;
  const auto q = torch::randn({2, heads, n, d});
  const auto k = torch::randn({2, heads, n, d});
  const auto v = torch::randn({2, heads, n, d});
  auto mask = torch::zeros({2, n}, torch::kBool);
  mask.index_put_({1, Slice(real, torch::indexing::None)}, true);
  const auto tau = torch::full({1, heads, 1, 1}, 1.5f);
  torch::NoGradGuard no_grad;
  const auto [qn, kn] = NormalizeQueryKey(q, k, tau);
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 512;  // three chunks, the last one partial
  const auto fp32 = TaylorEfficient(qn, kn, v, mask, options);
  options.bf16_products = true;
  const auto bf16 = TaylorEfficient(qn, kn, v, mask, options);
  ASSERT_EQ(bf16.scalar_type(), torch::kFloat32);
  const auto tau64 = torch::full({heads}, 1.5);
  const auto full = PlainTaylor(q[0], k[0], v[0], tau64);
  const auto part =
      PlainTaylor(q[1].narrow(1, 0, real), k[1].narrow(1, 0, real), v[1].narrow(1, 0, real), tau64);
  EXPECT_LE(RelativeError(fp32[0], full), 1e-4);
  EXPECT_LE(RelativeError(bf16[0], full), 2e-2);
  EXPECT_LE(RelativeError(bf16[1].narrow(1, 0, real), part), 2e-2);
  EXPECT_GT(RelativeError(bf16[0], fp32[0]), 1e-6);
}

TEST(TaylorGradientTest, DirectAndEfficientGradientsAgreeAndMatchFiniteDifferences) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t batch = 2, heads = 2, n = 9, d = 4;
  const auto mask = torch::arange(n).unsqueeze(0).ge(torch::tensor({9, 5}).unsqueeze(1));
  const auto q0 = torch::randn({batch, heads, n, d}, opts);
  const auto k0 = torch::randn({batch, heads, n, d}, opts);
  const auto v0 = torch::randn({batch, heads, n, d}, opts);
  const auto weight = torch::randn({batch, heads, n, d}, opts) *
                      mask.logical_not().view({batch, 1, n, 1}).to(torch::kFloat64);
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 4;
  options.direct_block_elements = 16;
  const auto loss_of = [&](AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v) {
    const auto [qh, kh] = NormalizeQueryKey(q, k, {});
    return (RunAttentionPath(path, qh, kh, v, mask, options) * weight).sum();
  };
  std::vector<std::vector<torch::Tensor>> grads;
  for (const auto path :
       {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kDirectReference}) {
    auto q = q0.clone().requires_grad_(true);
    auto k = k0.clone().requires_grad_(true);
    auto v = v0.clone().requires_grad_(true);
    loss_of(path, q, k, v).backward();
    grads.push_back({q.grad(), k.grad(), v.grad()});
  }
  for (std::size_t p = 1; p < grads.size(); ++p) {
    for (std::size_t t = 0; t < 3; ++t) {
      EXPECT_LE(RelativeError(grads[p][t], grads[0][t]), 1e-10) << "path " << p << " input " << t;
    }
  }
  // Central finite differences on a sample of coordinates of q, k and v.
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  for (std::size_t t = 0; t < 3; ++t) {
    for (int sample = 0; sample < 12; ++sample) {
      const std::int64_t flat = (sample * 37 + 11 * t) % q0.numel();
      std::vector<torch::Tensor> plus = {q0.clone(), k0.clone(), v0.clone()};
      std::vector<torch::Tensor> minus = {q0.clone(), k0.clone(), v0.clone()};
      plus[t].view(-1)[flat] += eps;
      minus[t].view(-1)[flat] -= eps;
      for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
        const double numeric = (loss_of(path, plus[0], plus[1], plus[2]).item<double>() -
                                loss_of(path, minus[0], minus[1], minus[2]).item<double>()) /
                               (2 * eps);
        const double analytic = grads[0][t].view(-1)[flat].item<double>();
        EXPECT_NEAR(numeric, analytic, 1e-6 * std::max(1.0, std::abs(analytic)))
            << AttentionPathName(path) << " input " << t << " index " << flat;
      }
    }
  }
}

// The efficient path's own backward against autograd through TaylorEfficientReference (full d²
// features, no chunks) in float64: q, k, v and the per-head temperature, on a padded batch whose
// sequences span several chunks, with and without output normalisation and for other Taylor
// coefficients than the default.
class TaylorEfficientBackwardTest
    : public ::testing::TestWithParam<std::tuple<int, bool, double, double, double>> {};

TEST_P(TaylorEfficientBackwardTest, GradientsMatchAutogradThroughReference) {
  const auto [d, output_normalize, a, b, c] = GetParam();
  torch::manual_seed(17 + d + (output_normalize ? 1 : 0));
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t batch = 2, heads = 3, n = 37;
  const auto mask = torch::arange(n).unsqueeze(0).ge(torch::tensor({37, 20}).unsqueeze(1));
  const auto q0 = torch::randn({batch, heads, n, d}, opts);
  const auto k0 = torch::randn({batch, heads, n, d}, opts);
  const auto v0 = torch::randn({batch, heads, n, d}, opts);
  const auto tau0 = torch::rand({1, heads, 1, 1}, opts) * 2.5 + 0.5;
  // Padded query rows are meaningless: the loss ignores them, as training does.
  const auto weight = torch::randn({batch, heads, n, d}, opts) *
                      mask.logical_not().view({batch, 1, n, 1}).to(torch::kFloat64);
  TaylorKernelOptions options;
  options.a = a;
  options.b = b;
  options.c = c;
  options.output_normalize = output_normalize;
  options.efficient_chunk_tokens = 8;  // 5 chunks, the last one partial
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<torch::Tensor> outputs;
  for (const auto path : {AttentionPath::kEfficientReference, AttentionPath::kEfficient}) {
    auto q = q0.clone().requires_grad_(true);
    auto k = k0.clone().requires_grad_(true);
    auto v = v0.clone().requires_grad_(true);
    auto tau = tau0.clone().requires_grad_(true);
    const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, tau);
    const auto y = RunAttentionPath(path, q_hat, k_hat, v, mask, options);
    (y * weight).sum().backward();
    outputs.push_back(y.detach());
    grads.push_back({q.grad(), k.grad(), v.grad(), tau.grad()});
  }
  EXPECT_LE(RelativeError(outputs[1], outputs[0]), 1e-12);
  const char* names[] = {"q", "k", "v", "temperature"};
  for (std::size_t t = 0; t < 4; ++t) {
    ASSERT_TRUE(grads[1][t].defined()) << names[t];
    EXPECT_GT(grads[0][t].abs().max().item<double>(), 0.0) << names[t];
    EXPECT_LE(RelativeError(grads[1][t], grads[0][t]), 1e-10) << names[t] << " d=" << d;
  }
  // Padded keys get no gradient: they are not part of any sequence.
  const auto padded_keys = Slice(20, n);
  EXPECT_EQ(grads[1][1][1].index({Slice(), padded_keys}).abs().max().item<double>(), 0.0);
  EXPECT_EQ(grads[1][2][1].index({Slice(), padded_keys}).abs().max().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Grid, TaylorEfficientBackwardTest,
                         ::testing::Values(std::make_tuple(4, true, 0.5, 1.0, 1.0),
                                           std::make_tuple(4, false, 0.5, 1.0, 1.0),
                                           std::make_tuple(8, true, 0.5, 1.0, 1.0),
                                           std::make_tuple(8, false, 1.0, 0.5, 0.25),
                                           std::make_tuple(16, true, 0.25, -0.5, 0.5)));

TEST(TaylorEfficientBackwardTest, TemperatureGradientMatchesFiniteDifferences) {
  torch::manual_seed(23);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t batch = 2, heads = 2, n = 21, d = 4;
  const auto mask = torch::arange(n).unsqueeze(0).ge(torch::tensor({21, 9}).unsqueeze(1));
  const auto q = torch::randn({batch, heads, n, d}, opts);
  const auto k = torch::randn({batch, heads, n, d}, opts);
  const auto v = torch::randn({batch, heads, n, d}, opts);
  const auto weight = torch::randn({batch, heads, n, d}, opts) *
                      mask.logical_not().view({batch, 1, n, 1}).to(torch::kFloat64);
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 4;
  const auto loss_of = [&](const torch::Tensor& tau) {
    const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, tau);
    return (TaylorEfficient(q_hat, k_hat, v, mask, options) * weight).sum();
  };
  auto tau = torch::tensor({0.7, 1.9}, opts).view({1, heads, 1, 1}).requires_grad_(true);
  loss_of(tau).backward();
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  for (std::int64_t h = 0; h < heads; ++h) {
    auto plus = tau.detach().clone(), minus = tau.detach().clone();
    plus.view(-1)[h] += eps;
    minus.view(-1)[h] -= eps;
    const double numeric =
        (loss_of(plus).item<double>() - loss_of(minus).item<double>()) / (2 * eps);
    const double analytic = tau.grad().view(-1)[h].item<double>();
    EXPECT_NEAR(numeric, analytic, 1e-7 * std::max(1.0, std::abs(analytic))) << "head " << h;
  }
}

TEST(TaylorEfficientBackwardTest, Float32GradientsStayCloseToFloat64) {
  torch::manual_seed(29);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t n = 3000, d = 16;
  const auto q0 = torch::randn({1, 2, n, d}, opts);
  const auto k0 = torch::randn({1, 2, n, d}, opts);
  const auto v0 = torch::randn({1, 2, n, d}, opts);
  const auto weight = torch::randn({1, 2, n, d}, opts);
  std::vector<std::vector<torch::Tensor>> grads;
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto q = q0.to(dtype).clone().requires_grad_(true);
    auto k = k0.to(dtype).clone().requires_grad_(true);
    auto v = v0.to(dtype).clone().requires_grad_(true);
    const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, {});
    (TaylorEfficient(q_hat, k_hat, v, {}, {}) * weight.to(dtype)).sum().backward();
    grads.push_back({q.grad(), k.grad(), v.grad()});
  }
  for (std::size_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(torch::isfinite(grads[1][t]).all().item<bool>()) << "input " << t;
    EXPECT_LE(RelativeError(grads[1][t], grads[0][t]), 1e-4) << "input " << t;
  }
}

// What autograd keeps between forward and backward, and the peak of backward, must not grow
// with the N×F features (F = 561 at d = 32): a training step at long N would otherwise hold
// N·F floats per head and layer. Counted by the CPU allocator wrapper (tensor bytes only).
TEST(TaylorEfficientBackwardTest, MemoryDoesNotHoldFeaturesOfTheWholeSequence) {
  torch::manual_seed(31);
  const std::int64_t heads = 2, n = 4096, d = 32, features = d * (d + 1) / 2 + d + 1;
  const std::int64_t float_bytes = 4;
  compat::CountCpuAllocations();
  auto q = torch::randn({1, heads, n, d}).requires_grad_(true);
  auto k = torch::randn({1, heads, n, d}).requires_grad_(true);
  auto v = torch::randn({1, heads, n, d}).requires_grad_(true);
  const auto weight = torch::randn({1, heads, n, d});
  TaylorKernelOptions options;
  options.efficient_chunk_tokens = 256;
  // One tensor of the sequence's features per head, and one [N, d+1] tensor per head.
  const std::int64_t all_features = heads * n * features * float_bytes;
  const std::int64_t per_token_row = heads * n * (d + 1) * float_bytes;
  const std::int64_t chunk_features = 2 * std::max(1, at::get_num_threads()) *
                                      options.efficient_chunk_tokens * features * float_bytes;

  const auto before = compat::GetCpuAllocationCounts().current_bytes;
  compat::ResetPeakCpuAllocations();
  auto loss = (TaylorEfficient(q, k, v, {}, options) * weight).sum();
  const auto after_forward = compat::GetCpuAllocationCounts();
  const std::int64_t held = after_forward.current_bytes - before;
  // Kept: the scaled q, k and v' (plus y and the denominators), about 5 rows per token. Autograd
  // through the chunk loop kept, per side, the features and the two factors of their products.
  EXPECT_LE(held, 8 * per_token_row) << "forward keeps " << held << " bytes for backward";
  EXPECT_LT(held, all_features / 3);

  compat::ResetPeakCpuAllocations();
  loss.backward();
  const std::int64_t backward_peak = compat::GetCpuAllocationCounts().peak_bytes - before;
  // What forward kept, the gradients of y, nom, q, k, v and v' (and the leaves' .grad), and two
  // chunks of features per thread: about 11 rows per token.
  EXPECT_LE(backward_peak, 16 * per_token_row + chunk_features)
      << "backward peaks at " << backward_peak << " bytes";
  EXPECT_LT(backward_peak, all_features);
  ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
}

// The direct path under autograd keeps no N×N scores between forward and backward and recomputes
// them block by block in backward: a training step at long N would otherwise hold two N×N
// tensors per head and layer (the scores and their squares). Counted by the CPU allocator wrapper.
TEST(TaylorDirectBackwardTest, MemoryDoesNotHoldScoresOfTheWholeSequence) {
  torch::manual_seed(37);
  const std::int64_t heads = 2, n = 2048, d = 16;
  const std::int64_t float_bytes = 4;
  compat::CountCpuAllocations();
  auto q = torch::randn({1, heads, n, d}).requires_grad_(true);
  auto k = torch::randn({1, heads, n, d}).requires_grad_(true);
  auto v = torch::randn({1, heads, n, d}).requires_grad_(true);
  const auto weight = torch::randn({1, heads, n, d});
  TaylorKernelOptions options;
  options.direct_block_elements = heads * 128 * n;  // 128 query rows per block
  const std::int64_t all_scores = heads * n * n * float_bytes;
  const std::int64_t block = options.direct_block_elements * float_bytes;
  const std::int64_t per_token_row = heads * n * (d + 1) * float_bytes;

  const auto before = compat::GetCpuAllocationCounts().current_bytes;
  compat::ResetPeakCpuAllocations();
  auto loss = (TaylorDirect(q, k, v, {}, options) * weight).sum();
  const auto after_forward = compat::GetCpuAllocationCounts();
  const std::int64_t held = after_forward.current_bytes - before;
  // Kept: v'', y, the denominators and the scaled output, about 4 rows per token.
  EXPECT_LE(held, 8 * per_token_row) << "forward keeps " << held << " bytes for backward";
  EXPECT_LT(held, all_scores / 8);
  EXPECT_LE(after_forward.peak_bytes - before, 8 * per_token_row + 2 * block);

  compat::ResetPeakCpuAllocations();
  loss.backward();
  const std::int64_t backward_peak = compat::GetCpuAllocationCounts().peak_bytes - before;
  EXPECT_LE(backward_peak, 16 * per_token_row + 2 * block)
      << "backward peaks at " << backward_peak << " bytes";
  EXPECT_LT(backward_peak, all_scores / 4);
  ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
}

// The direct path's own backward against autograd through TaylorDirectReference in float64, on a
// padded batch over several blocks, with other Taylor coefficients and without output
// normalisation; and in float32 against float64 at a long sequence.
TEST(TaylorDirectBackwardTest, GradientsMatchAutogradThroughReference) {
  torch::manual_seed(41);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t batch = 2, heads = 3, n = 37, d = 8;
  const auto mask = torch::arange(n).unsqueeze(0).ge(torch::tensor({37, 20}).unsqueeze(1));
  const auto q0 = torch::randn({batch, heads, n, d}, opts);
  const auto k0 = torch::randn({batch, heads, n, d}, opts);
  const auto v0 = torch::randn({batch, heads, n, d}, opts);
  const auto tau0 = torch::rand({1, heads, 1, 1}, opts) * 2.5 + 0.5;
  const auto weight = torch::randn({batch, heads, n, d}, opts) *
                      mask.logical_not().view({batch, 1, n, 1}).to(torch::kFloat64);
  for (const auto& [a, b, c, normalize] :
       {std::make_tuple(0.5, 1.0, 1.0, true), std::make_tuple(0.25, -0.5, 0.5, false)}) {
    TaylorKernelOptions options;
    options.a = a;
    options.b = b;
    options.c = c;
    options.output_normalize = normalize;
    options.direct_block_elements = batch * heads * 5 * n;  // 8 blocks of 5 rows, the last 2
    std::vector<std::vector<torch::Tensor>> grads;
    for (const auto path : {AttentionPath::kDirectReference, AttentionPath::kDirect}) {
      auto q = q0.clone().requires_grad_(true);
      auto k = k0.clone().requires_grad_(true);
      auto v = v0.clone().requires_grad_(true);
      auto tau = tau0.clone().requires_grad_(true);
      const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, tau);
      (RunAttentionPath(path, q_hat, k_hat, v, mask, options) * weight).sum().backward();
      grads.push_back({q.grad(), k.grad(), v.grad(), tau.grad()});
    }
    for (std::size_t t = 0; t < 4; ++t) {
      EXPECT_GT(grads[0][t].abs().max().item<double>(), 0.0) << t;
      EXPECT_LE(RelativeError(grads[1][t], grads[0][t]), 1e-10) << "input " << t << " b=" << b;
    }
    EXPECT_EQ(grads[1][2][1].index({Slice(), Slice(20, n)}).abs().max().item<double>(), 0.0);
  }
}

TEST(TaylorDirectBackwardTest, Float32GradientsStayCloseToFloat64) {
  torch::manual_seed(43);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t n = 1500, d = 16;
  const auto q0 = torch::randn({1, 2, n, d}, opts);
  const auto k0 = torch::randn({1, 2, n, d}, opts);
  const auto v0 = torch::randn({1, 2, n, d}, opts);
  const auto weight = torch::randn({1, 2, n, d}, opts);
  std::vector<std::vector<torch::Tensor>> grads;
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto q = q0.to(dtype).clone().requires_grad_(true);
    auto k = k0.to(dtype).clone().requires_grad_(true);
    auto v = v0.to(dtype).clone().requires_grad_(true);
    const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, {});
    (TaylorDirect(q_hat, k_hat, v, {}, {}) * weight.to(dtype)).sum().backward();
    grads.push_back({q.grad(), k.grad(), v.grad()});
  }
  for (std::size_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(torch::isfinite(grads[1][t]).all().item<bool>()) << "input " << t;
    EXPECT_LE(RelativeError(grads[1][t], grads[0][t]), 1e-4) << "input " << t;
  }
}

TEST(TaylorCoefficientsTest, RejectsPolynomialsThatCanBeNegative) {
  EXPECT_NO_THROW(CheckTaylorCoefficients(0.5, 1.0, 0.5));
  try {
    CheckTaylorCoefficients(0.5, 1.0, 0.4);
    FAIL() << "c < b^2/4a must be rejected";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("c >= b^2/(4a)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CheckTaylorCoefficients(0.0, 0.0, 1.0), c10::Error);
  EXPECT_THROW(TaylorShiftAttention(TaylorShiftAttentionOptions(16, 2).a(-1.0)), c10::Error);
  EXPECT_THROW(TaylorShiftAttention(TaylorShiftAttentionOptions(16, 3)), c10::Error);
}

TEST(TaylorShiftAttentionTest, SequenceOutputDoesNotDependOnItsBatch) {
  torch::manual_seed(5);
  for (const bool fp64 : {false, true}) {
    TaylorShiftAttention attention(TaylorShiftAttentionOptions(32, 4));
    if (fp64) attention->to(torch::kFloat64);
    {
      torch::NoGradGuard no_grad;
      attention->temperature.uniform_(0.5, 2.0);
    }
    attention->eval();
    const auto dtype = fp64 ? torch::kFloat64 : torch::kFloat32;
    const std::int64_t long_n = 70, short_n = 23;
    const auto x = torch::randn({2, long_n, 32}, torch::TensorOptions().dtype(dtype));
    const auto mask =
        torch::arange(long_n).unsqueeze(0).ge(torch::tensor({long_n, short_n}).unsqueeze(1));
    for (const auto path :
         {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kSoftmax}) {
      torch::NoGradGuard no_grad;
      const auto batched = attention->forward(x, mask, path);
      const auto alone = attention->forward(x.index({Slice(1, 2), Slice(0, short_n)}), {}, path);
      EXPECT_LE(RelativeError(batched.index({Slice(1, 2), Slice(0, short_n)}), alone), 1e-5)
          << AttentionPathName(path) << (fp64 ? " fp64" : " fp32");
      const auto first_alone = attention->forward(x.index({Slice(0, 1)}), {}, path);
      EXPECT_LE(RelativeError(batched.index({Slice(0, 1)}), first_alone), 1e-5);
    }
    torch::NoGradGuard no_grad;
    const auto direct = attention->forward(x, mask, AttentionPath::kDirect);
    const auto efficient = attention->forward(x, mask, AttentionPath::kEfficient);
    EXPECT_LE(RelativeError(direct.index({Slice(1, 2), Slice(0, short_n)}),
                            efficient.index({Slice(1, 2), Slice(0, short_n)})),
              fp64 ? 1e-12 : 1e-5);
  }
}

TEST(TaylorShiftAttentionTest, AutoPicksDirectUpToCrossoverThenEfficient) {
  TaylorShiftAttention attention(TaylorShiftAttentionOptions(64, 4));  // d = 16, N0 = 273
  EXPECT_EQ(attention->crossover_tokens(), SpeedCrossoverN0(16));
  EXPECT_EQ(attention->ResolvePath(AttentionPath::kAuto, 273), AttentionPath::kDirect);
  EXPECT_EQ(attention->ResolvePath(AttentionPath::kAuto, 274), AttentionPath::kEfficient);
  EXPECT_EQ(attention->ResolvePath(AttentionPath::kSoftmax, 10), AttentionPath::kSoftmax);
  attention->set_crossover_tokens(100);
  EXPECT_EQ(attention->ResolvePath(AttentionPath::kAuto, 101), AttentionPath::kEfficient);
  EXPECT_EQ(attention->ResolvePath(AttentionPath::kAuto, 100), AttentionPath::kDirect);
}

TEST(TaylorShiftAttentionTest, ParameterNamesFollowTheReference) {
  TaylorShiftAttention attention(TaylorShiftAttentionOptions(32, 4));
  const auto params = attention->named_parameters();
  ASSERT_TRUE(params.contains("qkv.weight"));
  EXPECT_EQ(params["qkv.weight"].sizes(), torch::IntArrayRef({96, 32}));
  EXPECT_EQ(params["qkv.bias"].sizes(), torch::IntArrayRef({96}));
  EXPECT_EQ(params["temperature"].sizes(), torch::IntArrayRef({1, 4, 1, 1}));
  EXPECT_EQ(params["proj.weight"].sizes(), torch::IntArrayRef({32, 32}));
  TaylorShiftAttention plain(
      TaylorShiftAttentionOptions(32, 4).input_normalize(false).qkv_bias(false));
  EXPECT_FALSE(plain->named_parameters().contains("temperature"));
  EXPECT_FALSE(plain->named_parameters().contains("qkv.bias"));
}

TEST(TaylorAttentionCudaTest, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device on this machine";
  }
  torch::manual_seed(11);
  const auto q = torch::randn({2, 4, 600, 32}, torch::kFloat64);
  const auto k = torch::randn({2, 4, 600, 32}, torch::kFloat64);
  const auto v = torch::randn({2, 4, 600, 32}, torch::kFloat64);
  const auto mask = torch::arange(600).unsqueeze(0).ge(torch::tensor({600, 333}).unsqueeze(1));
  torch::NoGradGuard no_grad;
  const auto [qh, kh] = NormalizeQueryKey(q, k, {});
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
      const auto cpu = RunAttentionPath(path, qh.to(dtype), kh.to(dtype), v.to(dtype), mask, {});
      const auto gpu =
          RunAttentionPath(path, qh.to(torch::kCUDA, dtype), kh.to(torch::kCUDA, dtype),
                           v.to(torch::kCUDA, dtype), mask.to(torch::kCUDA), {});
      // Real query rows only: a padded query's row is unspecified (the CPU's fused float32
      // kernels leave it zero, the GPU's ATen form computes it; nothing reads it).
      const auto real = mask.logical_not().view({2, 1, 600, 1});
      EXPECT_LE(RelativeError(gpu.cpu() * real, cpu * real),
                dtype == torch::kFloat64 ? 1e-12 : 1e-5)
          << AttentionPathName(path) << " " << dtype;
    }
  }
}

}  // namespace
}  // namespace ts

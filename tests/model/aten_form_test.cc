// The attention paths' ATen form (KernelImplementation::kAten): the code CUDA devices run for
// float32 and under autograd. The AtenForm tests force it on the CPU, so every change to it is
// tested on any machine; the AtenFormCuda tests run the same checks on a GPU, and the FusedCuda
// tests the fused CUDA kernels (KernelImplementation::kCuda; they skip without a GPU;
// scripts/gpu-check runs them). Each compares with a float64 oracle computed on the CPU: the
// formula of docs/MODEL.md per sequence (tests/testing/attention_oracle.h) for outputs, and the CPU
// kernels' float64 backward (tested against finite differences in attention_test.cc) for gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "model/api/attention_path.h"
#include "model/kernels/attention_dispatch.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/kernels/taylor_attention.h"
#include "model/torch_compat.h"
#include "tests/testing/attention_oracle.h"

namespace ts {
namespace {

using testing::PlainTaylor;
using testing::RelativeError;
using torch::indexing::Slice;

struct Problem {
  torch::Tensor q, k, v, tau, mask;  // float64 on the CPU; tau [H]
  std::vector<std::int64_t> lengths;
};

// Two sequences, the second shorter, with padding after both and one padded key inside the
// first (any mask, not only trailing padding).
Problem MakeProblem(std::int64_t heads, std::int64_t n, std::int64_t d, std::uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  const std::int64_t total = n + 3;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  p.q = torch::randn({2, heads, total, d}, opts);
  p.k = torch::randn({2, heads, total, d}, opts);
  p.v = torch::randn({2, heads, total, d}, opts);
  p.tau = torch::rand({heads}, opts) * 2.5 + 0.5;
  p.lengths = {n, std::max<std::int64_t>(1, n / 3)};
  p.mask = torch::arange(total).unsqueeze(0).ge(torch::tensor(p.lengths).unsqueeze(1));
  if (n > 4) p.mask.index_put_({0, n / 2}, true);
  return p;
}

// Sequence b of the problem without its padded positions: [H, real, d].
torch::Tensor Real(const Problem& p, const torch::Tensor& x, std::int64_t b) {
  return x[b].index_select(1, p.mask[b].logical_not().nonzero().squeeze(1));
}

torch::Tensor RunOn(const torch::Device& device, torch::ScalarType dtype, AttentionPath path,
                    const Problem& p, const TaylorKernelOptions& options) {
  const auto to = [&](const torch::Tensor& x) { return x.to(device, dtype); };
  const auto tau = to(p.tau).view({1, -1, 1, 1});
  if (path == AttentionPath::kSoftmax) {
    return RunAttentionPath(path, to(p.q), to(p.k), to(p.v), p.mask.to(device), options);
  }
  const auto [q_hat, k_hat] = NormalizeQueryKey(to(p.q), to(p.k), tau);
  return RunAttentionPath(path, q_hat, k_hat, to(p.v), p.mask.to(device), options);
}

// softmax(q kᵀ/√d) v of one sequence in float64: [H, n, d].
torch::Tensor PlainSoftmax(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(torch::softmax(torch::matmul(q, k.transpose(1, 2)) * scale, -1), v);
}

// Every real row of every sequence within `tolerance` (relative) of the float64 oracle.
void ExpectMatchesOracle(const torch::Device& device, torch::ScalarType dtype, AttentionPath path,
                         const Problem& p, const TaylorKernelOptions& options, double tolerance) {
  torch::NoGradGuard no_grad;
  const auto y = RunOn(device, dtype, path, p, options);
  ASSERT_EQ(y.device().type(), device.type());
  ASSERT_EQ(y.scalar_type(), dtype);
  for (std::int64_t b = 0; b < 2; ++b) {
    const auto expected =
        path == AttentionPath::kSoftmax
            ? PlainSoftmax(Real(p, p.q, b), Real(p, p.k, b), Real(p, p.v, b))
            : PlainTaylor(Real(p, p.q, b), Real(p, p.k, b), Real(p, p.v, b), p.tau);
    const auto actual = Real(p, y.to(torch::kCPU), b);
    ASSERT_TRUE(torch::isfinite(actual).all().item<bool>()) << AttentionPathName(path);
    EXPECT_LE(RelativeError(actual, expected), tolerance)
        << AttentionPathName(path) << " on " << device << " d=" << p.q.size(3)
        << " n=" << p.lengths[0] << " sequence " << b;
  }
}

// q, k, v and temperature gradients of sum(y ⊙ w) over real rows, on `device` in `dtype`.
std::vector<torch::Tensor> Gradients(const torch::Device& device, torch::ScalarType dtype,
                                     AttentionPath path, const Problem& p,
                                     const TaylorKernelOptions& options) {
  // Fresh leaves (`to` returns the problem's own tensor when nothing changes).
  const auto leaf = [&](const torch::Tensor& x) {
    return x.to(device, dtype).detach().clone().requires_grad_(true);
  };
  const auto to = [&](const torch::Tensor& x) { return x.to(device, dtype); };
  auto q = leaf(p.q), k = leaf(p.k), v = leaf(p.v), tau = leaf(p.tau.view({1, -1, 1, 1}));
  torch::manual_seed(5);
  const auto weight = torch::randn(p.q.sizes(), torch::kFloat64) *
                      p.mask.logical_not().view({2, 1, -1, 1}).to(torch::kFloat64);
  const auto [q_hat, k_hat] = NormalizeQueryKey(q, k, tau);
  (RunAttentionPath(path, q_hat, k_hat, v, p.mask.to(device), options) * to(weight))
      .sum()
      .backward();
  return {q.grad().cpu(), k.grad().cpu(), v.grad().cpu(), tau.grad().cpu()};
}

void ExpectGradientsMatchOracle(const torch::Device& device, torch::ScalarType dtype,
                                AttentionPath path, const Problem& p,
                                const TaylorKernelOptions& options, double tolerance) {
  TaylorKernelOptions oracle_options = options;
  oracle_options.implementation = KernelImplementation::kAuto;
  oracle_options.direct_block_elements = 1 << 24;  // few blocks: the oracle's time stays small
  const auto expected = Gradients(torch::kCPU, torch::kFloat64, path, p, oracle_options);
  const auto actual = Gradients(device, dtype, path, p, options);
  const char* names[] = {"q", "k", "v", "temperature"};
  ASSERT_GT(expected[2].abs().max().item<double>(), 0.1);
  for (std::size_t t = 0; t < expected.size(); ++t) {
    // Relative to the gradient's scale, with a floor: with one token per sequence the q, k and
    // temperature gradients are exactly zero (P = 1 whatever the scores), and rounding noise
    // around zero must stay under tolerance × 1e-2.
    const double scale = std::max(expected[t].abs().max().item<double>(), 1e-2);
    const double error = (actual[t] - expected[t]).abs().max().item<double>() / scale;
    EXPECT_LE(error, tolerance) << AttentionPathName(path) << " on " << device << " d(" << names[t]
                                << ") d=" << p.q.size(3);
  }
}

// The tolerance of bf16 products on `device`: bfloat16 rounding where they run (CUDA; a CPU whose
// LibTorch sums bf16 in float32), float32's where the ATen form multiplies in float32 instead (a
// CPU whose LibTorch sums bf16 in bfloat16: model/kernels/bf16_matmul_probe.h).
double Bf16ProductsTolerance(const torch::Device& device) {
  return device.is_cpu() && !CpuBf16Matmul().float32_sums() ? 1e-5 : 1e-2;
}

TaylorKernelOptions AtenOptions() {
  TaylorKernelOptions options;
  options.implementation = KernelImplementation::kAten;
  // Several blocks and chunks, the last ones partial (a CUDA device sizes them by its memory).
  options.direct_block_elements = 1 << 12;
  options.efficient_chunk_tokens = 64;
  return options;
}

// Head dimensions the models use (8, 16, 32, 64) at odd lengths, N = 1 included.
class AtenFormTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  static void CheckForward(const torch::Device& device) {
    const auto [d, n] = GetParam();
    const Problem p = MakeProblem(3, n, d, 100 * d + n);
    for (const auto path :
         {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kSoftmax}) {
      ExpectMatchesOracle(device, torch::kFloat32, path, p, AtenOptions(), 1e-5);
      ExpectMatchesOracle(device, torch::kFloat64, path, p, AtenOptions(), 1e-11);
      if (path != AttentionPath::kSoftmax) {
        TaylorKernelOptions low = AtenOptions();
        low.bf16_products = true;
        ExpectMatchesOracle(device, torch::kFloat32, path, p, low, Bf16ProductsTolerance(device));
      }
    }
  }
  static void CheckGradients(const torch::Device& device) {
    const auto [d, n] = GetParam();
    const Problem p = MakeProblem(2, n, d, 7 * d + n);
    for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
      ExpectGradientsMatchOracle(device, torch::kFloat64, path, p, AtenOptions(), 1e-10);
      ExpectGradientsMatchOracle(device, torch::kFloat32, path, p, AtenOptions(), 1e-4);
    }
  }
};

TEST_P(AtenFormTest, ForwardMatchesFloat64Oracle) { CheckForward(torch::kCPU); }
TEST_P(AtenFormTest, GradientsMatchFloat64Oracle) { CheckGradients(torch::kCPU); }

INSTANTIATE_TEST_SUITE_P(Grid, AtenFormTest,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64),
                                            ::testing::Values(1, 7, 301)));

// One chunk per sequence, as a GPU sizes it: the efficient path's state summed over 256-token
// slices and a remainder (AccumulateState), forward and backward.
TEST(AtenFormSlicesTest, StateSummedOverSlicesMatchesOracle) {
  TaylorKernelOptions options = AtenOptions();
  options.efficient_chunk_tokens = 1 << 20;
  const Problem p = MakeProblem(2, 1031, 16, 41);
  ExpectMatchesOracle(torch::kCPU, torch::kFloat32, AttentionPath::kEfficient, p, options, 1e-5);
  ExpectMatchesOracle(torch::kCPU, torch::kFloat64, AttentionPath::kEfficient, p, options, 1e-11);
  ExpectGradientsMatchOracle(torch::kCPU, torch::kFloat64, AttentionPath::kEfficient, p, options,
                             1e-10);
  // bf16 products slice from 2048 tokens on: 8 slices and a remainder of 6.
  TaylorKernelOptions low = options;
  low.bf16_products = true;
  const Problem longer = MakeProblem(2, 2051, 16, 43);
  ExpectMatchesOracle(torch::kCPU, torch::kFloat32, AttentionPath::kEfficient, longer, low,
                      Bf16ProductsTolerance(torch::kCPU));
}

// The same checks on a GPU, against the same CPU oracles.
class AtenFormCudaTest : public AtenFormTest {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
    // fp32 is float32: TF32's 10-bit mantissa would miss 1e-5 (LibTorch lets cuDNN use it).
    compat::SetCudaTf32(false);
  }
};

TEST_P(AtenFormCudaTest, ForwardMatchesFloat64Oracle) { CheckForward(torch::kCUDA); }
TEST_P(AtenFormCudaTest, GradientsMatchFloat64Oracle) { CheckGradients(torch::kCUDA); }

INSTANTIATE_TEST_SUITE_P(Grid, AtenFormCudaTest,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64),
                                            ::testing::Values(1, 7, 301, 4099)));

// The ATen form is what CUDA runs by default: kAuto on a GPU gives the same values as kAten.
TEST(CudaDeviceTest, AutoOnCudaIsTheAtenForm) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  compat::SetCudaTf32(false);
  const Problem p = MakeProblem(4, 600, 32, 3);
  torch::NoGradGuard no_grad;
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    const auto automatic = RunOn(torch::kCUDA, torch::kFloat32, path, p, {});
    const auto aten = RunOn(torch::kCUDA, torch::kFloat32, path, p, AtenOptions());
    EXPECT_LE(RelativeError(automatic, aten), 1e-6) << AttentionPathName(path);
  }
}

// The device-memory helpers take "cuda" without an index (the current device) as they take
// "cuda:0"; attention_bench --device=cuda once passed index -1 to the caching allocator.
TEST(CudaDeviceTest, DeviceMemoryOfCudaWithoutIndex) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const torch::Device cuda(torch::kCUDA);
  EXPECT_EQ(compat::CudaDeviceIndex(cuda), compat::CudaDeviceIndex(torch::Device("cuda:0")));
  compat::ResetPeakDeviceMemory(cuda);
  const auto x = torch::empty({1 << 20}, torch::TensorOptions().device(cuda));
  EXPECT_GE(compat::GetDeviceMemory(cuda).allocated_bytes, std::int64_t{4} << 20);
  EXPECT_GT(compat::CudaAvailableBytes(cuda), 0);
}

// The fused CUDA kernels (kCuda: bf16 products, float32 sums) against the same float64 oracles,
// both paths, every head dimension the models use, N = 1, odd N, N across tile edges (64, 65)
// and past one slice of the state, with padding inside and after the sequences.
class FusedCudaTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  }
  static TaylorKernelOptions Fused() {
    TaylorKernelOptions options;
    options.bf16_products = true;
    options.implementation = KernelImplementation::kCuda;
    return options;
  }
};

TEST_P(FusedCudaTest, ForwardMatchesFloat64Oracle) {
  const auto [d, n] = GetParam();
  const Problem p = MakeProblem(3, n, d, 31 * d + n);
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    ExpectMatchesOracle(torch::kCUDA, torch::kFloat32, path, p, Fused(), 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, FusedCudaTest,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64),
                                            ::testing::Values(1, 7, 64, 65, 301, 4099)));

// The backward kernels (asked for: implementation cuda under autograd) against the CPU's float64
// backward: q, k, v and temperature gradients of both paths on the same grid.
TEST_P(FusedCudaTest, GradientsMatchFloat64Oracle) {
  const auto [d, n] = GetParam();
  const Problem p = MakeProblem(2, n, d, 13 * d + n);
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    ExpectGradientsMatchOracle(torch::kCUDA, torch::kFloat32, path, p, Fused(), 1e-2);
  }
}

// Other Taylor coefficients and no output normalisation: every sequence against the formula.
TEST_F(FusedCudaTest, CoefficientsAndNoOutputNormalisation) {
  const Problem p = MakeProblem(2, 333, 32, 9);
  TaylorKernelOptions options = Fused();
  options.a = 0.8;
  options.b = 0.5;
  options.c = 0.3;
  options.output_normalize = false;
  torch::NoGradGuard no_grad;
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    const auto y = RunOn(torch::kCUDA, torch::kFloat32, path, p, options).cpu();
    for (std::int64_t b = 0; b < 2; ++b) {
      const double n = static_cast<double>(p.lengths[b] - (b == 0 ? 1 : 0));
      const auto expected = testing::PlainTaylor(Real(p, p.q, b), Real(p, p.k, b), Real(p, p.v, b),
                                                 p.tau, 0.8, 0.5, 0.3) /
                            std::sqrt(n / 32.0);
      EXPECT_LE(RelativeError(Real(p, y, b), expected), 1e-2) << AttentionPathName(path);
    }
  }
}

// Sequences of very different lengths in one padded batch: each as if alone.
TEST_F(FusedCudaTest, VeryDifferentLengthsInOneBatch) {
  torch::manual_seed(4);
  const std::vector<std::int64_t> lengths = {5000, 1, 130};
  const std::int64_t total = 5000, heads = 2, d = 16;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto q = torch::randn({3, heads, total, d}, opts);
  const auto k = torch::randn({3, heads, total, d}, opts);
  const auto v = torch::randn({3, heads, total, d}, opts);
  const auto tau = torch::ones({heads}, opts);
  const auto mask = torch::arange(total).unsqueeze(0).ge(torch::tensor(lengths).unsqueeze(1));
  torch::NoGradGuard no_grad;
  const auto [q_hat, k_hat] = NormalizeQueryKey(q.to(torch::kCUDA, torch::kFloat32),
                                                k.to(torch::kCUDA, torch::kFloat32), {});
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    const auto y = RunAttentionPath(path, q_hat, k_hat, v.to(torch::kCUDA, torch::kFloat32),
                                    mask.to(torch::kCUDA), Fused())
                       .cpu();
    for (std::int64_t b = 0; b < 3; ++b) {
      const auto real = Slice(0, lengths[b]);
      const auto expected =
          testing::PlainTaylor(q[b].index({Slice(), real}), k[b].index({Slice(), real}),
                               v[b].index({Slice(), real}), tau);
      EXPECT_LE(RelativeError(y[b].index({Slice(), real}), expected), 1e-2)
          << AttentionPathName(path) << " sequence " << b << " of " << lengths[b] << " tokens";
    }
  }
}

// Other coefficients and no output normalisation under autograd, and what runs: kAuto keeps the
// ATen form for training (the backward kernels run only when asked for).
TEST_F(FusedCudaTest, GradientsWithCoefficientsAndAutoKeepsTheAtenForm) {
  const Problem p = MakeProblem(2, 333, 32, 19);
  TaylorKernelOptions options = Fused();
  options.a = 0.8;
  options.b = 0.5;
  options.c = 0.3;
  options.output_normalize = false;
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    ExpectGradientsMatchOracle(torch::kCUDA, torch::kFloat32, path, p, options, 1e-2);
  }
  TaylorKernelOptions automatic;
  automatic.bf16_products = true;
  const auto q = torch::randn({1, 2, 64, 32}, torch::kCUDA).requires_grad_(true);
  EXPECT_EQ(ChooseAttentionKernel(q, q, q, automatic), AttentionKernel::kAten);
  EXPECT_EQ(ChooseAttentionKernel(q, q, q, Fused()), AttentionKernel::kFusedCuda);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(ChooseAttentionKernel(q, q, q, automatic), AttentionKernel::kFusedCuda);
}

// The same inputs give the same bits (the state's slices are summed in a fixed order), and kAuto
// at bf16 on a GPU runs the fused kernels; the ATen form's bf16 agrees within bf16 rounding.
TEST_F(FusedCudaTest, DeterministicAndWhatAutoRuns) {
  const Problem p = MakeProblem(4, 3000, 32, 12);
  torch::NoGradGuard no_grad;
  TaylorKernelOptions automatic;
  automatic.bf16_products = true;
  TaylorKernelOptions aten = AtenOptions();
  aten.bf16_products = true;
  for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
    const auto first = RunOn(torch::kCUDA, torch::kFloat32, path, p, Fused());
    const auto second = RunOn(torch::kCUDA, torch::kFloat32, path, p, Fused());
    EXPECT_TRUE(torch::equal(first, second)) << AttentionPathName(path);
    EXPECT_TRUE(torch::equal(first, RunOn(torch::kCUDA, torch::kFloat32, path, p, automatic)))
        << AttentionPathName(path);
    const auto reference = RunOn(torch::kCUDA, torch::kFloat32, path, p, aten);
    for (std::int64_t b = 0; b < 2; ++b) {
      EXPECT_LE(RelativeError(Real(p, first.cpu(), b), Real(p, reference.cpu(), b)), 1e-2)
          << AttentionPathName(path);
    }
  }
}

}  // namespace
}  // namespace ts

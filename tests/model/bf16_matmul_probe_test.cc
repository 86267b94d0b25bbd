// model/kernels/bf16_matmul_probe.h: LibTorch's bf16 products on this CPU, measured, and what the
// measurement decides. Either branch asserts what a user sees: where the probe finds float32 sums,
// a K = 2048 product of positive bf16 values is within bfloat16 rounding of float64 and bf16 is
// accepted; where it finds bfloat16 sums, the same product is far off and bf16 is refused with the
// measurement and the alternative in the message. CI runs this test uncapped and capped to AVX2 and
// the generic level (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and TS_CPU_CAPABILITY together).
#include "model/kernels/bf16_matmul_probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "model/kernels/mixed_linear.h"
#include "model/training/training.h"

namespace ts {
namespace {

// The test's own K = 2048 product (other shapes and seed than the probe's) of positive bf16
// values, against float64 of the same inputs, relative to the largest entry.
double OwnProductError() {
  torch::NoGradGuard no_grad;
  torch::manual_seed(97);
  const auto a = (torch::rand({64, kBf16ProbeDepth}) + 0.01).to(torch::kBFloat16);
  const auto b = (torch::rand({kBf16ProbeDepth, 40}) + 0.01).to(torch::kBFloat16);
  const auto exact = torch::mm(a.to(torch::kFloat64), b.to(torch::kFloat64));
  const auto got = torch::mm(a, b).to(torch::kFloat64);
  return ((got - exact).abs().max() / exact.abs().max()).item<double>();
}

TEST(Bf16MatmulProbeTest, Float32SumsOrBf16IsRefused) {
  const Bf16MatmulProbe& probe = CpuBf16Matmul();
  // The measurement, for the log of every run (docs/MODEL.md's table was read off it).
  std::cout << "bf16 probe: " << probe.Describe()
            << (probe.onednn_bypassed ? "; oneDNN refused bf16, LibTorch's own kernels measured"
                                      : "")
            << "\n";
  SCOPED_TRACE(probe.Describe());
  const absl::Status inference = CheckPrecisionSupported(Precision::kBf16, torch::kCPU);
  TrainingOptions training;
  training.precision = Precision::kBf16;
  const absl::Status trained = ValidateTrainingOptions(training);
  if (probe.float32_sums()) {
    EXPECT_LE(probe.relative_error, kBf16AccumulationBound);
    EXPECT_LE(OwnProductError(), kBf16AccumulationBound);
    EXPECT_TRUE(CheckBf16SumsInFloat32(Precision::kBf16, torch::kCPU).ok());
    EXPECT_TRUE(trained.ok()) << trained;
    return;
  }
  if (probe.ran) {
    EXPECT_GT(probe.relative_error, kBf16AccumulationBound);
    EXPECT_GT(OwnProductError(), kBf16AccumulationBound);
  }
  for (const absl::Status& refused : {inference, trained}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(refused.message().find("use precision: fp32"), std::string::npos) << refused;
  }
}

// The measurement is a real one: it scales with the sum's length where sums are bfloat16 and
// stays at bfloat16's rounding where they are float32.
TEST(Bf16MatmulProbeTest, ErrorFollowsTheSumLength) {
  const Bf16MatmulProbe shorter = MeasureCpuBf16Matmul(64);
  const Bf16MatmulProbe& longer = CpuBf16Matmul();
  ASSERT_EQ(shorter.ran, longer.ran) << shorter.error << " / " << longer.error;
  if (!longer.ran) GTEST_SKIP() << "LibTorch refused bf16 products: " << longer.error;
  EXPECT_GT(shorter.relative_error, 0.0) << "bf16 inputs should not multiply exactly";
  if (longer.float32_sums()) {
    EXPECT_LE(shorter.relative_error, kBf16AccumulationBound);
  } else {
    EXPECT_GT(longer.relative_error, 4 * shorter.relative_error);
  }
}

TEST(Bf16MatmulProbeTest, Fp32AndOtherDevicesAreNeverRefused) {
  EXPECT_TRUE(CheckBf16SumsInFloat32(Precision::kFp32, torch::kCPU).ok());
  EXPECT_TRUE(CheckBf16SumsInFloat32(Precision::kBf16, torch::Device(torch::kCUDA, 0)).ok());
}

}  // namespace
}  // namespace ts

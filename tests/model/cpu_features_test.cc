// The CPU probe (model/kernels/cpu_features.h): names, the TS_CPU_CAPABILITY cap, and what the cap
// reaches (the bf16 check; the kernels' own variants are compared in fused_inference_test).
#include "model/kernels/cpu_features.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "model/kernels/bf16_feature_products.h"
#include "model/kernels/mixed_linear.h"

namespace ts {
namespace {

constexpr CpuCapability kAll[] = {CpuCapability::kDefault, CpuCapability::kAvx2,
                                  CpuCapability::kAvx512, CpuCapability::kAvx512Bf16,
                                  CpuCapability::kAmx};

TEST(CpuFeaturesTest, NamesRoundTripAndBadNamesListTheValues) {
  for (const CpuCapability cap : kAll) {
    const auto parsed = ParseCpuCapability(CpuCapabilityName(cap));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, cap);
  }
  const auto bad = ParseCpuCapability("avx-512");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "'avx-512' is not one of default, avx2, avx512, avx512_bf16, amx"),
            std::string::npos)
      << bad.status();
}

TEST(CpuFeaturesTest, TheCapLowersButNeverRaisesTheLevel) {
  const CpuCapability detected = DetectedCpuCapability();
  for (const CpuCapability cap : kAll) {
    ScopedCpuCapability scoped(cap);
    EXPECT_EQ(ActiveCpuCapability(), std::min(cap, detected)) << CpuCapabilityName(cap);
    EXPECT_EQ(HaveAvx512F(), std::min(cap, detected) >= CpuCapability::kAvx512);
    EXPECT_EQ(HaveAvx512Bf16(), std::min(cap, detected) >= CpuCapability::kAvx512Bf16);
  }
}

// Under the cap, bf16 is refused as on a CPU without it, and the message says why.
TEST(CpuFeaturesTest, CappingBelowAvx512Bf16RefusesBf16AndSaysSo) {
  if (DetectedCpuCapability() < CpuCapability::kAvx512Bf16) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16 to cap";
  }
  ScopedCpuCapability scoped(CpuCapability::kAvx2);
  EXPECT_FALSE(HostCpuHasBf16());
  const auto status = CheckPrecisionSupported(Precision::kBf16, torch::kCPU);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("capped at avx2 (detected"), std::string::npos) << status;
  EXPECT_TRUE(CheckPrecisionSupported(Precision::kFp32, torch::kCPU).ok());
}

}  // namespace
}  // namespace ts

// GpuTelemetry against a stand-in NVML (tests/testing/fake_nvml.cc, two GPUs): readings, a GPU
// whose queries fail, NVML that does not start, and no library at all.
#include "common/gpu_telemetry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace ts {
namespace {

class GpuTelemetryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("FAKE_NVML_INIT_ERROR");
    unsetenv("FAKE_NVML_FAIL_INDEX");
  }
};

TEST_F(GpuTelemetryTest, ReadsEveryGpu) {
  auto telemetry = GpuTelemetry::Open(TS_FAKE_NVML);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_EQ((*telemetry)->device_count(), 2);
  const std::vector<GpuTelemetry::Sample> samples = (*telemetry)->Read();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].index, 0);
  EXPECT_EQ(samples[0].uuid, "GPU-fake-0000");
  EXPECT_DOUBLE_EQ(samples[0].utilization, 0.37);
  EXPECT_DOUBLE_EQ(samples[0].memory_utilization, 0.12);
  EXPECT_EQ(samples[0].memory_used_bytes, std::uint64_t{1} << 30);
  EXPECT_EQ(samples[0].memory_total_bytes, std::uint64_t{80} << 30);
  EXPECT_EQ(samples[1].uuid, "GPU-fake-0001");
  EXPECT_DOUBLE_EQ(samples[1].utilization, 1.0);
}

TEST_F(GpuTelemetryTest, AGpuWhoseQueriesFailIsLeftOut) {
  setenv("FAKE_NVML_FAIL_INDEX", "0", 1);
  auto telemetry = GpuTelemetry::Open(TS_FAKE_NVML);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  const std::vector<GpuTelemetry::Sample> samples = (*telemetry)->Read();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].index, 1);
}

TEST_F(GpuTelemetryTest, NvmlThatDoesNotStartIsFailedPreconditionWithItsMessage) {
  setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  auto telemetry = GpuTelemetry::Open(TS_FAKE_NVML);
  ASSERT_FALSE(telemetry.ok());
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(telemetry.status().message().find("Driver Not Loaded"), std::string::npos)
      << telemetry.status();
}

TEST_F(GpuTelemetryTest, NoLibraryIsNotFound) {
  auto telemetry = GpuTelemetry::Open("libts-no-such-nvml.so.1");
  ASSERT_FALSE(telemetry.ok());
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(telemetry.status().message().find("libts-no-such-nvml.so.1"), std::string::npos);
}

TEST_F(GpuTelemetryTest, ALibraryWithoutNvmlIsFailedPreconditionNamingTheSymbol) {
  auto telemetry = GpuTelemetry::Open("libz.so.1");
  ASSERT_FALSE(telemetry.ok());
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(telemetry.status().message().find("nvmlInit_v2"), std::string::npos);
}

}  // namespace
}  // namespace ts

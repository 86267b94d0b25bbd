// model/torch_compat: what differs between LibTorch 1.13 (Debian) and 2.11 (the CUDA build), and
// what the CUDA build must get right about the process it runs in. Runs in both builds.
#include "model/torch_compat.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace ts {
namespace {

// The distinct files of the mapped libraries whose name contains `name`.
std::set<std::string> MappedLibraries(const std::string& name) {
  std::set<std::string> paths;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (std::filesystem::path(path).filename().string().find(name) != std::string::npos) {
      paths.insert(path);
    }
  }
  return paths;
}

// Two OpenMP runtimes in one process (a wheel's LibTorch bundles its own libgomp beside
// Debian's, which OpenBLAS and oneDNN use) would each start their own thread team. The build
// links the one LibTorch runs on; exactly one libgomp is mapped, and it is LibTorch's own where
// LibTorch ships one.
TEST(TorchCompatTest, OneOpenMpRuntimeIsMapped) {
  at::parallel_for(0, 1024, 1, [](std::int64_t, std::int64_t) {});
  EXPECT_GE(omp_get_max_threads(), 1);
  const auto gomp = MappedLibraries("libgomp");
  ASSERT_EQ(gomp.size(), 1u) << "libgomp mapped from " << gomp.size() << " files";
  const auto torch_cpu = MappedLibraries("libtorch_cpu.so");
  ASSERT_EQ(torch_cpu.size(), 1u);
  const auto bundled = std::filesystem::path(*torch_cpu.begin()).parent_path() / "libgomp.so.1";
  if (std::filesystem::exists(bundled)) {
    EXPECT_TRUE(std::filesystem::equivalent(*gomp.begin(), bundled))
        << "mapped " << *gomp.begin() << ", LibTorch's is " << bundled;
  }
}

TEST(TorchCompatTest, VersionIsTheOneCompiledAgainst) {
  EXPECT_EQ(compat::TorchVersion(), TORCH_VERSION);
  EXPECT_EQ(compat::TorchVersion().rfind(std::to_string(TORCH_VERSION_MAJOR) + ".", 0), 0u);
}

// bf16 × bf16 with a float32 result, as the ATen form's bf16 products take it.
TEST(TorchCompatTest, BmmFloat32KeepsAFloat32Result) {
  torch::manual_seed(1);
  const auto a = torch::randn({3, 17, 40});
  const auto b = torch::randn({3, 40, 9});
  const auto exact = torch::bmm(a.to(torch::kFloat64), b.to(torch::kFloat64));
  const auto fp32 = compat::BmmFloat32(a, b);
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat);
  EXPECT_LE((fp32 - exact).abs().max().item<double>(), 1e-4);
  const auto low = compat::BmmFloat32(a.to(torch::kBFloat16), b.to(torch::kBFloat16));
  EXPECT_EQ(low.scalar_type(), torch::kFloat);
  const double scale = exact.abs().max().item<double>();
  EXPECT_LE((low - exact).abs().max().item<double>() / scale, 2e-2);
}

TEST(TorchCompatTest, SdpaBackendsCanBeChosenWhereLibTorchHasThem) {
  EXPECT_TRUE(compat::UseOnlySdpaBackend("auto"));
  EXPECT_FALSE(compat::UseOnlySdpaBackend("fastest"));
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_TRUE(compat::UseOnlySdpaBackend("math"));
  torch::manual_seed(2);
  const auto q = torch::randn({1, 2, 5, 8});
  const auto y = compat::ScaledDotProductAttention(q, q, q, {});
  EXPECT_TRUE(compat::UseOnlySdpaBackend("auto"));
  EXPECT_LE((y - compat::ScaledDotProductAttention(q, q, q, {})).abs().max().item<double>(), 1e-6);
#else
  EXPECT_FALSE(compat::UseOnlySdpaBackend("flash"));
#endif
}

TEST(TorchCompatTest, CudaHelpersAreInertOnTheCpu) {
  EXPECT_EQ(compat::CudaAvailableBytes(torch::kCPU), 0);
  EXPECT_EQ(compat::GetDeviceMemory(torch::kCPU).allocated_bytes, 0);
  EXPECT_EQ(compat::CudaComputeCapabilityMajor(torch::kCPU), 0);
  compat::SetCudaTf32(false);
  EXPECT_FALSE(compat::CudaTf32Allowed());
}

}  // namespace
}  // namespace ts

#include "model/kernels/mixed_linear.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/cpu_gemm.h"
#include "model/torch_compat.h"

namespace ts {

bool CpuInfoHasBf16(std::string_view cpuinfo) {
  int processors = 0;
  int with_bf16 = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(cpuinfo.data(), cpuinfo.size()), '\n')) {
    if (!absl::StartsWith(line, "flags")) continue;
    ++processors;
    bool found = false;
    for (absl::string_view flag : absl::StrSplit(line.substr(line.find(':') + 1), ' ')) {
      if (flag == "avx512_bf16" || flag == "amx_bf16") found = true;
    }
    if (found) ++with_bf16;
  }
  return processors > 0 && with_bf16 == processors;
}

bool HostCpuHasBf16() {
  // An unreadable /proc/cpuinfo reads as no bf16.
  static const bool listed = CpuInfoHasBf16(ReadFile("/proc/cpuinfo").value_or(""));
  return listed && ActiveCpuCapability() >= CpuCapability::kAvx512Bf16;
}

absl::Status CheckPrecisionSupported(Precision precision, const torch::Device& device) {
  if (precision == Precision::kFp32) return absl::OkStatus();
  if (device.is_cuda()) {
    const int major = compat::CudaComputeCapabilityMajor(device);
    if (major >= 8) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("precision bf16: ", device.str(), " has compute capability ", major,
                     ".x; bf16 tensor cores need 8.0 or newer (use precision: fp32)"));
  }
  if (HostCpuHasBf16()) {
    // The flags say the hardware multiplies bf16; the probe says whether LibTorch sums in float32.
    if (const Bf16MatmulProbe& probe = CpuBf16Matmul(); !probe.float32_sums()) {
      return absl::FailedPreconditionError(
          absl::StrCat("precision bf16: ", probe.Describe(), "; use precision: fp32"));
    }
    return absl::OkStatus();
  }
  if (DetectedCpuCapability() >= CpuCapability::kAvx512Bf16) {
    return absl::FailedPreconditionError(
        absl::StrCat("precision bf16: the CPU kernels are capped at ", DescribeCpuCapability(),
                     ", below avx512_bf16 (unset TS_CPU_CAPABILITY, or use precision: fp32)"));
  }
  return absl::FailedPreconditionError(
      "precision bf16: this CPU has neither AVX512-BF16 nor AMX (no avx512_bf16 or amx_bf16 in "
      "/proc/cpuinfo), so bf16 would be emulated and slower than fp32 (use precision: fp32)");
}

absl::Status CheckBf16SumsInFloat32(Precision precision, const torch::Device& device) {
  if (precision == Precision::kFp32 || !device.is_cpu()) return absl::OkStatus();
  return CheckCpuBf16SumsInFloat32();
}

namespace {

// x·Wᵀ + b for float32 CPU inference with model/kernels/cpu_gemm.h's SgemmInto: one GEMM into a
// tensor that starts as the bias, where LibTorch's linear hands OpenBLAS the product and adds the
// bias in a second pass. Undefined when the inputs do not qualify.
torch::Tensor CpuInferenceLinear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  const auto& w = layer->weight;
  const auto& bias = layer->bias;
  const bool grad = torch::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() ||
                                                      (bias.defined() && bias.requires_grad()));
  if (grad || !x.is_cpu() || x.scalar_type() != torch::kFloat || w.scalar_type() != torch::kFloat ||
      !x.is_contiguous() || !w.is_contiguous() || x.dim() < 1 || x.numel() == 0) {
    return {};
  }
  const std::int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = bias.defined() ? bias.expand({rows, out}).contiguous()
                          : torch::empty({rows, out}, x.options());
  SgemmInto(false, true, rows, out, in, x.data_ptr<float>(), in, w.data_ptr<float>(), in,
            bias.defined() ? 1.0f : 0.0f, y.data_ptr<float>(), out);
  return y.view(sizes);
}

}  // namespace

torch::Tensor MixedLinear(const torch::nn::Linear& layer, const torch::Tensor& low_weight,
                          const torch::Tensor& x) {
  // A CPU whose LibTorch sums bf16 in bfloat16 never multiplies in bf16, even when a caller
  // skipped CheckPrecisionSupported.
  if (!low_weight.defined() || x.numel() < kMinLowPrecisionRows * x.size(-1) ||
      (x.is_cpu() && !CpuBf16Matmul().float32_sums())) {
    if (auto y = CpuInferenceLinear(layer, x); y.defined()) return y;
    return torch::nn::functional::linear(x, layer->weight, layer->bias);
  }
  // The bias in bf16 takes a slow path in LibTorch 1.13's oneDNN matmul: add it in float32.
  auto y =
      torch::nn::functional::linear(x.to(low_weight.scalar_type()), low_weight).to(x.scalar_type());
  if (layer->bias.defined()) y.add_(layer->bias);
  return y;
}

torch::Tensor LowPrecisionWeight(const torch::nn::Linear& layer, Precision precision) {
  if (precision == Precision::kFp32) return {};
  return layer->weight.detach().to(torch::kBFloat16).contiguous();
}

}  // namespace ts

// The linear layers of model/api/precision.h's bf16: the product in bfloat16, the rest in float32.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "model/api/precision.h"

namespace ts {

// True when /proc/cpuinfo text lists avx512_bf16 or amx_bf16 on every processor.
bool CpuInfoHasBf16(std::string_view cpuinfo);
// CpuInfoHasBf16 of this machine's /proc/cpuinfo (read once), and the kernels not capped below
// avx512_bf16 (TS_CPU_CAPABILITY, model/kernels/cpu_features.h).
bool HostCpuHasBf16();
// OK when `device` computes `precision` in hardware with float32 sums; FAILED_PRECONDITION
// naming what is missing (a CPU without AVX512-BF16 or AMX, a LibTorch whose bf16 products sum in
// bfloat16 there (model/kernels/bf16_matmul_probe.h), a CUDA device below compute capability 8.0)
// otherwise. For inference, where bf16 exists to be faster than fp32.
absl::Status CheckPrecisionSupported(Precision precision, const torch::Device& device);
// OK unless `precision` is bf16 on a CPU whose LibTorch sums bf16 products in bfloat16
// (FAILED_PRECONDITION naming the measurement and the alternative). For training's autocast, which
// may run emulated (slowly) where the CPU lacks AVX512-BF16, but never with bfloat16 sums.
absl::Status CheckBf16SumsInFloat32(Precision precision, const torch::Device& device);

// Rows below this count run in float32 even at bf16: the conversions cost more than they save
// on so little work (a 39-row product of the demo model ran slower in bf16 than in fp32 on an
// AVX512-BF16 CPU: bench/model_profile --preset demo --precision bf16 against fp32).
inline constexpr std::int64_t kMinLowPrecisionRows = 128;

// x·Wᵀ + b. With `low_weight` defined (W in a lower dtype) and at least kMinLowPrecisionRows
// rows, the product runs in that dtype and the result returns in x's dtype with the bias added
// there; otherwise it is `layer(x)`.
torch::Tensor MixedLinear(const torch::nn::Linear& layer, const torch::Tensor& low_weight,
                          const torch::Tensor& x);

// The copy of `layer`'s weight that MixedLinear uses at `precision` (undefined at fp32).
torch::Tensor LowPrecisionWeight(const torch::nn::Linear& layer, Precision precision);

}  // namespace ts

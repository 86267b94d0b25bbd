// Numeric precision of a model's linear layers at inference (docs/MODEL.md, "Precision").
//
// fp32: everything in float32. bf16: the qkv, proj and MLP products run in bfloat16 with float32
// accumulation (oneDNN on CPUs with AVX512-BF16 or AMX, tensor cores on CUDA devices of compute
// capability 8.0 or newer; on a CPU, only where LibTorch's bf16 products are measured to sum in
// float32: model/kernels/bf16_matmul_probe.h); their inputs are rounded to bfloat16, their results
// come back as float32 and the biases are added in float32. On the CPU, the efficient attention
// path's two feature products (ψ(K)ᵀV' and φ(Q)·KV) also run in bfloat16 with float32 sums
// (TaylorKernelOptions::bf16_products). Embeddings, layer norms, the direct path, the Taylor
// normalisations (coefficients, denominators, the division), the head and the softmax stay
// float32. Training always runs in the training spec's dtype: precision applies to modules in
// eval mode only.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ts {

enum class Precision { kFp32, kBf16 };

inline std::string PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

// INVALID_ARGUMENT naming the accepted values.
inline absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("precision: expected fp32 or bf16, got '",
                   absl::string_view(name.data(), std::min<std::size_t>(name.size(), 40)), "'"));
}

}  // namespace ts

#include "model/kernels/attention_dispatch.h"

#include <string>

#include "model/kernels/fused_cuda_attention.h"
#include "model/kernels/inference_problem.h"

namespace ts {
namespace {

// Why a kernel cannot run a call of q, k, v under a choice; "" when it can.
using Refusal = std::string (*)(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const KernelChoice& choice);

struct Entry {
  AttentionKernel kernel;
  std::string_view name;
  std::string_view description;  // for error messages
  // The implementation that forces this kernel; kAuto for kernels that only kAuto picks.
  KernelImplementation forced_by;
  Refusal refusal;
};

// kAuto's order: the first that can run the call. A new kernel is one entry here and its own file.
constexpr Entry kKernels[] = {
    {AttentionKernel::kFusedCuda, "fused_cuda", "the fused CUDA kernels",
     KernelImplementation::kCuda,
     [](const auto& q, const auto& k, const auto& v, const auto& choice) -> std::string {
       return FusedCudaRefusal(q, k, v, choice);
     }},
    {AttentionKernel::kFusedCpu, "fused_cpu", "the fused CPU kernels", KernelImplementation::kAuto,
     [](const auto& q, const auto& k, const auto& v, const auto&) -> std::string {
       return CanRunFusedInference(q, k, v) ? "" : "needs float32 CPU tensors without autograd";
     }},
    {AttentionKernel::kCpu, "cpu", "the CPU loops", KernelImplementation::kAuto,
     [](const auto& q, const auto&, const auto&, const auto&) -> std::string {
       return q.is_cpu() ? "" : "needs CPU tensors";
     }},
    {AttentionKernel::kAten, "aten", "the ATen form", KernelImplementation::kAten,
     [](const auto&, const auto&, const auto&, const auto&) -> std::string {
       return "";  // runs anywhere
     }},
};

}  // namespace

std::string_view AttentionKernelName(AttentionKernel kernel) {
  for (const Entry& entry : kKernels) {
    if (entry.kernel == kernel) return entry.name;
  }
  return "unknown";
}

AttentionKernel ChooseAttentionKernel(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const KernelChoice& choice) {
  if (choice.implementation != KernelImplementation::kAuto) {
    for (const Entry& entry : kKernels) {
      if (entry.forced_by != choice.implementation) continue;
      const std::string refusal = entry.refusal(q, k, v, choice);
      TORCH_CHECK(refusal.empty(), entry.description, " cannot run this call: ", refusal);
      return entry.kernel;
    }
  }
  for (const Entry& entry : kKernels) {
    if (entry.refusal(q, k, v, choice).empty()) return entry.kernel;
  }
  return AttentionKernel::kAten;
}

}  // namespace ts

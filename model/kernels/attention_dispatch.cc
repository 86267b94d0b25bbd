#include "model/kernels/attention_dispatch.h"

#include <string>

#include "model/kernels/fused_cuda_attention.h"
#include "model/kernels/inference_problem.h"

namespace ts {
namespace {

using Refusal = std::string (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                const KernelChoice&);

std::string PaddedFusedCudaRefusal(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const KernelChoice& choice) {
  return FusedCudaRefusal(q, k, v, choice);
}

std::string FusedCpuRefusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const KernelChoice& /*choice*/) {
  return CanRunFusedInference(q, k, v) ? "" : "needs float32 CPU tensors without autograd";
}

std::string CpuRefusal(const torch::Tensor& q, const torch::Tensor& /*k*/,
                       const torch::Tensor& /*v*/, const KernelChoice& /*choice*/) {
  return q.is_cpu() ? "" : "needs CPU tensors";
}

std::string AtenRefusal(const torch::Tensor& /*q*/, const torch::Tensor& /*k*/,
                        const torch::Tensor& /*v*/, const KernelChoice& /*choice*/) {
  return "";  // runs anywhere
}

struct Entry {
  AttentionKernel kernel;
  std::string_view name;
  std::string_view description;  // for error messages
  // The implementation that forces this kernel; kAuto for kernels that only kAuto picks.
  KernelImplementation forced_by;
  Refusal refusal;  // why it cannot run a call, "" when it can
};

// kAuto's order: the first that can run the call. A new kernel is one line here and its own file.
constexpr Entry kKernels[] = {
    {AttentionKernel::kFusedCuda, "fused_cuda", "the fused CUDA kernels",
     KernelImplementation::kCuda, &PaddedFusedCudaRefusal},
    {AttentionKernel::kFusedCpu, "fused_cpu", "the fused CPU kernels", KernelImplementation::kAuto,
     &FusedCpuRefusal},
    {AttentionKernel::kCpu, "cpu", "the CPU loops", KernelImplementation::kAuto, &CpuRefusal},
    {AttentionKernel::kAten, "aten", "the ATen form", KernelImplementation::kAten, &AtenRefusal},
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

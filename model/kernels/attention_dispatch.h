// Which kernel computes a call of the direct or efficient path: the one place that looks at the
// device, the dtype, autograd and the KernelChoice (as ATen's DispatchStub does; the CPU level
// is the kernels' own concern, through model/kernels/cpu_features.h). TaylorDirect, TaylorEfficient
// and the attention module ask it; nothing else tests devices to pick a kernel.
#pragma once

#include <torch/torch.h>

#include <string_view>

#include "model/kernels/taylor_attention.h"

namespace ts {

enum class AttentionKernel {
  kFusedCuda,  // model/kernels/fused_cuda_attention.h: bf16 inference on a GPU
  kFusedCpu,   // model/kernels/direct_inference.h, model/kernels/efficient_inference.h: float32 CPU
               // inference
  kCpu,        // taylor_attention.cc's CPU loops: CPU training, float64
  kAten,       // taylor_attention.cc's ATen form: any device (CUDA float32 and training)
};

// "fused_cuda", "fused_cpu", "cpu", "aten".
std::string_view AttentionKernelName(AttentionKernel kernel);

// The kernel for q, k, v (the Taylor paths' inputs) under `choice`. kAuto takes the first kernel
// of the table (attention_dispatch.cc) that can run the call; kAten and kCuda force theirs and
// throw c10::Error naming the reason when it cannot run the call.
AttentionKernel ChooseAttentionKernel(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const KernelChoice& choice);

}  // namespace ts

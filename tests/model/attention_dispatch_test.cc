// Which kernel runs a Taylor path's call (model/kernels/attention_dispatch.h), on any machine: what
// kAuto picks for CPU tensors by dtype and autograd, what kAten and kCuda force, and the reason
// given when a forced kernel cannot run. (On a GPU, aten_form_test's FusedCuda tests check that
// kAuto at bf16 runs the fused CUDA kernels.)
#include "model/kernels/attention_dispatch.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "model/kernels/fused_cuda_attention.h"
#include "model/kernels/taylor_attention.h"

namespace ts {
namespace {

TEST(AttentionDispatchTest, AutoOnTheCpu) {
  const auto x = torch::randn({1, 2, 10, 16});
  KernelChoice choice;
  EXPECT_EQ(ChooseAttentionKernel(x, x, x, choice), AttentionKernel::kFusedCpu);
  choice.bf16_products = true;  // a precision, not a kernel: still the fused CPU kernels
  EXPECT_EQ(ChooseAttentionKernel(x, x, x, choice), AttentionKernel::kFusedCpu);
  const auto wide = x.to(torch::kFloat64);
  EXPECT_EQ(ChooseAttentionKernel(wide, wide, wide, choice), AttentionKernel::kCpu);
  const auto trained = x.clone().requires_grad_(true);
  EXPECT_EQ(ChooseAttentionKernel(trained, x, x, choice), AttentionKernel::kCpu);
  {
    torch::NoGradGuard no_grad;  // a leaf that requires grad, in inference: fused
    EXPECT_EQ(ChooseAttentionKernel(trained, x, x, choice), AttentionKernel::kFusedCpu);
  }
}

TEST(AttentionDispatchTest, AtenIsForcedAnywhere) {
  const auto x = torch::randn({1, 2, 10, 16});
  KernelChoice choice;
  choice.implementation = KernelImplementation::kAten;
  EXPECT_EQ(ChooseAttentionKernel(x, x, x, choice), AttentionKernel::kAten);
  const auto wide = x.to(torch::kFloat64).requires_grad_(true);
  EXPECT_EQ(ChooseAttentionKernel(wide, wide, wide, choice), AttentionKernel::kAten);
}

// Forced where they cannot run, the fused CUDA kernels refuse with the reason, from the
// dispatcher and from the attention functions alike.
TEST(AttentionDispatchTest, ForcedCudaKernelsSayWhyTheyCannotRun) {
  const auto q = torch::randn({1, 2, 10, 16});
  TaylorKernelOptions options;
  options.bf16_products = true;
  options.implementation = KernelImplementation::kCuda;
  EXPECT_FALSE(FusedCudaRefusal(q, q, q, options).empty());
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) {
        ChooseAttentionKernel(q, q, q, options);
      } else {
        TaylorEfficient(q, q, q, {}, options);
      }
      ADD_FAILURE() << "kCuda on CPU tensors ran";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("the fused CUDA kernels cannot run this call"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(AttentionDispatchTest, NamesAndParsing) {
  EXPECT_EQ(AttentionKernelName(AttentionKernel::kFusedCuda), "fused_cuda");
  EXPECT_EQ(AttentionKernelName(AttentionKernel::kFusedCpu), "fused_cpu");
  EXPECT_EQ(AttentionKernelName(AttentionKernel::kCpu), "cpu");
  EXPECT_EQ(AttentionKernelName(AttentionKernel::kAten), "aten");
  EXPECT_EQ(ParseKernelImplementation("auto"), KernelImplementation::kAuto);
  EXPECT_EQ(ParseKernelImplementation("aten"), KernelImplementation::kAten);
  EXPECT_EQ(ParseKernelImplementation("cuda"), KernelImplementation::kCuda);
  EXPECT_FALSE(ParseKernelImplementation("fused").has_value());
}

}  // namespace
}  // namespace ts

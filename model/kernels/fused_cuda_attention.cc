#include "model/kernels/fused_cuda_attention.h"

#include <cstdint>
#include <limits>

#include "model/torch_compat.h"
#if defined(TS_WITH_CUDA_KERNELS)
#include "model/kernels/taylor_kernels_cuda.h"
#endif

namespace ts {

std::string FusedCudaRefusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const KernelChoice& choice) {
#if defined(TS_WITH_CUDA_KERNELS)
  if (!q.is_cuda() || k.device() != q.device() || v.device() != q.device()) {
    return "q, k and v are not on one CUDA device";
  }
  if (q.scalar_type() != torch::kFloat || k.scalar_type() != torch::kFloat ||
      v.scalar_type() != torch::kFloat) {
    return "q, k and v are not float32";
  }
  if (!choice.bf16_products) return "the kernels multiply in bfloat16 (bf16_products is off)";
  if (torch::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    return "the kernels have no backward (autograd is on)";
  }
  if (q.dim() != 4 || !cuda_kernels::SupportedHeadDim(static_cast<int>(q.size(3)))) {
    return "head dimension not 8, 16, 32 or 64";
  }
  if (q.size(0) * q.size(1) > 65535) return "more than 65,535 sequences × heads";
  if (q.size(2) > std::numeric_limits<int>::max()) return "more than 2^31 - 1 tokens";
  return "";
#else
  (void)q;
  (void)k;
  (void)v;
  (void)choice;
  return "this build has no CUDA kernels (scripts/build --cuda)";
#endif
}

torch::Tensor FusedCudaAttention(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options) {
  TORCH_CHECK(path == AttentionPath::kDirect || path == AttentionPath::kEfficient,
              "the fused CUDA kernels compute the direct and efficient paths, not ",
              AttentionPathName(path));
  const std::string refusal = FusedCudaRefusal(q, k, v, options);
  TORCH_CHECK(refusal.empty(), "the fused CUDA kernels cannot run this call: ", refusal);
#if defined(TS_WITH_CUDA_KERNELS)
  const auto q_c = q.contiguous();
  const auto k_c = k.contiguous();
  const auto v_c = v.contiguous();
  auto y = torch::empty_like(q_c);
  if (q.numel() == 0) return y;
  const std::int64_t batch = q.size(0), tokens = q.size(2);
  torch::Tensor mask;
  torch::Tensor counts;
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == batch &&
                    key_padding_mask.size(1) == tokens &&
                    key_padding_mask.scalar_type() == torch::kBool,
                "attention: key_padding_mask must be bool [B, N] = [", batch, ", ", tokens,
                "], got ", key_padding_mask.sizes());
    mask = key_padding_mask.to(q.device()).contiguous();
    counts = mask.logical_not().sum(1).clamp_min(1).to(torch::kFloat).contiguous();
  } else {
    counts = torch::full({batch}, static_cast<double>(tokens), q_c.options());
  }
  cuda_kernels::AttentionArgs args;
  args.q = q_c.data_ptr<float>();
  args.k = k_c.data_ptr<float>();
  args.v = v_c.data_ptr<float>();
  args.key_padding = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  args.counts = counts.data_ptr<float>();
  args.y = y.data_ptr<float>();
  args.batch = static_cast<int>(batch);
  args.heads = static_cast<int>(q.size(1));
  args.tokens = static_cast<int>(tokens);
  args.head_dim = static_cast<int>(q.size(3));
  args.a = static_cast<float>(options.a);
  args.b = static_cast<float>(options.b);
  args.c = static_cast<float>(options.c);
  args.output_normalize = options.output_normalize;
  compat::WithCudaStream(q.device(), [&](void* stream, int multiprocessors) {
    const auto raw = static_cast<cudaStream_t>(stream);
    cudaError_t error = cudaSuccess;
    if (path == AttentionPath::kDirect) {
      error = cuda_kernels::LaunchDirect(args, raw);
    } else {
      const auto plan = cuda_kernels::PlanEfficient(args, multiprocessors);
      // The caching allocator hands out memory ordered on the current stream.
      auto workspace = torch::empty({static_cast<std::int64_t>(plan.workspace_bytes)},
                                    q_c.options().dtype(torch::kUInt8));
      error = cuda_kernels::LaunchEfficient(args, plan, workspace.data_ptr(), raw);
    }
    TORCH_CHECK(error == cudaSuccess, "fused CUDA ", AttentionPathName(path),
                " attention failed to launch: ", cudaGetErrorString(error));
  });
  return y;
#else
  (void)key_padding_mask;
  return {};
#endif
}

}  // namespace ts

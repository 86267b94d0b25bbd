#include "model/kernels/fused_cuda_attention.h"

#include <array>
#include <cstdint>
#include <limits>

#include "model/torch_compat.h"
#if defined(TS_WITH_CUDA_KERNELS)
#include "model/kernels/taylor_kernels_cuda.h"
#endif

namespace ts {
namespace {

#if defined(TS_WITH_CUDA_KERNELS)
// q, k and v as the kernels read them: rows of contiguous values, q and k at one layout. The
// normalised q̂, k̂ and a view of the qkv product's v already are; anything else is copied.
std::array<torch::Tensor, 3> Operands(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v) {
  const bool shared = q.stride(-1) == 1 && k.strides() == q.strides();
  return {shared ? q : q.contiguous(), shared ? k : k.contiguous(),
          v.stride(-1) == 1 ? v : v.contiguous()};
}

// Fills the operands and the polynomial into `args` and runs `path`'s kernels on q's device.
void Launch(AttentionPath path, const std::array<torch::Tensor, 3>& qkv, const torch::Tensor& y,
            const TaylorKernelOptions& options, cuda_kernels::AttentionArgs& args) {
  args.q = qkv[0].data_ptr<float>();
  args.k = qkv[1].data_ptr<float>();
  args.v = qkv[2].data_ptr<float>();
  args.y = y.data_ptr<float>();
  args.head_dim = static_cast<int>(qkv[0].size(-1));
  args.a = static_cast<float>(options.a);
  args.b = static_cast<float>(options.b);
  args.c = static_cast<float>(options.c);
  args.output_normalize = options.output_normalize;
  compat::WithCudaStream(y.device(), [&](void* stream, int multiprocessors) {
    const auto raw = static_cast<cudaStream_t>(stream);
    cudaError_t error = cudaSuccess;
    if (path == AttentionPath::kDirect) {
      error = cuda_kernels::LaunchDirect(args, raw);
    } else {
      const auto plan = cuda_kernels::PlanEfficient(args, multiprocessors);
      // The caching allocator hands out memory ordered on the current stream.
      auto workspace = torch::empty({static_cast<std::int64_t>(plan.workspace_bytes)},
                                    y.options().dtype(torch::kUInt8));
      error = cuda_kernels::LaunchEfficient(args, plan, workspace.data_ptr(), raw);
    }
    TORCH_CHECK(error == cudaSuccess, "fused CUDA ", AttentionPathName(path),
                " attention failed to launch: ", cudaGetErrorString(error));
  });
}
#endif

void CheckRunnable(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                   const torch::Tensor& v, const TaylorKernelOptions& options,
                   std::int64_t packed_sequences) {
  TORCH_CHECK(path == AttentionPath::kDirect || path == AttentionPath::kEfficient,
              "the fused CUDA kernels compute the direct and efficient paths, not ",
              AttentionPathName(path));
  const std::string refusal = FusedCudaRefusal(q, k, v, options, packed_sequences);
  TORCH_CHECK(refusal.empty(), "the fused CUDA kernels cannot run this call: ", refusal);
}

}  // namespace

std::string FusedCudaRefusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const KernelChoice& choice, std::int64_t packed_sequences) {
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
  const bool packed = packed_sequences > 0;
  if (q.dim() != (packed ? 3 : 4) || k.sizes() != q.sizes() || v.sizes() != q.sizes()) {
    return packed ? "q, k and v are not [T, H, d]" : "q, k and v are not [B, H, N, d]";
  }
  if (!cuda_kernels::SupportedHeadDim(static_cast<int>(q.size(-1)))) {
    return "head dimension not 8, 16, 32 or 64";
  }
  if ((packed ? packed_sequences : q.size(0)) * q.size(1) > 65535) {
    return "more than 65,535 sequences × heads";
  }
  if (q.size(packed ? 0 : 2) > std::numeric_limits<int>::max()) return "more than 2^31 - 1 tokens";
  return "";
#else
  (void)q;
  (void)k;
  (void)v;
  (void)choice;
  (void)packed_sequences;
  return "this build has no CUDA kernels (scripts/build --cuda)";
#endif
}

torch::Tensor FusedCudaAttention(AttentionPath path, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& key_padding_mask,
                                 const TaylorKernelOptions& options) {
  CheckRunnable(path, q, k, v, options, 0);
#if defined(TS_WITH_CUDA_KERNELS)
  auto y = torch::empty(q.sizes(), q.options());
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
    counts = torch::full({batch}, static_cast<double>(tokens), q.options());
  }
  const auto qkv = Operands(q, k, v);
  cuda_kernels::AttentionArgs args;
  args.in_layout = {qkv[0].stride(0), qkv[0].stride(1), qkv[0].stride(2)};
  args.value_layout = {qkv[2].stride(0), qkv[2].stride(1), qkv[2].stride(2)};
  args.out_layout = {y.stride(0), y.stride(1), y.stride(2)};
  args.key_padding = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  args.counts = counts.data_ptr<float>();
  args.batch = static_cast<int>(batch);
  args.heads = static_cast<int>(q.size(1));
  args.tokens = static_cast<int>(tokens);
  Launch(path, qkv, y, options, args);
  return y;
#else
  (void)key_padding_mask;
  return {};
#endif
}

torch::Tensor FusedCudaPackedAttention(AttentionPath path, const torch::Tensor& q,
                                       const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& starts, std::int64_t longest,
                                       const TaylorKernelOptions& options) {
  TORCH_CHECK(starts.dim() == 1 && starts.size(0) >= 2 && starts.scalar_type() == torch::kInt,
              "packed attention: starts must be int32 [B + 1], got ", starts.sizes(), " ",
              starts.scalar_type());
  CheckRunnable(path, q, k, v, options, starts.size(0) - 1);
  TORCH_CHECK(longest >= 1 && longest <= q.size(0), "packed attention: the longest sequence (",
              longest, " rows) must have 1 to the ", q.size(0), " packed rows");
#if defined(TS_WITH_CUDA_KERNELS)
  auto y = torch::empty(q.sizes(), q.options());
  const auto offsets = starts.to(q.device()).contiguous();
  const auto counts =
      (offsets.narrow(0, 1, offsets.size(0) - 1) - offsets.narrow(0, 0, offsets.size(0) - 1))
          .clamp_min(1)
          .to(torch::kFloat)
          .contiguous();
  const auto qkv = Operands(q, k, v);
  cuda_kernels::AttentionArgs args;
  args.in_layout = {0, qkv[0].stride(1), qkv[0].stride(0)};
  args.value_layout = {0, qkv[2].stride(1), qkv[2].stride(0)};
  args.out_layout = {0, y.stride(1), y.stride(0)};
  args.starts = offsets.data_ptr<int>();
  args.counts = counts.data_ptr<float>();
  args.batch = static_cast<int>(starts.size(0) - 1);
  args.heads = static_cast<int>(q.size(1));
  args.tokens = static_cast<int>(longest);
  Launch(path, qkv, y, options, args);
  return y;
#else
  return {};
#endif
}

}  // namespace ts

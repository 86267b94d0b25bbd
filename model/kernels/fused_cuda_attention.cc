#include "model/kernels/fused_cuda_attention.h"

#include <array>
#include <cstdint>
#include <limits>
#include <utility>

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

// The operands and the polynomial into `args` (forward and backward alike).
void FillOperands(const std::array<torch::Tensor, 3>& qkv, const TaylorMath& math,
                  cuda_kernels::AttentionArgs& args) {
  args.q = qkv[0].data_ptr<float>();
  args.k = qkv[1].data_ptr<float>();
  args.v = qkv[2].data_ptr<float>();
  args.head_dim = static_cast<int>(qkv[0].size(-1));
  args.a = static_cast<float>(math.a);
  args.b = static_cast<float>(math.b);
  args.c = static_cast<float>(math.c);
  args.output_normalize = math.output_normalize;
}

// Fills the operands, the polynomial and y into `args` and runs `path`'s kernels on q's device.
void Launch(AttentionPath path, const std::array<torch::Tensor, 3>& qkv, const torch::Tensor& y,
            const TaylorKernelOptions& options, cuda_kernels::AttentionArgs& args) {
  FillOperands(qkv, options, args);
  args.y = y.data_ptr<float>();
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

// The padded batch's arguments: q, k, v [B, H, N, d] as Operands gives them, y its output,
// `mask` [B, N] (undefined: none) and `counts` [B] float32 on the device.
cuda_kernels::AttentionArgs PaddedArgs(const std::array<torch::Tensor, 3>& qkv,
                                       const torch::Tensor& y, const torch::Tensor& mask,
                                       const torch::Tensor& counts) {
  cuda_kernels::AttentionArgs args;
  args.in_layout = {qkv[0].stride(0), qkv[0].stride(1), qkv[0].stride(2)};
  args.value_layout = {qkv[2].stride(0), qkv[2].stride(1), qkv[2].stride(2)};
  args.out_layout = {y.stride(0), y.stride(1), y.stride(2)};
  args.key_padding = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  args.counts = counts.data_ptr<float>();
  args.batch = static_cast<int>(qkv[0].size(0));
  args.heads = static_cast<int>(qkv[0].size(1));
  args.tokens = static_cast<int>(qkv[0].size(2));
  return args;
}

// The mask on q's device and each sequence's real tokens (at least 1), float32 [B].
std::pair<torch::Tensor, torch::Tensor> MaskAndCounts(const torch::Tensor& q,
                                                      const torch::Tensor& key_padding_mask) {
  const std::int64_t batch = q.size(0), tokens = q.size(2);
  if (!key_padding_mask.defined()) {
    return {torch::Tensor(), torch::full({batch}, static_cast<double>(tokens), q.options())};
  }
  TORCH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == batch &&
                  key_padding_mask.size(1) == tokens &&
                  key_padding_mask.scalar_type() == torch::kBool,
              "attention: key_padding_mask must be bool [B, N] = [", batch, ", ", tokens, "], got ",
              key_padding_mask.sizes());
  auto mask = key_padding_mask.to(q.device()).contiguous();
  auto counts = mask.logical_not().sum(1).clamp_min(1).to(torch::kFloat).contiguous();
  return {mask, counts};
}

// Both paths under autograd: the forward kernels (which also write each query's denominator),
// and a backward by the backward kernels, which recompute scores and features: what is kept is
// q̂, k̂, v, y and the denominators, O(N·d) per head.
class FusedCudaCore : public torch::autograd::Function<FusedCudaCore> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_padding_mask, AttentionPath path,
                               const TaylorKernelOptions& options) {
    const std::array<torch::Tensor, 3> qkv = {q.contiguous(), k.contiguous(), v.contiguous()};
    auto y = torch::empty(q.sizes(), q.options());
    const auto [mask, counts] = MaskAndCounts(q, key_padding_mask);
    auto den = torch::empty({q.size(0), q.size(1), q.size(2), 1}, q.options());
    auto args = PaddedArgs(qkv, y, mask, counts);
    args.denominators = den.data_ptr<float>();
    Launch(path, qkv, y, options, args);
    ctx->save_for_backward({qkv[0], qkv[1], qkv[2], y, den, mask, counts});
    ctx->saved_data["path"] = static_cast<std::int64_t>(path);
    ctx->saved_data["a"] = options.a;
    ctx->saved_data["b"] = options.b;
    ctx->saved_data["c"] = options.c;
    ctx->saved_data["output_normalize"] = options.output_normalize;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &y = saved[3], &den = saved[4];
    const auto &mask = saved[5], &counts = saved[6];
    const auto path = static_cast<AttentionPath>(ctx->saved_data["path"].toInt());
    // The polynomial the forward ran with (saved_data holds IValues: doubles and a bool).
    TaylorMath math;
    math.a = ctx->saved_data["a"].toDouble();
    math.b = ctx->saved_data["b"].toDouble();
    math.c = ctx->saved_data["c"].toDouble();
    math.output_normalize = ctx->saved_data["output_normalize"].toBool();
    const bool normalize = math.output_normalize;
    const auto grad_y = grad_outputs[0].to(torch::kFloat);
    // ∂L/∂nom from the quotient: the direct path's y carries the output normalisation s.
    auto scaled = grad_y;
    if (path == AttentionPath::kDirect && normalize) {
      scaled = grad_y * (counts / static_cast<double>(q.size(3))).sqrt().view({-1, 1, 1, 1});
    }
    const auto dnom =
        torch::cat({scaled, -(grad_y * y).sum(-1, /*keepdim=*/true)}, -1).div_(den).contiguous();
    auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    cuda_kernels::BackwardArgs args;
    args.forward = PaddedArgs({q, k, v}, y, mask, counts);
    FillOperands({q, k, v}, math, args.forward);
    args.dnom = dnom.data_ptr<float>();
    args.dnom_layout = {dnom.stride(0), dnom.stride(1), dnom.stride(2)};
    args.dq = dq.data_ptr<float>();
    args.dk = dk.data_ptr<float>();
    args.dv = dv.data_ptr<float>();
    args.grad_layout = {dq.stride(0), dq.stride(1), dq.stride(2)};
    compat::WithCudaStream(q.device(), [&](void* stream, int multiprocessors) {
      const auto raw = static_cast<cudaStream_t>(stream);
      cudaError_t error = cudaSuccess;
      if (path == AttentionPath::kDirect) {
        error = cuda_kernels::LaunchDirectBackward(args, raw);
      } else {
        const auto plan = cuda_kernels::PlanEfficient(args.forward, multiprocessors);
        auto workspace =
            torch::empty({static_cast<std::int64_t>(
                             cuda_kernels::EfficientBackwardWorkspace(args.forward, plan))},
                         q.options().dtype(torch::kUInt8));
        error = cuda_kernels::LaunchEfficientBackward(args, plan, workspace.data_ptr(), raw);
      }
      TORCH_CHECK(error == cudaSuccess, "fused CUDA ", AttentionPathName(path),
                  " attention's backward failed to launch: ", cudaGetErrorString(error));
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
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
  const bool packed = packed_sequences > 0;
  if (torch::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    if (packed) return "packed batches have no backward (autograd is on)";
    // The backward kernels have not run on a GPU yet: kAuto keeps the ATen form for training.
    if (choice.implementation != KernelImplementation::kCuda) {
      return "under autograd only when asked for (implementation cuda)";
    }
  }
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
  if (q.numel() == 0) return torch::empty(q.sizes(), q.options());
  if (torch::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    return FusedCudaCore::apply(q, k, v, key_padding_mask, path, options);
  }
  auto y = torch::empty(q.sizes(), q.options());
  const auto [mask, counts] = MaskAndCounts(q, key_padding_mask);
  const auto qkv = Operands(q, k, v);
  auto args = PaddedArgs(qkv, y, mask, counts);
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

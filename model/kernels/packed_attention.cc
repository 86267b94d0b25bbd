#include "model/kernels/packed_attention.h"

#include "model/kernels/fused_cuda_attention.h"

namespace ts {

PackedBatch PackBatch(const torch::Tensor& lengths, std::int64_t width) {
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) > 0, "lengths must be [batch], got ",
                    lengths.sizes());
  const auto lens = lengths.to(torch::kLong);
  const auto host = lens.cpu();  // one copy from the device for the checks and the longest
  PackedBatch batch;
  batch.sequences = lens.size(0);
  batch.width = width;
  batch.longest = host.max().item<std::int64_t>();
  const std::int64_t shortest = host.min().item<std::int64_t>();
  TORCH_CHECK_VALUE(shortest >= 1 && batch.longest <= width, "every sequence needs 1 to ", width,
                    " rows, got ", shortest, " to ", batch.longest);
  const auto ends = torch::cumsum(lens, 0);
  const auto firsts = ends - lens;
  batch.starts = torch::cat({torch::zeros({1}, ends.options()), ends}).to(torch::kInt);
  const auto slots = torch::arange(width, lens.options()).unsqueeze(0);
  const auto keep = slots < lens.unsqueeze(1);  // [B, N]
  batch.rows = keep.reshape({-1}).nonzero().squeeze(1);
  batch.spread =
      (firsts.unsqueeze(1) + torch::where(keep, slots, torch::zeros_like(slots))).reshape({-1});
  if (shortest < width) batch.key_padding_mask = keep.logical_not();
  return batch;
}

torch::Tensor RunPackedAttentionPath(AttentionPath path, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const PackedBatch& batch, const TaylorKernelOptions& options) {
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes() &&
                  q.size(0) == batch.rows.size(0),
              "packed attention: q, k and v must be [T, H, d] with T = ", batch.rows.size(0),
              " rows, got ", q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  const bool taylor = path == AttentionPath::kDirect || path == AttentionPath::kEfficient;
  const bool cuda_allowed = options.implementation == KernelImplementation::kAuto ||
                            options.implementation == KernelImplementation::kCuda;
  if (taylor && cuda_allowed && FusedCudaRefusal(q, k, v, options, batch.sequences).empty()) {
    return FusedCudaPackedAttention(path, q, k, v, batch.starts.to(q.device()), batch.longest,
                                    options);
  }
  // Every other kernel on the padded layout; a forced kernel that cannot run says why there.
  const std::int64_t heads = q.size(1), d = q.size(2);
  const auto spread = [&](const torch::Tensor& x) {
    return x.index_select(0, batch.spread)
        .view({batch.sequences, batch.width, heads, d})
        .transpose(1, 2);
  };
  const auto mask = batch.key_padding_mask;
  const auto y = RunAttentionPath(path, spread(q), spread(k), spread(v), mask, options);
  return y.transpose(1, 2).reshape({-1, heads, d}).index_select(0, batch.rows);
}

}  // namespace ts

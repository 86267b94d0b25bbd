#include "model/networks/packed_forward.h"

#include "common/status_macros.h"

namespace ts {

torch::Tensor PackedForward(TaylorShiftEncoderImpl& model, const torch::Tensor& tokens,
                            const torch::Tensor& lengths, AttentionPath path) {
  // Without a hook nothing stops the pass.
  return *PackedForwardUnlessStopped(model, tokens, lengths, path, StopCheck());
}

absl::StatusOr<torch::Tensor> PackedForwardUnlessStopped(TaylorShiftEncoderImpl& model,
                                                         const torch::Tensor& tokens,
                                                         const torch::Tensor& lengths,
                                                         AttentionPath path,
                                                         const StopCheck& stop) {
  TORCH_CHECK_VALUE(!model.is_training(), "PackedForward runs in eval mode only");
  TORCH_CHECK_VALUE(lengths.defined(), "PackedForward needs the sequences' lengths");
  const auto [ids, lens] = model.CheckInputs(tokens, lengths);
  const std::int64_t batch = tokens.size(0);
  const std::int64_t length = tokens.size(1);
  const auto positions = torch::arange(length, lens.options()).unsqueeze(0);
  const auto valid = positions < lens.unsqueeze(1);  // [B, N], for the conv embedding

  // The embedding on the padded layout, as forward computes it; CLS first in every row.
  const auto x = model.Embed(ids, valid);

  // The packed rows: the real ones of the padded [B·(N + 1)] rows, CLS included.
  const PackedBatch packing = PackBatch(lens + 1, length + 1);
  const AttentionPath resolved = model.ResolvePath(path, length + 1, batch);

  auto packed = x.flatten(0, 1).index_select(0, packing.rows);  // [T, C]
  for (const auto& module : *model.blocks) {
    TS_RETURN_IF_ERROR(CheckStop(stop));
    auto& block = *module->as<TaylorShiftBlockImpl>();
    packed = packed + block.attn->ForwardPacked(block.Norm(block.norm1, packed), packing, resolved);
    packed = packed + block.mlp(block.Norm(block.norm2, packed));
  }
  // Each sequence's first packed row is its CLS.
  const auto cls_rows = packing.starts.narrow(0, 0, batch).to(torch::kLong);
  return model.head(model.norm(packed.index_select(0, cls_rows)));
}

}  // namespace ts

#include "model/networks/packed_forward.h"

namespace ts {

torch::Tensor PackedForward(TaylorShiftEncoderImpl& model, const torch::Tensor& tokens,
                            const torch::Tensor& lengths, AttentionPath path) {
  TORCH_CHECK_VALUE(!model.is_training(), "PackedForward runs in eval mode only");
  TORCH_CHECK_VALUE(tokens.dim() == 2 && lengths.dim() == 1 && lengths.size(0) == tokens.size(0),
                    "tokens must be [batch, length] and lengths [batch], got ", tokens.sizes(),
                    " and ", lengths.sizes());
  const std::int64_t batch = tokens.size(0);
  const std::int64_t length = tokens.size(1);
  const std::int64_t width = model.options().embed_dim();
  TORCH_CHECK_VALUE(length <= model.options().max_length(), "sequence of ", length,
                    " tokens exceeds max_length ", model.options().max_length());
  const auto ids = tokens.to(torch::kLong);
  const auto lens = lengths.to(torch::kLong);
  const auto positions = torch::arange(length, lens.options()).unsqueeze(0);
  const auto valid = positions < lens.unsqueeze(1);  // [B, N]

  // The embedding on the padded layout, as forward computes it; CLS first in every row.
  torch::Tensor x;
  if (model.options().conv_embed()) {
    x = model.patch_embed_conv(ids, valid);
  } else {
    x = torch::embedding(model.patch_embed->weight.t().contiguous(), ids) + model.patch_embed->bias;
  }
  x = x + model.pe.narrow(1, 0, length);
  x = torch::cat({model.cls_token.expand({batch, 1, width}), x}, 1);

  // The packed rows: the real ones of the padded [B·(N + 1)] rows, CLS included.
  const auto keep = torch::cat({torch::ones({batch, 1}, valid.options()), valid}, 1);
  const auto rows = keep.reshape({-1}).nonzero().squeeze(1);      // [T], in sequence order
  const auto cls_rows = torch::cumsum(lens + 1, 0) - (lens + 1);  // each sequence's first row
  // Back to the padded layout: a real position takes its packed row, a padded one its
  // sequence's CLS row (finite values, so that the masked keys' zero weights stay zero; their
  // outputs are dropped).
  const auto slots = torch::arange(length + 1, lens.options()).unsqueeze(0);
  const auto spread_rows =
      (cls_rows.unsqueeze(1) + torch::where(keep, slots, torch::zeros_like(slots))).reshape({-1});
  const torch::Tensor key_padding_mask = keep.logical_not();
  const bool padded = key_padding_mask.any().item<bool>();
  const AttentionPath resolved = model.ResolvePath(path, length + 1, batch);

  auto packed = x.reshape({-1, width}).index_select(0, rows);  // [T, C]
  for (const auto& module : *model.blocks) {
    auto& block = *module->as<TaylorShiftBlockImpl>();
    const auto normed = block.Norm(block.norm1, packed);
    const auto spread = normed.index_select(0, spread_rows).view({batch, length + 1, width});
    const auto attended = block.attn(spread, padded ? key_padding_mask : torch::Tensor(), resolved);
    packed = packed + attended.reshape({-1, width}).index_select(0, rows);
    packed = packed + block.mlp(block.Norm(block.norm2, packed));
  }
  return model.head(model.norm(packed.index_select(0, cls_rows)));
}

}  // namespace ts

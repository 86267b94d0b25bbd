// Import of weights trained with the reference implementation (github.com/tobna/TaylorShift,
// `TaylorTransformer`) from a file written by PyTorch as
//     torch.save(dict(model.state_dict()), path)
// The architecture is inferred from the tensors (docs/MODEL.md, "Encoder"): depth from blocks.N,
// C and V from patch_embed (linear or conv), H from blocks.0.attn.temperature, L from
// blocks.0.mlp.fc1, classes from head, max length from pe, qkv_bias and conv_embed from the
// presence of their tensors. What a state dict cannot say (output normalisation, the Taylor
// coefficients, labels, modality, heads without input normalisation) comes from
// ReferenceImportOptions. Never throws; every problem is a Status naming the key.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/encoder.h"

namespace ts {

struct ReferenceImportOptions {
  // Class names; empty means "0", "1", ..., "K-1". Otherwise the count must equal K.
  std::vector<std::string> labels;
  // "bytes" or "pixels".
  std::string modality = "bytes";
  // Attention heads. Required when the state dict has no temperature (model trained without
  // input normalisation); otherwise 0 or equal to the inferred count.
  std::int64_t heads = 0;
  // Not recorded in a state dict; every registered reference model uses output normalisation.
  bool output_normalize = true;
  double a = 0.5;
  double b = 1.0;
  double c = 1.0;
  // Extra provenance entries (e.g. created_by); "source" defaults to the imported path.
  std::map<std::string, std::string> provenance;
};

// The imported model (eval mode, CPU, in the state dict's dtype) with its options and metadata,
// ready for SaveCheckpoint.
absl::StatusOr<LoadedCheckpoint> ImportReferenceStateDict(
    const std::string& path, const ReferenceImportOptions& options = {});

// Same, from tensors already in memory (name → tensor).
absl::StatusOr<LoadedCheckpoint> ImportReferenceState(
    const std::map<std::string, torch::Tensor>& state, const ReferenceImportOptions& options);

}  // namespace ts

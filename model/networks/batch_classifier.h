// One forward pass over a batch of token sequences: pads them, builds the lengths, resolves
// the attention path once for the batch (its padded length and size), and returns each sequence's
// class probabilities. The model is only read (eval mode, inference mode), so several threads may
// classify with the same model at once.
#pragma once

#include <torch/torch.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "model/api/stop_check.h"
#include "model/networks/encoder.h"

namespace ts {

struct BatchClassification {
  AttentionPath path = AttentionPath::kDirect;    // the concrete path that ran
  std::int64_t padded_tokens = 0;                 // per sequence, incl. CLS
  std::int64_t real_tokens = 0;                   // all sequences, incl. CLS
  std::vector<std::vector<float>> probabilities;  // [sequence][class]
};

// How a batch of sequences of different lengths runs: padded to the longest (the encoder's
// forward), or packed (PackedForward: the per-token work skips the padding). kAuto packs on a GPU.
enum class BatchLayout { kAuto, kPadded, kPacked };

// `sequences` are byte tokens (each non-empty and ≤ the model's max_length). `pad_to` ≥ the
// longest sequence pads the batch to a fixed length (0 = the longest); the path is resolved
// for the padded length so that a bucket's batches take one path. `stop` is asked before each
// encoder block (model/api/stop_check.h): its first non-OK status is returned and nothing more
// is computed.
absl::StatusOr<BatchClassification> ClassifyBatch(
    TaylorShiftEncoder& model, const std::vector<std::string_view>& sequences,
    AttentionPath requested, const torch::Device& device, std::int64_t pad_to = 0,
    BatchLayout layout = BatchLayout::kAuto, const StopCheck& stop = {});

}  // namespace ts

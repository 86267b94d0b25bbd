#include "model/networks/batch_classifier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/kernels/cuda_stream.h"
#include "model/networks/packed_forward.h"
#include "model/torch_status.h"

namespace ts {

absl::StatusOr<BatchClassification> ClassifyBatch(TaylorShiftEncoder& model,
                                                  const std::vector<std::string_view>& sequences,
                                                  AttentionPath requested,
                                                  const torch::Device& device, std::int64_t pad_to,
                                                  BatchLayout layout, const StopCheck& stop) {
  if (sequences.empty()) return absl::InvalidArgumentError("ClassifyBatch: empty batch");
  const std::int64_t max_length = model->options().max_length();
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto n = static_cast<std::int64_t>(sequences[i].size());
    if (n == 0 || n > max_length) {
      return absl::InvalidArgumentError(
          absl::StrCat("ClassifyBatch: sequence ", i, " has ", n, " tokens; need 1..", max_length));
    }
    longest = std::max(longest, n);
  }
  const std::int64_t width = std::min(max_length, std::max(longest, pad_to));
  const auto batch = static_cast<std::int64_t>(sequences.size());
  try {
    torch::InferenceMode inference;
    // On a GPU: the batch on a stream of its own (batch threads run side by side), its inputs in
    // pinned host memory copied asynchronously; the copy of the probabilities back waits for it.
    const bool gpu = device.is_cuda();
    CudaStreamScope stream(device);
    const auto host = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(gpu);
    auto tokens = torch::zeros({batch, width}, host);
    auto lengths = torch::empty({batch}, host);
    auto* token_data = tokens.data_ptr<std::int64_t>();
    auto* length_data = lengths.data_ptr<std::int64_t>();
    BatchClassification out;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto& s = sequences[b];
      std::transform(s.begin(), s.end(), token_data + b * width,
                     [](char c) { return static_cast<unsigned char>(c); });
      length_data[b] = static_cast<std::int64_t>(s.size());
      out.real_tokens += length_data[b] + 1;
    }
    out.padded_tokens = width + 1;
    out.path = model->ResolvePath(requested, width + 1, batch);
    const auto device_tokens = tokens.to(device, /*non_blocking=*/gpu);
    const auto device_lengths = lengths.to(device, /*non_blocking=*/gpu);
    const bool pack = (layout == BatchLayout::kPacked || (layout == BatchLayout::kAuto && gpu)) &&
                      !model->is_training() && out.real_tokens < batch * out.padded_tokens;
    auto stoppable =
        pack ? PackedForwardUnlessStopped(*model, device_tokens, device_lengths, out.path, stop)
             : model->ForwardUnlessStopped(device_tokens, device_lengths, out.path, stop);
    if (!stoppable.ok()) return stoppable.status();
    const torch::Tensor logits = *std::move(stoppable);
    const auto probabilities =
        torch::softmax(logits.to(torch::kFloat64), -1).to(torch::kFloat32).cpu().contiguous();
    const std::int64_t classes = probabilities.size(1);
    const float* p = probabilities.data_ptr<float>();
    out.probabilities.reserve(batch);
    for (std::int64_t b = 0; b < batch; ++b) {
      out.probabilities.emplace_back(p + b * classes, p + (b + 1) * classes);
    }
    return out;
  } catch (const std::exception& e) {
    return StatusFromException(e, "classify batch");
  }
}

}  // namespace ts

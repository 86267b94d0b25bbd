// Self-describing model checkpoints: architecture, metadata (modality, labels, provenance) and
// weights in one file, checked end to end.
//
// File layout (all integers little-endian):
//   8 bytes   magic "TSCKPT\0\1"
//   uint32    format version (kCheckpointFormatVersion)
//   uint64    payload length P
//   P bytes   torch::pickle_save of Dict{"architecture": Dict[str, int|float|bool],
//             "metadata": Dict{"modality": str, "labels": List[str], "provenance": Dict[str, str]},
//             "state": Dict[str, Tensor]} (tensors on CPU, contiguous)
//   uint32    CRC-32 (IEEE) of the payload
// Saving writes `path.tmp-<pid>`, fsyncs and renames, so a reader sees the old file or the new
// one, never a partial one. Loading never throws: truncation, corruption, unknown versions and
// missing/mismatched tensors all come back as a Status that names the problem.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/networks/encoder.h"

namespace ts {

inline constexpr std::uint32_t kCheckpointFormatVersion = 1;

struct CheckpointMetadata {
  // Format version of the file the metadata came from (set by LoadCheckpoint; SaveCheckpoint
  // always writes kCheckpointFormatVersion).
  int format_version = static_cast<int>(kCheckpointFormatVersion);
  // What the tokens are: "bytes" (text as bytes) or "pixels" (8-bit grayscale).
  std::string modality = "bytes";
  // Class names, one per output of the head (count = num_classes).
  std::vector<std::string> labels;
  // Free-form provenance: created_by, created_at (UTC ISO-8601), source, ... SaveCheckpoint
  // fills created_at and libtorch_version when absent.
  std::map<std::string, std::string> provenance;
};

// A model ready to serve (eval mode) with the record it came from.
struct LoadedCheckpoint {
  TaylorShiftEncoderOptions options;
  CheckpointMetadata metadata;
  TaylorShiftEncoder model;
};

// OK when modality is "bytes" or "pixels" and there is one label per class.
absl::Status ValidateCheckpointMetadata(const CheckpointMetadata& metadata,
                                        std::int64_t num_classes);

// Writes `model` (any device or floating dtype; stored as is on CPU) with its options and
// metadata atomically to `path`. `options` must describe `model` (same parameter shapes).
absl::Status SaveCheckpoint(const std::string& path, const TaylorShiftEncoderOptions& options,
                            const CheckpointMetadata& metadata, TaylorShiftEncoder& model);

// Reads, verifies and builds the model on `device` in eval mode, in the dtype it was saved in.
// NOT_FOUND for a missing file, DATA_LOSS for truncation/corruption/bad magic, INVALID_ARGUMENT
// for content that does not describe a valid model (naming the key, expected vs actual).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path,
                                                torch::Device device = torch::kCPU);

// What LoadCheckpoint does once it has read the file: verifies `file_bytes` (a whole checkpoint
// file) and builds the model, with the same errors; `name` (the file's path) prefixes them. The
// checkpoint fuzz target (tests/fuzz/checkpoint_fuzz.cc) calls it with the bytes it makes up.
absl::StatusOr<LoadedCheckpoint> ParseCheckpoint(std::string_view file_bytes,
                                                 const std::string& name,
                                                 torch::Device device = torch::kCPU);

// Copies `state` (name → tensor) into `model`, which must have exactly these parameters and
// buffers with the same shapes; all tensors must share one floating dtype, which the model is
// converted to. Errors name the key and the expected vs actual shape or dtype, or list the
// missing/unexpected keys. Used by LoadCheckpoint and the reference importer.
absl::Status LoadStateDict(const std::map<std::string, torch::Tensor>& state,
                           TaylorShiftEncoder& model);

// The model's parameters and buffers by name (CPU, contiguous, detached copies).
std::map<std::string, torch::Tensor> StateDict(TaylorShiftEncoder& model);

// CRC-32 (IEEE 802.3, as zlib's crc32) of `size` bytes.
std::uint32_t Crc32(const void* data, std::size_t size);

// A checkpoint file's version as served (GetModel, promotions, models/NAME/VERSION.tsckpt): 8 hex
// digits of the CRC-32 of the file without its 4-byte trailer. Not of the whole file: a CRC
// over data followed by that data's own CRC is the same for every payload of one length, so the
// whole file's CRC told apart only headers (every fine-tuning of one model got one version).
std::string CheckpointVersion(std::string_view file_bytes);

}  // namespace ts

// The checkpoint reader (model/checkpoints/checkpoint.h: ParseCheckpoint, the whole of
// LoadCheckpoint after it has read the file): header, length and CRC-32 checks, LibTorch's
// unpickler (a zip archive of a pickle and tensor records), the architecture, metadata and state
// decoding, the model builder and LoadStateDict. The selector (mod 3) picks what the bytes are:
//   0  a whole checkpoint file, as read from disk (the header, length and CRC checks);
//   1  the payload only (the zip archive torch::pickle_save writes), wrapped here in a correct
//      header and its CRC-32, so that every mutation gets past the CRC to the unpickler;
//   2  the archive's pickle (data.pkl) only: the archive is written around it as pickle_save
//      writes one, with tensor records data/0 to data/39 (10 KiB of zeros each), then wrapped as
//      in 1. Mutations that change the pickle's length, which break the archive's offsets in 1,
//      reach the unpickler and the model builder this way.
// A checkpoint that loads must be what the header promises: a valid architecture and metadata, a
// model in eval mode whose one forward pass gives [1, num_classes] logits.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "model/checkpoints/checkpoint.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void AppendLittleEndian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The file SaveCheckpoint writes around `payload` (checkpoint.h's layout).
std::string WrapPayload(const std::string& payload) {
  std::string file("TSCKPT\0\1", 8);
  AppendLittleEndian(file, ts::kCheckpointFormatVersion, 4);
  AppendLittleEndian(file, payload.size(), 8);
  file += payload;
  AppendLittleEndian(file, ts::Crc32(payload.data(), payload.size()), 4);
  return file;
}

// The payload torch::pickle_save would write for `pickle`, with kRecords tensor records of
// kRecordBytes zeros (enough for the seeds' largest tensor, 9,600 bytes; a tensor needs no more
// than its storage holds, so any that fits loads).
std::string ArchiveAround(const std::string& pickle) {
  constexpr int kRecords = 40;
  constexpr std::size_t kRecordBytes = 10 * 1024;
  static const std::string zeros(kRecordBytes, '\0');
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, std::size_t count) {
    archive.append(static_cast<const char*>(bytes), count);
    return count;
  });
  for (int key = 0; key < kRecords; ++key) {
    writer.writeRecord("data/" + std::to_string(key), zeros.data(), zeros.size());
  }
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeEndOfFile();
  return archive;
}

void CheckLoaded(ts::LoadedCheckpoint& loaded) {
  const ts::TaylorShiftEncoderOptions& options = loaded.options;
  if (!ts::ValidateEncoderOptions(options).ok()) ts::fuzz::Broken("loaded an invalid architecture");
  if (!ts::ValidateCheckpointMetadata(loaded.metadata, options.num_classes()).ok()) {
    ts::fuzz::Broken("loaded invalid metadata");
  }
  if (loaded.metadata.format_version != static_cast<int>(ts::kCheckpointFormatVersion)) {
    ts::fuzz::Broken("loaded metadata of another format version");
  }
  if (loaded.model.is_empty() || loaded.model->is_training()) {
    ts::fuzz::Broken("a loaded model not in eval mode");
  }
  // What serving does first with a model: classify a short input.
  torch::NoGradGuard no_grad;
  const std::int64_t tokens = std::min<std::int64_t>(3, options.max_length());
  const torch::Tensor input =
      torch::arange(tokens, torch::kLong).remainder(options.vocab_size()).unsqueeze(0);
  const torch::Tensor logits = loaded.model->forward(input);
  if (logits.dim() != 2 || logits.size(0) != 1 || logits.size(1) != options.num_classes()) {
    ts::fuzz::Broken("a loaded model's logits are not [1, num_classes]");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One intra-op thread: inputs run one at a time, and the replay stays deterministic.
  static const bool single_thread = [] {
    torch::set_num_threads(1);
    return true;
  }();
  (void)single_thread;
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  std::string file;
  switch (input.selector % 3) {
    case 0:
      file = input.bytes;
      break;
    case 1:
      file = WrapPayload(input.bytes);
      break;
    default:
      file = WrapPayload(ArchiveAround(input.bytes));
      break;
  }
  absl::StatusOr<ts::LoadedCheckpoint> loaded = absl::UnknownError("not run");
  try {
    loaded = ts::ParseCheckpoint(file, "fuzz.tsckpt");
  } catch (const std::exception& e) {
    ts::fuzz::Broken(std::string("ParseCheckpoint threw (it never throws): ") + e.what());
  }
  if (!loaded.ok()) {
    // checkpoint.h: DATA_LOSS for truncation/corruption, INVALID_ARGUMENT for content that does
    // not describe a valid model; RESOURCE_EXHAUSTED when memory runs out.
    const absl::StatusCode code = loaded.status().code();
    if (code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kInvalidArgument &&
        code != absl::StatusCode::kResourceExhausted) {
      ts::fuzz::Broken("ParseCheckpoint failed with an unexpected code: " +
                       loaded.status().ToString());
    }
    return 0;
  }
  CheckLoaded(*loaded);
  return 0;
}

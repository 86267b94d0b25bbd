// Checkpoint files over the Jobs service's DownloadCheckpoint stream (jobs.proto): what both
// ends share. The sender computes the header's CRC-32 and version with CheckpointDigest; the
// receiver (tsctl, a serving replica that follows promotions) writes the stream into a file with
// ReceiveCheckpoint, which checks it against the header before the file appears under its name.
// Torch-free: the checkpoint's own structure and payload CRC are checked where it is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/support/sync_stream.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::api {

// The most data one CheckpointChunk carries (and the default).
inline constexpr std::uint32_t kCheckpointChunkBytes = 1 << 20;

// CRC-32 (IEEE, zlib's crc32) of a file of `size_bytes` bytes fed in order in pieces, and its
// checkpoint version: 8 hex digits of the CRC-32 of all but the last 4 bytes (the checkpoint's
// own CRC trailer), as model/checkpoints/checkpoint.h's CheckpointVersion computes it from the
// whole file. Not thread-safe.
class CheckpointDigest {
 public:
  explicit CheckpointDigest(std::uint64_t size_bytes) : size_bytes_(size_bytes) {}
  void Update(std::string_view bytes);
  std::uint64_t bytes_seen() const { return seen_; }
  std::uint32_t crc32() const { return crc_; }
  // Valid once every byte was fed (before that, of what was fed up to size_bytes − 4).
  std::string version() const;

 private:
  std::uint64_t size_bytes_;
  std::uint64_t seen_ = 0;
  std::uint32_t crc_ = 0;
  std::uint32_t version_crc_ = 0;  // CRC of the first size_bytes − 4 bytes
};

// Reads a DownloadCheckpoint stream to its end into `path`: the data goes to `path`.tmp-<pid> in
// the same directory, is checked against the header (the sizes agree, the CRC-32 and the version
// match, at most `max_bytes`), fsynced and renamed over `path`, so `path` is either untouched or
// the whole checked file. A not_modified header writes nothing. Returns the header.
// Errors: the call's own status; DATA_LOSS for a stream that does not match its header;
// RESOURCE_EXHAUSTED for a checkpoint over `max_bytes` (the call is then cancelled through
// `context`); file errors as common/atomic_file.h's. `call_failed` (may be null) is set when
// the error is the call's own status, to tell it from the others.
absl::StatusOr<taylorshift::v1::CheckpointHeader> ReceiveCheckpoint(
    grpc::ClientContext& context,
    grpc::ClientReaderInterface<taylorshift::v1::CheckpointChunk>& reader, const std::string& path,
    std::uint64_t max_bytes, bool* call_failed = nullptr);

}  // namespace ts::api

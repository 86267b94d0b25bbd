// Framing of the WorkerMessages a tsworker writes to its supervisor: each message is a 4-byte
// little-endian length followed by the serialized proto. Writes are whole frames under a lock
// (the heartbeat thread and the job share the pipe); torch-free, gRPC-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::job {

// Frames longer than this are refused by the reader (a corrupt stream, not a message).
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 20;

class EventWriter {
 public:
  explicit EventWriter(int fd, int rank) : fd_(fd), rank_(rank) {}
  // Writes one frame (the message's rank is set). UNAVAILABLE when the reader is gone.
  absl::Status Write(taylorshift::v1::WorkerMessage message);
  int rank() const { return rank_; }

 private:
  const int fd_;
  const int rank_;
  absl::Mutex mu_;
};

// Splits bytes read from the pipe (in any chunks) back into messages. Next() returns nullopt
// until a whole frame has arrived; DATA_LOSS for an oversized frame or an unparsable message
// (the stream cannot be trusted after that).
class EventDecoder {
 public:
  void Append(const char* data, std::size_t size) { buffer_.append(data, size); }
  absl::StatusOr<std::optional<taylorshift::v1::WorkerMessage>> Next();
  // Bytes of an incomplete frame still waiting for the rest.
  std::size_t pending_bytes() const { return buffer_.size() - offset_; }

 private:
  std::string buffer_;
  std::size_t offset_ = 0;
};

}  // namespace ts::job

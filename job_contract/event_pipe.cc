#include "job_contract/event_pipe.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ts::job {

absl::Status EventWriter::Write(taylorshift::v1::WorkerMessage message) {
  message.set_rank(rank_);
  std::string frame(4, '\0');
  if (!message.AppendToString(&frame)) return absl::InternalError("cannot serialize an event");
  const auto size = static_cast<std::uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  absl::MutexLock lock(&mu_);
  std::size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = write(fd_, frame.data() + done, frame.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("writing an event: ", std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<taylorshift::v1::WorkerMessage>> EventDecoder::Next() {
  if (pending_bytes() < 4) return std::nullopt;
  std::uint32_t size = 0;
  for (int i = 0; i < 4; ++i) {
    size |= static_cast<std::uint32_t>(static_cast<unsigned char>(buffer_[offset_ + i])) << (8 * i);
  }
  if (size > kMaxFrameBytes) {
    return absl::DataLossError(absl::StrCat("worker events: a frame of ", size,
                                            " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  if (pending_bytes() < 4 + static_cast<std::size_t>(size)) return std::nullopt;
  taylorshift::v1::WorkerMessage message;
  if (!message.ParseFromArray(buffer_.data() + offset_ + 4, static_cast<int>(size))) {
    return absl::DataLossError("worker events: a frame that is not a WorkerMessage");
  }
  offset_ += 4 + size;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  } else if (offset_ > (1u << 20)) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return message;
}

}  // namespace ts::job

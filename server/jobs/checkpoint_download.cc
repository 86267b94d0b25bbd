#include "server/jobs/checkpoint_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/checkpoint_transfer.h"
#include "common/status_macros.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace {

constexpr int kMaxIfNoneMatch = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointFileReader>> CheckpointFileReader::Open(
    const std::string& path, const std::string& what, const std::string& source,
    const std::string& name) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
    return error == ENOENT || error == ENOTDIR ? absl::NotFoundError(message)
                                               : absl::PermissionDeniedError(message);
  }
  std::unique_ptr<CheckpointFileReader> reader(new CheckpointFileReader(fd, what));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, ": not a regular file"));
  }
  const auto size = static_cast<std::uint64_t>(info.st_size);
  api::CheckpointDigest digest(size);
  std::string buffer;
  for (std::uint64_t offset = 0; offset < size; offset += buffer.size()) {
    const auto bytes = static_cast<std::size_t>(
        std::min<std::uint64_t>(api::kCheckpointChunkBytes, size - offset));
    TS_RETURN_IF_ERROR(reader->Read(offset, bytes, &buffer));
    digest.Update(buffer);
  }
  reader->header_.set_version(digest.version());
  reader->header_.set_size_bytes(size);
  reader->header_.set_crc32(digest.crc32());
  reader->header_.set_source(source);
  reader->header_.set_file_name(absl::StrCat(name, "-", digest.version(), ".tsckpt"));
  return reader;
}

CheckpointFileReader::~CheckpointFileReader() { ::close(fd_); }

absl::Status CheckpointFileReader::Read(std::uint64_t offset, std::size_t bytes,
                                        std::string* out) const {
  out->resize(bytes);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        ::pread(fd_, out->data() + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat("cannot read the ", what_, " at byte ", offset + done,
                                              ": ",
                                              n == 0 ? "it ended early" : std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointFileReader::Next(std::size_t max_bytes) {
  const auto bytes =
      static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, header_.size_bytes() - offset_));
  std::string chunk;
  TS_RETURN_IF_ERROR(Read(offset_, bytes, &chunk));
  offset_ += bytes;
  return chunk;
}

absl::Status ValidateDownloadRequest(const pb::DownloadCheckpointRequest& request) {
  switch (request.source_case()) {
    case pb::DownloadCheckpointRequest::kJobId:
      if (request.job_id().empty()) return absl::InvalidArgumentError("job_id: empty");
      break;
    case pb::DownloadCheckpointRequest::kModel:
      if (request.model().empty()) return absl::InvalidArgumentError("model: empty");
      break;
    default:
      return absl::InvalidArgumentError("source: give job_id or model");
  }
  if (request.if_none_match_size() > kMaxIfNoneMatch) {
    return absl::InvalidArgumentError(absl::StrCat("if_none_match: at most ", kMaxIfNoneMatch,
                                                   " versions, got ",
                                                   request.if_none_match_size()));
  }
  if (request.chunk_bytes() > api::kCheckpointChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes: at most ", api::kCheckpointChunkBytes, ", got ", request.chunk_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace ts::server

#include "api/checkpoint_transfer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "grpcpp/client_context.h"

namespace ts::api {
namespace pb = taylorshift::v1;
namespace {

constexpr std::uint64_t kTrailerBytes = 4;

std::uint32_t Crc32Update(std::uint32_t crc, std::string_view bytes) {
  return static_cast<std::uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// A file written in pieces to a temporary name, renamed into place by Commit; removed unless
// committed.
class PartialFile {
 public:
  explicit PartialFile(std::string path)
      : path_(std::move(path)), temp_(absl::StrCat(path_, ".tmp-", ::getpid())) {}
  ~PartialFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;

  absl::Status Open() {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Error("cannot create");
    return absl::OkStatus();
  }
  absl::Status Write(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Error("cannot write");
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return absl::OkStatus();
  }
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Error("cannot fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Error("cannot close");
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
      return FileErrorStatus(
          errno, absl::StrCat("cannot rename ", temp_, " to ", path_, ": ", std::strerror(errno)));
    }
    committed_ = true;
    SyncParentDirectory(path_);
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const char* what) const {
    return FileErrorStatus(errno, absl::StrCat(what, " ", temp_, ": ", std::strerror(errno)));
  }

  const std::string path_;
  const std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

absl::Status CallStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

void CheckpointDigest::Update(std::string_view bytes) {
  // The part of `bytes` before the trailer also goes into the version's CRC.
  const std::uint64_t covered = size_bytes_ > kTrailerBytes ? size_bytes_ - kTrailerBytes : 0;
  if (seen_ < covered) {
    const std::size_t take =
        static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), covered - seen_));
    version_crc_ = Crc32Update(version_crc_, bytes.substr(0, take));
  }
  crc_ = Crc32Update(crc_, bytes);
  seen_ += bytes.size();
}

std::string CheckpointDigest::version() const { return absl::StrFormat("%08x", version_crc_); }

absl::StatusOr<pb::CheckpointHeader> ReceiveCheckpoint(
    grpc::ClientContext& context, grpc::ClientReaderInterface<pb::CheckpointChunk>& reader,
    const std::string& path, std::uint64_t max_bytes, bool* call_failed) {
  bool ignored = false;
  if (call_failed == nullptr) call_failed = &ignored;
  *call_failed = false;
  const auto call_status = [call_failed](const grpc::Status& status) {
    *call_failed = true;
    return CallStatus(status);
  };
  pb::CheckpointChunk chunk;
  if (!reader.Read(&chunk)) {
    const grpc::Status status = reader.Finish();
    if (!status.ok()) return call_status(status);
    return absl::DataLossError("the checkpoint stream ended before its header");
  }
  const pb::CheckpointHeader header = chunk.header();
  if (header.not_modified()) {
    const grpc::Status status = reader.Finish();
    if (!status.ok()) return call_status(status);
    return header;
  }
  if (header.size_bytes() > max_bytes) {
    context.TryCancel();
    reader.Finish();
    return absl::ResourceExhaustedError(absl::StrCat("the checkpoint (", header.source(), ") is ",
                                                     header.size_bytes(),
                                                     " bytes, over the limit of ", max_bytes));
  }
  PartialFile file(path);
  CheckpointDigest digest(header.size_bytes());
  absl::Status written = file.Open();
  bool more = true;
  while (written.ok() && more) {
    if (digest.bytes_seen() + chunk.data().size() > header.size_bytes()) {
      written = absl::DataLossError(absl::StrCat("the checkpoint stream sent more than the ",
                                                 header.size_bytes(), " bytes its header says"));
      break;
    }
    digest.Update(chunk.data());
    written = file.Write(chunk.data());
    more = reader.Read(&chunk);
  }
  if (!written.ok()) {
    context.TryCancel();
    reader.Finish();
    return written;
  }
  if (const grpc::Status status = reader.Finish(); !status.ok()) return call_status(status);
  if (digest.bytes_seen() != header.size_bytes()) {
    return absl::DataLossError(absl::StrCat("the checkpoint stream ended after ",
                                            digest.bytes_seen(), " of ", header.size_bytes(),
                                            " bytes"));
  }
  if (digest.crc32() != header.crc32() || digest.version() != header.version()) {
    return absl::DataLossError(absl::StrFormat(
        "the checkpoint received does not match its header: CRC-32 %08x, version %s; the header "
        "says %08x, version %s",
        digest.crc32(), digest.version(), header.crc32(), header.version()));
  }
  if (absl::Status committed = file.Commit(); !committed.ok()) return committed;
  return header;
}

}  // namespace ts::api

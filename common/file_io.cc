#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_slice.h"

namespace ts {
namespace {

// Closes the descriptor on every return path.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` for reading after checking that it is a regular file; errors as ReadFile's.
absl::Status OpenRegularFile(const std::string& path, const std::string& what, int* fd_out,
                             struct stat* info) {
  // Non-blocking open, so that a FIFO is refused below instead of blocking here.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", what, " ", path, ": ", std::strerror(error)));
  }
  *fd_out = fd;  // the caller's Descriptor closes it from here on
  if (::fstat(fd, info) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot stat ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(info->st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is a directory"));
  }
  if (!S_ISREG(info->st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  ::fcntl(fd, F_SETFL, 0);  // blocking reads from here on
  return absl::OkStatus();
}

// Appends up to `limit` bytes (all that is left when negative) from `fd`'s position to `bytes`.
absl::Status ReadUpTo(int fd, std::int64_t limit, const std::string& path, const std::string& what,
                      std::string* bytes) {
  char buffer[1 << 16];
  std::int64_t left = limit;
  while (limit < 0 || left > 0) {
    const std::size_t want =
        limit < 0 ? sizeof buffer
                  : static_cast<std::size_t>(std::min<std::int64_t>(left, sizeof buffer));
    const ssize_t got = ::read(fd, buffer, want);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
    }
    bytes->append(buffer, static_cast<std::size_t>(got));
    left -= got;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  int raw_fd = -1;
  struct stat info {};
  const absl::Status opened = OpenRegularFile(path, what, &raw_fd, &info);
  const Descriptor fd(raw_fd);
  if (!opened.ok()) return opened;
  std::string bytes;
  if (info.st_size > 0) bytes.reserve(static_cast<size_t>(info.st_size));
  if (absl::Status read = ReadUpTo(fd.get(), -1, path, what, &bytes); !read.ok()) return read;
  return bytes;
}

absl::StatusOr<FileSlice> ReadFileSlice(const std::string& path, FileEnd end,
                                        std::int64_t max_bytes, const std::string& what) {
  if (max_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", what, " ", path, ": max_bytes must be >= 0, got ", max_bytes));
  }
  int raw_fd = -1;
  struct stat info {};
  const absl::Status opened = OpenRegularFile(path, what, &raw_fd, &info);
  const Descriptor fd(raw_fd);
  if (!opened.ok()) return opened;
  FileSlice slice;
  slice.file_bytes = static_cast<std::int64_t>(info.st_size);
  const std::int64_t want = std::min(max_bytes, slice.file_bytes);
  if (end == FileEnd::kTail && slice.file_bytes > want &&
      ::lseek(fd.get(), static_cast<off_t>(slice.file_bytes - want), SEEK_SET) < 0) {
    return absl::DataLossError(
        absl::StrCat("cannot seek in ", what, " ", path, ": ", std::strerror(errno)));
  }
  slice.bytes.reserve(static_cast<std::size_t>(want));
  if (absl::Status read = ReadUpTo(fd.get(), want, path, what, &slice.bytes); !read.ok()) {
    return read;
  }
  return slice;
}

}  // namespace ts

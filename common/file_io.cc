#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  // Non-blocking open, so that a FIFO is refused below instead of blocking here.
  const Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", what, " ", path, ": ", std::strerror(error)));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot stat ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is a directory"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  ::fcntl(fd.get(), F_SETFL, 0);  // blocking reads from here on
  std::string bytes;
  if (info.st_size > 0) bytes.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
    }
    bytes.append(buffer, static_cast<size_t>(got));
  }
  return bytes;
}

}  // namespace ts

#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace ts {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

absl::Status FileErrorStatus(int error_number, const std::string& message) {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    default:
      return absl::InternalError(message);
  }
}

// Writes all of `data` to `path` through a temporary file in the same directory, fsynced and
// renamed over `path`.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data) {
  const std::string temp = absl::StrCat(path, ".tmp-", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return FileErrorStatus(errno, absl::StrCat("cannot create ", temp, ": ", ErrnoText()));
  }
  const auto fail = [&](absl::string_view what) {
    const int error_number = errno;
    const std::string message = absl::StrCat(what, " ", temp, ": ", ErrnoText());
    ::close(fd);
    ::unlink(temp.c_str());
    return FileErrorStatus(error_number, message);
  };
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    const int error_number = errno;
    const std::string message = absl::StrCat("cannot close ", temp, ": ", ErrnoText());
    ::unlink(temp.c_str());
    return FileErrorStatus(error_number, message);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error_number = errno;
    const std::string message =
        absl::StrCat("cannot rename ", temp, " to ", path, ": ", ErrnoText());
    ::unlink(temp.c_str());
    return FileErrorStatus(error_number, message);
  }
  SyncParentDirectory(path);  // the rename itself durable
  return absl::OkStatus();
}

void SyncParentDirectory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

absl::Status CreateDirectories(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace ts

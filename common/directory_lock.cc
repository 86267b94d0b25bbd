#include "common/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ts {

namespace {

// What the holder wrote ("pid 1234 since 2026-12-06T08:00:00Z"), or "" when unreadable.
std::string Holder(int fd) {
  char text[128] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  return std::string(absl::StripAsciiWhitespace(absl::string_view(text, static_cast<size_t>(n))));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(
    const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "LOCK").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the lock file ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = Holder(fd);
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state_dir ", directory, " is in use by another server",
          holder.empty() ? "" : absl::StrCat(" (", holder, ")"),
          "; one server per state directory: give this one its own state_dir, or stop the "
          "other"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
  }
  char since[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const std::string owner = absl::StrCat("pid ", ::getpid(), " since ", since, "\n");
  // Best effort: the lock holds whether or not the note is written.
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, owner.data(), owner.size(), 0);
  }
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(fd, path));
}

DirectoryLock::~DirectoryLock() { ::close(fd_); }

}  // namespace ts

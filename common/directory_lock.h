// One owner per directory: an exclusive flock(2) on DIR/LOCK, held for the object's lifetime.
// The job manager takes one on its state_dir, so a second tsserver started on the same state
// directory refuses to start instead of running the same jobs into the same files. The lock is
// the kernel's: it goes when the process dies (kill -9 included), never left behind by a crash;
// the file itself stays and names the last owner (pid and start time) for the next refusal's
// message. The descriptor is close-on-exec, so worker processes never inherit it. Not
// thread-safe to share; the object is movable only by pointer.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ts {

class DirectoryLock {
 public:
  // FAILED_PRECONDITION naming the directory and the holder's pid when another process (or
  // another DirectoryLock in this one) holds it; other errors as the system reports them.
  static absl::StatusOr<std::unique_ptr<DirectoryLock>> Acquire(const std::string& directory);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& path() const { return path_; }  // DIR/LOCK

 private:
  DirectoryLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace ts

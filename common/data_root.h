// The data-root guard: where the data paths of remote callers (job specs) may lead. Torch-free.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts {

// DataRoot: resolves user-given relative data paths inside one directory — the security boundary
// for remote callers, who must never read other files. Resolve() refuses empty and absolute
// paths and any `..` component (INVALID_ARGUMENT), and paths that leave the root through a
// symlink (PERMISSION_DENIED); it returns the path with symlinks resolved, so opening it does
// not follow a link again (a link swapped in afterwards by someone with write access to the root
// is outside this boundary). The path need not exist. Immutable and thread-safe.
class DataRoot {
 public:
  // The root must be an existing directory; it is canonicalised (symlinks resolved).
  static absl::StatusOr<DataRoot> Create(const std::string& root);

  absl::StatusOr<std::string> Resolve(std::string_view relative) const;

  const std::string& root() const { return root_; }

 private:
  explicit DataRoot(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

// PERMISSION_DENIED ("<path> resolves outside the data root") when `path` resolves, through
// symlinks, to somewhere outside the directory `root`; OK when `root` is empty (no confinement).
// What a reader checks for every file it reaches inside a data-root path (a folder data set).
absl::Status CheckInsideRoot(const std::string& path, const std::string& root);

// What a remote caller may see of a server-side message: every path under one of `dirs` written
// relative to it, so that errors name files as callers name them (relative to the data root) and
// never tell where the server keeps its files. Each ServerDir is an absolute directory and the
// text that replaces it: "<dir>/a/b" becomes "<prefix>a/b", and `dir` alone (not followed by a
// path character) becomes `alone`. Longer directories are replaced first (a state directory
// inside the data root keeps its own label).
struct ServerDir {
  std::string dir;     // absolute, no trailing '/'
  std::string prefix;  // replaces "<dir>/": "" for the data root
  std::string alone;   // replaces `dir` itself: "the data root"
};
std::string WithoutServerDirs(std::string_view message, std::vector<ServerDir> dirs);

}  // namespace ts

// Durable, atomic file replacement: readers see the old contents or the new ones, never a
// partial file, and the new contents survive a crash once this returns OK.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ts {

// Writes `data` to a temporary file next to `path` (".tmp-<pid>"), fsyncs it, renames it over
// `path` and fsyncs the directory. On error the temporary file is removed and `path` is
// untouched; the Status names the file and the system error, with the code FileErrorStatus gives.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);

// `message` with the code for the system error `error_number`: RESOURCE_EXHAUSTED for a full
// disk or quota (ENOSPC, EDQUOT, EFBIG), PERMISSION_DENIED for EACCES, EPERM and EROFS,
// NOT_FOUND for ENOENT and ENOTDIR, INTERNAL otherwise.
absl::Status FileErrorStatus(int error_number, const std::string& message);

// Makes a rename of or into `path` durable: fsyncs the directory that holds `path` (best effort:
// a directory that cannot be opened is left as it is, as the rename already happened).
void SyncParentDirectory(const std::string& path);

// Creates the directory `dir` and its missing parents; INTERNAL "cannot create DIR: WHY".
absl::Status CreateDirectories(const std::string& dir);

}  // namespace ts

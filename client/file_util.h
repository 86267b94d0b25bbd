// Whole-file reads and writes for tsctl. Errors are absl::Status naming the path: NOT_FOUND when
// the file does not exist, PERMISSION_DENIED when it cannot be opened for that reason, otherwise
// DATA_LOSS / UNKNOWN with strerror's text. Thread-safe.
#pragma once

#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts::client {

absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

// Creates or replaces `path` with `bytes` (errors as for reads, naming the path).
absl::Status WriteFileBytes(const std::string& path, const std::string& bytes);

// Everything left on `in` (e.g. std::cin), byte for byte.
absl::StatusOr<std::string> ReadStreamBytes(std::istream& in, const std::string& name);

}  // namespace ts::client

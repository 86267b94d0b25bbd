// tsctl's whole-file writes and stream reads (files are read with common/file_io.h). Errors are
// absl::Status naming the path: NOT_FOUND when its directory does not exist, PERMISSION_DENIED
// when it cannot be created for that reason, INVALID_ARGUMENT for a directory, otherwise UNKNOWN
// with strerror's text; DATA_LOSS when a stream fails. Thread-safe.
#pragma once

#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts::client {

// Creates or replaces `path` with `bytes`.
absl::Status WriteFileBytes(const std::string& path, const std::string& bytes);

// Everything left on `in` (e.g. std::cin), byte for byte.
absl::StatusOr<std::string> ReadStreamBytes(std::istream& in, const std::string& name);

}  // namespace ts::client

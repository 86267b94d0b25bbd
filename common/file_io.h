// Reading a whole file, the one way the project does it.
#ifndef TS_COMMON_FILE_IO_H_
#define TS_COMMON_FILE_IO_H_

#include <string>

#include "absl/status/statusor.h"

namespace ts {

// The bytes of `path`. NOT_FOUND when it does not exist, FAILED_PRECONDITION for a directory or
// anything else that is not a regular file (a FIFO is refused, not waited on),
// PERMISSION_DENIED when it cannot be opened for another reason (the message carries strerror),
// DATA_LOSS when reading fails part way. `what` names the file in messages ("checkpoint", "config
// file"); the path always follows.
absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what = "file");

}  // namespace ts

#endif  // TS_COMMON_FILE_IO_H_

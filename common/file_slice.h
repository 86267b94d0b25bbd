// Reading part of a file: at most N bytes from its start or its end, and the file's size, so a
// caller that keeps only a prefix or a suffix (tsctl and tsmodel predict under a length policy)
// never reads the rest. Errors as ReadFile's (common/file_io.h).
#ifndef TS_COMMON_FILE_SLICE_H_
#define TS_COMMON_FILE_SLICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ts {

enum class FileEnd { kHead, kTail };

struct FileSlice {
  std::string bytes;
  std::int64_t file_bytes = 0;  // the file's size (st_size), however much of it was read
};

// At most `max_bytes` bytes of `path` from `end`. Errors as ReadFile's; INVALID_ARGUMENT for a
// negative `max_bytes`.
absl::StatusOr<FileSlice> ReadFileSlice(const std::string& path, FileEnd end,
                                        std::int64_t max_bytes, const std::string& what = "file");

}  // namespace ts

#endif  // TS_COMMON_FILE_SLICE_H_

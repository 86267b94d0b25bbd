#include "client/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ts::client {
namespace {

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace

absl::Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot create ", path));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int write_error = errno;
  // fclose flushes: a full disk may only show here.
  if (std::fclose(file) != 0 || !written) {
    return ErrnoStatus(written ? errno : write_error, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadStreamBytes(std::istream& in, const std::string& name) {
  std::ostringstream buffer;
  if (in.peek() != std::char_traits<char>::eof()) buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error while reading ", name));
  return std::move(buffer).str();
}

}  // namespace ts::client

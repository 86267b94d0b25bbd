#include "common/data_root.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/quoted.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

// Whether `path` (canonical) lies in directory `root` (canonical).
bool IsInside(const fs::path& path, const fs::path& root) {
  const std::string p = path.string();
  std::string r = root.string();
  if (p == r) return true;
  if (r.empty() || r.back() != '/') r.push_back('/');
  return p.rfind(r, 0) == 0;
}

}  // namespace

absl::Status CheckInsideRoot(const std::string& path, const std::string& root) {
  if (root.empty()) return absl::OkStatus();
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(path, ec);
  const fs::path canonical_root = fs::weakly_canonical(root, ec);
  if (ec || !IsInside(resolved, canonical_root)) {
    return absl::PermissionDeniedError(absl::StrCat(path, " resolves outside the data root"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DataRoot> DataRoot::Create(const std::string& root) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(root, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("data root ", root, ": ", ec.message()));
  }
  if (!fs::is_directory(canonical, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("data root ", root, " is not a folder"));
  }
  return DataRoot(canonical.string());
}

absl::StatusOr<std::string> DataRoot::Resolve(std::string_view relative) const {
  const std::string path(relative);
  if (path.empty()) return absl::InvalidArgumentError("empty data path");
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("data path contains a NUL byte");
  }
  if (path[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "data path ", Quoted(path), " is absolute; give it relative to the data root"));
  }
  for (const absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "data path ", Quoted(path), " contains \"..\"; it must stay in the data root"));
    }
  }
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::path(root_) / path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("data path ", Quoted(path), " cannot be resolved: ", ec.message()));
  }
  if (!IsInside(resolved, root_)) {
    return absl::PermissionDeniedError(
        absl::StrCat("data path ", Quoted(path), " leads outside the data root"));
  }
  // weakly_canonical resolves every link that exists; one left in the path dangles, and could
  // later point anywhere.
  fs::path prefix(root_);
  for (const fs::path& part : resolved.lexically_relative(root_)) {
    if (part == ".") continue;
    prefix /= part;
    if (fs::is_symlink(fs::symlink_status(prefix, ec))) {
      return absl::PermissionDeniedError(absl::StrCat(
          "data path ", Quoted(path), " goes through a symlink that does not resolve"));
    }
  }
  return resolved.string();
}

std::string WithoutServerDirs(std::string_view message, std::vector<ServerDir> dirs) {
  std::sort(dirs.begin(), dirs.end(),
            [](const ServerDir& a, const ServerDir& b) { return a.dir.size() > b.dir.size(); });
  const auto is_path_char = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  };
  std::string out;
  out.reserve(message.size());
  std::size_t i = 0;
  while (i < message.size()) {
    bool replaced = false;
    for (const ServerDir& dir : dirs) {
      if (dir.dir.size() < 2 || message.compare(i, dir.dir.size(), dir.dir) != 0) continue;
      // The directory must start a path: not the tail of a longer one ("/x/data" for "/data").
      if (i > 0 && (is_path_char(message[i - 1]) || message[i - 1] == '/')) continue;
      const std::size_t end = i + dir.dir.size();
      if (end < message.size() && message[end] == '/') {
        out += dir.prefix;
        i = end + 1;
      } else if (end == message.size() || !is_path_char(message[end])) {
        out += dir.alone;
        i = end;
      } else {
        continue;  // "/data2" is not under "/data"
      }
      replaced = true;
      break;
    }
    if (!replaced) out.push_back(message[i++]);
  }
  return out;
}

}  // namespace ts

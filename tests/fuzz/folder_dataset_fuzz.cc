// A folder-per-class data set (model/data/dataset_readers.h: ReadFolderDataset, the aclImdb layout)
// that the input lays out in a scratch folder: sections "=== class/name.txt" followed by the
// file's bytes, or "=== class/name.txt -> target" for a symbolic link. Beside the data root lies
// outside/, with a file and a class folder of its own, so links may lead out of the root; the
// selector's bit 2 confines the reader to the root (as jobs are confined to the data root), its
// bits 0 and 1 pick the other options (dataset_checks.h). Paths that would leave the scratch
// folder are dropped before anything is made.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_split.h"
#include "model/data/dataset_readers.h"
#include "tests/fuzz/dataset_checks.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace fs = std::filesystem;

// `relative` as a path below `base`, or empty when it is absolute or climbs out of `base`.
fs::path Below(const fs::path& base, const fs::path& relative) {
  if (relative.empty() || relative.is_absolute()) return {};
  fs::path joined = (base / relative).lexically_normal();
  const fs::path inside = joined.lexically_relative(base);
  if (inside.empty() || *inside.begin() == "..") return {};
  return joined;
}

void LayOut(const fs::path& scratch, const std::string& bytes) {
  const fs::path root = scratch / "root";
  fs::create_directories(root);
  fs::create_directories(scratch / "outside" / "class");
  ts::fuzz::ScratchFolder::Get().Write("outside/secret.txt", "outside the data root");
  ts::fuzz::ScratchFolder::Get().Write("outside/class/x.txt", "outside the data root");
  const std::vector<std::string> sections = absl::StrSplit(bytes, "=== ");
  for (const std::string& section : sections) {
    const std::size_t end = section.find('\n');
    const std::string header = section.substr(0, end);
    const std::string contents = end == std::string::npos ? "" : section.substr(end + 1);
    std::error_code error;
    if (const std::size_t arrow = header.find(" -> "); arrow != std::string::npos) {
      const fs::path link = Below(root, header.substr(0, arrow));
      if (link.empty()) continue;
      const fs::path target = header.substr(arrow + 4);
      const fs::path resolved = (link.parent_path() / target).lexically_normal();
      if (Below(scratch, resolved.lexically_relative(scratch)).empty()) continue;
      fs::create_directories(link.parent_path(), error);
      fs::create_symlink(target, link, error);
    } else {
      const fs::path file = Below(root, header);
      if (file.empty()) continue;
      // A section that clashes with an earlier one (a file where a folder is) makes nothing.
      fs::create_directories(file.parent_path(), error);
      std::ofstream(file, std::ios::binary) << contents;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  ts::fuzz::ScratchFolder& scratch = ts::fuzz::ScratchFolder::Get();
  scratch.Reset();
  LayOut(scratch.path(), input.bytes);
  ts::DatasetReadOptions options = ts::fuzz::ReadOptions(input.selector);
  const fs::path root = scratch.path() / "root";
  if (input.selector & 4) options.confine_to = root.string();
  const auto dataset = ts::ReadFolderDataset(root.string(), options);
  if (!dataset.ok()) return 0;
  ts::fuzz::CheckDataset(*dataset);
  return 0;
}

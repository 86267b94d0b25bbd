// Replays fuzz inputs without libFuzzer, with any compiler: each argument is a file or a folder
// (every file below it, in path order), and each file is handed to the target's
// LLVMFuzzerTestOneInput once. The ordinary build links every fuzz target with this main and
// ctest runs it over the target's corpus and regressions (tests/fuzz/CMakeLists.txt), so a fixed
// crash stays fixed in every scripts/test. A missing argument or an empty set of inputs fails,
// so a moved corpus cannot turn the test into one that passes vacuously.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    const fs::path arg = argv[i];
    if (fs::is_regular_file(arg, error)) {
      files.push_back(arg);
    } else if (fs::is_directory(arg, error)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg, error)) {
        if (entry.is_regular_file(error)) files.push_back(entry.path());
      }
      if (error) {
        std::fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], error.message().c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a folder\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs in %d argument(s)\n", argc - 1);
    return 2;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 2;
    }
    // Named before the run: when an input crashes the process, the log says which one.
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", files.size());
  return 0;
}

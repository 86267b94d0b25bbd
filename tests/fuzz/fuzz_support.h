// What the fuzz targets (tests/fuzz/*_fuzz.cc) share: one input split into a selector byte (which
// variant of a target runs: model kind, reader options) and the bytes the parser reads; a scratch
// folder per process for the readers that take a path; and the check that stops a run when a
// parser breaks a promise its header makes. Header-only; used by one thread per process.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace ts::fuzz {

struct Input {
  std::uint8_t selector = 0;  // the first byte; 0 for an empty input
  std::string bytes;          // the rest
};

inline Input SplitInput(const std::uint8_t* data, std::size_t size) {
  Input input;
  if (size == 0) return input;
  input.selector = data[0];
  input.bytes.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  return input;
}

// A contract of the code under test was broken: report it and abort, so libFuzzer (or the
// replay's ctest entry) records the input as a crash.
[[noreturn]] inline void Broken(std::string_view what) {
  std::fprintf(stderr, "fuzz: broken contract: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// An empty folder of this process's own (under /dev/shm when there is one, so the readers' files
// stay in memory), removed when the process exits normally.
class ScratchFolder {
 public:
  static ScratchFolder& Get() {
    static ScratchFolder folder;
    return folder;
  }

  const std::filesystem::path& path() const { return path_; }

  // Makes the folder empty again.
  void Reset() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
    std::filesystem::create_directories(path_, error);
    if (error) Broken("cannot make the scratch folder " + path_.string() + ": " + error.message());
  }

  // Writes `bytes` to path()/relative (creating its folders); returns the file's path.
  std::string Write(const std::filesystem::path& relative, std::string_view bytes) {
    const std::filesystem::path file = path_ / relative;
    std::error_code error;
    std::filesystem::create_directories(file.parent_path(), error);
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) Broken("cannot write " + file.string());
    return file.string();
  }

  ~ScratchFolder() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }

 private:
  ScratchFolder() {
    std::error_code error;
    std::filesystem::path base = "/dev/shm";
    if (!std::filesystem::is_directory(base, error) || ::access(base.c_str(), W_OK) != 0) {
      base = std::filesystem::temp_directory_path(error);
    }
    path_ = base / ("ts_fuzz_" + std::to_string(::getpid()));
    Reset();
  }

  std::filesystem::path path_;
};

}  // namespace ts::fuzz

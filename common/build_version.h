// What `--version` prints, the same way in every binary: the project version, the git commit the
// binary was built from, and fields the binary adds (the LibTorch version, the CPU kernel level
// and CUDA for the binaries that link LibTorch; model/version_fields.h gives those). Torch-free.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"

namespace ts {

// One "name: value" line.
struct VersionField {
  std::string name;
  std::string value;
};

// The project version (CMake's PROJECT_VERSION), e.g. "0.4.0".
std::string_view ProjectVersion();
// `git describe --always --dirty --abbrev=12` of the checkout at build time (re-read at every
// build), the TS_GIT_COMMIT environment variable where that is set (image builds without .git),
// else "unknown".
std::string_view GitCommit();

// "PROGRAM VERSION\ncommit: COMMIT\n" and then "NAME: VALUE\n" per field.
std::string VersionText(std::string_view program, const std::vector<VersionField>& fields);

// Adds --version to `app`: ParseCommandLine (common/command_line.h) prints
// VersionText(app's name, fields()) on stdout and exits 0. `fields` runs only then.
void AddVersionFlag(CLI::App& app, std::function<std::vector<VersionField>()> fields = {});

}  // namespace ts

// `--version` of every installed binary (tsctl, tsserver, tsworker, tsmodel): exit 0 and, on
// stdout, the program and project version, the git commit built from, and for the binaries that
// link LibTorch its version, the CPU kernel level and CUDA.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

struct Output {
  int exit_code = -1;
  std::string text;
};

Output RunCommand(const std::string& command) {
  Output output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    output.text.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

// The commit line's value, e.g. "a3c9a3ea989a-dirty".
std::string CommitOf(const std::string& text) {
  std::smatch match;
  const std::regex line("(^|\n)commit: ([^\n]*)\n");
  return std::regex_search(text, match, line) ? match[2].str() : "";
}

void ExpectVersionAndCommit(const std::string& program, const Output& run) {
  EXPECT_EQ(run.exit_code, 0) << run.text;
  EXPECT_EQ(run.text.rfind(program + " " + TS_PROJECT_VERSION + "\n", 0), 0u) << run.text;
  const std::string commit = CommitOf(run.text);
  EXPECT_THAT(commit, ContainsRegex("^([0-9a-f]{7,40}(-dirty)?|unknown)$")) << run.text;
  // In a git checkout, the commit is one of its commits (HEAD's when the binaries were built
  // from it; a commit made since does not rebuild them).
  const Output git =
      RunCommand(std::string("git -C ") + TS_SOURCE_DIR + " rev-parse HEAD 2>/dev/null");
  if (git.exit_code == 0 && commit != "unknown") {
    const std::string hex = commit.substr(0, commit.find('-'));
    EXPECT_EQ(RunCommand(std::string("git -C ") + TS_SOURCE_DIR + " cat-file -e '" + hex +
                         "^{commit}' 2>/dev/null")
                  .exit_code,
              0)
        << commit << " is not a commit of " << TS_SOURCE_DIR;
  }
}

TEST(VersionFlagTest, TsctlPrintsVersionAndCommitOnly) {
  const Output run = RunCommand(std::string(TS_TSCTL_BINARY) + " --version");
  ExpectVersionAndCommit("tsctl", run);
  EXPECT_THAT(run.text, Not(HasSubstr("libtorch")));  // the client links no LibTorch
}

TEST(VersionFlagTest, TorchBinariesAlsoPrintLibTorchCpuKernelsAndCuda) {
  for (const std::string& binary :
       {std::string(TS_TSSERVER_BINARY), std::string(TS_TSWORKER_BINARY),
        std::string(TS_TSMODEL_BINARY)}) {
    const std::string program = binary.substr(binary.rfind('/') + 1);
    const Output run = RunCommand(binary + " --version");
    SCOPED_TRACE(program);
    ExpectVersionAndCommit(program, run);
    EXPECT_THAT(run.text, ContainsRegex("\nlibtorch: [0-9]+\\.[0-9]+"));
    EXPECT_THAT(run.text, ContainsRegex("\ncpu kernels: (default|avx2|avx512|avx512_bf16|amx)"));
    EXPECT_THAT(run.text, ContainsRegex("\ncuda: (built with CUDA|not built with CUDA)"));
    // The kernel level follows TS_CPU_CAPABILITY's cap, as the kernels do.
    const Output capped = RunCommand("TS_CPU_CAPABILITY=default " + binary + " --version");
    EXPECT_THAT(capped.text, ContainsRegex("\ncpu kernels: default"));
  }
}

}  // namespace
}  // namespace ts

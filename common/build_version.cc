#include "common/build_version.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "git_commit.h"  // generated at build time: TS_GIT_COMMIT

namespace ts {

std::string_view ProjectVersion() { return TS_VERSION; }

std::string_view GitCommit() { return TS_GIT_COMMIT; }

std::string VersionText(std::string_view program, const std::vector<VersionField>& fields) {
  std::string text = absl::StrCat(std::string(program), " ", std::string(ProjectVersion()),
                                  "\ncommit: ", std::string(GitCommit()), "\n");
  for (const VersionField& field : fields)
    absl::StrAppend(&text, field.name, ": ", field.value, "\n");
  return text;
}

void AddVersionFlag(CLI::App& app, std::function<std::vector<VersionField>()> fields) {
  const std::string program = app.get_name();
  app.set_version_flag(
      "--version",
      [program, fields = std::move(fields)] {
        return VersionText(program, fields ? fields() : std::vector<VersionField>{});
      },
      "print the version and the build (git commit; LibTorch, CPU kernels and CUDA where linked) "
      "and exit");
}

}  // namespace ts

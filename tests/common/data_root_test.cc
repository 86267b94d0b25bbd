#include "common/data_root.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "tests/testing/scratch_dir.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

using DataRootTest = testing::ScratchDirTest;

TEST_F(DataRootTest, ResolvesInsideAndRefusesEscapes) {
  Write("root/train.jsonl", "{}");
  Write("root/sub/val.jsonl", "{}");
  Write("outside/secret.txt", "password");
  fs::create_symlink(dir_ / "outside", dir_ / "root/escape_dir");
  fs::create_symlink(dir_ / "outside/secret.txt", dir_ / "root/escape_file");
  fs::create_symlink(dir_ / "root/sub", dir_ / "root/inner_link");
  fs::create_symlink(dir_ / "outside/nothing_yet", dir_ / "root/dangling");
  absl::StatusOr<DataRoot> root = DataRoot::Create((dir_ / "root").string());
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string canonical_root = fs::canonical(dir_ / "root").string();
  EXPECT_EQ(root->root(), canonical_root);

  EXPECT_EQ(root->Resolve("train.jsonl").value(), canonical_root + "/train.jsonl");
  EXPECT_EQ(root->Resolve("sub/val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("./sub//val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("inner_link/val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("not_yet/out.ckpt").value(), canonical_root + "/not_yet/out.ckpt");

  for (const char* bad : {"", "/etc/passwd", "../outside/secret.txt", "sub/../../outside",
                          "sub/../train.jsonl", ".."}) {
    EXPECT_EQ(root->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  for (const char* escape :
       {"escape_dir/secret.txt", "escape_file", "escape_dir", "dangling", "dangling/x"}) {
    EXPECT_EQ(root->Resolve(escape).status().code(), absl::StatusCode::kPermissionDenied) << escape;
  }
  EXPECT_EQ(DataRoot::Create((dir_ / "none").string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(DataRoot::Create((dir_ / "root/train.jsonl").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DataRootTest, CheckInsideRootFollowsSymlinks) {
  Write("root/data/a.txt", "a");
  Write("outside/b.txt", "b");
  fs::create_symlink(dir_ / "outside/b.txt", dir_ / "root/data/b.txt");
  fs::create_symlink(dir_ / "root/data/a.txt", dir_ / "root/data/c.txt");
  const std::string root = (dir_ / "root").string();
  EXPECT_TRUE(CheckInsideRoot((dir_ / "root/data/a.txt").string(), root).ok());
  EXPECT_TRUE(CheckInsideRoot((dir_ / "root/data/c.txt").string(), root).ok());
  const absl::Status escape = CheckInsideRoot((dir_ / "root/data/b.txt").string(), root);
  EXPECT_EQ(escape.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(escape.message().find("resolves outside the data root"), absl::string_view::npos);
  // No root: no confinement.
  EXPECT_TRUE(CheckInsideRoot((dir_ / "root/data/b.txt").string(), "").ok());
}

// Issue 41: job errors quoted absolute server paths. What reaches a client names data files
// relative to the data root and the state directory by its key.
TEST(WithoutServerDirsTest, WritesServerPathsRelativeToTheirDirectory) {
  const std::vector<ServerDir> dirs = {{"/srv/ts/data", "", "the data root"},
                                       {"/srv/ts/data/state", "<state_dir>/", "<state_dir>"}};
  EXPECT_EQ(WithoutServerDirs("train.path: cannot open /srv/ts/data/imdb/train.jsonl: No such file",
                              dirs),
            "train.path: cannot open imdb/train.jsonl: No such file");
  EXPECT_EQ(
      WithoutServerDirs("checkpoint: /srv/ts/data/state/jobs/job-7/best.tsckpt is corrupt", dirs),
      "checkpoint: <state_dir>/jobs/job-7/best.tsckpt is corrupt");
  EXPECT_EQ(WithoutServerDirs("\"/srv/ts/data\" is full; /srv/ts/data: no space", dirs),
            "\"the data root\" is full; the data root: no space");
  // Only whole directories at the start of a path.
  EXPECT_EQ(WithoutServerDirs("/srv/ts/database/x /mnt/srv/ts/data/x /srv/ts/data2/y", dirs),
            "/srv/ts/database/x /mnt/srv/ts/data/x /srv/ts/data2/y");
  EXPECT_EQ(WithoutServerDirs("two: /srv/ts/data/a and /srv/ts/data/b", dirs), "two: a and b");
  EXPECT_EQ(WithoutServerDirs("no paths here", dirs), "no paths here");
  EXPECT_EQ(WithoutServerDirs("", dirs), "");
}

}  // namespace
}  // namespace ts

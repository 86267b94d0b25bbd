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

}  // namespace
}  // namespace ts

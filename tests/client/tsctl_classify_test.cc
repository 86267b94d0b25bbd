// The tsctl binary's classify command against a scripted Classifier service on loopback: what it
// sends (--top-k, --over-length) and what it prints in text and JSON.
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_classifier_service.h"
#include "tests/testing/scratch_dir.h"

namespace ts::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct ToolRun {
  int exit_code = -1;
  std::vector<std::string> lines;  // stdout
  std::string err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class TsctlClassifyTest : public ts::testing::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    service_.Start();
    document_ = Write("review.txt", "a fine film");
  }

  // tsctl classify --model m --server <fake> --timeout-ms 10000 ARGS.
  ToolRun Classify(const std::string& args) {
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    const std::string command = std::string(TS_TSCTL_BINARY) + " classify --model m --server " +
                                service_.address() + " --timeout-ms 10000 " + args + " >" + out +
                                " 2>" + err;
    const int status = std::system(command.c_str());
    ToolRun run;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.lines = absl::StrSplit(ReadAll(out), '\n', absl::SkipEmpty());
    run.err = ReadAll(err);
    return run;
  }

  ts::testing::FakeClassifierService service_{{"neg", "neu", "pos"}, {0.08f, 0.17f, 0.75f}};
  std::string document_;
};

TEST_F(TsctlClassifyTest, TopKShowsTheKBestClassesInText) {
  const ToolRun run = Classify("--top-k 2 " + document_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 1u);
  EXPECT_THAT(run.lines[0], HasSubstr("review.txt: pos (p=0.750) top-2: pos 0.750, neu 0.170 "
                                      "path=direct"));
  ASSERT_EQ(service_.requests().size(), 1u);
  EXPECT_EQ(service_.requests()[0].top_k(), 2u);

  // Without --top-k the line names only the label, as before.
  const ToolRun plain = Classify(document_);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(plain.lines.size(), 1u);
  EXPECT_THAT(plain.lines[0], HasSubstr("review.txt: pos (p=0.750) path=direct"));
  EXPECT_THAT(plain.lines[0], Not(HasSubstr("top-")));
}

TEST_F(TsctlClassifyTest, OverLengthIsSentWithTheRequest) {
  for (const std::string policy : {"truncate", "keep_tail", "reject", "window"}) {
    const ToolRun run = Classify("--over-length " + policy + " --json " + document_);
    EXPECT_EQ(run.exit_code, 0) << policy << ": " << run.err;
    ASSERT_FALSE(service_.requests().empty());
    EXPECT_EQ(service_.requests().back().over_length(), policy);
  }
  // Not given: "" (the model's policy).
  ASSERT_EQ(Classify(document_).exit_code, 0);
  EXPECT_EQ(service_.requests().back().over_length(), "");
}

TEST_F(TsctlClassifyTest, AnUnknownOverLengthPolicyIsAUsageError) {
  const ToolRun run = Classify("--over-length tail " + document_);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--over-length"));
  EXPECT_THAT(run.err, HasSubstr("expected truncate, keep_tail, reject or window"));
  EXPECT_TRUE(service_.requests().empty());  // refused before sending anything
}

}  // namespace
}  // namespace ts::client

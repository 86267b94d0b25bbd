// The tsctl binary's classify command against a scripted Classifier service on loopback: what it
// sends (--top-k, --over-length, only the part of a document the model uses) and what it prints
// in text and JSON.
#include <sys/wait.h>
#include <unistd.h>

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

// The model a test scripts for GetModel: max_length bytes, `policy`, stride, window cap.
taylorshift::v1::ModelInfo ModelWith(std::uint32_t max_length, const std::string& policy,
                                     std::uint32_t stride, std::uint32_t max_windows) {
  taylorshift::v1::ModelInfo info;
  info.set_name("m");
  info.set_max_length(max_length);
  info.set_over_length_policy(policy);
  info.set_window_stride(stride);
  info.set_max_windows(max_windows);
  return info;
}

// A 70 MiB file (sparse past its first bytes) is over the 64 MiB message limit whole, but under
// truncate the model keeps its first 2048 bytes: tsctl reads and sends max_length + 1 of them.
TEST_F(TsctlClassifyTest, TruncateSendsOnlyWhatTheModelKeeps) {
  service_.set_model_info(ModelWith(2048, "truncate", 1024, 16));
  const std::string big = Write("big.txt", "the head of a long document");
  ASSERT_EQ(::truncate(big.c_str(), std::int64_t{70} << 20), 0);
  const ToolRun run = Classify(big);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(service_.requests().size(), 1u);
  const std::string sent = service_.requests()[0].document();
  EXPECT_EQ(sent.size(), 2049u);  // one past max_length: the server still answers truncated
  EXPECT_EQ(sent.substr(0, 27), "the head of a long document");

  // The same from stdin: read as a stream, stopped after max_length + 1 bytes.
  const ToolRun piped = Classify("- < " + big);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  ASSERT_EQ(service_.requests().size(), 2u);
  EXPECT_EQ(service_.requests()[1].document(), sent);
}

TEST_F(TsctlClassifyTest, KeepTailSendsTheLastMaxLengthPlusOneBytes) {
  service_.set_model_info(ModelWith(8, "truncate", 4, 16));
  const std::string file = Write("tail.txt", "0123456789abcdefghijklmnopqrstuvwxyz");
  ASSERT_EQ(Classify("--over-length keep_tail " + file).exit_code, 0);
  ASSERT_EQ(Classify("--over-length keep_tail - < " + file).exit_code, 0);
  ASSERT_EQ(service_.requests().size(), 2u);
  EXPECT_EQ(service_.requests()[0].document(), "rstuvwxyz");
  EXPECT_EQ(service_.requests()[1].document(), "rstuvwxyz");
}

TEST_F(TsctlClassifyTest, WindowOverMaxWindowsIsRefusedBeforeSending) {
  // max_length 8, stride 4, 2 windows: at most 12 bytes.
  service_.set_model_info(ModelWith(8, "truncate", 4, 2));
  const std::string fits = Write("fits.txt", "0123456789ab");
  ASSERT_EQ(Classify("--over-length window " + fits).exit_code, 0);
  ASSERT_EQ(service_.requests().size(), 1u);
  EXPECT_EQ(service_.requests()[0].document(), "0123456789ab");  // windows need it all

  const std::string over = Write("over.txt", "0123456789abcdefghij");
  for (const std::string& input : {over, "- < " + over}) {
    const ToolRun run = Classify("--over-length window " + input);
    EXPECT_EQ(run.exit_code, 1) << input;
    EXPECT_THAT(run.err, HasSubstr("max_windows of 2: at most 12 bytes")) << input;
    EXPECT_THAT(run.err, HasSubstr("nothing was sent"));
  }
  EXPECT_EQ(service_.requests().size(), 1u);
}

TEST_F(TsctlClassifyTest, RejectOverMaxLengthIsRefusedBeforeSending) {
  service_.set_model_info(ModelWith(8, "reject", 4, 2));
  const ToolRun run = Classify(Write("long.txt", "0123456789"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("10 bytes, over model 'm''s max_length of 8 under over-length "
                                 "policy reject"));
  EXPECT_THAT(run.err, HasSubstr("--over-length"));
  EXPECT_TRUE(service_.requests().empty());
}

// What the server would keep is still over the message limit: refused naming the limit, tsctl's
// flag and the server's config key, instead of gRPC's "Sent message larger than max".
TEST_F(TsctlClassifyTest, OverTheMessageLimitIsRefusedNamingFlagAndConfigKey) {
  service_.set_model_info(ModelWith(100, "window", 100, 100));
  const std::string file = Write("doc.txt", std::string(5000, 'x'));
  const ToolRun run = Classify("--max-message-bytes 1000 " + file);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("sending 5000 of 5000 bytes (what the model uses under "
                                 "over-length policy window) would exceed the message limit of "
                                 "1000 bytes (tsctl --max-message-bytes; the server's own limit "
                                 "is its max_message_bytes config key)"));
  EXPECT_TRUE(service_.requests().empty());
}

// A server that does not answer GetModel: documents go whole, up to the message limit.
TEST_F(TsctlClassifyTest, WithoutGetModelTheWholeDocumentIsSentUpToTheLimit) {
  const std::string file = Write("doc.txt", std::string(5000, 'x'));
  ASSERT_EQ(Classify(file).exit_code, 0);
  ASSERT_EQ(service_.requests().size(), 1u);
  EXPECT_EQ(service_.requests()[0].document().size(), 5000u);
  const ToolRun run = Classify("--max-message-bytes 1000 " + file);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("--max-message-bytes"));
  EXPECT_EQ(service_.requests().size(), 1u);
}

// Issue 44: tsctl bench --files reads its inputs through the same bounded read as classify
// (common/file_slice.h). A 64 GiB file (sparse past its head) is benchmarked at once, each request
// carrying what the model keeps under the policy (truncate: the first max_length + 1 bytes,
// keep_tail: the last ones), the same requests as for the file cut to those bytes.
TEST_F(TsctlClassifyTest, BenchFilesSendsOnlyWhatTheModelKeepsOfAHugeFile) {
  service_.set_model_info(ModelWith(2048, "truncate", 1024, 16));
  std::string head = "the head of a huge document ";
  while (head.size() < 3000) head += head;
  const std::string big = Write("huge.txt", head);
  ASSERT_EQ(::truncate(big.c_str(), std::int64_t{64} << 30), 0);
  const std::string cut = Write("cut.txt", head.substr(0, 2049));
  const auto bench = [this](const std::string& args) {
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    const std::string command = std::string(TS_TSCTL_BINARY) + " bench --model m --server " +
                                service_.address() + " --timeout-ms 10000 --concurrency 1 " +
                                "--requests 2 " + args + " >" + out + " 2>" + err;
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(err);
  };
  bench("--files " + big);
  bench("--files " + cut);
  const auto requests = service_.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].document().size(), 2049u);
  EXPECT_EQ(requests[0].document(), head.substr(0, 2049));
  for (const auto& request : requests) EXPECT_EQ(request.document(), requests[0].document());

  // keep_tail: the file's last 2049 bytes (zeros, the sparse part), as for a file of them.
  const std::string tail = Write("tail.txt", std::string(2049, '\0'));
  bench("--over-length keep_tail --files " + big);
  bench("--over-length keep_tail --files " + tail);
  const auto tails = service_.requests();
  ASSERT_EQ(tails.size(), 8u);
  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_EQ(tails[i].document(), std::string(2049, '\0')) << i;
    EXPECT_EQ(tails[i].over_length(), "keep_tail") << i;
  }
}

}  // namespace
}  // namespace ts::client

// tsctl against a real tsserver on loopback: models, classify (JSON lines in input order, files
// and images, errors per input), short bench runs (every --protocol), and health (gRPC's health
// service).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "model/checkpoints/checkpoint.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/server_process.h"

namespace ts {
namespace {

using ts::testing::RunCommand;

class TsctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(ts::testing::MakeScratchDir());
    for (const auto& [name, modality, length] :
         {std::tuple<std::string, std::string, std::int64_t>{"text", "bytes", 256},
          {"pixels", "pixels", 16}}) {
      TaylorShiftEncoderOptions options(32, 1, 4, length, 2);
      options.mlp_hidden(64);
      TaylorShiftEncoder model(options);
      ts::testing::RandomizeParameters(model, 11);
      CheckpointMetadata metadata;
      metadata.format_version = kCheckpointFormatVersion;
      metadata.modality = modality;
      metadata.labels = {"no", "yes"};
      ASSERT_TRUE(SaveCheckpoint(*dir_ + "/" + name + ".tsckpt", options, metadata, model).ok());
    }
    server_ = new ts::testing::ServerProcess();
    ASSERT_TRUE(server_->Start(
        TS_TSSERVER_BINARY,
        {"--listen", "127.0.0.1:0", "--metrics-listen", "", "--model",
         "text=" + *dir_ + "/text.tsckpt", "--model", "pixels=" + *dir_ + "/pixels.tsckpt",
         "--threads", "2", "--state-dir", *dir_ + "/state", "--data-root", *dir_ + "/data"},
        *dir_));
    server_flag_ = new std::string(" --server " + server_->grpc_address());
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(SIGTERM), 0);
    delete server_;
  }
  static std::string* dir_;
  // "tsctl COMMAND --server ADDR ARGS".
  static std::string Tsctl(const std::string& command, const std::string& args) {
    return std::string(TS_TSCTL_BINARY) + " " + command + *server_flag_ + " " + args;
  }
  static std::string* server_flag_;
  static ts::testing::ServerProcess* server_;
};
std::string* TsctlTest::dir_ = nullptr;
std::string* TsctlTest::server_flag_ = nullptr;
ts::testing::ServerProcess* TsctlTest::server_ = nullptr;

TEST_F(TsctlTest, ModelsListsWhatIsServed) {
  const auto out = RunCommand(Tsctl("models", "--json"));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  ASSERT_EQ(out.lines.size(), 2u) << out.text;
  EXPECT_NE(out.text.find("\"name\":\"pixels\""), std::string::npos);
  EXPECT_NE(out.text.find("\"name\":\"text\""), std::string::npos);
  EXPECT_NE(out.text.find("\"max_length\":256"), std::string::npos) << out.text;
}

// Issue 45: `tsctl model NAME` of a name that is not served lists the served ones, as gRPC
// Classify's NOT_FOUND does.
TEST_F(TsctlTest, ModelOfAnUnservedNameListsTheServedModels) {
  const auto out = RunCommand(Tsctl("model", "nope"));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("NOT_FOUND"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("model \"nope\" is not served ("), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("pixels"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("text"), std::string::npos) << out.text;
}

TEST_F(TsctlTest, ClassifyPrintsOneJsonLinePerInputInInputOrder) {
  std::vector<std::string> files;
  for (int i = 0; i < 6; ++i) {
    files.push_back(*dir_ + "/doc" + std::to_string(i) + ".txt");
    std::ofstream(files.back()) << std::string(static_cast<std::size_t>(250 - 40 * i), 'a' + i);
  }
  files.push_back(*dir_ + "/empty.txt");
  std::ofstream(files.back()).close();
  std::string command = Tsctl("classify", "--model text --json --concurrency 4");
  for (const auto& f : files) command += " " + f;
  const auto out = RunCommand(command);
  EXPECT_EQ(out.exit_code, 1) << "the empty file fails, so the exit code is 1\n" << out.text;
  std::vector<std::string> json;
  for (const auto& line : out.lines) {
    if (!line.empty() && line[0] == '{') json.push_back(line);
  }
  ASSERT_EQ(json.size(), files.size()) << out.text;
  for (std::size_t i = 0; i + 1 < files.size(); ++i) {
    EXPECT_NE(json[i].find("\"file\":\"" + files[i] + "\""), std::string::npos) << json[i];
    for (const char* key : {"\"label\":", "\"probabilities\":", "\"path\":", "\"batch_size\":",
                            "\"model_version\":"}) {
      EXPECT_NE(json[i].find(key), std::string::npos) << key << " in " << json[i];
    }
  }
  EXPECT_NE(json.back().find("INVALID_ARGUMENT"), std::string::npos) << json.back();
}

TEST_F(TsctlTest, ClassifySendsPgmImagesAsPixels) {
  const std::string image = *dir_ + "/img.pgm";
  {
    std::ofstream out(image, std::ios::binary);
    out << "P5\n4 4\n255\n" << std::string(16, '\x7f');
  }
  const auto out = RunCommand(Tsctl("classify", "--model pixels --json " + image));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("\"tokens\":17"), std::string::npos) << out.text;
}

TEST_F(TsctlTest, BenchReportsThroughputLatencyAndTheMix) {
  const auto out = RunCommand(
      Tsctl("bench", "--model text --concurrency 4 --requests 40 --lengths uniform:20:250 --json"));
  ASSERT_EQ(out.exit_code, 0) << out.text;
  for (const char* key : {"\"requests_per_s\":", "\"p50\":", "\"p99\":", "\"paths\":",
                          "\"batch_size\":", "\"ok\":40"}) {
    EXPECT_NE(out.text.find(key), std::string::npos) << key << " in " << out.text;
  }
}

TEST_F(TsctlTest, BenchDrivesEveryProtocol) {
  // Its own server with the HTTP front end on (and its own folder for the ready file).
  const std::string dir = *dir_ + "/protocols";
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/tsserver.yaml";
  std::ofstream(config) << "http: {listen: \"127.0.0.1:0\"}\n";
  ts::testing::ServerProcess server;
  ASSERT_TRUE(server.Start(TS_TSSERVER_BINARY,
                           {"--config", config, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                            "--model", "text=" + *dir_ + "/text.tsckpt", "--threads", "1",
                            "--state-dir", dir + "/state", "--data-root", dir + "/data"},
                           dir));
  ASSERT_FALSE(server.http_address().empty()) << server.Log();
  const std::string bench = std::string(TS_TSCTL_BINARY) +
                            " bench --model text --concurrency 3 --requests 9 "
                            "--lengths uniform:20:250 --json --protocol ";
  for (const std::string protocol : {"classify", "v2-grpc", "v2-rest", "rest"}) {
    const bool http = protocol == "v2-rest" || protocol == "rest";
    const auto out = RunCommand(
        bench + protocol +
        (http ? " --http " + server.http_address() : " --server " + server.grpc_address()));
    EXPECT_EQ(out.exit_code, 0) << protocol << ": " << out.text;
    EXPECT_NE(out.text.find("\"ok\":9,\"failed\":0"), std::string::npos)
        << protocol << ": " << out.text;
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

TEST_F(TsctlTest, BenchProtocolFlagsAreChecked) {
  const std::string bench = std::string(TS_TSCTL_BINARY) + " bench --model text --requests 1 ";
  const auto no_http = RunCommand(bench + "--protocol rest");
  EXPECT_EQ(no_http.exit_code, 2) << no_http.text;
  EXPECT_NE(no_http.text.find("needs --http"), std::string::npos) << no_http.text;
  const auto unknown = RunCommand(bench + "--protocol soap");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.text;
  EXPECT_NE(unknown.text.find("classify, v2-grpc, v2-rest or rest"), std::string::npos);
  const std::string image = *dir_ + "/bench.pgm";
  {
    std::ofstream out(image, std::ios::binary);
    out << "P5\n2 2\n255\n" << std::string(4, '\x10');
  }
  const auto images = RunCommand(bench + "--protocol v2-grpc --files " + image);
  EXPECT_EQ(images.exit_code, 2) << images.text;
  EXPECT_NE(images.text.find("need --protocol classify"), std::string::npos) << images.text;
}

TEST_F(TsctlTest, HealthOfTheServerAndOfEachServiceAndModelIsServing) {
  const auto overall = RunCommand(Tsctl("health", ""));
  EXPECT_EQ(overall.exit_code, 0) << overall.text;
  EXPECT_EQ(overall.text, "SERVING\n");
  for (const char* service : {"taylorshift.v1.Classifier", "taylorshift.v1.Jobs", "text"}) {
    const auto out =
        RunCommand(Tsctl("health", std::string("--timeout-ms 5000 --service ") + service));
    EXPECT_EQ(out.exit_code, 0) << service << ": " << out.text;
    EXPECT_EQ(out.text, "SERVING\n") << service;
  }
  const auto json = RunCommand(Tsctl("health", "--service=pixels --json"));
  EXPECT_EQ(json.exit_code, 0) << json.text;
  EXPECT_EQ(json.text, "{\"service\":\"pixels\",\"status\":\"SERVING\"}\n");
}

TEST_F(TsctlTest, HealthOfAnUnknownServiceIsNotFound) {
  const auto out = RunCommand(Tsctl("health", "--service no-such-model"));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("NOT_FOUND"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("SERVING"), std::string::npos) << out.text;
}

TEST_F(TsctlTest, HealthOfAnUnreachableServerFails) {
  const auto out =
      RunCommand(std::string(TS_TSCTL_BINARY) + " health --server 127.0.0.1:1 --timeout-ms 2000");
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("UNAVAILABLE"), std::string::npos) << out.text;
}

TEST_F(TsctlTest, JobsOffServerSaysSoAndWhereJobsRunAndIsNotServingForJobs) {
  // Its own folder: ServerProcess names its ready file after the starts in that folder.
  const std::string dir = *dir_ + "/no-jobs";
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/tsserver.yaml";
  std::ofstream(config) << "jobs: {enabled: false, elsewhere: \"taylorshift-jobs:50051\"}\n";
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "model: {embed_dim: 32, depth: 1, heads: 4, max_length: 64}\n"
                         "data: {train: {format: jsonl, path: train.jsonl}}\nsteps: 10\n";
  ts::testing::ServerProcess server;
  ASSERT_TRUE(server.Start(TS_TSSERVER_BINARY,
                           {"--config", config, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                            "--model", "text=" + *dir_ + "/text.tsckpt", "--threads", "1",
                            "--state-dir", dir + "/state", "--data-root", dir + "/data"},
                           dir));
  const std::string tsctl =
      std::string(TS_TSCTL_BINARY) + " health --server " + server.grpc_address();
  const auto jobs = RunCommand(tsctl + " --service taylorshift.v1.Jobs");
  EXPECT_EQ(jobs.exit_code, 1) << jobs.text;
  EXPECT_EQ(jobs.text, "NOT_SERVING\n");
  const auto overall = RunCommand(tsctl);
  EXPECT_EQ(overall.exit_code, 0) << overall.text;
  // What a user who asks for jobs reads: the code, that jobs are off here, and where they run.
  const std::string server_flag = " --server " + server.grpc_address();
  for (const std::string& command :
       {std::string(" jobs list"), " train --spec " + spec, std::string(" jobs get job-1")}) {
    std::string line = TS_TSCTL_BINARY;
    line.append(command).append(server_flag);
    const auto out = RunCommand(line);
    EXPECT_EQ(out.exit_code, 1) << command << ": " << out.text;
    EXPECT_NE(out.text.find("FAILED_PRECONDITION"), std::string::npos)
        << command << ": " << out.text;
    EXPECT_NE(out.text.find("jobs are disabled on this server (jobs.enabled: false)"),
              std::string::npos)
        << command << ": " << out.text;
    EXPECT_NE(out.text.find("taylorshift-jobs:50051"), std::string::npos) << out.text;
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0);
  // Nothing was read or written under state_dir: it was never made.
  EXPECT_FALSE(std::filesystem::exists(dir + "/state"));
}

TEST_F(TsctlTest, HealthTakesNoPositionalArguments) {
  const auto out = RunCommand(Tsctl("health", "text"));
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("not expected: text"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("Run 'tsctl health --help'"), std::string::npos) << out.text;
}

TEST_F(TsctlTest, UnreachableServerIsAClearError) {
  const auto out =
      RunCommand(std::string(TS_TSCTL_BINARY) + " models --server 127.0.0.1:1 --timeout-ms 2000");
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_NE(out.text.find("UNAVAILABLE"), std::string::npos) << out.text;
}

// Usage errors stop before anything starts: exit 2, and the message names the flag.
TEST(CommandLineFlagsTest, UnknownFlagsAndBadIntegersAreUsageErrorsNamingTheFlag) {
  const std::string tsctl = TS_TSCTL_BINARY;
  const std::string tsserver = TS_TSSERVER_BINARY;
  for (const std::string& command :
       {tsctl + " models --follow", tsctl + " jobs list --limit=ten",
        tsctl + " bench --model m --concurrency 0", tsctl + " health --timeout-ms -5",
        tsserver + " --model m=x.tsckpt --colour blue", tsserver + " --threads many",
        tsserver + " --threads=-2"}) {
    const auto out = RunCommand(command);
    EXPECT_EQ(out.exit_code, 2) << command << ": " << out.text;
    const std::string flag = command.substr(command.rfind(" --") + 1);
    EXPECT_NE(out.text.find(flag.substr(0, flag.find_first_of(" ="))), std::string::npos)
        << command << ": " << out.text;
  }
  const auto help = RunCommand(tsctl + " jobs list --help");
  EXPECT_EQ(help.exit_code, 0) << help.text;
  EXPECT_NE(help.text.find("--state"), std::string::npos) << help.text;
  const auto server_help = RunCommand(tsserver + " --help");
  EXPECT_EQ(server_help.exit_code, 0) << server_help.text;
  EXPECT_NE(server_help.text.find("--model NAME=CHECKPOINT"), std::string::npos)
      << server_help.text;
}

}  // namespace
}  // namespace ts

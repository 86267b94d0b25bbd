// What only the tsserver process shows (server/tsserver_main.cc): it writes the ready file with
// its addresses, SIGTERM drains every accepted request and exits 0, and a start-up error exits 1
// with the reason. Everything served is tested in-process (server_integration_test.cc).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <thread>

#include "model/checkpoints/checkpoint.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/metrics_text.h"
#include "tests/testing/server_process.h"

namespace ts {
namespace {

namespace pb = taylorshift::v1;
using ts::testing::ServerProcess;

class TsserverProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ts::testing::MakeScratchDir();
    TaylorShiftEncoderOptions options(32, 1, 4, 128, 2);
    options.mlp_hidden(64);
    TaylorShiftEncoder model(options);
    ts::testing::RandomizeParameters(model, 3);
    CheckpointMetadata metadata;
    metadata.format_version = kCheckpointFormatVersion;
    metadata.modality = "bytes";
    metadata.labels = {"x", "y"};
    ASSERT_TRUE(SaveCheckpoint(dir_ + "/tiny.tsckpt", options, metadata, model).ok());
  }
  std::string dir_;
};

TEST_F(TsserverProcessTest, SigtermFinishesEveryAcceptedRequestAndExitsZero) {
  // A batch waits a minute for company, so the requests are still queued at SIGTERM.
  std::ofstream(dir_ + "/slow.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nshutdown_grace_ms: 20000\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu,\n"
         "          batching: {max_queue_delay_us: 60000000, max_batch_size: 64,\n"
         "                     start_when_idle: false}}]\n";
  ServerProcess server;
  // Start returns once the ready file names the gRPC address (and the metrics one).
  ASSERT_TRUE(
      server.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/slow.yaml", "--threads", "2"}, dir_));
  ASSERT_FALSE(server.metrics_address().empty());
  constexpr int kRequests = 12;
  std::vector<std::future<grpc::Status>> calls;
  calls.reserve(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    calls.push_back(std::async(std::launch::async, [&server, i] {
      auto stub = pb::Classifier::NewStub(
          grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials()));
      pb::ClassifyRequest request;
      request.set_model("tiny");
      request.set_document(std::string(20 + 8 * i, 'q'));
      pb::ClassifyResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      return stub->Classify(&context, request, &response);
    }));
  }
  // Every request waits in the server's queue, none has an answer: then ask it to stop.
  ASSERT_TRUE(ts::testing::WaitForMetric(server.metrics_address(),
                                         "taylorshift_queue_depth{model=\"tiny\"}", kRequests))
      << server.Log();
  for (auto& call : calls) {
    EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a request finished before SIGTERM: the test would not test the drain";
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.Log();
  for (auto& call : calls) {
    const auto status = call.get();
    EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  }
  const std::string log = server.Log();
  EXPECT_NE(log.find("received SIGTERM: draining"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped"), std::string::npos) << log;
}

// compose stop (deploy-check) answered 503 "batcher is shutting down" to HTTP requests the
// server had read but that were still waiting for a handler thread: the batchers closed before
// the front ends had finished. With one handler thread, one request waits in the batcher and the
// others for the handler; SIGTERM answers all of them.
TEST_F(TsserverProcessTest, SigtermAnswersHttpRequestsWaitingForAHandlerThread) {
  std::ofstream(dir_ + "/http.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nshutdown_grace_ms: 20000\n"
         "http: {listen: 127.0.0.1:0, threads: 1}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu,\n"
         "          batching: {max_queue_delay_us: 60000000, max_batch_size: 64,\n"
         "                     start_when_idle: false}}]\n";
  ServerProcess server;
  ASSERT_TRUE(
      server.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/http.yaml", "--threads", "2"}, dir_));
  ASSERT_FALSE(server.http_address().empty()) << server.Log();
  constexpr int kRequests = 5;
  std::atomic<int> sent{0};
  std::vector<std::future<std::string>> calls;
  calls.reserve(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    calls.push_back(std::async(std::launch::async, [&server, &sent, i] {
      return ts::testing::HttpResponse(server.http_address(), "POST", "/v1/models/tiny:classify",
                                       {"Content-Type: application/json"},
                                       "{\"text\": \"" + std::string(20 + 8 * i, 'q') + "\"}", 60,
                                       [&sent] { ++sent; });
    }));
  }
  // The one handler thread's request waits in the batcher; the others were sent before SIGTERM.
  ASSERT_TRUE(ts::testing::WaitForMetric(server.metrics_address(),
                                         "taylorshift_queue_depth{model=\"tiny\"}", 1))
      << server.Log();
  for (int i = 0; i < 100 && sent.load() < kRequests; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(sent.load(), kRequests);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // read by the server's io thread
  for (auto& call : calls) {
    ASSERT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a request finished before SIGTERM: the test would not test the drain";
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.Log();
  for (auto& call : calls) {
    const std::string response = call.get();
    EXPECT_EQ(ts::testing::HttpStatus(response), 200) << response;
  }
}

TEST_F(TsserverProcessTest, AStartUpErrorExitsOneWithTheReason) {
  std::ofstream(dir_ + "/missing.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "models: [{name: gone, checkpoint: missing.tsckpt, device: cpu}]\n";
  const auto refused =
      ts::testing::RunCommand(std::string(TS_TSSERVER_BINARY) + " --config " + dir_ +
                              "/missing.yaml --ready-file " + dir_ + "/ready");
  EXPECT_EQ(refused.exit_code, 1) << refused.text;
  EXPECT_NE(refused.text.find("loading models: "), std::string::npos) << refused.text;
  EXPECT_NE(refused.text.find("missing.tsckpt"), std::string::npos) << refused.text;
  EXPECT_FALSE(std::ifstream(dir_ + "/ready").good()) << "a server that did not start is ready";
}

// Issue 45: two servers on one state_dir ran the same job into the same files. The second now
// exits 1 naming the first's pid, and the first keeps serving.
TEST_F(TsserverProcessTest, ASecondServerOnTheSameStateDirExitsOne) {
  std::ofstream(dir_ + "/jobs.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\nhttp: {listen: ''}\n"
         "state_dir: state\ndata_root: data\njobs: {enabled: true}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  ServerProcess first;
  ASSERT_TRUE(first.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/jobs.yaml"}, dir_));
  const auto second =
      ts::testing::RunCommand(std::string(TS_TSSERVER_BINARY) + " --config " + dir_ +
                              "/jobs.yaml --ready-file " + dir_ + "/second-ready");
  EXPECT_EQ(second.exit_code, 1) << second.text;
  EXPECT_NE(second.text.find("is in use by another server (pid " + std::to_string(first.pid())),
            std::string::npos)
      << second.text;
  EXPECT_FALSE(std::ifstream(dir_ + "/second-ready").good());
  EXPECT_EQ(first.Stop(SIGTERM), 0) << first.Log();
}

}  // namespace
}  // namespace ts

// Serving replicas follow promotions (docs/SERVING.md, "Serving replicas follow promotions"), with
// two real tsserver processes on loopback: a jobs server, and a serving replica with jobs off
// and promotions.follow pointed at it. A promotion on the jobs server reaches the replica; a
// checkpoint of another task is refused there; the replica keeps serving while the jobs server
// is down, and a restart serves the last followed version from its cache. DownloadCheckpoint
// through `tsctl download` writes a file tsmodel loads. Every wait is bounded; every process
// started is stopped by its PID (ServerProcess).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "common/file_io.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/encoder.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "taylorshift/v1/jobs.grpc.pb.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/metrics_text.h"
#include "tests/testing/server_process.h"

namespace ts {
namespace {

namespace pb = taylorshift::v1;
namespace fs = std::filesystem;
using ts::testing::ServerProcess;

constexpr auto kWait = std::chrono::seconds(60);

std::string SourceDir() {
  const char* dir = std::getenv("TS_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// Polls `done` every 50 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

// The version `address` serves under `model` ("" when the call fails).
std::string ServedVersion(const std::string& address, const std::string& model) {
  auto stub =
      pb::Classifier::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  pb::GetModelRequest request;
  request.set_name(model);
  pb::ModelInfo info;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  return stub->GetModel(&context, request, &info).ok() ? info.version() : "";
}

// Classifies a short document on `address`; the status, and the version that answered.
grpc::Status Classify(const std::string& address, const std::string& model, std::string* version) {
  auto stub =
      pb::Classifier::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  pb::ClassifyRequest request;
  request.set_model(model);
  request.set_document("[MAX 4 3 [MIN 2 3 ] 1 0 ]");
  pb::ClassifyResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  grpc::Status status = stub->Classify(&context, request, &response);
  *version = response.model_version();
  return status;
}

class PromotionFollowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ts::testing::MakeScratchDir();
    fs::create_directories(dir_ + "/data");
    // Each process's ready file and log in its own folder (ServerProcess numbers them per object).
    fs::create_directories(dir_ + "/jobs-run");
    fs::create_directories(dir_ + "/replica-run");
    listops_ = SourceDir() + "/models/listops-demo.tsckpt";
    jobs_listops_ = replica_listops_ = listops_;
    source_lang_ = SourceDir() + "/models/source-lang-demo.tsckpt";
    // A new version of the listops model: the same weights and task, other bytes.
    auto loaded = LoadCheckpoint(listops_);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded->metadata.provenance["note"] = "promotion_follow_test";
    ASSERT_TRUE(
        SaveCheckpoint(dir_ + "/data/v2.tsckpt", loaded->options, loaded->metadata, loaded->model)
            .ok());
    auto bytes = ReadFile(dir_ + "/data/v2.tsckpt");
    ASSERT_TRUE(bytes.ok());
    v2_bytes_ = *bytes;
    v2_version_ = CheckpointVersion(v2_bytes_);
  }

  // The jobs server: listops, and `lang` served from a ListOps checkpoint too (another task
  // than the replica's `lang`).
  void StartJobsServer() {
    std::ofstream(dir_ + "/jobs.yaml")
        << "listen: 127.0.0.1:0\nmetrics_listen: \"\"\nstate_dir: state\ndata_root: data\n"
           "nvml_library: \"\"\nmodels:\n"
           "  - {name: listops, checkpoint: "
        << jobs_listops_ << ", device: cpu}\n  - {name: lang, checkpoint: " << listops_
        << ", device: cpu}\n";
    ASSERT_TRUE(jobs_.Start(TS_TSSERVER_BINARY, {"--config", dir_ + "/jobs.yaml", "--threads", "1"},
                            dir_ + "/jobs-run"));
  }

  // The serving replica: jobs off, following the jobs server every 200 ms.
  void StartReplica() {
    std::ofstream(dir_ + "/replica.yaml")
        << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nnvml_library: \"\"\n"
           "state_dir: replica-state-unused\ndata_root: replica-data-unused\n"
           "jobs: {enabled: false}\n"
           "promotions:\n  follow:\n    server: "
        << jobs_address_ << "\n    interval_ms: 200\n    timeout_ms: 10000\n"
        << "    cache_dir: follow-cache\nmodels:\n  - {name: listops, checkpoint: "
        << replica_listops_ << ", device: cpu}\n  - {name: lang, checkpoint: " << source_lang_
        << ", device: cpu}\n";
    ASSERT_TRUE(replica_.Start(TS_TSSERVER_BINARY,
                               {"--config", dir_ + "/replica.yaml", "--threads", "1"},
                               dir_ + "/replica-run"));
  }

  void TearDown() override {
    std::error_code error;
    fs::remove_all(dir_, error);
  }

  double ReplicaMetric(const std::string& series) {
    return ts::testing::MetricSample(ts::testing::HttpGet(replica_.metrics_address(), "/metrics"),
                                     series)
        .value_or(0);
  }

  // What each server serves under `listops` (listops_ unless a test says otherwise).
  std::string jobs_listops_, replica_listops_;
  std::string dir_, listops_, source_lang_, v2_bytes_, v2_version_, jobs_address_;
  ServerProcess jobs_, replica_;
};

TEST_F(PromotionFollowTest, ReplicaServesPromotionsRefusesOtherTasksAndOutlivesTheJobsServer) {
  StartJobsServer();
  jobs_address_ = jobs_.grpc_address();
  StartReplica();
  const std::string configured = ServedVersion(replica_.grpc_address(), "listops");
  const std::string lang_configured = ServedVersion(replica_.grpc_address(), "lang");
  ASSERT_FALSE(configured.empty()) << replica_.Log();
  ASSERT_NE(configured, v2_version_);

  // The jobs server's `lang` answers ListOps digits: the replica refuses it and keeps its own.
  ASSERT_TRUE(WaitUntil([&] {
    return ReplicaMetric(
               "taylorshift_promotion_follow_errors_total{model=\"lang\",reason="
               "\"incompatible\"") >= 1;
  })) << replica_.Log();
  EXPECT_EQ(ServedVersion(replica_.grpc_address(), "lang"), lang_configured);
  EXPECT_NE(replica_.Log().find("answers another task"), std::string::npos) << replica_.Log();
  // Not in sync: the jobs server serves another version under that name.
  EXPECT_EQ(ReplicaMetric("taylorshift_promotion_follow_last_sync_timestamp_seconds{model="
                          "\"lang\"}"),
            0);

  // A promotion on the jobs server reaches the replica without a restart, and no request to the
  // replica fails while it swaps (a client classifies throughout).
  std::atomic<bool> swapped{false};
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};
  std::thread load([&] {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!swapped && std::chrono::steady_clock::now() < deadline) {
      std::string version;
      (Classify(replica_.grpc_address(), "listops", &version).ok() ? answered : failed)++;
    }
  });
  {
    auto stub =
        pb::Jobs::NewStub(grpc::CreateChannel(jobs_address_, grpc::InsecureChannelCredentials()));
    pb::PromoteCheckpointRequest request;
    request.set_model("listops");
    request.set_checkpoint("v2.tsckpt");
    pb::PromoteCheckpointResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    const grpc::Status status = stub->PromoteCheckpoint(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << jobs_.Log();
    ASSERT_EQ(response.model().version(), v2_version_);
  }
  const bool followed =
      WaitUntil([&] { return ServedVersion(replica_.grpc_address(), "listops") == v2_version_; });
  swapped = true;
  load.join();
  ASSERT_TRUE(followed) << replica_.Log();
  EXPECT_EQ(failed, 0);
  EXPECT_GT(answered, 0);
  std::string answered_by;
  grpc::Status classified = Classify(replica_.grpc_address(), "listops", &answered_by);
  ASSERT_TRUE(classified.ok()) << classified.error_message();
  EXPECT_EQ(answered_by, v2_version_);
  EXPECT_GT(ReplicaMetric("taylorshift_promotion_follow_last_sync_timestamp_seconds{model="
                          "\"listops\"}"),
            0);
  // The cache holds the followed file, byte for byte.
  auto cached = ReadFile(dir_ + "/follow-cache/listops/" + v2_version_ + ".tsckpt");
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(*cached, v2_bytes_);

  // tsctl download: the promoted checkpoint into a file that tsmodel loads; NOT_FOUND names
  // what is missing.
  const std::string out = dir_ + "/downloaded.tsckpt";
  auto downloaded = ts::testing::RunCommand(std::string(TS_TSCTL_BINARY) + " download --server " +
                                            jobs_address_ + " --model listops --out " + out);
  ASSERT_EQ(downloaded.exit_code, 0) << downloaded.text;
  EXPECT_NE(downloaded.text.find(v2_version_), std::string::npos) << downloaded.text;
  auto file = ReadFile(out);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, v2_bytes_);
  auto info = ts::testing::RunCommand(std::string(TS_TSMODEL_BINARY) + " info " + out);
  EXPECT_EQ(info.exit_code, 0) << info.text;
  auto missing_job = ts::testing::RunCommand(std::string(TS_TSCTL_BINARY) + " download --server " +
                                             jobs_address_ + " --job job-404 --out " + out);
  EXPECT_EQ(missing_job.exit_code, 1);
  EXPECT_NE(missing_job.text.find("NOT_FOUND"), std::string::npos) << missing_job.text;
  EXPECT_NE(missing_job.text.find("job-404"), std::string::npos) << missing_job.text;
  auto missing_model =
      ts::testing::RunCommand(std::string(TS_TSCTL_BINARY) + " download --server " + jobs_address_ +
                              " --model nope --out " + out);
  EXPECT_EQ(missing_model.exit_code, 1);
  EXPECT_NE(missing_model.text.find("NOT_FOUND"), std::string::npos) << missing_model.text;
  EXPECT_NE(missing_model.text.find("\"nope\""), std::string::npos) << missing_model.text;

  // The jobs server goes away: the replica keeps serving, counts the failed polls and says so
  // once.
  ASSERT_EQ(jobs_.Stop(SIGTERM), 0) << jobs_.Log();
  ASSERT_TRUE(WaitUntil([&] {
    return ReplicaMetric(
               "taylorshift_promotion_follow_errors_total{model=\"listops\",reason="
               "\"unavailable\"") >= 3;
  })) << replica_.Log();
  for (int i = 0; i < 3; ++i) {
    classified = Classify(replica_.grpc_address(), "listops", &answered_by);
    ASSERT_TRUE(classified.ok()) << classified.error_message();
    EXPECT_EQ(answered_by, v2_version_);
  }
  const std::string log = replica_.Log();
  const auto first = log.find("cannot reach the jobs server");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("cannot reach the jobs server", first + 1), std::string::npos) << log;

  // A restart, with the jobs server still down, serves the last followed version from the cache.
  ASSERT_EQ(replica_.Stop(SIGTERM), 0) << replica_.Log();
  StartReplica();
  EXPECT_EQ(ServedVersion(replica_.grpc_address(), "listops"), v2_version_) << replica_.Log();
  EXPECT_EQ(ServedVersion(replica_.grpc_address(), "lang"), lang_configured);
  EXPECT_EQ(replica_.Stop(SIGTERM), 0) << replica_.Log();
}

// Issue 45: a followed version whose labels and input kind match but whose encoder takes another
// max length is another task too (as promote's guard says): the replica refuses it, names both
// lengths, and keeps its configured version.
TEST_F(PromotionFollowTest, ReplicaRefusesAVersionOfAnotherMaxLength) {
  auto listops = LoadCheckpoint(listops_);
  ASSERT_TRUE(listops.ok()) << listops.status();
  const auto write = [&](const std::string& path, std::int64_t max_length) {
    TaylorShiftEncoderOptions options(16, 1, 2, max_length,
                                      static_cast<std::int64_t>(listops->metadata.labels.size()));
    options.mlp_hidden(32);
    TaylorShiftEncoder model(options);
    ts::testing::RandomizeParameters(model, 7);
    CheckpointMetadata metadata;
    metadata.modality = listops->metadata.modality;
    metadata.labels = listops->metadata.labels;
    ASSERT_TRUE(SaveCheckpoint(path, options, metadata, model).ok());
  };
  replica_listops_ = dir_ + "/short.tsckpt";
  jobs_listops_ = dir_ + "/long.tsckpt";
  write(replica_listops_, 32);
  write(jobs_listops_, 64);

  StartJobsServer();
  jobs_address_ = jobs_.grpc_address();
  StartReplica();
  const std::string configured = ServedVersion(replica_.grpc_address(), "listops");
  ASSERT_FALSE(configured.empty()) << replica_.Log();
  ASSERT_NE(ServedVersion(jobs_address_, "listops"), configured);
  ASSERT_TRUE(WaitUntil([&] {
    return ReplicaMetric(
               "taylorshift_promotion_follow_errors_total{model=\"listops\",reason="
               "\"incompatible\"") >= 1;
  })) << replica_.Log();
  EXPECT_NE(replica_.Log().find("max length differs: served 32, candidate 64"), std::string::npos)
      << replica_.Log();
  EXPECT_EQ(ServedVersion(replica_.grpc_address(), "listops"), configured);
  EXPECT_EQ(replica_.Stop(SIGTERM), 0) << replica_.Log();
  EXPECT_EQ(jobs_.Stop(SIGTERM), 0) << jobs_.Log();
}

}  // namespace
}  // namespace ts

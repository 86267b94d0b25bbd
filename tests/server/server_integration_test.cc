// Integration tests against the whole server (server/server.h) running in this process on
// loopback, its batchers on a fake clock that moves only when a test says: results equal the
// model's own while batches form and both paths run, every error case answers its code and the
// server keeps serving, an expired deadline skips compute, a full queue says which limit, metrics
// pass promtool, health, auth, TLS, message limits, calibration and windows behave. What only a
// process shows (signals, the ready file, exit codes) is tests/server/tsserver_process_test.cc.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/file_io.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "model/checkpoints/checkpoint.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/batch_classifier.h"
#include "server/config.h"
#include "server/server.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/metrics_text.h"
#include "tests/testing/server_process.h"

namespace ts {
namespace {

namespace pb = taylorshift::v1;
using ts::server::Server;
using ts::testing::FakeClock;

constexpr std::int64_t kMaxLength = 512;

std::string WriteModel(const std::string& dir, const std::string& name, const std::string& modality,
                       std::int64_t max_length, std::vector<std::string> labels,
                       std::uint64_t seed) {
  TaylorShiftEncoderOptions options(32, 1, 4, max_length, static_cast<std::int64_t>(labels.size()));
  options.mlp_hidden(64);
  TaylorShiftEncoder model(options);
  ts::testing::RandomizeParameters(model, seed);
  CheckpointMetadata metadata;
  metadata.format_version = kCheckpointFormatVersion;
  metadata.modality = modality;
  metadata.labels = std::move(labels);
  metadata.provenance["created_by"] = "server_integration_test";
  std::string path = dir + "/" + name + ".tsckpt";
  EXPECT_TRUE(SaveCheckpoint(path, options, metadata, model).ok());
  return path;
}

// Loads `config_path` as tsserver does (relative paths against its directory) and starts the
// server on `clock`.
absl::StatusOr<std::unique_ptr<Server>> StartServer(const std::string& config_path,
                                                    ts::Clock* clock) {
  auto config = ts::server::LoadServerConfig(config_path);
  if (!config.ok()) return config.status();
  return Server::Create(*config, clock);
}

std::string RandomDocument(std::mt19937& rng, std::int64_t length) {
  std::uniform_int_distribution<int> byte(32, 126);
  std::string doc(static_cast<std::size_t>(length), ' ');
  for (auto& c : doc) c = static_cast<char>(byte(rng));
  return doc;
}

class ServerIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(ts::testing::MakeScratchDir());
    tiny_ = new std::string(WriteModel(*dir_, "tiny", "bytes", kMaxLength, {"a", "b", "c"}, 7));
    const std::string px = WriteModel(*dir_, "px", "pixels", 64, {"dark", "light"}, 8);
    std::ofstream config(*dir_ + "/config.yaml");
    config << "listen: 127.0.0.1:0\n"
              "metrics_listen: 127.0.0.1:0\n"
              "intra_op_threads: 2\n"
              "shutdown_grace_ms: 20000\n"
              "models:\n"
              "  - name: tiny\n"
              "    checkpoint: tiny.tsckpt\n"
              "    device: cpu\n"
              "    batching: {bucket_boundaries: [32, 64, 128, 256, 512], max_batch_size: 16,\n"
              "               max_batch_tokens: 16384, max_queue_delay_us: 30000}\n"
              "  - name: strict\n"
              "    checkpoint: tiny.tsckpt\n"
              "    device: cpu\n"
              "    max_length: 256\n"
              "    over_length: reject\n"
              "  - name: px\n"
              "    checkpoint: px.tsckpt\n"
              "    device: cpu\n"
              "  - name: slow\n"
              "    checkpoint: tiny.tsckpt\n"
              "    device: cpu\n"
              "    batching: {max_queue_delay_us: 400000, max_queue_size: 3, max_batch_size: 64,\n"
              "               start_when_idle: false}\n";
    config.close();
    clock_ = new FakeClock();
    auto server = StartServer(*dir_ + "/config.yaml", clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(20));
    delete server_;
    delete clock_;  // after the server: its batch threads wait on it
  }

  std::unique_ptr<pb::Classifier::Stub> Stub() {
    return pb::Classifier::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }
  // `deadline_ms` is real time; the server moves it onto its (fake) clock.
  static grpc::Status Call(pb::Classifier::Stub& stub, const pb::ClassifyRequest& request,
                           pb::ClassifyResponse* response, int deadline_ms = 30000) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    return stub.Classify(&context, request, response);
  }
  static pb::ClassifyRequest Document(const std::string& model, const std::string& doc) {
    pb::ClassifyRequest request;
    request.set_model(model);
    request.set_document(doc);
    return request;
  }

  static std::string* dir_;
  static std::string* tiny_;
  static FakeClock* clock_;
  static Server* server_;
};
std::string* ServerIntegrationTest::dir_ = nullptr;
std::string* ServerIntegrationTest::tiny_ = nullptr;
FakeClock* ServerIntegrationTest::clock_ = nullptr;
Server* ServerIntegrationTest::server_ = nullptr;

TEST_F(ServerIntegrationTest, ConcurrentMixedLengthsGetTheInProcessModelsProbabilities) {
  std::mt19937 rng(42);
  std::vector<std::string> docs;
  docs.reserve(48);
  std::uniform_int_distribution<std::int64_t> short_len(5, 60), long_len(100, kMaxLength);
  for (int i = 0; i < 48; ++i)
    docs.push_back(RandomDocument(rng, i % 2 ? short_len(rng) : long_len(rng)));
  // Expected: each document alone through the in-process model.
  auto loaded = LoadCheckpoint(*tiny_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<std::vector<float>> expected;
  for (const auto& doc : docs) {
    auto result = ClassifyBatch(loaded->model, {doc}, AttentionPath::kAuto, torch::kCPU);
    ASSERT_TRUE(result.ok()) << result.status();
    expected.push_back(result->probabilities[0]);
  }
  std::vector<pb::ClassifyResponse> responses(docs.size());
  std::vector<grpc::Status> statuses(docs.size());
  std::vector<std::thread> clients;
  clients.reserve(16);
  std::atomic<std::size_t> next{0};
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&] {
      auto stub = Stub();
      for (std::size_t i = next++; i < docs.size(); i = next++) {
        statuses[i] = Call(*stub, Document("tiny", docs[i]), &responses[i]);
      }
    });
  }
  for (auto& c : clients) c.join();
  std::uint32_t largest_batch = 0;
  std::set<int> paths;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    const auto& r = responses[i];
    ASSERT_EQ(r.probabilities_size(), 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(r.probabilities(c).probability(), expected[i][c], 1e-5) << "doc " << i;
      EXPECT_EQ(r.probabilities(c).index(), static_cast<std::uint32_t>(c));
    }
    EXPECT_EQ(r.tokens(), docs[i].size() + 1);
    EXPECT_FALSE(r.truncated());
    EXPECT_FALSE(r.model_version().empty());
    largest_batch = std::max(largest_batch, r.timing().batch_size());
    paths.insert(r.path());
  }
  EXPECT_GT(largest_batch, 1u) << "no batch of more than one request formed";
  EXPECT_TRUE(paths.count(pb::ATTENTION_PATH_DIRECT)) << "short documents should run direct";
  EXPECT_TRUE(paths.count(pb::ATTENTION_PATH_EFFICIENT)) << "long documents should run efficient";
}

TEST_F(ServerIntegrationTest, ErrorsAnswerTheirCodeAndTheServerKeepsServing) {
  auto stub = Stub();
  pb::ClassifyResponse response;
  auto status = Call(*stub, Document("nope", "abc"), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("\"nope\""), std::string::npos) << status.error_message();
  // A name no model can have is refused as such, not looked up (issue 41).
  for (const std::string name : {"..", ".", "taylorshift.v1.Jobs"}) {
    status = Call(*stub, Document(name, "abc"), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_NE(status.error_message().find("model: must match [A-Za-z0-9]"), std::string::npos)
        << status.error_message();
  }

  status = Call(*stub, Document("tiny", ""), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The message tsmodel predict gives an empty file too (tests/tools/tsmodel_test.cc).
  EXPECT_NE(status.error_message().find("input is empty (0 tokens)"), std::string::npos)
      << status.error_message();

  status = Call(*stub, Document("strict", std::string(300, 'x')), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("256"), std::string::npos) << status.error_message();

  pb::ClassifyRequest image;
  image.set_model("px");
  image.mutable_image()->set_width(8);
  image.mutable_image()->set_height(8);
  image.mutable_image()->set_channels(3);
  image.mutable_image()->set_pixels(std::string(100, '\x10'));
  status = Call(*stub, image, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("192"), std::string::npos) << status.error_message();

  image.set_model("tiny");
  status = Call(*stub, image, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  pb::ClassifyRequest no_input;
  no_input.set_model("tiny");
  EXPECT_EQ(Call(*stub, no_input, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  auto top = Document("tiny", "hello");
  top.set_top_k(4);
  EXPECT_EQ(Call(*stub, top, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Still serving, and the valid variants work.
  image.set_model("px");
  image.mutable_image()->set_pixels(std::string(192, '\x80'));
  ASSERT_TRUE(Call(*stub, image, &response).ok());
  EXPECT_EQ(response.tokens(), 65u);
  top.set_top_k(2);
  ASSERT_TRUE(Call(*stub, top, &response).ok());
  ASSERT_EQ(response.probabilities_size(), 2);
  EXPECT_GE(response.probabilities(0).probability(), response.probabilities(1).probability());
  EXPECT_EQ(response.label(), response.probabilities(0).label());
  ASSERT_TRUE(Call(*stub, Document("tiny", std::string(2000, 'y')), &response).ok());
  EXPECT_TRUE(response.truncated());
  EXPECT_EQ(response.tokens(), kMaxLength + 1);
}

TEST_F(ServerIntegrationTest, ExpiredDeadlinesAreNotComputedAndAFullQueueSaysWhichLimit) {
  // "slow" holds a batch open for 400 ms of the server's clock, which moves only here.
  const absl::Time start = clock_->Now();
  auto expiring = std::async(std::launch::async, [this] {
    auto stub = Stub();
    pb::ClassifyResponse response;
    return Call(*stub, Document("slow", "expires in the queue"), &response, 20000);
  });
  // The request is queued once the batch thread waits for its bucket's delay.
  ASSERT_TRUE(clock_->BlockUntilWaiting(start + absl::Milliseconds(400)));
  // Past the 20 s deadline (moved onto the fake clock) and the 400 ms delay: the batch starts
  // with the request already expired.
  clock_->Advance(absl::Seconds(21));
  const grpc::Status expired = expiring.get();
  EXPECT_EQ(expired.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << expired.error_message();
  EXPECT_NE(expired.error_message().find("deadline passed before the batch ran"), std::string::npos)
      << expired.error_message();

  // Three requests fill max_queue_size 3; two more are refused at once, naming the limit.
  std::vector<std::future<grpc::Status>> queued;
  queued.reserve(3);
  for (int i = 0; i < 3; ++i) {
    queued.push_back(std::async(std::launch::async, [this, i] {
      auto s = Stub();
      pb::ClassifyResponse r;
      return Call(*s, Document("slow", "queued " + std::to_string(i)), &r);
    }));
  }
  ASSERT_TRUE(ts::testing::WaitForMetric(server_->metrics_address(),
                                         "taylorshift_queue_depth{model=\"slow\"}", 3));
  for (int i = 3; i < 5; ++i) {
    auto stub = Stub();
    pb::ClassifyResponse response;
    const auto s = Call(*stub, Document("slow", "queued " + std::to_string(i)), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("max_queue_size=3"), std::string::npos) << s.error_message();
  }
  for (auto& call : queued) {
    EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a batch ran before its delay passed on the server's clock";
  }
  clock_->Advance(absl::Milliseconds(400));
  for (auto& call : queued) {
    const auto s = call.get();
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  }

  const std::string metrics = ts::testing::HttpGet(server_->metrics_address(), "/metrics");
  EXPECT_EQ(ts::testing::MetricSample(
                metrics, "taylorshift_rejected_total{model=\"slow\",reason=\"deadline_exceeded\"}"),
            1)
      << metrics;
  EXPECT_EQ(ts::testing::MetricSample(
                metrics, "taylorshift_rejected_total{model=\"slow\",reason=\"queue_full\"}"),
            2)
      << metrics;
  // The expired request never reached compute: one batch ran, the three accepted requests'.
  EXPECT_EQ(ts::testing::MetricSample(metrics,
                                      "taylorshift_compute_duration_seconds_count{model=\"slow\""),
            1)
      << metrics;
}

TEST_F(ServerIntegrationTest, MetricsEndpointPassesPromtool) {
  auto stub = Stub();
  pb::ClassifyResponse response;
  ASSERT_TRUE(Call(*stub, Document("tiny", "scrape me"), &response).ok());
  const std::string metrics = ts::testing::HttpGet(server_->metrics_address(), "/metrics");
  for (const char* family :
       {"taylorshift_requests_total", "taylorshift_request_duration_seconds_bucket",
        "taylorshift_queue_duration_seconds_bucket", "taylorshift_compute_duration_seconds_bucket",
        "taylorshift_batch_size_bucket", "taylorshift_batch_tokens_bucket",
        "taylorshift_padding_ratio_bucket", "taylorshift_sequence_length_bucket",
        "taylorshift_attention_path_total", "taylorshift_queue_depth", "taylorshift_model_info",
        "taylorshift_process_resident_memory_bytes"}) {
    EXPECT_NE(metrics.find(family), std::string::npos) << family;
  }
  // Latency is labelled by protocol and code, as the request count is.
  EXPECT_GE(ts::testing::MetricSample(metrics,
                                      "taylorshift_request_duration_seconds_count{code=\"OK\","
                                      "model=\"tiny\",protocol=\"grpc\"}")
                .value_or(0),
            1)
      << metrics;
  const std::string path = *dir_ + "/metrics.txt";
  std::ofstream(path) << metrics;
  const int rc =
      std::system(("promtool check metrics < " + path + " > " + path + ".out 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ts::ReadFile(path + ".out").value_or("(no promtool output)");
}

TEST_F(ServerIntegrationTest, StreamAnswersEveryRequestWithItsId) {
  auto stub = Stub();
  grpc::ClientContext context;
  auto stream = stub->ClassifyStream(&context);
  std::mt19937 rng(5);
  for (int i = 0; i < 12; ++i) {
    auto request = Document(i == 7 ? "nope" : "tiny", RandomDocument(rng, 20 + 30 * i));
    request.set_request_id("r" + std::to_string(i));
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  std::set<std::string> ids;
  pb::ClassifyResponse response;
  while (stream->Read(&response)) {
    ids.insert(response.request_id());
    if (response.request_id() == "r7") {
      EXPECT_EQ(response.error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
    } else {
      EXPECT_EQ(response.error_code(), 0) << response.error_message();
      EXPECT_EQ(response.probabilities_size(), 3);
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ids.size(), 12u);
}

TEST_F(ServerIntegrationTest, ListModelsAndGetModelDescribeWhatIsServed) {
  auto stub = Stub();
  grpc::ClientContext list_context;
  pb::ListModelsResponse list;
  ASSERT_TRUE(stub->ListModels(&list_context, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 4);
  grpc::ClientContext get_context;
  pb::GetModelRequest get;
  get.set_name("strict");
  pb::ModelInfo info;
  ASSERT_TRUE(stub->GetModel(&get_context, get, &info).ok());
  EXPECT_EQ(info.max_length(), 256u);
  EXPECT_EQ(info.head_dim(), 8u);
  EXPECT_EQ(info.crossover_tokens(), 73u);
  EXPECT_EQ(info.crossover_source(), "formula");
  EXPECT_EQ(info.over_length_policy(), "reject");
  EXPECT_EQ(info.labels_size(), 3);
}

// grpc.health.v1.Health/Check with the stub compiled from proto/grpc/health/v1/health.proto, in
// the process that serves gRPC's own health service: the status (SERVING = 1), or minus the
// call's error code.
int HealthStatus(const std::string& address, const std::string& service,
                 const std::string& token = "") {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status status = stub->Check(&context, request, &response);
  return status.ok() ? response.status() : -static_cast<int>(status.error_code());
}

TEST_F(ServerIntegrationTest, HealthIsServingOverallAndPerModel) {
  EXPECT_EQ(HealthStatus(server_->grpc_address(), ""), 1);
  EXPECT_EQ(HealthStatus(server_->grpc_address(), "tiny"), 1);
  EXPECT_EQ(HealthStatus(server_->grpc_address(), "taylorshift.v1.Classifier"), 1);
  EXPECT_EQ(HealthStatus(server_->grpc_address(), "unknown-model"),
            -static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

// Each test starts its own server (StartServer) on a config of its own.
class ServerIntegrationConfigTest : public ::testing::Test {
 protected:
  // A plaintext Classifier stub for `server`.
  static std::unique_ptr<pb::Classifier::Stub> PlainStub(const Server& server) {
    return pb::Classifier::NewStub(
        grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials()));
  }

  void SetUp() override {
    dir_ = ts::testing::MakeScratchDir();
    WriteModel(dir_, "tiny", "bytes", 128, {"x", "y"}, 3);
  }
  std::string dir_;
  FakeClock clock_;  // outlives the servers the tests start
};

TEST_F(ServerIntegrationConfigTest, Bf16ModelsServeWithin002OfFp32OrAreRefusedWithoutTheHardware) {
  // The same checkpoint at both precisions; 127-byte documents give 128 rows, enough for the
  // bf16 product (kMinLowPrecisionRows).
  std::ofstream(dir_ + "/bf16.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "models: [{name: full, checkpoint: tiny.tsckpt, device: cpu},\n"
         "         {name: half, checkpoint: tiny.tsckpt, device: cpu, precision: bf16}]\n";
  auto server = StartServer(dir_ + "/bf16.yaml", &clock_);
  if (!HostCpuHasBf16()) {
    ASSERT_FALSE(server.ok());
    const std::string message(server.status().message());
    EXPECT_NE(message.find("model 'half': precision bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("AVX512-BF16"), std::string::npos) << message;
    return;
  }
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = PlainStub(**server);
  for (const auto& [name, precision] :
       {std::pair<std::string, std::string>{"full", "fp32"}, {"half", "bf16"}}) {
    grpc::ClientContext context;
    pb::GetModelRequest get;
    get.set_name(name);
    pb::ModelInfo info;
    ASSERT_TRUE(stub->GetModel(&context, get, &info).ok());
    EXPECT_EQ(info.precision(), precision);
  }
  std::mt19937 rng(9);
  double largest = 0;
  for (int i = 0; i < 8; ++i) {
    std::string document(kMinLowPrecisionRows - 1, ' ');
    for (auto& c : document)
      c = static_cast<char>(std::uniform_int_distribution<int>(32, 126)(rng));
    std::vector<float> probabilities[2];
    for (int m = 0; m < 2; ++m) {
      grpc::ClientContext context;
      pb::ClassifyRequest request;
      request.set_model(m == 0 ? "full" : "half");
      request.set_document(document);
      pb::ClassifyResponse response;
      const grpc::Status status = stub->Classify(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      for (const auto& p : response.probabilities()) probabilities[m].push_back(p.probability());
    }
    ASSERT_EQ(probabilities[0].size(), probabilities[1].size());
    for (std::size_t c = 0; c < probabilities[0].size(); ++c) {
      largest = std::max(largest,
                         static_cast<double>(std::abs(probabilities[0][c] - probabilities[1][c])));
    }
  }
  EXPECT_LT(largest, 0.02);
  EXPECT_GT(largest, 0.0) << "the bf16 model computed in fp32";
}

TEST_F(ServerIntegrationConfigTest, BearerTokensGuardClassifyButNotHealth) {
  std::ofstream(dir_ + "/auth.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n"
         "http: {listen: 127.0.0.1:0}\n"
         "auth: {tokens: {s3cret: [classify]}}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  auto server = StartServer(dir_ + "/auth.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = PlainStub(**server);
  pb::ClassifyRequest request;
  request.set_model("tiny");
  request.set_document("guarded");
  for (const std::string token : {"", "wrong", "s3cret"}) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    pb::ClassifyResponse response;
    const auto status = stub->Classify(&context, request, &response);
    if (token == "s3cret") {
      EXPECT_TRUE(status.ok()) << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    }
  }
  EXPECT_EQ(HealthStatus((*server)->grpc_address(), ""), 1);
  // The HTTP routes refuse a classification from its headers, before the body; those refusals
  // are counted with every other request (issue 41: they were not).
  const std::string http = (*server)->http_address();
  using ts::testing::HttpResponse;
  using ts::testing::HttpStatus;
  EXPECT_EQ(HttpStatus(
                HttpResponse(http, "POST", "/v1/models/tiny:classify", {}, R"({"document": "x"})")),
            401);
  EXPECT_EQ(HttpStatus(HttpResponse(http, "POST", "/v2/models/nope/infer",
                                    {"Authorization: Bearer wrong"}, R"({"inputs": []})")),
            401);
  const std::string metrics = ts::testing::HttpGet((*server)->metrics_address(), "/metrics");
  EXPECT_NE(metrics.find("taylorshift_requests_total{code=\"UNAUTHENTICATED\",model=\"tiny\","
                         "protocol=\"rest\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("taylorshift_requests_total{code=\"UNAUTHENTICATED\","
                         "model=\"(unknown)\",protocol=\"v2_rest\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("taylorshift_requests_total{code=\"UNAUTHENTICATED\",model=\"tiny\","
                         "protocol=\"grpc\"} 2"),
            std::string::npos);
}

// One grpc.reflection.v1alpha ServerReflectionInfo exchange through a generic stub (the test has
// no reflection stubs): asks list_services (field 7, "") and returns the call's status and the
// raw bytes of the answers it read (service names appear in them as plain text).
struct ReflectionAnswer {
  grpc::Status status;
  std::string bytes;
};
ReflectionAnswer ListServicesByReflection(const std::string& address, const std::string& token) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  ReflectionAnswer answer;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  const auto next = [&queue]() {
    void* tag = nullptr;
    bool ok = false;
    const auto status =
        queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(15));
    return status == grpc::CompletionQueue::GOT_EVENT && ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (next()) {
    grpc::Slice request(std::string("\x3a\x00", 2));
    grpc::ByteBuffer buffer(&request, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    if (next()) {
      grpc::ByteBuffer reply;
      call->Read(&reply, reinterpret_cast<void*>(3));
      if (next()) {
        std::vector<grpc::Slice> slices;
        if (reply.Dump(&slices).ok()) {
          for (const auto& slice : slices) {
            answer.bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
          }
        }
      }
      call->WritesDone(reinterpret_cast<void*>(4));
      next();
    }
  }
  call->Finish(&answer.status, reinterpret_cast<void*>(5));
  next();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  return answer;
}

// Issue 41: without a token, Health/Check(model) told which model names exist and reflection
// listed every service. With tokens on (auth.protect_discovery by default), both need a token;
// the server's and the services' health stay open to probes.
TEST_F(ServerIntegrationConfigTest, DiscoveryNeedsATokenWhenTokensAreOn) {
  std::ofstream(dir_ + "/auth.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "auth: {tokens: {s3cret: [classify], ops: [admin]}}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  auto server = StartServer(dir_ + "/auth.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->grpc_address();
  const int unauthenticated = -static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(HealthStatus(address, ""), 1);
  EXPECT_EQ(HealthStatus(address, "taylorshift.v1.Classifier"), 1);
  EXPECT_EQ(HealthStatus(address, "inference.GRPCInferenceService"), 1);
  // A served and an unknown model answer alike without a token.
  EXPECT_EQ(HealthStatus(address, "tiny"), unauthenticated);
  EXPECT_EQ(HealthStatus(address, "no-such-model"), unauthenticated);
  EXPECT_EQ(HealthStatus(address, "tiny", "wrong"), unauthenticated);
  // Any role's token sees them.
  EXPECT_EQ(HealthStatus(address, "tiny", "s3cret"), 1);
  EXPECT_EQ(HealthStatus(address, "tiny", "ops"), 1);
  EXPECT_EQ(HealthStatus(address, "no-such-model", "s3cret"),
            -static_cast<int>(grpc::StatusCode::NOT_FOUND));

  const ReflectionAnswer refused = ListServicesByReflection(address, "");
  EXPECT_FALSE(refused.status.ok());
  EXPECT_EQ(refused.bytes.find("taylorshift"), std::string::npos) << refused.bytes;
  const ReflectionAnswer wrong = ListServicesByReflection(address, "wrong");
  EXPECT_FALSE(wrong.status.ok());
  EXPECT_EQ(wrong.bytes.find("taylorshift"), std::string::npos) << wrong.bytes;
  const ReflectionAnswer listed = ListServicesByReflection(address, "s3cret");
  EXPECT_TRUE(listed.status.ok()) << listed.status.error_message();
  EXPECT_NE(listed.bytes.find("taylorshift.v1.Classifier"), std::string::npos) << listed.bytes;
  // Serving goes on.
  EXPECT_EQ(HealthStatus(address, ""), 1);
}

TEST_F(ServerIntegrationConfigTest, DiscoveryStaysOpenWhenConfiguredOrWithoutTokens) {
  for (const std::string& auth : std::vector<std::string>{
           "auth: {tokens: {s3cret: [classify]}, protect_discovery: false}\n", std::string("")}) {
    std::ofstream(dir_ + "/open.yaml") << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
                                       << auth
                                       << "models: [{name: tiny, checkpoint: tiny.tsckpt, "
                                          "device: cpu}]\n";
    auto server = StartServer(dir_ + "/open.yaml", &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::string address = (*server)->grpc_address();
    EXPECT_EQ(HealthStatus(address, "tiny"), 1) << auth;
    EXPECT_EQ(HealthStatus(address, "no-such-model"),
              -static_cast<int>(grpc::StatusCode::NOT_FOUND))
        << auth;
    const ReflectionAnswer listed = ListServicesByReflection(address, "");
    EXPECT_TRUE(listed.status.ok()) << auth << listed.status.error_message();
    EXPECT_NE(listed.bytes.find("taylorshift.v1.Classifier"), std::string::npos) << auth;
  }
}

// One grpc.reflection.v1 stream: sends `requests` in order, reading each answer before the next
// (one answer per request), and returns the answers and the stream's status.
struct ReflectionV1Exchange {
  std::vector<grpc::reflection::v1::ServerReflectionResponse> responses;
  grpc::Status status;
};
ReflectionV1Exchange ReflectV1(
    const std::string& address, const std::string& token,
    const std::vector<grpc::reflection::v1::ServerReflectionRequest>& requests) {
  auto stub = grpc::reflection::v1::ServerReflection::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub->ServerReflectionInfo(&context);
  ReflectionV1Exchange exchange;
  for (const auto& request : requests) {
    grpc::reflection::v1::ServerReflectionResponse response;
    if (!stream->Write(request) || !stream->Read(&response)) break;
    exchange.responses.push_back(std::move(response));
  }
  stream->WritesDone();
  exchange.status = stream->Finish();
  return exchange;
}

// Issue 44: newer grpcurl, Postman and grpcio-reflection ask grpc.reflection.v1 first; gRPC 1.51
// has only v1alpha, so v1 answered UNIMPLEMENTED. Now every request kind is answered from the
// generated pool, each file once per stream, behind the same discovery guard as v1alpha.
TEST_F(ServerIntegrationConfigTest, ReflectionV1AnswersEveryRequestKindBehindTheDiscoveryGuard) {
  using grpc::reflection::v1::ServerReflectionRequest;
  std::ofstream(dir_ + "/auth.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "auth: {tokens: {s3cret: [classify]}}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  auto server = StartServer(dir_ + "/auth.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->grpc_address();

  ServerReflectionRequest list;
  list.set_list_services("");
  for (const std::string& token : {std::string(""), std::string("wrong")}) {
    const ReflectionV1Exchange refused = ReflectV1(address, token, {list});
    EXPECT_FALSE(refused.status.ok()) << token;
    EXPECT_NE(refused.status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << token;
    EXPECT_TRUE(refused.responses.empty()) << token;
  }

  ServerReflectionRequest classifier;
  classifier.set_file_containing_symbol("taylorshift.v1.Classifier.Classify");
  ServerReflectionRequest inference;
  inference.set_file_containing_symbol("inference.GRPCInferenceService");
  ServerReflectionRequest missing;
  missing.set_file_containing_symbol("taylorshift.v1.NoSuchService");
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("taylorshift/v1/classifier.proto");
  ServerReflectionRequest missing_file;
  missing_file.set_file_by_filename("no/such.proto");
  ServerReflectionRequest extension;
  extension.mutable_file_containing_extension()->set_containing_type("google.protobuf.FileOptions");
  extension.mutable_file_containing_extension()->set_extension_number(12345);
  ServerReflectionRequest numbers;
  numbers.set_all_extension_numbers_of_type("taylorshift.v1.ClassifyRequest");
  ServerReflectionRequest no_type;
  no_type.set_all_extension_numbers_of_type("taylorshift.v1.Nope");
  const ReflectionV1Exchange exchange = ReflectV1(
      address, "s3cret",
      {list, classifier, inference, missing, by_name, missing_file, extension, numbers, no_type});
  ASSERT_TRUE(exchange.status.ok()) << exchange.status.error_message();
  ASSERT_EQ(exchange.responses.size(), 9u);
  const auto& r = exchange.responses;

  std::set<std::string> services;
  for (const auto& service : r[0].list_services_response().service()) {
    services.insert(service.name());
  }
  for (const char* name :
       {"taylorshift.v1.Classifier", "taylorshift.v1.Jobs", "inference.GRPCInferenceService",
        "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection"}) {
    EXPECT_EQ(services.count(name), 1u) << name;
  }
  EXPECT_EQ(r[0].original_request().message_request_case(), ServerReflectionRequest::kListServices);

  // The files rebuild a pool in which the services and their methods resolve; no file twice.
  google::protobuf::DescriptorPool pool;
  std::vector<google::protobuf::FileDescriptorProto> files;
  std::set<std::string> names;
  for (int i : {1, 2}) {
    ASSERT_TRUE(r[i].has_file_descriptor_response()) << r[i].DebugString();
    for (const std::string& bytes : r[i].file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      ASSERT_TRUE(file.ParseFromString(bytes));
      EXPECT_TRUE(names.insert(file.name()).second) << file.name() << " sent twice";
      files.push_back(std::move(file));
    }
  }
  EXPECT_EQ(files.front().name(), "taylorshift/v1/classifier.proto");
  // Dependencies follow what needs them; the pool takes a file once its imports are in it.
  for (std::size_t round = 0; round < files.size(); ++round) {
    for (const auto& file : files) {
      if (pool.FindFileByName(file.name()) != nullptr) continue;
      bool ready = true;
      for (const std::string& dependency : file.dependency()) {
        ready = ready && pool.FindFileByName(dependency) != nullptr;
      }
      if (ready) {
        ASSERT_NE(pool.BuildFile(file), nullptr) << file.name();
      }
    }
  }
  const auto* service = pool.FindServiceByName("taylorshift.v1.Classifier");
  ASSERT_NE(service, nullptr);
  EXPECT_NE(service->FindMethodByName("Classify"), nullptr);
  ASSERT_NE(pool.FindServiceByName("inference.GRPCInferenceService"), nullptr);
  EXPECT_NE(
      pool.FindServiceByName("inference.GRPCInferenceService")->FindMethodByName("ModelInfer"),
      nullptr);

  EXPECT_EQ(r[3].error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_NE(r[3].error_response().error_message().find("taylorshift.v1.NoSuchService"),
            std::string::npos);
  // Already sent in this stream: the file by name comes back empty.
  ASSERT_TRUE(r[4].has_file_descriptor_response()) << r[4].DebugString();
  EXPECT_EQ(r[4].file_descriptor_response().file_descriptor_proto_size(), 0);
  EXPECT_EQ(r[5].error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_NE(r[5].error_response().error_message().find("no/such.proto"), std::string::npos);
  EXPECT_EQ(r[6].error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_NE(r[6].error_response().error_message().find("12345"), std::string::npos);
  EXPECT_EQ(r[7].all_extension_numbers_response().base_type_name(),
            "taylorshift.v1.ClassifyRequest");
  EXPECT_EQ(r[7].all_extension_numbers_response().extension_number_size(), 0);
  EXPECT_EQ(r[8].error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));

  // A new stream sends the files again.
  const ReflectionV1Exchange again = ReflectV1(address, "s3cret", {by_name});
  ASSERT_EQ(again.responses.size(), 1u);
  EXPECT_GT(again.responses[0].file_descriptor_response().file_descriptor_proto_size(), 0);
  // v1alpha lists v1 too.
  const ReflectionAnswer alpha = ListServicesByReflection(address, "s3cret");
  EXPECT_NE(alpha.bytes.find("grpc.reflection.v1.ServerReflection"), std::string::npos);
}

// Issue 41: /metrics was plaintext and open. metrics_tls + metrics_require_token: HTTPS, and a
// scrape needs a token with the "metrics" role.
TEST_F(ServerIntegrationConfigTest, MetricsNeedATokenWithTheMetricsRoleAndServeTls) {
  ASSERT_EQ(std::system(
                (ts::testing::SourcePath("tests/testing/make_test_certs.sh") + " " + dir_).c_str()),
            0);
  std::ofstream(dir_ + "/metrics.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n"
         "metrics_require_token: true\n"
         "auth: {tokens: {prom: [metrics], s3cret: [classify]}}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  {
    auto server = StartServer(dir_ + "/metrics.yaml", &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::string address = (*server)->metrics_address();
    using ts::testing::HttpGetResponse;
    using ts::testing::HttpStatus;
    const std::string refused = HttpGetResponse(address, "/metrics");
    EXPECT_EQ(HttpStatus(refused), 401) << refused;
    EXPECT_EQ(refused.find("taylorshift_"), std::string::npos) << refused;
    EXPECT_NE(refused.find("WWW-Authenticate: Bearer"), std::string::npos) << refused;
    EXPECT_EQ(HttpStatus(HttpGetResponse(address, "/metrics", {"Authorization: Bearer nope"})),
              401);
    const std::string classify_only =
        HttpGetResponse(address, "/metrics", {"Authorization: Bearer s3cret"});
    EXPECT_EQ(HttpStatus(classify_only), 403) << classify_only;
    EXPECT_EQ(classify_only.find("taylorshift_"), std::string::npos);
    const std::string scraped =
        HttpGetResponse(address, "/metrics", {"Authorization: Bearer prom"});
    EXPECT_EQ(HttpStatus(scraped), 200) << scraped.substr(0, 200);
    EXPECT_NE(scraped.find("taylorshift_model_info"), std::string::npos);
  }
  // The same over HTTPS (curl checks the certificate against the test CA).
  std::ofstream(dir_ + "/metrics.yaml", std::ios::app)
      << "metrics_tls: {cert_file: server.crt, key_file: server.key}\n";
  auto server = StartServer(dir_ + "/metrics.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = "https://" + (*server)->metrics_address() + "/metrics";
  const auto curl = [&](const std::string& token) {
    return ts::testing::RunCommand(
               "curl -sS --max-time 10 --cacert " + dir_ +
               "/ca.crt -o /dev/null -w '%{http_code}' " +
               (token.empty() ? "" : "-H 'Authorization: Bearer " + token + "' ") + url)
        .text;
  };
  EXPECT_EQ(curl(""), "401");
  EXPECT_EQ(curl("prom"), "200");
  // Plain HTTP to the HTTPS port gets no metrics.
  const std::string plain = ts::testing::HttpGetResponse((*server)->metrics_address(), "/metrics",
                                                         {"Authorization: Bearer prom"});
  EXPECT_NE(ts::testing::HttpStatus(plain), 200);
  EXPECT_EQ(plain.find("taylorshift_"), std::string::npos);
}

TEST_F(ServerIntegrationConfigTest, MutualTlsAcceptsOnlyClientsWithACertificateFromTheCa) {
  ASSERT_EQ(std::system(
                (ts::testing::SourcePath("tests/testing/make_test_certs.sh") + " " + dir_).c_str()),
            0);
  std::ofstream(dir_ + "/tls.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "tls: {cert_file: server.crt, key_file: server.key,\n"
         "      client_ca_file: ca.crt}\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  auto server = StartServer(dir_ + "/tls.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  const auto read = [this](const std::string& name) {
    return ts::ReadFile(dir_ + "/" + name).value_or("");
  };
  const auto classify = [&](const grpc::SslCredentialsOptions& tls) {
    auto stub = pb::Classifier::NewStub(
        grpc::CreateChannel((*server)->grpc_address(), grpc::SslCredentials(tls)));
    pb::ClassifyRequest request;
    request.set_model("tiny");
    request.set_document("over tls");
    pb::ClassifyResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub->Classify(&context, request, &response);
  };
  grpc::SslCredentialsOptions with_cert{read("ca.crt"), read("client.key"), read("client.crt")};
  const auto ok = classify(with_cert);
  EXPECT_TRUE(ok.ok()) << ok.error_code() << " " << ok.error_message();
  grpc::SslCredentialsOptions without_cert;
  without_cert.pem_root_certs = read("ca.crt");
  EXPECT_FALSE(classify(without_cert).ok());
  // Plaintext to a TLS port fails too.
  auto plain = PlainStub(**server);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::ListModelsResponse models;
  EXPECT_FALSE(plain->ListModels(&context, {}, &models).ok());
}

TEST_F(ServerIntegrationConfigTest, MessagesOverTheSizeLimitAreRefusedAndTheServerKeepsServing) {
  std::ofstream(dir_ + "/small.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "max_message_bytes: 4096\n"
         "models: [{name: tiny, checkpoint: tiny.tsckpt, device: cpu}]\n";
  auto server = StartServer(dir_ + "/small.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = PlainStub(**server);
  for (const std::size_t bytes : {std::size_t{100000}, std::size_t{50}}) {
    pb::ClassifyRequest request;
    request.set_model("tiny");
    request.set_document(std::string(bytes, 'm'));
    pb::ClassifyResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    const auto status = stub->Classify(&context, request, &response);
    if (bytes > 4096) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << status.error_message();
    } else {
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  }
}

TEST_F(ServerIntegrationConfigTest, CrossoverComesFromCalibrationFileOrStartupCalibration) {
  std::ofstream(dir_ + "/tiny.calibration")
      << "taylorshift-calibration 1\n"
         "crossover head_dim=8 heads=4 batch=1 tokens=42 crossed=1 device=cpu threads=2\n"
         "crossover head_dim=8 heads=4 batch=8 tokens=30 crossed=1 device=cpu threads=2 "
         "precision=fp32\n"
         "crossover head_dim=8 heads=4 batch=1 tokens=99 crossed=1 device=cpu threads=2 "
         "precision=bf16\n";
  std::ofstream(dir_ + "/calibrated.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "models:\n"
         "  - {name: from_file, checkpoint: tiny.tsckpt, device: cpu, calibration: "
         "tiny.calibration}\n"
         "  - {name: measured, checkpoint: tiny.tsckpt, device: cpu, calibrate_at_start: true}\n";
  auto server = StartServer(dir_ + "/calibrated.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = PlainStub(**server);
  for (const std::string name : {"from_file", "measured"}) {
    grpc::ClientContext context;
    pb::GetModelRequest request;
    request.set_name(name);
    pb::ModelInfo info;
    ASSERT_TRUE(stub->GetModel(&context, request, &info).ok());
    if (name == "from_file") {
      // The fp32 model takes the fp32 lines (the first has no precision key: fp32).
      EXPECT_EQ(info.crossover_source(), "calibration");
      EXPECT_EQ(info.crossover_tokens(), 42u);
      ASSERT_EQ(info.crossovers_size(), 2);
      EXPECT_EQ(info.crossovers(1).batch(), 8u);
      EXPECT_EQ(info.crossovers(1).tokens(), 30u);
    } else {
      // Measured at batch 1 and at max_batch_size (32 by default), capped at 8.
      EXPECT_EQ(info.crossover_source(), "startup-calibration");
      EXPECT_GE(info.crossover_tokens(), 1u);
      EXPECT_LE(info.crossover_tokens(), 129u);
      ASSERT_EQ(info.crossovers_size(), 2);
      EXPECT_EQ(info.crossovers(0).batch(), 1u);
      EXPECT_EQ(info.crossovers(1).batch(), 8u);
    }
  }
  // With the crossover at 42 tokens (incl. CLS), 41 bytes run direct and 42 bytes efficient.
  for (const auto& [length, path] :
       {std::pair<int, pb::AttentionPath>{41, pb::ATTENTION_PATH_DIRECT},
        {42, pb::ATTENTION_PATH_EFFICIENT}}) {
    grpc::ClientContext context;
    pb::ClassifyRequest request;
    request.set_model("from_file");
    request.set_document(std::string(static_cast<std::size_t>(length), 'z'));
    pb::ClassifyResponse response;
    ASSERT_TRUE(stub->Classify(&context, request, &response).ok());
    EXPECT_EQ(response.path(), path) << length;
  }
  if (!HostCpuHasBf16()) return;
  // A bf16 model takes the file's bf16 crossovers, and a file without any is refused, naming
  // the field, the head shape and the precision. (Jobs off: the first server, still running,
  // owns the state directory.)
  std::ofstream(dir_ + "/half.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\njobs: {enabled: false}\n"
         "models: [{name: half, checkpoint: tiny.tsckpt, device: cpu, precision: bf16, "
         "calibration: tiny.calibration}]\n";
  auto half = StartServer(dir_ + "/half.yaml", &clock_);
  ASSERT_TRUE(half.ok()) << half.status();
  grpc::ClientContext context;
  pb::GetModelRequest request;
  request.set_name("half");
  pb::ModelInfo info;
  ASSERT_TRUE(PlainStub(**half)->GetModel(&context, request, &info).ok());
  EXPECT_EQ(info.crossover_tokens(), 99u);
  EXPECT_EQ(info.crossovers_size(), 1);
  std::ofstream(dir_ + "/fp32-only.calibration")
      << "taylorshift-calibration 1\n"
         "crossover head_dim=8 heads=4 batch=1 tokens=42 crossed=1 device=cpu threads=2\n";
  std::ofstream(dir_ + "/refused.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\njobs: {enabled: false}\n"
         "models: [{name: half, checkpoint: tiny.tsckpt, device: cpu, precision: bf16, "
         "calibration: fp32-only.calibration}]\n";
  const auto refused = StartServer(dir_ + "/refused.yaml", &clock_);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("model 'half': calibration file"), std::string::npos) << message;
  EXPECT_NE(message.find("head_dim 8 with 4 heads at precision bf16"), std::string::npos)
      << message;
}

TEST_F(ServerIntegrationConfigTest, WindowPolicyAveragesTheWindowsProbabilities) {
  std::ofstream(dir_ + "/window.yaml")
      << "listen: 127.0.0.1:0\nmetrics_listen: ''\n"
         "models: [{name: win, checkpoint: tiny.tsckpt, device: cpu, max_length: 64,\n"
         "          over_length: window, window_stride: 32, max_windows: 4}]\n";
  auto server = StartServer(dir_ + "/window.yaml", &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = PlainStub(**server);
  std::mt19937 rng(9);
  const std::string doc = RandomDocument(rng, 130);  // windows at 0, 32, 64 and 66 (end-aligned)
  pb::ClassifyRequest request;
  request.set_model("win");
  request.set_document(doc);
  pb::ClassifyResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->Classify(&context, request, &response).ok());
  EXPECT_EQ(response.windows(), 4u);
  auto loaded = LoadCheckpoint(dir_ + "/tiny.tsckpt");
  ASSERT_TRUE(loaded.ok());
  std::vector<double> mean(2, 0.0);
  for (const std::size_t start : {0, 32, 64, 66}) {
    auto result = ClassifyBatch(loaded->model, {std::string_view(doc).substr(start, 64)},
                                AttentionPath::kAuto, torch::kCPU);
    ASSERT_TRUE(result.ok());
    for (int c = 0; c < 2; ++c) mean[c] += result->probabilities[0][c] / 4.0;
  }
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(response.probabilities(c).probability(), mean[c], 1e-5);
  // Too long for max_windows = 4.
  grpc::ClientContext too_long_context;
  request.set_document(std::string(1000, 'w'));
  const auto status = stub->Classify(&too_long_context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("max_windows=4"), std::string::npos)
      << status.error_message();
}

// Issue 41, "no client can hurt another": a hostile client's expensive request against the real
// server on the real clock (deadlines and CPU are what the test is about). The model is small
// but deep enough (4 blocks) to stop between blocks, and its windows long enough that softmax is
// slow: uninterrupted, the hostile request below computes for far longer than a Classify waits.
class ServerAdmissionTest : public ::testing::Test {
 protected:
  static constexpr std::int64_t kWindowLength = 1023;  // 1024 tokens with CLS

  void SetUp() override {
    dir_ = ts::testing::MakeScratchDir();
    TaylorShiftEncoderOptions options(32, 4, 4, kWindowLength, 2);
    options.mlp_hidden(64);
    TaylorShiftEncoder model(options);
    ts::testing::RandomizeParameters(model, 41);
    CheckpointMetadata metadata;
    metadata.format_version = kCheckpointFormatVersion;
    metadata.modality = "bytes";
    metadata.labels = {"benign", "hostile"};
    ASSERT_TRUE(SaveCheckpoint(dir_ + "/deep.tsckpt", options, metadata, model).ok());
  }

  // Starts a server on the real clock with `extra` (YAML lines) at the top level and
  // `model_extra` in the model's mapping.
  std::unique_ptr<Server> Start(const std::string& extra, const std::string& model_extra) {
    std::ofstream(dir_ + "/admission.yaml")
        << "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nintra_op_threads: 1\n"
        << extra << "models:\n  - {name: deep, checkpoint: deep.tsckpt, device: cpu" << model_extra
        << "}\n  - {name: other, checkpoint: deep.tsckpt, device: cpu}\n";
    auto server = StartServer(dir_ + "/admission.yaml", ts::RealClock());
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  static pb::ClassifyRequest Windowed(const std::string& model, std::size_t bytes,
                                      pb::AttentionPath path) {
    std::mt19937 rng(5);
    pb::ClassifyRequest request;
    request.set_model(model);
    request.set_document(RandomDocument(rng, static_cast<std::int64_t>(bytes)));
    request.set_over_length("window");
    request.set_path(path);
    return request;
  }

  static grpc::Status Call(const Server& server, const pb::ClassifyRequest& request,
                           std::chrono::milliseconds deadline, const std::string& token = "",
                           pb::ClassifyResponse* response = nullptr) {
    auto stub = pb::Classifier::NewStub(
        grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    pb::ClassifyResponse ignored;
    return stub->Classify(&context, request, response != nullptr ? response : &ignored);
  }

  std::string dir_;
};

TEST_F(ServerAdmissionTest, AHostileRequestsBatchStopsAtItsDeadlineAndTheNextClientIsAnswered) {
  // Limits high enough to admit the hostile request: what is tested here is that its compute
  // stops, not that admission refuses it (the next test). Passes of two windows (max_batch_tokens
  // 2048), one batch thread as by default.
  auto server = Start("",
                      ", max_windows: 64, max_request_mflop: 100000000,"
                      " max_batch_mflop: 100000000, batching: {max_batch_tokens: 2048}");
  ASSERT_NE(server, nullptr);
  const std::string metrics = server->metrics_address();
  // 32 KiB in windows of 1023 bytes, stride 511: 64 windows of 1024 tokens on softmax, about
  // 8.7 s of compute uninterrupted on one core of the 2-core CI machine (4.35 s for 32 windows,
  // measured), longer than the second client's 5 s deadline below.
  const pb::ClassifyRequest hostile = Windowed("deep", 32 << 10, pb::ATTENTION_PATH_SOFTMAX);
  const auto hostile_start = std::chrono::steady_clock::now();
  auto hostile_call = std::async(
      std::launch::async, [&] { return Call(*server, hostile, std::chrono::milliseconds(500)); });
  ASSERT_TRUE(ts::testing::WaitForMetric(metrics, "taylorshift_batches_in_flight{model=\"deep\"}",
                                         1, std::chrono::seconds(10)));

  // A second client's everyday request to the same model, sent while the hostile batch runs
  // (its deadline 0.5 s has not passed yet): it waits behind it on the model's one batch thread.
  pb::ClassifyRequest everyday;
  everyday.set_model("deep");
  everyday.set_document("an ordinary short document");
  const auto sent = std::chrono::steady_clock::now();
  auto everyday_call = std::async(std::launch::async, [&] {
    pb::ClassifyResponse answer;
    const grpc::Status status = Call(*server, everyday, std::chrono::seconds(5), "", &answer);
    return std::make_pair(
        status, std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
  });
  // Another model and health answer at once meanwhile: each model has its own batcher and
  // threads, health none.
  {
    pb::ClassifyRequest elsewhere;
    elsewhere.set_model("other");
    elsewhere.set_document("another model's request");
    const auto other_sent = std::chrono::steady_clock::now();
    const grpc::Status other = Call(*server, elsewhere, std::chrono::seconds(5));
    const double other_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - other_sent).count();
    EXPECT_TRUE(other.ok()) << other.error_message();
    EXPECT_LT(other_s, 1.0);
    EXPECT_EQ(HealthStatus(server->grpc_address(), "deep"), 1);
    std::printf("[ measured ] model 'other' answered in %.3f s during the hostile batch\n",
                other_s);
  }
  const auto [status, latency_s] = everyday_call.get();
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message() << " after "
                           << latency_s << " s";
  // The hostile batch frees the model within one block of one pass after its deadline.
  EXPECT_LT(latency_s, 2.5) << "the next client waited for the hostile batch";
  std::printf("[ measured ] second client's Classify answered in %.3f s\n", latency_s);

  const grpc::Status hostile_status = hostile_call.get();
  EXPECT_EQ(hostile_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(ts::testing::WaitForMetric(
      metrics, "taylorshift_batches_stopped_total{model=\"deep\",reason=\"deadline\"}", 1,
      std::chrono::seconds(5)))
      << ts::testing::HttpGet(metrics, "/metrics");
  // Nothing computes any more: the CPU time of the process stays still.
  ASSERT_TRUE(ts::testing::WaitForMetric(metrics, "taylorshift_batches_in_flight{model=\"deep\"}",
                                         0, std::chrono::seconds(5)));
  const double stopped_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - hostile_start).count();
  const auto cpu_before = ts::testing::MetricSample(ts::testing::HttpGet(metrics, "/metrics"),
                                                    "taylorshift_process_cpu_seconds_total");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto cpu_after = ts::testing::MetricSample(ts::testing::HttpGet(metrics, "/metrics"),
                                                   "taylorshift_process_cpu_seconds_total");
  ASSERT_TRUE(cpu_before.has_value() && cpu_after.has_value());
  EXPECT_LT(*cpu_after - *cpu_before, 0.3) << "the server kept computing after the batch stopped";
  std::printf(
      "[ measured ] hostile batch idle %.3f s after it was sent (deadline 0.5 s); "
      "CPU in the next second %.3f s\n",
      stopped_s, *cpu_after - *cpu_before);
  server->Shutdown(absl::Seconds(5));
}

TEST_F(ServerAdmissionTest, ARequestOverTheCostLimitIsRefusedNamingTheLimitBeforeItIsQueued) {
  // Default (automatic) limits: a request of max_windows (16) windows on `auto` fits; on
  // softmax, which costs 6.3 times as much per window of 1024 tokens here, 16 windows do not and
  // neither do 4.
  auto server = Start("", "");
  ASSERT_NE(server, nullptr);
  for (const auto& [bytes, path] :
       {std::pair<std::size_t, pb::AttentionPath>{8 << 10, pb::ATTENTION_PATH_SOFTMAX},
        {2 << 10, pb::ATTENTION_PATH_SOFTMAX}}) {
    const auto sent = std::chrono::steady_clock::now();
    const grpc::Status refused =
        Call(*server, Windowed("deep", bytes, path), std::chrono::seconds(20));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << bytes << " bytes: " << refused.error_message();
    EXPECT_NE(refused.error_message().find("max_request_mflop="), std::string::npos)
        << refused.error_message();
    EXPECT_NE(refused.error_message().find("path softmax"), std::string::npos)
        << refused.error_message();
    EXPECT_LT(seconds, 1.0) << "refused only after computing";
  }
  // The same document on auto is admitted and answered.
  pb::ClassifyResponse response;
  const grpc::Status ok = Call(*server, Windowed("deep", 8 << 10, pb::ATTENTION_PATH_AUTO),
                               std::chrono::seconds(60), "", &response);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(response.windows(), 16u);
  const std::string metrics = ts::testing::HttpGet(server->metrics_address(), "/metrics");
  EXPECT_EQ(ts::testing::MetricSample(
                metrics, "taylorshift_rejected_total{model=\"deep\",reason=\"over_cost\"}"),
            2)
      << metrics;
  server->Shutdown(absl::Seconds(5));
}

// Issue 41: a KServe v2 request's elements were admitted one at a time, so four elements that
// each fit the request limit were all computed although together they cost far more. Now they
// are one request: over the limit together, none is queued.
TEST_F(ServerAdmissionTest, AKServeRequestsElementsAreAdmittedTogether) {
  auto server = Start("", "");
  ASSERT_NE(server, nullptr);
  auto kserve = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server->grpc_address(), grpc::InsecureChannelCredentials()));
  const auto infer = [&](int elements, inference::ModelInferResponse* response) {
    inference::ModelInferRequest request;
    request.set_model_name("deep");
    (*request.mutable_parameters())["path"].set_string_param("softmax");
    auto* input = request.add_inputs();
    input->set_name("document");
    input->set_datatype("BYTES");
    input->add_shape(elements);
    std::mt19937 rng(9);
    for (int i = 0; i < elements; ++i) {
      // One window of 1024 tokens each: on softmax about 0.4 of max_request_mflop.
      input->mutable_contents()->add_bytes_contents(RandomDocument(rng, kWindowLength));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return kserve->ModelInfer(&context, request, response);
  };
  inference::ModelInferResponse response;
  const auto sent = std::chrono::steady_clock::now();
  const grpc::Status refused = infer(4, &response);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("4 elements together"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("max_request_mflop="), std::string::npos)
      << refused.error_message();
  EXPECT_LT(seconds, 1.0) << "refused only after computing";
  const std::string metrics = ts::testing::HttpGet(server->metrics_address(), "/metrics");
  EXPECT_EQ(ts::testing::MetricSample(
                metrics, "taylorshift_rejected_total{model=\"deep\",reason=\"over_cost\"}"),
            4)
      << metrics;
  EXPECT_EQ(metrics.find("taylorshift_batch_size_count{model=\"deep\""), std::string::npos)
      << "an element of the refused request was computed";
  // One element alone fits and is answered.
  const grpc::Status ok = infer(1, &response);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  server->Shutdown(absl::Seconds(5));
}

TEST_F(ServerAdmissionTest, ClassifyTokensMayNotChooseTheAttentionPathUnlessTheConfigAllows) {
  const std::string tokens = "auth: {tokens: {reader: [classify], operator: [classify, admin]}";
  pb::ClassifyRequest request;
  request.set_model("deep");
  request.set_document("a short document");
  request.set_path(pb::ATTENTION_PATH_SOFTMAX);
  {
    auto server = Start(tokens + "}\n", "");
    ASSERT_NE(server, nullptr);
    const grpc::Status denied = Call(*server, request, std::chrono::seconds(20), "reader");
    EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED) << denied.error_message();
    EXPECT_NE(denied.error_message().find("path softmax"), std::string::npos)
        << denied.error_message();
    EXPECT_NE(denied.error_message().find("auth.classify_diagnostic_options"), std::string::npos)
        << denied.error_message();
    // auto stays open to the classify token; softmax to the admin one.
    request.set_path(pb::ATTENTION_PATH_AUTO);
    EXPECT_TRUE(Call(*server, request, std::chrono::seconds(20), "reader").ok());
    request.set_path(pb::ATTENTION_PATH_SOFTMAX);
    pb::ClassifyResponse response;
    const grpc::Status admin =
        Call(*server, request, std::chrono::seconds(20), "operator", &response);
    EXPECT_TRUE(admin.ok()) << admin.error_message();
    EXPECT_EQ(response.path(), pb::ATTENTION_PATH_SOFTMAX);
    server->Shutdown(absl::Seconds(5));
  }
  auto allowing = Start(tokens + ", classify_diagnostic_options: true}\n", "");
  ASSERT_NE(allowing, nullptr);
  const grpc::Status allowed = Call(*allowing, request, std::chrono::seconds(20), "reader");
  EXPECT_TRUE(allowed.ok()) << allowed.error_message();
  allowing->Shutdown(absl::Seconds(5));
}

TEST_F(ServerAdmissionTest, ShutdownGraceHoldsWhileABatchThatCannotFinishRuns) {
  // A caller that waits a minute for 64 softmax windows (about 8.7 s of compute): the drain's
  // time is up after 1 s, and the running batch stops there instead of holding the exit.
  auto server = Start("",
                      ", max_windows: 64, max_request_mflop: 100000000,"
                      " max_batch_mflop: 100000000, batching: {max_batch_tokens: 2048}");
  ASSERT_NE(server, nullptr);
  const pb::ClassifyRequest hostile = Windowed("deep", 32 << 10, pb::ATTENTION_PATH_SOFTMAX);
  auto hostile_call = std::async(std::launch::async,
                                 [&] { return Call(*server, hostile, std::chrono::seconds(60)); });
  ASSERT_TRUE(ts::testing::WaitForMetric(server->metrics_address(),
                                         "taylorshift_batches_in_flight{model=\"deep\"}", 1,
                                         std::chrono::seconds(10)));
  const auto begun = std::chrono::steady_clock::now();
  server->Shutdown(absl::Seconds(1));
  const double shutdown_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count();
  EXPECT_LT(shutdown_s, 2.5) << "the drain waited for a batch past shutdown_grace";
  std::printf("[ measured ] Shutdown(grace 1 s) returned after %.3f s\n", shutdown_s);
  const grpc::Status status = hostile_call.get();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

}  // namespace
}  // namespace ts

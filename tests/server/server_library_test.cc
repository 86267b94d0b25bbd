// The server as a library (server/server.h): built in-process with a fake clock, answering the
// same document identically over Classifier.Classify, KServe v2 ModelInfer and the HTTP route,
// refusing an address in use, and stopping on Shutdown. With jobs off, every Jobs RPC says so
// and where jobs run, and nothing is made under state_dir.
#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/server.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "taylorshift/v1/jobs.grpc.pb.h"
#include "tests/testing/fake_clock.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ServerConfig DemoConfig() {
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.http.listen = "127.0.0.1:0";
  config.jobs.enabled = false;
  config.intra_op_threads = 1;
  ModelConfig model;
  model.name = "listops";
  const char* source = std::getenv("TS_SOURCE_DIR");  // set by ctest
  model.checkpoint = std::string(source != nullptr ? source : ".") + "/models/listops-demo.tsckpt";
  config.models.push_back(model);
  return config;
}

TEST(ServerLibraryTest, OneProcessServesEveryFrontEndAlikeAndShutsDown) {
  ts::testing::FakeClock clock;
  std::vector<std::string> log;
  auto server = Server::Create(DemoConfig(), &clock,
                               [&log](const std::string& line) { log.push_back(line); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_THAT(log, ::testing::Contains(HasSubstr("model 'listops'")));
  const std::string document = "[MAX 4 3 [MIN 2 3 ] 1 0 [MED 2 9 ] ]";

  auto channel = grpc::CreateChannel((*server)->grpc_address(), grpc::InsecureChannelCredentials());
  auto classifier = taylorshift::v1::Classifier::NewStub(channel);
  taylorshift::v1::ClassifyRequest request;
  request.set_model("listops");
  request.set_document(document);
  taylorshift::v1::ClassifyResponse classified;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(classifier->Classify(&context, request, &classified).ok());
  ASSERT_EQ(classified.probabilities_size(), 10);

  auto kserve = inference::GRPCInferenceService::NewStub(channel);
  inference::ModelInferRequest infer;
  infer.set_model_name("listops");
  auto* input = infer.add_inputs();
  input->set_name("document");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(document);
  inference::ModelInferResponse inferred;
  grpc::ClientContext infer_context;
  infer_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(kserve->ModelInfer(&infer_context, infer, &inferred).ok());
  ASSERT_EQ(inferred.raw_output_contents(0).size(), 10 * sizeof(float));
  std::vector<float> v2(10);
  std::memcpy(v2.data(), inferred.raw_output_contents(0).data(), 10 * sizeof(float));

  const std::string http = (*server)->http_address();
  httplib::Client client("127.0.0.1", std::stoi(http.substr(http.rfind(':') + 1)));
  client.set_read_timeout(30, 0);
  auto answer = client.Post("/v1/models/listops:classify",
                            nlohmann::json{{"text", document}}.dump(), "application/json");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const auto rest = nlohmann::json::parse(answer->body)["probabilities"];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(v2[c], classified.probabilities(c).probability()) << c;
    EXPECT_EQ(static_cast<float>(rest[c]["probability"].get<double>()),
              classified.probabilities(c).probability())
        << c;
  }

  // Issue 45: NOT_FOUND lists the served models on every front end, not only gRPC Classify.
  const std::string not_served = "model \"nope\" is not served (listops)";
  request.set_model("nope");
  grpc::ClientContext unknown_context;
  const grpc::Status unknown = classifier->Classify(&unknown_context, request, &classified);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr(not_served));
  request.set_model("listops");
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("nope");
  inference::ModelMetadataResponse metadata;
  grpc::ClientContext metadata_context;
  const grpc::Status v2_grpc =
      kserve->ModelMetadata(&metadata_context, metadata_request, &metadata);
  EXPECT_EQ(v2_grpc.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(v2_grpc.error_message(), HasSubstr(not_served));
  infer.set_model_name("nope");
  grpc::ClientContext unknown_infer_context;
  const grpc::Status v2_infer = kserve->ModelInfer(&unknown_infer_context, infer, &inferred);
  EXPECT_EQ(v2_infer.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(v2_infer.error_message(), HasSubstr(not_served));
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"POST", "/v1/models/nope:classify"},
                                                        {"GET", "/v1/models/nope"},
                                                        {"GET", "/v2/models/nope"},
                                                        {"POST", "/v2/models/nope/infer"}}) {
    const std::string body =
        path.find("infer") != std::string::npos
            ? R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], "data": ["a"]}]})"
            : nlohmann::json{{"text", document}}.dump();
    auto rest_answer =
        method == "GET" ? client.Get(path) : client.Post(path, body, "application/json");
    ASSERT_TRUE(rest_answer) << path;
    EXPECT_EQ(rest_answer->status, 404) << path << ": " << rest_answer->body;
    EXPECT_THAT(rest_answer->body, HasSubstr("is not served (listops)")) << path;
  }

  // The address in use is refused, with nothing left running.
  ServerConfig same = DemoConfig();
  same.listen = (*server)->grpc_address();
  same.http.listen = "";
  auto second = Server::Create(same, &clock, [](const std::string&) {});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen"));

  (*server)->Shutdown(absl::Seconds(5));
  EXPECT_THAT(log, ::testing::Contains("stopped"));
  grpc::ClientContext after;
  after.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(classifier->Classify(&after, request, &classified).ok());
  (*server)->Shutdown(absl::Seconds(5));  // idempotent
}

// `method` ("/package.Service/Method") called with an empty request, as any client may call it.
grpc::Status CallWithEmptyRequest(grpc::GenericStub& stub, const std::string& method) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Slice empty("");
  const grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return done.get_future().get();
}

TEST(ServerLibraryTest, JobsOffAnswersEveryJobsRpcSayingSoAndWhereJobsRun) {
  ts::testing::FakeClock clock;
  ServerConfig config = DemoConfig();
  config.http.listen = "";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("jobs-off-" + std::to_string(getpid()));
  config.state_dir = (dir / "state").string();
  config.data_root = (dir / "data").string();
  config.jobs.elsewhere = "taylorshift-jobs:50051";
  auto server = Server::Create(config, &clock, [](const std::string&) {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->grpc_address(), grpc::InsecureChannelCredentials());

  // Every method the service has (read from its descriptor: the ones added later too).
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("taylorshift.v1.Jobs");
  ASSERT_NE(service, nullptr);
  ASSERT_GE(service->method_count(), 9);
  grpc::GenericStub generic(channel);
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string method = "/taylorshift.v1.Jobs/" + service->method(i)->name();
    const grpc::Status status = CallWithEmptyRequest(generic, method);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << method;
    EXPECT_THAT(status.error_message(),
                HasSubstr("jobs are disabled on this server (jobs.enabled: false)"))
        << method;
    EXPECT_THAT(status.error_message(), HasSubstr("jobs run at taylorshift-jobs:50051")) << method;
  }
  // As tsctl calls them: a unary call and the WatchJob stream.
  auto jobs = taylorshift::v1::Jobs::NewStub(channel);
  grpc::ClientContext list_context;
  taylorshift::v1::ListJobsResponse listed;
  const grpc::Status list =
      jobs->ListJobs(&list_context, taylorshift::v1::ListJobsRequest(), &listed);
  EXPECT_EQ(list.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext watch_context;
  taylorshift::v1::WatchJobRequest watch;
  watch.set_id("job-1");
  auto reader = jobs->WatchJob(&watch_context, watch);
  taylorshift::v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  const grpc::Status watched = reader->Finish();
  EXPECT_EQ(watched.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(watched.error_message(), HasSubstr("taylorshift-jobs:50051"));
  // A method of no service is still UNIMPLEMENTED; the health of Jobs stays NOT_SERVING.
  EXPECT_EQ(CallWithEmptyRequest(generic, "/taylorshift.v1.Nothing/Here").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext health_context;
  grpc::health::v1::HealthCheckRequest check;
  check.set_service("taylorshift.v1.Jobs");
  grpc::health::v1::HealthCheckResponse checked;
  ASSERT_TRUE(health->Check(&health_context, check, &checked).ok());
  EXPECT_EQ(checked.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  (*server)->Shutdown(absl::Seconds(5));
  // Nothing was made under state_dir or data_root.
  EXPECT_FALSE(std::filesystem::exists(config.state_dir));
  EXPECT_FALSE(std::filesystem::exists(config.data_root));
}

// A method no service takes answers UNIMPLEMENTED with a message naming it and what is served
// instead, with jobs on or off (gRPC's own answer has an empty message).
TEST(ServerLibraryTest, UnknownMethodsSayWhatIsServedInstead) {
  for (const bool jobs : {false, true}) {
    SCOPED_TRACE(jobs ? "jobs on" : "jobs off");
    ts::testing::FakeClock clock;
    ServerConfig config = DemoConfig();
    config.http.listen = "";
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                      ("unknown-method-" + std::to_string(getpid()));
    config.jobs.enabled = jobs;
    config.state_dir = (dir / "state").string();
    config.data_root = (dir / "data").string();
    auto server = Server::Create(config, &clock, [](const std::string&) {});
    ASSERT_TRUE(server.ok()) << server.status();
    grpc::GenericStub generic(
        grpc::CreateChannel((*server)->grpc_address(), grpc::InsecureChannelCredentials()));

    // Triton's repository RPC, which KServe v2 does not have.
    const grpc::Status triton =
        CallWithEmptyRequest(generic, "/inference.GRPCInferenceService/RepositoryIndex");
    EXPECT_EQ(triton.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_THAT(triton.error_message(),
                HasSubstr("RepositoryIndex is not implemented by inference.GRPCInferenceService "
                          "on this server; it answers ServerLive, ServerReady, ModelReady, "
                          "ServerMetadata, ModelMetadata, ModelInfer, ModelStreamInfer, "
                          "ModelConfig"));
    EXPECT_THAT(triton.error_message(), HasSubstr("model repository"));
    // A method a served service lacks, and a service that is not served.
    const grpc::Status classifier =
        CallWithEmptyRequest(generic, "/taylorshift.v1.Classifier/Explain");
    EXPECT_EQ(classifier.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_THAT(classifier.error_message(),
                HasSubstr("Explain is not implemented by taylorshift.v1.Classifier on this "
                          "server; it answers Classify, ClassifyStream, ListModels, GetModel"));
    const grpc::Status nothing = CallWithEmptyRequest(generic, "/taylorshift.v1.Nothing/Here");
    EXPECT_EQ(nothing.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_THAT(nothing.error_message(),
                HasSubstr("unknown method /taylorshift.v1.Nothing/Here: service "
                          "'taylorshift.v1.Nothing' is not served here; this server serves "
                          "taylorshift.v1.Classifier, "));
    EXPECT_EQ(absl::StrContains(nothing.error_message(), "taylorshift.v1.Jobs"), jobs);
    (*server)->Shutdown(absl::Seconds(5));
    std::filesystem::remove_all(dir);
  }
}

TEST(ServerLibraryTest, JobsOffWithoutAHintSaysWhereToGo) {
  ts::testing::FakeClock clock;
  ServerConfig config = DemoConfig();
  config.http.listen = "";
  auto server = Server::Create(config, &clock, [](const std::string&) {});
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::GenericStub generic(
      grpc::CreateChannel((*server)->grpc_address(), grpc::InsecureChannelCredentials()));
  const grpc::Status status = CallWithEmptyRequest(generic, "/taylorshift.v1.Jobs/SubmitTraining");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              HasSubstr("jobs are disabled on this server (jobs.enabled: false)"));
  EXPECT_THAT(status.error_message(), HasSubstr("on the server that runs them"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr("jobs.elsewhere")));
}

}  // namespace
}  // namespace ts::server

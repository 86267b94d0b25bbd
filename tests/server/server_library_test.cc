// The server as a library (server/server.h): built in-process with a fake clock, answering the
// same document identically over Classifier.Classify, KServe v2 ModelInfer and the HTTP route,
// refusing an address in use, and stopping on Shutdown.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/server.h"
#include "taylorshift/v1/classifier.grpc.pb.h"
#include "tests/testing/fake_clock.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace ts::server

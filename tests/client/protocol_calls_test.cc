// tsctl bench's protocols without a server: flag checks, request encodings, the decoding of v2
// answers (raw gRPC contents and JSON) and of the plain route's answer into a ClassifyResponse,
// and the HTTP status → gRPC code mapping. tests/server/tsctl_integration_test.cc runs all four
// against a real tsserver.
#include "client/protocol_calls.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;
using ::testing::HasSubstr;

// The server's encodings (server/serving/kserve_v2.cc ToProto), written independently of the
// decoder.
std::string RawFp32(const std::vector<float>& values) {
  std::string raw;
  for (const float value : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    for (int b = 0; b < 4; ++b) raw.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
  }
  return raw;
}

std::string RawBytes(const std::vector<std::string>& elements) {
  std::string raw;
  for (const std::string& element : elements) {
    const auto length = static_cast<std::uint32_t>(element.size());
    for (int b = 0; b < 4; ++b) raw.push_back(static_cast<char>((length >> (8 * b)) & 0xff));
    raw += element;
  }
  return raw;
}

void AddOutput(inference::ModelInferResponse* answer, const std::string& name,
               const std::string& datatype, const std::vector<std::int64_t>& shape,
               std::string raw) {
  auto* output = answer->add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (const auto d : shape) output->add_shape(d);
  answer->add_raw_output_contents(std::move(raw));
}

// What tsserver answers for one document of a 3-class model.
inference::ModelInferResponse ThreeClassAnswer() {
  inference::ModelInferResponse answer;
  answer.set_model_name("listops");
  answer.set_model_version("v2");
  answer.set_id("bench-7");
  AddOutput(&answer, "probabilities", "FP32", {1, 3}, RawFp32({0.125f, 0.75f, 0.125f}));
  AddOutput(&answer, "label", "BYTES", {1}, RawBytes({"one"}));
  return answer;
}

TEST(ProtocolCallsTest, ProtocolNamesRoundTrip) {
  for (const char* name : {"classify", "v2-grpc", "v2-rest", "rest"}) {
    absl::StatusOr<BenchProtocol> protocol = ParseBenchProtocol(name);
    ASSERT_TRUE(protocol.ok()) << name;
    EXPECT_EQ(BenchProtocolName(*protocol), name);
  }
  for (const char* bad : {"", "grpc", "REST", "v2", "http"}) {
    absl::StatusOr<BenchProtocol> protocol = ParseBenchProtocol(bad);
    ASSERT_FALSE(protocol.ok()) << bad;
    EXPECT_EQ(protocol.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(protocol.status().message(), HasSubstr("classify, v2-grpc, v2-rest or rest"));
  }
  EXPECT_FALSE(UsesHttp(BenchProtocol::kClassify));
  EXPECT_FALSE(UsesHttp(BenchProtocol::kV2Grpc));
  EXPECT_TRUE(UsesHttp(BenchProtocol::kV2Rest));
  EXPECT_TRUE(UsesHttp(BenchProtocol::kRest));
}

TEST(ProtocolCallsTest, HttpProtocolsNeedHttpAndGrpcOnesRefuseIt) {
  EXPECT_TRUE(ValidateProtocolFlags(BenchProtocol::kClassify, "", false).ok());
  EXPECT_TRUE(ValidateProtocolFlags(BenchProtocol::kV2Grpc, "", false).ok());
  EXPECT_TRUE(ValidateProtocolFlags(BenchProtocol::kV2Rest, "127.0.0.1:8080", false).ok());
  EXPECT_TRUE(ValidateProtocolFlags(BenchProtocol::kRest, "127.0.0.1:8080", false).ok());
  for (const BenchProtocol protocol : {BenchProtocol::kV2Rest, BenchProtocol::kRest}) {
    const absl::Status missing = ValidateProtocolFlags(protocol, "", false);
    EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(missing.message(), HasSubstr("needs --http HOST:PORT"));
  }
  for (const BenchProtocol protocol : {BenchProtocol::kClassify, BenchProtocol::kV2Grpc}) {
    const absl::Status extra = ValidateProtocolFlags(protocol, "127.0.0.1:8080", false);
    EXPECT_EQ(extra.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(extra.message(), HasSubstr("--http is for --protocol v2-rest and rest"));
  }
}

TEST(ProtocolCallsTest, OnlyClassifySendsImages) {
  EXPECT_TRUE(ValidateProtocolFlags(BenchProtocol::kClassify, "", true).ok());
  for (const auto& [protocol, http] :
       {std::pair<BenchProtocol, std::string>{BenchProtocol::kV2Grpc, ""},
        {BenchProtocol::kV2Rest, "h:1"},
        {BenchProtocol::kRest, "h:1"}}) {
    const absl::Status image = ValidateProtocolFlags(protocol, http, true);
    EXPECT_EQ(image.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(image.message(), HasSubstr("need --protocol classify"));
  }
}

TEST(ProtocolCallsTest, HttpBaseUrlTakesHostPortOrAUrl) {
  ConnectionOptions plain;
  EXPECT_EQ(*HttpBaseUrl("127.0.0.1:8080", plain), "http://127.0.0.1:8080");
  EXPECT_EQ(*HttpBaseUrl("http://localhost:8080/", plain), "http://localhost:8080");
  EXPECT_EQ(*HttpBaseUrl("https://localhost:8443", plain), "https://localhost:8443");
  ConnectionOptions tls;
  tls.ca_file = "ca.pem";
  EXPECT_EQ(*HttpBaseUrl("localhost:8443", tls), "https://localhost:8443");
  EXPECT_EQ(*HttpBaseUrl("http://localhost:8080", tls), "http://localhost:8080");
  for (const char* bad : {"", "localhost", "http://", "h:1/v2", "http://h:1/x"}) {
    EXPECT_EQ(HttpBaseUrl(bad, plain).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  ConnectionOptions renamed;
  renamed.tls_server_name = "localhost";
  EXPECT_THAT(HttpBaseUrl("127.0.0.1:1", renamed).status().message(),
              HasSubstr("--tls-server-name"));
  EXPECT_EQ(MakeHttpCall(BenchProtocol::kV2Grpc, "http://h:1", plain, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolCallsTest, HttpStatusesMapToGrpcCodes) {
  EXPECT_EQ(GrpcCodeForHttpStatus(200), grpc::StatusCode::OK);
  EXPECT_EQ(GrpcCodeForHttpStatus(400), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GrpcCodeForHttpStatus(401), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GrpcCodeForHttpStatus(403), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(GrpcCodeForHttpStatus(404), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GrpcCodeForHttpStatus(409), grpc::StatusCode::ABORTED);
  EXPECT_EQ(GrpcCodeForHttpStatus(429), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(GrpcCodeForHttpStatus(499), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(GrpcCodeForHttpStatus(501), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(GrpcCodeForHttpStatus(503), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GrpcCodeForHttpStatus(504), grpc::StatusCode::DEADLINE_EXCEEDED);
  for (const int other : {302, 405, 413, 418, 500, 502}) {
    EXPECT_EQ(GrpcCodeForHttpStatus(other), grpc::StatusCode::UNKNOWN) << other;
  }
}

TEST(ProtocolCallsTest, TheJsonCodeFieldWinsOverTheHttpStatus) {
  // The server's error shape: {"error": ..., "code": ...}.
  const grpc::Status queue_full = StatusFromHttpAnswer(
      429, R"({"error":"queue of model listops is full","code":"RESOURCE_EXHAUSTED"})");
  EXPECT_EQ(queue_full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(queue_full.error_message(), "queue of model listops is full");
  // 500 is several codes at once; the body says which.
  const grpc::Status internal =
      StatusFromHttpAnswer(500, R"({"error":"model crashed","code":"INTERNAL"})");
  EXPECT_EQ(internal.error_code(), grpc::StatusCode::INTERNAL);
  // 413: body over max_body_bytes, which the server calls RESOURCE_EXHAUSTED.
  EXPECT_EQ(StatusFromHttpAnswer(413, R"({"error":"body: too large","code":"RESOURCE_EXHAUSTED"})")
                .error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // No usable code: the status decides, the body is the message.
  const grpc::Status proxy = StatusFromHttpAnswer(504, "<html>gateway timeout</html>");
  EXPECT_EQ(proxy.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(proxy.error_message(), HasSubstr("HTTP 504: <html>gateway timeout"));
  EXPECT_EQ(StatusFromHttpAnswer(404, R"({"error":"no model x","code":"NOPE"})").error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(StatusFromHttpAnswer(400, R"({"error":"bad","code":"OK"})").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(StatusFromHttpAnswer(503, "").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(StatusFromHttpAnswer(502, "").error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_TRUE(StatusFromHttpAnswer(200, "{}").ok());
  EXPECT_EQ(*ParseGrpcCodeName("UNAUTHENTICATED"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(ParseGrpcCodeName("unauthenticated").ok());
}

TEST(ProtocolCallsTest, V2InferRequestIsOneRawBytesElement) {
  ClassifyRequest request;
  request.set_model("listops");
  request.set_document("[MAX 1 2]");
  request.set_request_id("bench-3");
  inference::ModelInferRequest infer = V2InferRequest(request);
  EXPECT_EQ(infer.model_name(), "listops");
  EXPECT_EQ(infer.id(), "bench-3");
  EXPECT_TRUE(infer.parameters().empty());
  ASSERT_EQ(infer.inputs_size(), 1);
  EXPECT_EQ(infer.inputs(0).name(), "document");
  EXPECT_EQ(infer.inputs(0).datatype(), "BYTES");
  ASSERT_EQ(infer.inputs(0).shape_size(), 1);
  EXPECT_EQ(infer.inputs(0).shape(0), 1);
  ASSERT_EQ(infer.raw_input_contents_size(), 1);
  EXPECT_EQ(infer.raw_input_contents(0), std::string("\x09\x00\x00\x00", 4) + "[MAX 1 2]");

  request.set_top_k(2);
  request.set_path(taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  infer = V2InferRequest(request);
  EXPECT_EQ(infer.parameters().at("top_k").int64_param(), 2);
  EXPECT_EQ(infer.parameters().at("path").string_param(), "efficient");
}

TEST(ProtocolCallsTest, RestBodiesCarryTheDocument) {
  ClassifyRequest request;
  request.set_model("listops");
  request.set_document("say \"hi\"");
  request.set_request_id("bench-0");
  EXPECT_EQ(*V2RestBody(request),
            R"({"id":"bench-0","inputs":[{"data":["say \"hi\""],"datatype":"BYTES",)"
            R"("name":"document","shape":[1]}]})");
  EXPECT_EQ(RestClassifyBody(request), R"({"request_id":"bench-0","text":"say \"hi\""})");
  request.set_top_k(3);
  request.set_path(taylorshift::v1::ATTENTION_PATH_DIRECT);
  EXPECT_THAT(*V2RestBody(request), HasSubstr(R"("parameters":{"path":"direct","top_k":3})"));
  EXPECT_THAT(RestClassifyBody(request), HasSubstr(R"("path":"direct")"));
  EXPECT_THAT(RestClassifyBody(request), HasSubstr(R"("top_k":3)"));

  // Bytes that are not UTF-8: base64 on the plain route, refused by v2 REST.
  request.set_document(std::string("\xff\xfe", 2));
  EXPECT_THAT(RestClassifyBody(request), HasSubstr(R"("document_base64":"//4=")"));
  EXPECT_EQ(V2RestBody(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolCallsTest, DecodesRawV2Outputs) {
  ClassifyResponse response;
  ASSERT_TRUE(DecodeV2Response(ThreeClassAnswer(), &response).ok());
  EXPECT_EQ(response.label(), "one");
  EXPECT_EQ(response.model_version(), "v2");
  EXPECT_EQ(response.request_id(), "bench-7");
  ASSERT_EQ(response.probabilities_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(response.probabilities(i).index(), i);
  EXPECT_EQ(response.probabilities(0).probability(), 0.125f);
  EXPECT_EQ(response.probabilities(1).probability(), 0.75f);
  EXPECT_EQ(response.path(), taylorshift::v1::ATTENTION_PATH_AUTO);  // not in v2 answers
  EXPECT_EQ(response.timing().batch_size(), 0u);
}

TEST(ProtocolCallsTest, DecodesTypedContentsWhenThereAreNoRawOnes) {
  inference::ModelInferResponse answer;
  auto* probabilities = answer.add_outputs();
  probabilities->set_name("probabilities");
  probabilities->set_datatype("FP32");
  probabilities->add_shape(1);
  probabilities->add_shape(2);
  probabilities->mutable_contents()->add_fp32_contents(0.25f);
  probabilities->mutable_contents()->add_fp32_contents(0.75f);
  auto* label = answer.add_outputs();
  label->set_name("label");
  label->set_datatype("BYTES");
  label->add_shape(1);
  label->mutable_contents()->add_bytes_contents("yes");
  ClassifyResponse response;
  ASSERT_TRUE(DecodeV2Response(answer, &response).ok());
  EXPECT_EQ(response.label(), "yes");
  ASSERT_EQ(response.probabilities_size(), 2);
  EXPECT_EQ(response.probabilities(1).probability(), 0.75f);
}

TEST(ProtocolCallsTest, DecodesTheClassificationForm) {
  inference::ModelInferResponse answer;
  AddOutput(&answer, "probabilities", "BYTES", {1, 2}, RawBytes({"0.75:1:b:c", "0.125:0:a"}));
  ClassifyResponse response;
  ASSERT_TRUE(DecodeV2Response(answer, &response).ok());
  ASSERT_EQ(response.probabilities_size(), 2);
  EXPECT_EQ(response.probabilities(0).label(), "b:c");  // labels may hold colons
  EXPECT_EQ(response.probabilities(0).index(), 1u);
  EXPECT_EQ(response.probabilities(0).probability(), 0.75f);
  EXPECT_EQ(response.probabilities(1).label(), "a");
  EXPECT_EQ(response.label(), "b:c");  // no "label" output: the best entry's
}

TEST(ProtocolCallsTest, RefusesMalformedRawV2Outputs) {
  const auto decode = [](const inference::ModelInferResponse& answer) {
    ClassifyResponse response;
    return DecodeV2Response(answer, &response);
  };
  inference::ModelInferResponse answer = ThreeClassAnswer();
  answer.mutable_raw_output_contents(0)->pop_back();  // 11 bytes of FP32
  EXPECT_THAT(decode(answer).message(), HasSubstr("not a multiple of 4"));

  answer = ThreeClassAnswer();
  *answer.mutable_raw_output_contents(1) = std::string("\x09\x00\x00\x00one", 7);
  EXPECT_THAT(decode(answer).message(), HasSubstr("runs past the end"));

  answer = ThreeClassAnswer();
  *answer.mutable_raw_output_contents(0) = RawFp32({0.5f, 0.5f});  // shape says 3
  EXPECT_THAT(decode(answer).message(), HasSubstr("2 elements for the shape's 3"));

  answer = ThreeClassAnswer();
  answer.mutable_outputs(1)->set_shape(0, 2);
  *answer.mutable_raw_output_contents(1) = RawBytes({"a", "b"});
  EXPECT_THAT(decode(answer).message(), HasSubstr("expected a batch of 1"));

  answer = ThreeClassAnswer();
  answer.mutable_outputs(0)->set_datatype("FP16");
  EXPECT_THAT(decode(answer).message(), HasSubstr("'FP16'"));

  answer = ThreeClassAnswer();
  answer.add_raw_output_contents("");
  EXPECT_THAT(decode(answer).message(), HasSubstr("3 raw_output_contents for 2 outputs"));

  EXPECT_THAT(decode(inference::ModelInferResponse()).message(),
              HasSubstr("neither a \"label\" nor a \"probabilities\""));
  EXPECT_EQ(decode(answer).code(), absl::StatusCode::kInternal);
}

TEST(ProtocolCallsTest, DecodesTheV2JsonAnswer) {
  // As tsserver writes it (FP32 data are the float values).
  const std::string body =
      R"({"model_name":"listops","model_version":"v2","id":"bench-1","outputs":[)"
      R"({"name":"probabilities","datatype":"FP32","shape":[1,3],"data":[0.1,0.7,0.2]},)"
      R"({"name":"label","datatype":"BYTES","shape":[1],"data":["1"]}]})";
  ClassifyResponse response;
  ASSERT_TRUE(DecodeV2JsonResponse(body, &response).ok());
  EXPECT_EQ(response.label(), "1");
  EXPECT_EQ(response.model_version(), "v2");
  EXPECT_EQ(response.request_id(), "bench-1");
  ASSERT_EQ(response.probabilities_size(), 3);
  EXPECT_EQ(response.probabilities(1).probability(), 0.7f);

  EXPECT_FALSE(DecodeV2JsonResponse("not json", &response).ok());
  EXPECT_FALSE(DecodeV2JsonResponse(R"({"outputs":[{"name":"label"}]})", &response).ok());
  EXPECT_THAT(
      DecodeV2JsonResponse(
          R"({"outputs":[{"name":"label","datatype":"BYTES","shape":[1],"data":[]}]})", &response)
          .message(),
      HasSubstr("0 elements for the shape's 1"));
}

TEST(ProtocolCallsTest, DecodesThePlainRouteAnswer) {
  const std::string body =
      R"({"label":"yes","probabilities":[{"label":"no","index":0,"probability":0.25},)"
      R"({"label":"yes","index":1,"probability":0.75}],"path":"efficient","batch_size":4,)"
      R"("batch_tokens":1024,"model_version":"v3","tokens":251,"truncated":false,"windows":1,)"
      R"("queue_ms":1.5,"compute_ms":3.25,"latency_ms":5.0,"request_id":"bench-9"})";
  ClassifyResponse response;
  ASSERT_TRUE(DecodeRestClassifyResponse(body, &response).ok());
  EXPECT_EQ(response.label(), "yes");
  ASSERT_EQ(response.probabilities_size(), 2);
  EXPECT_EQ(response.probabilities(0).label(), "no");
  EXPECT_EQ(response.probabilities(1).probability(), 0.75f);
  EXPECT_EQ(response.path(), taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  EXPECT_EQ(response.timing().batch_size(), 4u);
  EXPECT_EQ(response.timing().batch_tokens(), 1024u);
  EXPECT_EQ(response.tokens(), 251u);
  EXPECT_EQ(response.windows(), 1u);
  EXPECT_EQ(response.model_version(), "v3");
  EXPECT_EQ(response.request_id(), "bench-9");
  EXPECT_DOUBLE_EQ(response.timing().queue_seconds(), 0.0015);
  EXPECT_DOUBLE_EQ(response.timing().compute_seconds(), 0.00325);

  // null timings (no value) read as 0; a wrong type or a missing label is refused.
  ASSERT_TRUE(DecodeRestClassifyResponse(R"({"label":"a","queue_ms":null})", &response).ok());
  EXPECT_EQ(response.timing().queue_seconds(), 0);
  EXPECT_FALSE(DecodeRestClassifyResponse(R"({"label":"a","tokens":"many"})", &response).ok());
  EXPECT_FALSE(DecodeRestClassifyResponse(R"({"probabilities":[]})", &response).ok());
  EXPECT_FALSE(DecodeRestClassifyResponse(R"({"label":"a","path":"sideways"})", &response).ok());
}

}  // namespace
}  // namespace ts::client

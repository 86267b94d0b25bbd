// The HTTP front end (server/serving/http_frontend.h): routing, JSON decoding with the field named,
// the status mapping with Retry-After / WWW-Authenticate, and one real listener on loopback.
#include "server/serving/http_frontend.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/server/fake_inference.h"
#include "tests/testing/fake_clock.h"

namespace ts::server {
namespace {

using testing::FakeInference;
using ::testing::HasSubstr;
using Json = nlohmann::json;

HttpAnswer Call(FakeInference& fake, const std::string& method, const std::string& path,
                const std::string& body = "", std::map<std::string, std::string> headers = {}) {
  HttpExchange exchange{method, path, std::move(headers), body};
  RouteOptions options;
  options.max_infer_batch = 4;
  return Route(&fake, options, exchange);
}

TEST(HttpFrontendTest, HealthAndMetadataRoutes) {
  FakeInference fake;
  EXPECT_EQ(Json::parse(Call(fake, "GET", "/v2/health/live").body)["live"], true);
  EXPECT_EQ(Call(fake, "GET", "/v2/health/ready").status, 200);
  fake.SetReady(false);
  auto not_ready = Call(fake, "GET", "/v2/health/ready");
  EXPECT_EQ(not_ready.status, 400);  // as Triton answers; the specification: 4xx
  EXPECT_EQ(Call(fake, "GET", "/v2/models/m/ready").status, 400);
  EXPECT_EQ(Json::parse(not_ready.body)["ready"], false);
  EXPECT_EQ(Json::parse(not_ready.body)["live"], true);  // the specification's field name
  fake.SetReady(true);
  EXPECT_EQ(Json::parse(Call(fake, "GET", "/v2/health/ready").body)["ready"], true);
  EXPECT_EQ(Json::parse(Call(fake, "GET", "/v2").body)["name"], "taylorshift-serve");
  // GET v2 (the specification's table) and /v2/ (its OpenAPI file) are both server metadata.
  auto slash = Call(fake, "GET", "/v2/");
  EXPECT_EQ(slash.status, 200);
  EXPECT_EQ(Json::parse(slash.body)["name"], "taylorshift-serve");
  auto metadata = Json::parse(Call(fake, "GET", "/v2/models/m").body);
  EXPECT_EQ(metadata["inputs"][0]["name"], "document");
  EXPECT_EQ(metadata["outputs"][0]["shape"], Json::parse("[-1, 3]"));
  EXPECT_EQ(Call(fake, "GET", "/v2/models/m/versions/v1/ready").status, 200);
  EXPECT_EQ(Call(fake, "GET", "/v2/models/m/versions/v2/ready").status, 404);
  EXPECT_EQ(Call(fake, "GET", "/v2/models/x/ready").status, 404);
  auto models = Json::parse(Call(fake, "GET", "/v1/models").body);
  EXPECT_EQ(models["models"][0]["labels"], Json::parse(R"(["c0","c1","c2"])"));
  EXPECT_EQ(Json::parse(Call(fake, "GET", "/v1/models/m").body)["version"], "v1");
}

TEST(HttpFrontendTest, V2InferAnswersJsonTensorsWithExactFloats) {
  FakeInference fake;
  auto answer = Call(fake, "POST", "/v2/models/m/infer", R"({"id": "q", "inputs": [
      {"name": "document", "datatype": "BYTES", "shape": [2, 1], "data": [["ab"], ["abcd"]]}],
      "parameters": {"path": "direct"}})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto body = Json::parse(answer.body);
  EXPECT_EQ(body["id"], "q");
  EXPECT_EQ(body["outputs"][0]["shape"], Json::parse("[2, 3]"));
  const auto expected = FakeInference::Probabilities(4, 3);
  EXPECT_EQ(static_cast<float>(body["outputs"][0]["data"][4].get<double>()), expected[1]);
  EXPECT_EQ(body["outputs"][1]["data"], Json::parse(R"(["c2", "c2"])"));
  EXPECT_EQ(fake.calls()[0].path(), taylorshift::v1::ATTENTION_PATH_DIRECT);
  // The requests counter's protocol label (server/serving/inference.h).
  EXPECT_STREQ(fake.contexts()[0].protocol, "v2_rest");
}

// KServe's Python SDK (kserve 0.21, InferenceRESTClient) puts "model_name" in every v2 body: it
// is accepted when it names the route's model, as is a "model_version" the route leaves open.
TEST(HttpFrontendTest, V2InferBodyMayNameTheRoutesModelAsKServesSdkDoes) {
  FakeInference fake;
  const std::string inputs =
      R"("inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], "data": ["ab"]}])";
  const auto body = [&](const std::string& names) { return "{" + names + ", " + inputs + "}"; };
  EXPECT_EQ(
      Call(fake, "POST", "/v2/models/m/infer", body(R"("id": "k", "model_name": "m")")).status,
      200);
  EXPECT_EQ(Call(fake, "POST", "/v2/models/m/infer", body(R"("model_version": "v1")")).status, 200);
  EXPECT_EQ(
      Call(fake, "POST", "/v2/models/m/versions/v1/infer", body(R"("model_version": "v1")")).status,
      200);
  const auto refused = [&](const std::string& path, const std::string& names, int status,
                           const std::string& text) {
    const HttpAnswer answer = Call(fake, "POST", path, body(names));
    EXPECT_EQ(answer.status, status) << answer.body;
    EXPECT_THAT(answer.body, HasSubstr(text));
  };
  refused("/v2/models/m/infer", R"("model_name": "other")", 400,
          R"(model_name: \"other\" differs from the route's \"m\")");
  refused("/v2/models/m/infer", R"("model_name": 3)", 400, "model_name: must be a string");
  refused("/v2/models/m/versions/v1/infer", R"("model_version": "v2")", 400,
          R"(model_version: \"v2\" differs from the route's \"v1\")");
  // A version named only in the body is the request's version: one the model lacks is 404.
  refused("/v2/models/m/infer", R"("model_version": "v9")", 404, "has no version");
  refused("/v2/models/m/infer", R"("model": "m")", 400,
          "model: unknown key (known: id, model_name, model_version, parameters, inputs, outputs)");
}

TEST(HttpFrontendTest, PlainClassifyRouteAnswersTsctlsJson) {
  FakeInference fake;
  auto answer = Call(fake, "POST", "/v1/models/m:classify",
                     R"({"text": "hello", "top_k": 2, "request_id": "r", "over_length": "reject"})",
                     {{"authorization", "Bearer t"}, {"x-timeout-ms", "5000"}});
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto body = Json::parse(answer.body);
  EXPECT_EQ(body["label"], "c2");
  EXPECT_EQ(body["request_id"], "r");
  ASSERT_EQ(body["probabilities"].size(), 2u);
  EXPECT_EQ(body["probabilities"][0]["index"], 2);
  EXPECT_TRUE(body.contains("latency_ms"));
  EXPECT_FALSE(body.contains("file"));
  const auto call = fake.contexts()[0];
  EXPECT_EQ(call.authorization, "Bearer t");
  EXPECT_EQ(call.timeout, absl::Seconds(5));
  EXPECT_STREQ(call.protocol, "rest");
  EXPECT_EQ(fake.calls()[0].over_length(), "reject");
  // Binary documents and images.
  EXPECT_EQ(Call(fake, "POST", "/v1/models/m:classify", R"({"document_base64": "AAEC"})").status,
            200);
  EXPECT_EQ(fake.calls().back().document(), std::string("\0\1\2", 3));
  EXPECT_EQ(Call(fake, "POST", "/v1/models/m:classify",
                 R"({"image": {"width": 2, "height": 1, "pixels": [0, 255]}})")
                .status,
            200);
  EXPECT_EQ(fake.calls().back().image().pixels(), std::string("\0\xff", 2));
}

// Issue 41: a model promoted as ".." answered POST /v1/models/..:classify with 200. Every route
// that names a model refuses a name outside the name rule before anything is looked up.
TEST(HttpFrontendTest, RoutesRefuseModelNamesOutsideTheNameRule) {
  for (const std::string name : {"..", ".", "taylorshift.v1.Jobs", ".hidden"}) {
    FakeInference fake;
    fake.SetModelName(name);  // as if it were served
    for (const auto& [method, path, body] : std::vector<std::array<std::string, 3>>{
             {"POST", "/v1/models/" + name + ":classify", R"({"text": "abc"})"},
             {"GET", "/v1/models/" + name, ""},
             {"GET", "/v2/models/" + name, ""},
             {"GET", "/v2/models/" + name + "/ready", ""},
             {"POST", "/v2/models/" + name + "/infer",
              R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
                  "data": ["ab"]}]})"}}) {
      const HttpAnswer answer = Call(fake, method, path, body);
      EXPECT_EQ(answer.status, 400) << method << " " << path << ": " << answer.body;
      EXPECT_THAT(answer.body, HasSubstr("model: the name in the path must match "
                                         "[A-Za-z0-9][A-Za-z0-9_-]{0,63}"))
          << path;
    }
    EXPECT_TRUE(fake.calls().empty()) << name;
  }
  // Names that follow the rule still route (the fake answers NOT_FOUND for the ones it lacks).
  FakeInference fake;
  fake.SetModelName("listops-small_2");
  EXPECT_EQ(Call(fake, "POST", "/v1/models/listops-small_2:classify", R"({"text": "a"})").status,
            200);
  EXPECT_EQ(Call(fake, "GET", "/v2/models/source-lang").status, 404);
}

// latency_ms and a deadline that passes while the batch runs are read on the injected clock.
TEST(HttpFrontendTest, LatencyAndDeadlinesRunOnTheInjectedClock) {
  FakeInference fake;
  ts::testing::FakeClock clock;
  fake.WhileComputing([&clock] { clock.Advance(absl::Seconds(6)); });
  RouteOptions options;
  options.clock = &clock;
  const auto classify = [&](const std::string& timeout_ms) {
    return Route(&fake, options,
                 HttpExchange{"POST",
                              "/v1/models/m:classify",
                              {{"x-timeout-ms", timeout_ms}},
                              R"({"text": "hello"})"});
  };
  const HttpAnswer in_time = classify("7000");
  ASSERT_EQ(in_time.status, 200) << in_time.body;
  EXPECT_EQ(Json::parse(in_time.body)["latency_ms"], 6000.0);
  const HttpAnswer late = classify("5000");
  EXPECT_EQ(late.status, 504) << late.body;
  EXPECT_THAT(late.body, HasSubstr("X-Timeout-Ms: the deadline passed"));
  const HttpAnswer late_v2 =
      Route(&fake, options,
            HttpExchange{"POST",
                         "/v2/models/m/infer",
                         {{"x-timeout-ms", "5000"}},
                         R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
                       "data": ["ab"]}]})"});
  EXPECT_EQ(late_v2.status, 504) << late_v2.body;
  // Issue 45: X-Timeout-Ms: 0 answered 504 at once, where tsctl's --timeout-ms 0 and
  // http.default_timeout_ms 0 mean no deadline. 0 is no deadline of the request's own: the
  // server's default applies, as without the header.
  const HttpAnswer no_deadline = classify("0");
  ASSERT_EQ(no_deadline.status, 200) << no_deadline.body;
  EXPECT_EQ(fake.contexts().back().timeout, absl::InfiniteDuration());
  options.default_timeout = absl::Seconds(5);
  EXPECT_EQ(classify("0").status, 504);
  EXPECT_EQ(fake.contexts().back().timeout, absl::Seconds(5));
}

TEST(HttpFrontendTest, ErrorsCarryTheirStatusFieldAndHeaders) {
  FakeInference fake;
  const auto expect = [&](const HttpAnswer& a, int status, const std::string& text) {
    EXPECT_EQ(a.status, status) << a.body;
    const auto body = Json::parse(a.body);
    EXPECT_THAT(body["error"].get<std::string>(), HasSubstr(text));
    EXPECT_TRUE(body["code"].is_string());
  };
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"text": )"), 400, "invalid JSON");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"([1])"), 400, "JSON object");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"text": 3})"), 400, "text:");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"txt": "a"})"), 400, "txt: unknown key");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a", "top_k": -1})"), 400,
         "top_k:");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a", "path": "fast"})"), 400,
         "path:");
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({})"), 400, "exactly one of");
  expect(Call(fake, "POST", "/v1/models/x:classify", R"({"text": "a"})"), 404, "no such model");
  expect(Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
         "datatype": "BYTES", "shape": [1], "data": [7]}]})"),
         400, "inputs[0].data[0]: BYTES elements are JSON strings");
  expect(Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
         "datatype": "BYTES", "shape": [1]}]})"),
         400, "inputs[0].data: required");
  expect(Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
         "datatype": "BYTES", "shape": [1], "data": ["a"], "parameters": {"binary_data_size": 1}}]})"),
         400, "inputs[0].data: give either data or parameters.binary_data_size");
  expect(Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
         "datatype": "BYTES", "shape": [1], "data": ["a"]}], "parameters": {"colour": 1}})"),
         400, "parameters.colour: unknown parameter");
  expect(
      Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a"})", {{"x-timeout-ms", "soon"}}),
      400, "X-Timeout-Ms");
  expect(Call(fake, "GET", "/v3"), 404, "no route");
  auto wrong_method = Call(fake, "GET", "/v2/models/m/infer");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(wrong_method.headers["Allow"], "POST");
  fake.FailWith(absl::ResourceExhaustedError("queue full"));
  auto full = Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a"})");
  expect(full, 429, "queue full");
  EXPECT_EQ(full.headers["Retry-After"], "1");
  fake.FailWith(absl::UnauthenticatedError("missing token"));
  auto denied = Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
      "datatype": "BYTES", "shape": [1], "data": ["a"]}]})");
  expect(denied, 401, "missing token");
  EXPECT_EQ(denied.headers["WWW-Authenticate"], "Bearer");
  fake.FailWith(absl::DeadlineExceededError("late"));
  expect(Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a"})"), 504, "late");
}

// Triton's model configuration: what perf_analyzer reads, dims as JSON numbers.
TEST(HttpFrontendTest, ModelConfigIsTritonsJson) {
  FakeInference fake;
  for (const char* path : {"/v2/models/m/config", "/v2/models/m/versions/v1/config"}) {
    const auto answer = Call(fake, "GET", path);
    ASSERT_EQ(answer.status, 200) << answer.body;
    const auto config = Json::parse(answer.body);
    EXPECT_EQ(config["name"], "m");
    EXPECT_EQ(config["platform"], "taylorshift_libtorch");
    EXPECT_EQ(config["max_batch_size"], 4);  // max_infer_batch
    EXPECT_EQ(config["input"][0]["name"], "document");
    EXPECT_EQ(config["input"][0]["data_type"], "TYPE_STRING");
    EXPECT_EQ(config["input"][0]["dims"], Json::parse("[1]"));
    EXPECT_EQ(config["input"][0]["is_shape_tensor"], false);
    EXPECT_EQ(config["output"][0]["name"], "probabilities");
    EXPECT_EQ(config["output"][0]["data_type"], "TYPE_FP32");
    EXPECT_EQ(config["output"][0]["dims"], Json::parse("[3]"));
    EXPECT_EQ(config["output"][1]["data_type"], "TYPE_STRING");
    EXPECT_EQ(config["dynamic_batching"]["max_queue_delay_microseconds"], 0);
    EXPECT_EQ(config["model_transaction_policy"]["decoupled"], false);
  }
  EXPECT_EQ(Call(fake, "GET", "/v2/models/m/versions/v9/config").status, 404);
  EXPECT_EQ(Call(fake, "GET", "/v2/models/x/config").status, 404);
}

// A BYTES tensor in the binary tensor data extension: 4-byte little-endian lengths, then bytes.
std::string RawBytes(const std::vector<std::string>& elements) {
  std::string raw;
  for (const std::string& e : elements) {
    const auto n = static_cast<std::uint32_t>(e.size());
    for (int i = 0; i < 4; ++i) raw.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    raw += e;
  }
  return raw;
}

HttpAnswer CallBinary(FakeInference& fake, const std::string& json, const std::string& binary) {
  return Call(fake, "POST", "/v2/models/m/infer", json + binary,
              {{"inference-header-content-length", std::to_string(json.size())}});
}

// tritonclient.http's default mode: binary inputs and outputs, answered with the same values as
// the JSON form.
TEST(HttpFrontendTest, BinaryTensorDataExtensionInAndOut) {
  FakeInference fake;
  const std::string raw = RawBytes({"ab", "abcd"});
  const std::string json =
      R"({"id": "b", "inputs": [{"name": "document", "datatype": "BYTES", "shape": [2, 1],
      "parameters": {"binary_data_size": )" +
      std::to_string(raw.size()) + R"(}}], "parameters": {"binary_data_output": true}})";
  const auto answer = CallBinary(fake, json, raw);
  ASSERT_EQ(answer.status, 200) << answer.body;
  ASSERT_EQ(fake.calls().size(), 2u);
  EXPECT_EQ(fake.calls()[1].document(), "abcd");
  EXPECT_EQ(answer.content_type, "application/octet-stream");
  const std::size_t header = std::stoul(answer.headers.at("Inference-Header-Content-Length"));
  const auto body = Json::parse(answer.body.substr(0, header));
  EXPECT_EQ(body["id"], "b");
  ASSERT_EQ(body["outputs"].size(), 2u);
  EXPECT_FALSE(body["outputs"][0].contains("data"));
  const std::size_t fp32_bytes = body["outputs"][0]["parameters"]["binary_data_size"];
  const std::size_t label_bytes = body["outputs"][1]["parameters"]["binary_data_size"];
  EXPECT_EQ(fp32_bytes, 2u * 3u * 4u);
  ASSERT_EQ(answer.body.size(), header + fp32_bytes + label_bytes);
  const auto expected = FakeInference::Probabilities(4, 3);
  float second[3];
  std::memcpy(second, answer.body.data() + header + 12, sizeof(second));
  EXPECT_EQ(second[1], expected[1]);
  EXPECT_EQ(answer.body.substr(header + fp32_bytes), RawBytes({"c2", "c2"}));

  // Per output: binary_data true on one, the other in JSON.
  const std::string mixed =
      R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
      "parameters": {"binary_data_size": 6}}], "outputs": [{"name": "label",
      "parameters": {"binary_data": true}}, {"name": "probabilities"}]})";
  const auto per_output = CallBinary(fake, mixed, RawBytes({"ab"}));
  ASSERT_EQ(per_output.status, 200) << per_output.body;
  const std::size_t mixed_header =
      std::stoul(per_output.headers.at("Inference-Header-Content-Length"));
  const auto mixed_body = Json::parse(per_output.body.substr(0, mixed_header));
  EXPECT_EQ(mixed_body["outputs"][0]["name"], "label");
  EXPECT_EQ(per_output.body.substr(mixed_header), RawBytes({"c2"}));
  EXPECT_EQ(mixed_body["outputs"][1]["data"].size(), 3u);
  // No binary output: plain JSON, no header.
  const auto plain =
      CallBinary(fake, R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
      "parameters": {"binary_data_size": 6}}]})",
                 RawBytes({"ab"}));
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.headers.count("Inference-Header-Content-Length"), 0u);
  EXPECT_EQ(Json::parse(plain.body)["outputs"][1]["data"], Json::parse(R"(["c2"])"));
}

TEST(HttpFrontendTest, MalformedBinaryBodiesAre400NamingTheField) {
  FakeInference fake;
  const auto expect = [&](const HttpAnswer& a, const std::string& text) {
    EXPECT_EQ(a.status, 400) << a.body;
    EXPECT_THAT(Json::parse(a.body)["error"].get<std::string>(), HasSubstr(text));
  };
  const auto input = [](const std::string& size) {
    return R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
      "parameters": {"binary_data_size": )" +
           size + "}}]}";
  };
  const std::string raw = RawBytes({"ab"});
  // The header's length past the body, or not a number.
  expect(Call(fake, "POST", "/v2/models/m/infer", input("6") + raw,
              {{"inference-header-content-length", "100000"}}),
         "Inference-Header-Content-Length: must be the JSON header's length");
  expect(Call(fake, "POST", "/v2/models/m/infer", input("6") + raw,
              {{"inference-header-content-length", "-3"}}),
         "Inference-Header-Content-Length");
  // A JSON header cut short.
  expect(Call(fake, "POST", "/v2/models/m/infer", input("6") + raw,
              {{"inference-header-content-length", "20"}}),
         "invalid JSON");
  // More bytes claimed than sent; bytes nobody claims; a negative or non-integer size.
  expect(CallBinary(fake, input("7"), raw),
         "inputs[0].parameters.binary_data_size: 7 bytes, but only 6");
  expect(CallBinary(fake, input("5"), raw), "1 bytes follow the JSON header");
  expect(CallBinary(fake, input("-1"), raw), "inputs[0].parameters.binary_data_size: must be");
  expect(CallBinary(fake, input("\"6\""), raw), "inputs[0].parameters.binary_data_size");
  // An element whose length prefix runs past the end.
  std::string corrupt = raw;
  corrupt[0] = 9;
  expect(CallBinary(fake, input("6"), corrupt), "inputs[0]'s binary data");
  // Neither data nor binary_data_size.
  expect(CallBinary(fake, R"({"inputs": [{"name": "document", "datatype": "BYTES",
      "shape": [1]}]})",
                    ""),
         "inputs[0].data: required (or parameters.binary_data_size");
  // binary_data must be a boolean.
  expect(Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
      "datatype": "BYTES", "shape": [1], "data": ["a"]}], "outputs": [{"name": "label",
      "parameters": {"binary_data": 1}}]})"),
         "outputs[0].parameters.binary_data: must be a boolean");
  EXPECT_TRUE(fake.calls().empty());
}

// The plain route's body is proto3 JSON of taylorshift.v1.RestClassifyRequest: the field names
// or their lowerCamelCase, integers as numbers or strings, null as absent; errors name the field
// as the hand-written reader did.
TEST(HttpFrontendTest, PlainRouteBodyIsProto3Json) {
  FakeInference fake;
  const auto classify = [&](const std::string& body) {
    return Call(fake, "POST", "/v1/models/m:classify", body);
  };
  auto camel = classify(R"({"documentBase64": "AAEC", "topK": "2", "requestId": "r",
                            "overLength": "window", "path": null})");
  ASSERT_EQ(camel.status, 200) << camel.body;
  EXPECT_EQ(fake.calls().back().document(), std::string("\0\1\2", 3));
  EXPECT_EQ(fake.calls().back().top_k(), 2u);
  EXPECT_EQ(fake.calls().back().request_id(), "r");
  EXPECT_EQ(fake.calls().back().over_length(), "window");
  ASSERT_EQ(classify(R"({"image": {"width": 1, "height": 1, "pixelsBase64": "/w=="}})").status,
            200);
  EXPECT_EQ(fake.calls().back().image().pixels(), "\xff");
  EXPECT_EQ(fake.calls().back().image().channels(), 1u);
  ASSERT_EQ(classify(R"({"text": "a", "path": "ATTENTION_PATH_EFFICIENT"})").status, 200);
  EXPECT_EQ(fake.calls().back().path(), taylorshift::v1::ATTENTION_PATH_EFFICIENT);

  const auto expect_400 = [&](const std::string& body, const std::string& text) {
    const auto answer = classify(body);
    EXPECT_EQ(answer.status, 400) << body;
    EXPECT_THAT(Json::parse(answer.body)["error"].get<std::string>(), HasSubstr(text)) << body;
  };
  expect_400(R"({"image": {"width": 1, "pixls": [1]}})",
             "image.pixls: unknown key (known: width, height, channels, pixels, pixels_base64)");
  expect_400(R"({"txt": "a"})",
             "(known: text, document_base64, image, top_k, path, over_length, "
             "request_id)");
  expect_400(R"({"text": "a", "document_base64": "AA=="})", "body: give exactly one of");
  expect_400(R"({"text": null})", "body: give exactly one of");
  expect_400(R"({"image": {"width": 2, "height": 1, "pixels": [0, 256]}})",
             "image.pixels[1]: must be an integer 0 to 255");
  expect_400(R"({"image": {"width": 2, "height": 1, "pixels": [0, -1]}})", "image.pixels[1]:");
  expect_400(R"({"image": {"width": 1, "height": 1}})", "image: needs pixels or pixels_base64");
  expect_400(R"({"document_base64": "!!"})", "document_base64:");
  expect_400(R"({"text": "a", "top_k": 1.5})", "top_k:");
  expect_400(R"({"text": "a", "top_k": [1]})", "top_k:");
}

// Routes are registered on cpp-httplib's router: a GET route answers HEAD without a body, a
// route with another method 405 naming its own, a path no route takes 404, all as JSON.
TEST(HttpFrontendTest, ListenerRoutesMethodsAndHead) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.listen = "127.0.0.1:0";
  auto frontend = HttpFrontend::Start(options, &fake);
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  const std::string address = (*frontend)->address();
  httplib::Client client("127.0.0.1", std::stoi(address.substr(address.rfind(':') + 1)));
  auto head = client.Head("/v2/health/ready");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  auto metadata = client.Get("/v2/models/m/versions/v1");
  ASSERT_TRUE(metadata);
  EXPECT_EQ(Json::parse(metadata->body)["name"], "m");
  auto infer_get = client.Get("/v2/models/m/infer");
  ASSERT_TRUE(infer_get);
  EXPECT_EQ(infer_get->status, 405);
  EXPECT_EQ(infer_get->get_header_value("Allow"), "POST");
  auto classify_put = client.Put("/v1/models/m:classify", "{}", "application/json");
  ASSERT_TRUE(classify_put);
  EXPECT_EQ(classify_put->status, 405);
  EXPECT_THAT(classify_put->body, HasSubstr("PUT /v1/models/m:classify: use POST"));
  auto models_post = client.Post("/v1/models", "{}", "application/json");
  ASSERT_TRUE(models_post);
  EXPECT_EQ(models_post->status, 405);
  EXPECT_EQ(models_post->get_header_value("Allow"), "GET");
  auto nowhere = client.Options("/v2/models");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_EQ(Json::parse(nowhere->body)["code"], "NOT_FOUND");
}

std::string Nested(char open, char close, int depth, const std::string& inner) {
  return std::string(depth, open) + inner + std::string(depth, close);
}

// Found by a mutation fuzz: 30,000 nested arrays in a v2 body's data, or 100,000 in the plain
// route's top_k, ended tsserver with SIGSEGV (recursion while reading the value or while quoting
// it in the error message). Deep bodies are now refused at http.max_json_depth while parsing.
TEST(HttpFrontendTest, DeeplyNestedBodiesAreRefusedNamingTheLimit) {
  FakeInference fake;
  for (const int depth : {33, 30000, 100000}) {
    for (const auto& [open, close] : {std::pair{'[', ']'}, std::pair{'{', '}'}}) {
      const std::string inner = open == '[' ? "1" : "";
      std::string value = Nested(open, close, depth, inner);
      if (open == '{') {  // {"a":{"a":{...}}}
        value.clear();
        for (int i = 0; i < depth; ++i) value += R"({"a":)";
        value += "1" + std::string(depth, '}');
      }
      const auto plain =
          Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a", "top_k": )" + value + "}");
      EXPECT_EQ(plain.status, 400) << depth;
      EXPECT_THAT(plain.body, HasSubstr("top_k"));
      EXPECT_THAT(plain.body, HasSubstr("nested deeper than http.max_json_depth 32"));
      EXPECT_LT(plain.body.size(), 8000u);
      const auto v2 = Call(fake, "POST", "/v2/models/m/infer",
                           R"({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
                               "data": )" +
                               value + "}]}");
      EXPECT_EQ(v2.status, 400) << depth;
      EXPECT_THAT(v2.body, HasSubstr("inputs[0].data"));
    }
  }
  // Within the limit, nesting is read as before: a [1, 1] tensor of BYTES.
  const auto ok = Call(fake, "POST", "/v2/models/m/infer", R"({"inputs": [{"name": "document",
      "datatype": "BYTES", "shape": [1, 1], "data": [["ab"]]}]})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  RouteOptions shallow;
  shallow.max_json_depth = 4;  // the body's object, inputs, an input and data: 4 levels
  const auto refused = Route(&fake, shallow, {"POST", "/v2/models/m/infer", {}, R"({"inputs": [{
      "name": "document", "datatype": "BYTES", "shape": [1, 1], "data": [["ab"]]}]})"});
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("inputs[0].data[0]: JSON nested deeper than "
                                      "http.max_json_depth 4"));
}

// A number beyond double's range answered 500; it is the client's error, named by its field.
TEST(HttpFrontendTest, NumbersOutOfRangeAre400NamingTheField) {
  FakeInference fake;
  for (const std::string& number :
       std::vector<std::string>{"1e400", "-1e400", std::string(5000, '9')}) {
    const auto plain =
        Call(fake, "POST", "/v1/models/m:classify", R"({"text": "a", "top_k": )" + number + "}");
    EXPECT_EQ(plain.status, 400) << plain.body;
    EXPECT_THAT(plain.body, HasSubstr("top_k: number out of range"));
    EXPECT_LT(plain.body.size(), 1000u);  // the 5,000 digits are not echoed
    const auto v2 = Call(fake, "POST", "/v2/models/m/infer",
                         R"({"inputs": [{"name": "document",
        "datatype": "UINT8", "shape": [3], "data": [1, 2, )" +
                             number + "]}]}");
    EXPECT_EQ(v2.status, 400) << v2.body;
    EXPECT_THAT(v2.body, HasSubstr("inputs[0].data[2]: number out of range"));
  }
  // A long value that is wrong for its field is quoted, but cut.
  const auto long_string = Call(fake, "POST", "/v1/models/m:classify",
                                R"({"text": "a", "top_k": ")" + std::string(100000, 'x') + R"("})");
  EXPECT_EQ(long_string.status, 400);
  EXPECT_LT(long_string.body.size(), 1000u);
}

TEST(HttpFrontendTest, ServesOnLoopbackLimitsBodiesAndStops) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.listen = "127.0.0.1:0";
  options.http.threads = 2;
  options.http.max_body_bytes = 1000;
  // Every answer's status reaches on_response (the server's taylorshift_http_responses_total),
  // the router's 404 and 405 and httplib's own 413 included.
  absl::Mutex statuses_mu;
  std::vector<int> statuses;
  options.on_response = [&](int status) {
    absl::MutexLock lock(&statuses_mu);
    statuses.push_back(status);
  };
  auto frontend = HttpFrontend::Start(options, &fake);
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  const std::string address = (*frontend)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto live = client.Get("/v2/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  auto classify = client.Post("/v1/models/m:classify", R"({"text": "abc"})", "application/json");
  ASSERT_TRUE(classify);
  EXPECT_EQ(classify->status, 200) << classify->body;
  auto big = client.Post("/v1/models/m:classify", Json{{"text", std::string(5000, 'a')}}.dump(),
                         "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_THAT(big->body, HasSubstr("max_body_bytes"));
  auto missing = client.Get("/v2/nothing/here");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto method = client.Delete("/v2/health/live");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 405);
  (*frontend)->Stop();
  {
    absl::MutexLock lock(&statuses_mu);
    // Logged after each answer is written: the client may be on its next request by then.
    std::sort(statuses.begin(), statuses.end());
    EXPECT_EQ(statuses, (std::vector<int>{200, 200, 404, 405, 413}));
  }
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(2, 0);
  EXPECT_FALSE(after.Get("/v2/health/live"));
  // The address in use is refused with the listener's key.
  HttpFrontendOptions taken = options;
  auto first = HttpFrontend::Start(options, &fake);
  ASSERT_TRUE(first.ok());
  taken.http.listen = (*first)->address();
  auto second = HttpFrontend::Start(taken, &fake);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("http: cannot listen"));
}

// Found by a mutation fuzz: 14 connections trickling a request one byte every 2 s left
// GET /v2/health/ready unanswered for 30 s (8 listener threads). The pool now grows to
// http.max_connections, and a connection silent for http.read_timeout_ms is closed.
TEST(HttpFrontendTest, SlowClientsDoNotStarveHealthChecks) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.listen = "127.0.0.1:0";
  options.http.threads = 2;
  options.http.max_connections = 32;
  options.http.read_timeout = absl::Seconds(1);
  // A connection the server answered (400/408) then waits keep_alive for a next request: 1 s
  // here, so that every slow connection is closed well inside the 5 s each is given below (with
  // the default 5 s the two raced: one connection in one CI run was still open after 5 s).
  options.http.keep_alive = absl::Seconds(1);
  auto frontend = HttpFrontend::Start(options, &fake);
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  const std::string address = (*frontend)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::vector<int> slow;
  for (int i = 0; i < 14; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    const std::string start = i % 2 == 0 ? "GET /v2/health/ready HTTP/1.1\r\nHo"
                                         : "POST /v1/models/m:classify HTTP/1.1\r\n"
                                           "Content-Length: 100\r\n\r\n{\"te";
    ASSERT_EQ(::send(fd, start.data(), start.size(), 0), static_cast<ssize_t>(start.size()));
    slow.push_back(fd);
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(2, 0);  // a starved listener would answer after read_timeout at best
  for (int i = 0; i < 3; ++i) {
    auto ready = client.Get("/v2/health/ready");
    ASSERT_TRUE(ready) << "health check starved by 14 slow clients";
    EXPECT_EQ(ready->status, 200);
  }
  // The silent connections are closed after http.read_timeout_ms (1 s): each reads EOF (or a
  // 400/408 answer, then EOF; or a reset, when the close found bytes it had not read) within a
  // bounded wait. Only the wait running out (EAGAIN) means a connection stayed open.
  for (const int fd : slow) {
    timeval wait{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    char buffer[512];
    ssize_t n = 0;
    int reads = 0;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0 && ++reads < 16) {
    }
    const int error = n < 0 ? errno : 0;
    EXPECT_TRUE(n == 0 || error == ECONNRESET)
        << "a silent connection stayed open (recv " << n << ", " << std::strerror(error) << ")";
    ::close(fd);
  }
}

TEST(HttpFrontendTest, ServesHttpsWithTheServersCertificate) {
  const std::string dir = ::testing::TempDir() + "/http_frontend_tls";
  const std::string make_cert = "mkdir -p " + dir +
                                " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir +
                                "/key.pem -out " + dir +
                                "/cert.pem -days 1 -subj /CN=localhost -addext "
                                "subjectAltName=IP:127.0.0.1 2>/dev/null";
  ASSERT_EQ(std::system(make_cert.c_str()), 0) << make_cert;
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.listen = "127.0.0.1:0";
  options.tls.cert_file = dir + "/cert.pem";
  options.tls.key_file = dir + "/key.pem";
  auto frontend = HttpFrontend::Start(options, &fake);
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  const std::string address = (*frontend)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path((dir + "/cert.pem").c_str());
  client.enable_server_certificate_verification(true);
  auto classify = client.Post("/v1/models/m:classify", R"({"text": "abc"})", "application/json");
  ASSERT_TRUE(classify) << httplib::to_string(classify.error());
  EXPECT_EQ(classify->status, 200) << classify->body;
  // Plain HTTP to the TLS port gets no answer.
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(2, 0);
  auto refused = plain.Get("/v2/health/live");
  EXPECT_TRUE(!refused || refused->status != 200);
  // A key that does not load is refused at start with the file named.
  HttpFrontendOptions broken = options;
  broken.tls.key_file = dir + "/missing.pem";
  auto failed = HttpFrontend::Start(broken, &fake);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("missing.pem"));
}

}  // namespace
}  // namespace ts::server

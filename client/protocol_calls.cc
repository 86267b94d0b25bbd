#include "client/protocol_calls.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "api/proto_names.h"
#include "api/v2_raw.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::client {
namespace {

using Json = nlohmann::json;
using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;

// Indexed by BenchProtocol.
constexpr const char* kProtocolNames[] = {"classify", "v2-grpc", "v2-rest", "rest"};

// Extra wait beyond the deadline before an HTTP call gives up by itself, so that the server's
// 504 (its deadline is X-Timeout-Ms) normally arrives first.
constexpr std::int64_t kHttpDeadlineSlackMs = 1000;
// The wait when there is no deadline at all.
constexpr std::int64_t kHttpNoDeadlineWaitMs = std::int64_t{24} * 3600 * 1000;
// How long connecting may take at most (or the deadline, when shorter).
constexpr std::int64_t kHttpConnectMs = 10000;

// The parts of one v2 output tensor the decoders need, whichever encoding it came in.
struct V2Tensor {
  std::string name;
  std::string datatype;
  std::vector<std::int64_t> shape;
  std::vector<float> fp32;
  std::vector<std::string> bytes;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("unreadable v2 answer: ", what));
}

// The decoders read FP32 and BYTES outputs only.
absl::Status CheckDatatype(const V2Tensor& tensor) {
  if (tensor.datatype == "FP32" || tensor.datatype == "BYTES") return absl::OkStatus();
  return Malformed(absl::StrCat("output \"", tensor.name, "\" has datatype '", tensor.datatype,
                                "' (expected FP32 or BYTES)"));
}

// "score:index:label" (the label may itself hold colons).
absl::Status ParseClassificationEntry(const std::string& entry,
                                      taylorshift::v1::ClassProbability* out) {
  const std::size_t first = entry.find(':');
  const std::size_t second = first == std::string::npos ? first : entry.find(':', first + 1);
  float score = 0;
  std::uint32_t index = 0;
  if (second == std::string::npos || !absl::SimpleAtof(entry.substr(0, first), &score) ||
      !absl::SimpleAtoi(entry.substr(first + 1, second - first - 1), &index)) {
    return Malformed(
        absl::StrCat("probabilities entry '", entry, "' is not \"score:index:label\""));
  }
  out->set_probability(score);
  out->set_index(index);
  out->set_label(entry.substr(second + 1));
  return absl::OkStatus();
}

// Fills `response` from the decoded outputs of a one-element answer.
absl::Status FillFromTensors(const std::vector<V2Tensor>& tensors, ClassifyResponse* response) {
  bool have_label = false, have_probabilities = false;
  for (const V2Tensor& tensor : tensors) {
    const std::string where = absl::StrCat("output \"", tensor.name, "\" (", tensor.datatype, " [",
                                           absl::StrJoin(tensor.shape, ","), "])");
    if (tensor.shape.empty() || tensor.shape[0] != 1) {
      return Malformed(absl::StrCat(where, ": expected a batch of 1"));
    }
    const std::int64_t count = std::accumulate(tensor.shape.begin(), tensor.shape.end(),
                                               std::int64_t{1}, std::multiplies<>());
    const std::int64_t have = static_cast<std::int64_t>(
        tensor.datatype == "FP32" ? tensor.fp32.size() : tensor.bytes.size());
    if (count != have) {
      return Malformed(absl::StrCat(where, ": ", have, " elements for the shape's ", count));
    }
    if (tensor.name == "label") {
      if (tensor.datatype != "BYTES" || count != 1) {
        return Malformed(absl::StrCat(where, ": expected BYTES [1]"));
      }
      response->set_label(tensor.bytes[0]);
      have_label = true;
    } else if (tensor.name == "probabilities") {
      response->clear_probabilities();
      if (tensor.datatype == "FP32") {
        for (std::size_t i = 0; i < tensor.fp32.size(); ++i) {
          auto* entry = response->add_probabilities();
          entry->set_index(static_cast<std::uint32_t>(i));
          entry->set_probability(tensor.fp32[i]);
        }
      } else {  // BYTES: the decoders take no other datatype (CheckDatatype)
        for (const std::string& element : tensor.bytes) {
          TS_RETURN_IF_ERROR(ParseClassificationEntry(element, response->add_probabilities()));
        }
      }
      have_probabilities = true;
    }
    // Other outputs (none today) are not the bench's business.
  }
  if (!have_label && !have_probabilities) {
    return Malformed("neither a \"label\" nor a \"probabilities\" output");
  }
  if (!have_label && response->probabilities_size() > 0) {
    // Only probabilities asked for: the best one's label, when the answer names it.
    const auto& entries = response->probabilities();
    const auto best = std::max_element(
        entries.begin(), entries.end(),
        [](const auto& a, const auto& b) { return a.probability() < b.probability(); });
    response->set_label(best->label());
  }
  return absl::OkStatus();
}

// Whether `text` is valid UTF-8 (what a JSON string can carry).
bool IsUtf8(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

// Percent-encodes a path segment (a model name) except RFC 3986's unreserved characters.
std::string EncodePathSegment(const std::string& segment) {
  std::string out;
  for (const char c : segment) {
    const auto u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "%", absl::BytesToHexString(absl::string_view(&c, 1)));
    }
  }
  return out;
}

// The JSON number at `key` as a double, `fallback` when absent or null.
double NumberOr(const Json& object, const char* key, double fallback) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return it->get<double>();  // type_error when it is not a number
}

// One keep-alive httplib::Client per calling thread, all to the same base URL.
class HttpCaller {
 public:
  HttpCaller(BenchProtocol protocol, std::string base_url, ConnectionOptions connection,
             std::int64_t timeout_ms)
      : protocol_(protocol),
        base_url_(std::move(base_url)),
        connection_(std::move(connection)),
        timeout_ms_(timeout_ms) {}

  grpc::Status Call(const ClassifyRequest& request, ClassifyResponse* response) {
    std::string body, path;
    const std::string model = EncodePathSegment(request.model());
    if (protocol_ == BenchProtocol::kV2Rest) {
      absl::StatusOr<std::string> v2 = V2RestBody(request);
      if (!v2.ok()) return ToGrpcStatus(v2.status());
      body = *std::move(v2);
      path = absl::StrCat("/v2/models/", model, "/infer");
    } else {
      body = RestClassifyBody(request);
      path = absl::StrCat("/v1/models/", model, ":classify");
    }
    httplib::Headers headers = {{"Accept", "application/json"},
                                // Answers are a few hundred bytes: compressing them only costs.
                                {"Accept-Encoding", "identity"}};
    if (!connection_.token.empty()) {
      headers.emplace("Authorization", absl::StrCat("Bearer ", connection_.token));
    }
    if (timeout_ms_ > 0) headers.emplace("X-Timeout-Ms", absl::StrCat(timeout_ms_));
    const auto start = std::chrono::steady_clock::now();
    httplib::Result result = ClientForThisThread().Post(path, headers, body, "application/json");
    if (!result) {
      const auto elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
      const grpc::StatusCode code = timeout_ms_ > 0 && elapsed_ms >= timeout_ms_
                                        ? grpc::StatusCode::DEADLINE_EXCEEDED
                                        : grpc::StatusCode::UNAVAILABLE;
      return grpc::Status(
          code, absl::StrCat("POST ", base_url_, path, ": ", httplib::to_string(result.error())));
    }
    grpc::Status status = StatusFromHttpAnswer(result->status, result->body);
    if (!status.ok()) return status;
    const absl::Status decoded = protocol_ == BenchProtocol::kV2Rest
                                     ? DecodeV2JsonResponse(result->body, response)
                                     : DecodeRestClassifyResponse(result->body, response);
    return ToGrpcStatus(decoded);
  }

 private:
  httplib::Client& ClientForThisThread() {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<httplib::Client>& client = clients_[std::this_thread::get_id()];
    if (client == nullptr) {
      client = connection_.cert_file.empty()
                   ? std::make_unique<httplib::Client>(base_url_)
                   : std::make_unique<httplib::Client>(base_url_, connection_.cert_file,
                                                       connection_.key_file);
      client->set_keep_alive(true);
      client->set_tcp_nodelay(true);
      if (!connection_.ca_file.empty()) client->set_ca_cert_path(connection_.ca_file);
      const std::int64_t wait_ms =
          timeout_ms_ > 0 ? timeout_ms_ + kHttpDeadlineSlackMs : kHttpNoDeadlineWaitMs;
      const std::int64_t connect_ms =
          timeout_ms_ > 0 ? std::min(timeout_ms_, kHttpConnectMs) : kHttpConnectMs;
      client->set_connection_timeout(std::chrono::milliseconds(connect_ms));
      client->set_read_timeout(std::chrono::milliseconds(wait_ms));
      client->set_write_timeout(std::chrono::milliseconds(wait_ms));
    }
    return *client;
  }

  const BenchProtocol protocol_;
  const std::string base_url_;
  const ConnectionOptions connection_;
  const std::int64_t timeout_ms_;
  absl::Mutex mu_;
  // Each client is used only by the thread it is keyed by; the map itself is guarded.
  std::map<std::thread::id, std::unique_ptr<httplib::Client>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<BenchProtocol> ParseBenchProtocol(absl::string_view name) {
  for (std::size_t i = 0; i < std::size(kProtocolNames); ++i) {
    if (name == kProtocolNames[i]) return static_cast<BenchProtocol>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown protocol '", name, "': expected classify, v2-grpc, v2-rest or rest"));
}

std::string BenchProtocolName(BenchProtocol protocol) {
  return kProtocolNames[static_cast<int>(protocol)];
}

bool UsesHttp(BenchProtocol protocol) {
  return protocol == BenchProtocol::kV2Rest || protocol == BenchProtocol::kRest;
}

absl::Status ValidateProtocolFlags(BenchProtocol protocol, const std::string& http_address,
                                   bool has_image_input) {
  const std::string name = BenchProtocolName(protocol);
  if (UsesHttp(protocol) && http_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol ", name, " needs --http HOST:PORT (the server's http.listen address)"));
  }
  if (!UsesHttp(protocol) && !http_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http is for --protocol v2-rest and rest; --protocol ", name, " uses --server"));
  }
  if (has_image_input && protocol != BenchProtocol::kClassify) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol ", name,
        " sends documents only; image inputs (.pgm/.ppm/.pnm in --files) need --protocol "
        "classify"));
  }
  return absl::OkStatus();
}

grpc::Status StatusFromHttpAnswer(int http_status, const std::string& body) {
  grpc::StatusCode code = GrpcCodeForHttpStatus(http_status);
  if (code == grpc::StatusCode::OK) return grpc::Status::OK;
  std::string message;
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    if (const auto it = json.find("code"); it != json.end() && it->is_string()) {
      absl::StatusOr<grpc::StatusCode> named = ParseGrpcCodeName(it->get<std::string>());
      if (named.ok() && *named != grpc::StatusCode::OK) code = *named;
    }
    if (const auto it = json.find("error"); it != json.end() && it->is_string()) {
      message = it->get<std::string>();
    }
  }
  if (message.empty()) {
    constexpr std::size_t kShown = 200;
    message = absl::StrCat("HTTP ", http_status,
                           body.empty() ? "" : absl::StrCat(": ", body.substr(0, kShown)),
                           body.size() > kShown ? "..." : "");
  }
  return grpc::Status(code, message);
}

inference::ModelInferRequest V2InferRequest(const ClassifyRequest& request) {
  inference::ModelInferRequest infer;
  infer.set_model_name(request.model());
  infer.set_id(request.request_id());
  if (request.top_k() > 0) (*infer.mutable_parameters())["top_k"].set_int64_param(request.top_k());
  if (request.path() != taylorshift::v1::ATTENTION_PATH_AUTO) {
    (*infer.mutable_parameters())["path"].set_string_param(PathName(request.path()));
  }
  auto* input = infer.add_inputs();
  input->set_name("document");
  input->set_datatype("BYTES");
  input->add_shape(1);
  *infer.add_raw_input_contents() = EncodeRawBytes({request.document()});
  return infer;
}

absl::StatusOr<std::string> V2RestBody(const ClassifyRequest& request) {
  if (!IsUtf8(request.document())) {
    return absl::InvalidArgumentError(
        "v2 REST carries BYTES as JSON strings: the document is not valid UTF-8 (use --protocol "
        "rest, v2-grpc or classify for binary documents)");
  }
  Json body = Json::object();
  if (!request.request_id().empty()) body["id"] = request.request_id();
  Json parameters = Json::object();
  if (request.top_k() > 0) parameters["top_k"] = request.top_k();
  if (request.path() != taylorshift::v1::ATTENTION_PATH_AUTO) {
    parameters["path"] = PathName(request.path());
  }
  if (!parameters.empty()) body["parameters"] = std::move(parameters);
  body["inputs"] = Json::array({Json{{"name", "document"},
                                     {"datatype", "BYTES"},
                                     {"shape", Json::array({1})},
                                     {"data", Json::array({request.document()})}}});
  return body.dump();
}

std::string RestClassifyBody(const ClassifyRequest& request) {
  Json body = Json::object();
  if (IsUtf8(request.document())) {
    body["text"] = request.document();
  } else {
    body["document_base64"] = absl::Base64Escape(request.document());
  }
  if (request.top_k() > 0) body["top_k"] = request.top_k();
  if (request.path() != taylorshift::v1::ATTENTION_PATH_AUTO)
    body["path"] = PathName(request.path());
  if (!request.request_id().empty()) body["request_id"] = request.request_id();
  return body.dump();
}

absl::Status DecodeV2Response(const inference::ModelInferResponse& answer,
                              ClassifyResponse* response) {
  const bool raw = answer.raw_output_contents_size() > 0;
  if (raw && answer.raw_output_contents_size() != answer.outputs_size()) {
    return Malformed(absl::StrCat(answer.raw_output_contents_size(), " raw_output_contents for ",
                                  answer.outputs_size(), " outputs"));
  }
  std::vector<V2Tensor> tensors;
  for (int i = 0; i < answer.outputs_size(); ++i) {
    const auto& output = answer.outputs(i);
    V2Tensor tensor{
        output.name(), output.datatype(), {output.shape().begin(), output.shape().end()}, {}, {}};
    TS_RETURN_IF_ERROR(CheckDatatype(tensor));
    const auto& contents = output.contents();
    absl::Status decoded;
    if (tensor.datatype == "FP32" && raw) {
      decoded = DecodeRawFp32(answer.raw_output_contents(i), &tensor.fp32);
    } else if (tensor.datatype == "FP32") {
      tensor.fp32.assign(contents.fp32_contents().begin(), contents.fp32_contents().end());
    } else if (raw) {
      decoded = DecodeRawBytes(answer.raw_output_contents(i), &tensor.bytes);
    } else {
      tensor.bytes.assign(contents.bytes_contents().begin(), contents.bytes_contents().end());
    }
    if (!decoded.ok()) {
      return Malformed(absl::StrCat("output \"", tensor.name, "\": ", decoded.message()));
    }
    tensors.push_back(std::move(tensor));
  }
  TS_RETURN_IF_ERROR(FillFromTensors(tensors, response));
  response->set_model_version(answer.model_version());
  response->set_request_id(answer.id());
  return absl::OkStatus();
}

absl::Status DecodeV2JsonResponse(const std::string& body, ClassifyResponse* response) {
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return Malformed("the body is not a JSON object");
  try {
    std::vector<V2Tensor> tensors;
    for (const Json& output : json.at("outputs")) {
      V2Tensor tensor;
      tensor.name = output.at("name").get<std::string>();
      tensor.datatype = output.at("datatype").get<std::string>();
      tensor.shape = output.at("shape").get<std::vector<std::int64_t>>();
      const Json& data = output.at("data");
      TS_RETURN_IF_ERROR(CheckDatatype(tensor));
      if (tensor.datatype == "FP32") {
        for (const Json& value : data) tensor.fp32.push_back(value.get<float>());
      } else {
        for (const Json& value : data) tensor.bytes.push_back(value.get<std::string>());
      }
      tensors.push_back(std::move(tensor));
    }
    TS_RETURN_IF_ERROR(FillFromTensors(tensors, response));
    response->set_model_version(json.value("model_version", ""));
    response->set_request_id(json.value("id", ""));
  } catch (const Json::exception& e) {
    return Malformed(e.what());
  }
  return absl::OkStatus();
}

absl::Status DecodeRestClassifyResponse(const std::string& body, ClassifyResponse* response) {
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InternalError("unreadable classify answer: the body is not a JSON object");
  }
  try {
    response->set_label(json.at("label").get<std::string>());
    response->clear_probabilities();
    for (const Json& entry : json.value("probabilities", Json::array())) {
      auto* probability = response->add_probabilities();
      probability->set_label(entry.at("label").get<std::string>());
      probability->set_index(entry.at("index").get<std::uint32_t>());
      probability->set_probability(entry.at("probability").get<float>());
    }
    absl::StatusOr<taylorshift::v1::AttentionPath> path =
        ParsePath(json.value("path", std::string("auto")));
    if (!path.ok()) {
      return absl::InternalError(
          absl::StrCat("unreadable classify answer: path: ", path.status().message()));
    }
    response->set_path(*path);
    response->set_model_version(json.value("model_version", ""));
    response->set_tokens(json.value("tokens", 0u));
    response->set_truncated(json.value("truncated", false));
    response->set_windows(json.value("windows", 0u));
    response->set_request_id(json.value("request_id", ""));
    auto* timing = response->mutable_timing();
    timing->set_batch_size(json.value("batch_size", 0u));
    timing->set_batch_tokens(json.value("batch_tokens", 0u));
    timing->set_queue_seconds(NumberOr(json, "queue_ms", 0) / 1e3);
    timing->set_compute_seconds(NumberOr(json, "compute_ms", 0) / 1e3);
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat("unreadable classify answer: ", e.what()));
  }
  return absl::OkStatus();
}

ClassifyCall MakeGrpcCall(BenchProtocol protocol, std::shared_ptr<grpc::Channel> channel,
                          const ConnectionOptions& connection, std::int64_t timeout_ms) {
  if (protocol == BenchProtocol::kV2Grpc) {
    std::shared_ptr<inference::GRPCInferenceService::Stub> stub =
        inference::GRPCInferenceService::NewStub(std::move(channel));
    return
        [stub, connection, timeout_ms](const ClassifyRequest& request, ClassifyResponse* response) {
          grpc::ClientContext context;
          PrepareContext(connection, timeout_ms, &context);
          inference::ModelInferResponse answer;
          grpc::Status status = stub->ModelInfer(&context, V2InferRequest(request), &answer);
          if (!status.ok()) return status;
          return ToGrpcStatus(DecodeV2Response(answer, response));
        };
  }
  std::shared_ptr<taylorshift::v1::Classifier::Stub> stub =
      taylorshift::v1::Classifier::NewStub(std::move(channel));
  return
      [stub, connection, timeout_ms](const ClassifyRequest& request, ClassifyResponse* response) {
        grpc::ClientContext context;
        PrepareContext(connection, timeout_ms, &context);
        return stub->Classify(&context, request, response);
      };
}

absl::StatusOr<std::string> HttpBaseUrl(const std::string& http_address,
                                        const ConnectionOptions& connection) {
  if (http_address.empty()) return absl::InvalidArgumentError("--http must not be empty");
  if (!connection.tls_server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls-server-name is not supported over HTTP: give --http the name the server "
        "certificate carries");
  }
  absl::string_view rest = http_address;
  std::string scheme;
  for (const char* name : {"http", "https"}) {
    if (absl::ConsumePrefix(&rest, absl::StrCat(name, "://"))) scheme = name;
  }
  absl::ConsumeSuffix(&rest, "/");
  if (rest.empty() || rest.find('/') != std::string::npos || rest.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: expected HOST:PORT (optionally after http:// or https://), got '",
                     http_address, "'"));
  }
  if (scheme.empty()) {
    const bool tls = connection.tls || !connection.ca_file.empty() || !connection.cert_file.empty();
    scheme = tls ? "https" : "http";
  }
  return absl::StrCat(scheme, "://", rest);
}

absl::StatusOr<ClassifyCall> MakeHttpCall(BenchProtocol protocol, const std::string& base_url,
                                          const ConnectionOptions& connection,
                                          std::int64_t timeout_ms) {
  if (!UsesHttp(protocol)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol ", BenchProtocolName(protocol), " is not an HTTP protocol"));
  }
  if (connection.cert_file.empty() != connection.key_file.empty()) {
    return absl::InvalidArgumentError("--cert-file and --key-file go together (mutual TLS)");
  }
  auto caller = std::make_shared<HttpCaller>(protocol, base_url, connection, timeout_ms);
  return ClassifyCall([caller](const ClassifyRequest& request, ClassifyResponse* response) {
    return caller->Call(request, response);
  });
}

}  // namespace ts::client

#include "server/serving/http_frontend.h"

#include <google/protobuf/util/json_util.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "api/api_json.h"
#include "api/proto_names.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "server/serving/grpc_status.h"
#include "server/serving/kserve_v2.h"
#include "taylorshift/v1/rest.pb.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
namespace v2 = ::inference;
using Json = nlohmann::json;

HttpAnswer JsonAnswer(int status, const Json& body) {
  HttpAnswer answer;
  answer.status = status;
  // A name or message with bytes that are not UTF-8 must not make dump() throw.
  answer.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return answer;
}

HttpAnswer ErrorAnswer(const absl::Status& status) {
  HttpAnswer answer = JsonAnswer(
      HttpStatusFor(status.code()),
      Json{{"error", std::string(status.message())}, {"code", StatusCodeName(status.code())}});
  if (status.code() == absl::StatusCode::kResourceExhausted ||
      status.code() == absl::StatusCode::kUnavailable) {
    answer.headers["Retry-After"] = "1";
  }
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    answer.headers["WWW-Authenticate"] = "Bearer";
  }
  return answer;
}

absl::Status Invalid(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// The model name a route's path names: the one name rule (server/config.h), so that "..", "." or
// a service's name in a URL is refused as what it is, not looked up.
absl::Status CheckModelName(const std::string& name) {
  if (IsValidName(name)) return absl::OkStatus();
  return Invalid("model", absl::StrCat("the name in the path must match ", kNameRule, ", got \"",
                                       name.substr(0, 80), "\""));
}

std::string Header(const HttpExchange& request, const std::string& name) {
  const auto it = request.headers.find(name);
  return it == request.headers.end() ? "" : it->second;
}

absl::StatusOr<CallContext> CallFromHttp(const HttpExchange& request,
                                         absl::Duration default_timeout) {
  CallContext call;
  call.authorization = Header(request, "authorization");
  const std::string timeout = Header(request, "x-timeout-ms");
  if (!timeout.empty()) {
    std::int64_t ms = 0;
    if (!absl::SimpleAtoi(timeout, &ms) || ms < 0) {
      return Invalid("X-Timeout-Ms", absl::StrCat("must be a whole number of milliseconds ≥ 0, "
                                                  "got \"",
                                                  timeout, "\""));
    }
    // 0 is "no deadline of its own", as tsctl's --timeout-ms 0 and http.default_timeout_ms 0
    // are: the server's default applies, as without the header.
    if (ms > 0) call.timeout = absl::Milliseconds(ms);
  }
  if (call.timeout == absl::InfiniteDuration() && default_timeout > absl::ZeroDuration()) {
    call.timeout = default_timeout;
  }
  return call;
}

// A client's value in an error message, cut to `kShownChars` characters: a message never
// grows with the request.
constexpr std::size_t kShownChars = 64;
std::string Cut(std::string text, std::size_t max_chars) {
  if (text.size() > max_chars) text = absl::StrCat(text.substr(0, max_chars), "…");
  return text;
}
std::string Shown(const Json& value) {
  if (value.is_structured()) return value.is_array() ? "an array" : "an object";
  return Cut(value.dump(-1, ' ', false, Json::error_handler_t::replace), kShownChars);
}

// The JSON path of what the parser was reading ("inputs[0].data"), from the keys and array
// positions the parse callback saw.
class ParsePosition {
 public:
  void Open(bool array) { frames_.push_back({array, "", 0}); }
  void Close() {
    if (!frames_.empty()) frames_.pop_back();
  }
  void Key(const Json& key) {
    if (frames_.empty()) return;
    frames_.back().key = Cut(key.is_string() ? key.get<std::string>() : "", kShownChars);
  }
  void Value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (f.array) {
        absl::StrAppend(&path, "[", f.index, "]");
      } else if (!f.key.empty()) {
        absl::StrAppend(&path, path.empty() ? "" : ".", f.key);
      }
    }
    return path.empty() ? "body" : path;
  }

 private:
  struct Frame {
    bool array;
    std::string key;
    std::size_t index;
  };
  std::vector<Frame> frames_;
};

struct TooDeep {};

// Parses a request body into a JSON object. Nesting deeper than `max_depth` stops the parser at
// that depth (no value of the body is recursed into beyond it); a number out of double's range
// is an error naming its field, as a syntax error is: INVALID_ARGUMENT, never a 5xx.
absl::StatusOr<Json> ParseJsonText(std::string_view text, int max_depth) {
  ParsePosition position;
  const auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= max_depth) throw TooDeep{};
        position.Open(event == Json::parse_event_t::array_start);
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        position.Close();
        position.Value();
        break;
      case Json::parse_event_t::key:
        position.Key(parsed);
        break;
      case Json::parse_event_t::value:
        position.Value();
        break;
    }
    return true;
  };
  try {
    Json body = Json::parse(text.data(), text.data() + text.size(), callback);
    if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
    return body;
  } catch (const TooDeep&) {
    return Invalid(position.Path(),
                   absl::StrCat("JSON nested deeper than http.max_json_depth ", max_depth));
  } catch (const Json::out_of_range& e) {
    // nlohmann reports a number beyond double's range (1e400, a 5,000-digit integer) this way.
    return Invalid(position.Path(), absl::StrCat("number out of range: ", Cut(e.what(), 160)));
  } catch (const Json::exception& e) {
    return Invalid(position.Path(), absl::StrCat("invalid JSON: ", Cut(e.what(), 160)));
  }
}

absl::StatusOr<Json> ParseBody(const HttpExchange& request, int max_depth) {
  return ParseJsonText(request.body, max_depth);
}

std::string TypeName(const Json& value) { return value.type_name(); }

// --- the binary tensor data extension ------------------------------------------------------

constexpr char kHeaderLengthName[] = "Inference-Header-Content-Length";
constexpr char kHeaderLength[] = "inference-header-content-length";

// A body of the binary tensor data extension: the JSON header, then the tensors' bytes.
struct BinaryBody {
  std::string_view json;
  std::string_view binary;
};

// Splits `body` at the request's Inference-Header-Content-Length (absent: all JSON).
absl::StatusOr<BinaryBody> SplitBody(const HttpExchange& request) {
  const auto it = request.headers.find(kHeaderLength);
  const std::string_view body = request.body;
  if (it == request.headers.end()) return BinaryBody{body, {}};
  std::uint64_t length = 0;
  if (!absl::SimpleAtoi(it->second, &length) || length > body.size()) {
    return Invalid(kHeaderLengthName,
                   absl::StrCat("must be the JSON header's length in bytes, 0 to the body's ",
                                body.size(), "; got \"", Cut(it->second, kShownChars), "\""));
  }
  return BinaryBody{body.substr(0, length), body.substr(length)};
}

// Whether the answer's output `name` is sent as binary data: its binary_data parameter, else the
// request's binary_data_output.
bool BinaryOutput(const v2::ModelInferRequest& request, const std::string& name) {
  for (const auto& output : request.outputs()) {
    if (output.name() != name) continue;
    const auto it = output.parameters().find(kserve::kBinaryData);
    if (it != output.parameters().end()) return it->second.bool_param();
  }
  const auto it = request.parameters().find(kserve::kBinaryDataOutput);
  return it != request.parameters().end() && it->second.bool_param();
}

// --- KServe v2 JSON ↔ messages -------------------------------------------------------------

absl::Status ReadParameters(const Json& value, const std::string& field,
                            google::protobuf::Map<std::string, v2::InferParameter>* out) {
  if (!value.is_object())
    return Invalid(field, absl::StrCat("must be an object, got ", TypeName(value)));
  for (const auto& [name, v] : value.items()) {
    v2::InferParameter& parameter = (*out)[name];
    if (v.is_boolean()) {
      parameter.set_bool_param(v.get<bool>());
    } else if (v.is_number_integer()) {
      parameter.set_int64_param(v.get<std::int64_t>());
    } else if (v.is_string()) {
      parameter.set_string_param(v.get<std::string>());
    } else {
      return Invalid(absl::StrCat(field, ".", name),
                     absl::StrCat("must be a boolean, an integer or a string, got ", TypeName(v)));
    }
  }
  return absl::OkStatus();
}

// Flattens (possibly nested) JSON `data` into the contents field of its datatype.
absl::Status ReadData(const Json& data, const std::string& field, const std::string& datatype,
                      v2::InferTensorContents* contents) {
  if (data.is_array()) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      TS_RETURN_IF_ERROR(ReadData(data[i], absl::StrCat(field, "[", i, "]"), datatype, contents));
    }
    return absl::OkStatus();
  }
  if (datatype == "BYTES") {
    if (!data.is_string()) {
      return Invalid(field, absl::StrCat("BYTES elements are JSON strings, got ", TypeName(data)));
    }
    contents->add_bytes_contents(data.get<std::string>());
  } else if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") {
    if (!data.is_number_unsigned() || data.get<std::uint64_t>() > 0xffffffffu) {
      return Invalid(field,
                     absl::StrCat(datatype, " elements are integers ≥ 0, got ", Shown(data)));
    }
    contents->add_uint_contents(static_cast<std::uint32_t>(data.get<std::uint64_t>()));
  }
  // Other datatypes: the model takes none of them; kserve::Plan names the datatype.
  return absl::OkStatus();
}

// inputs[i] (`at`) of a v2 JSON body into `request`, its contents from its data or (the binary
// tensor data extension) its binary_data_size bytes taken from the front of `binary`.
absl::Status ReadInput(const Json& in, const std::string& at, std::string_view* binary,
                       v2::ModelInferRequest* request) {
  if (!in.is_object()) return Invalid(at, "must be an object");
  auto* tensor = request->add_inputs();
  for (const char* required : {"name", "datatype", "shape"}) {
    if (!in.contains(required)) return Invalid(absl::StrCat(at, ".", required), "required");
  }
  for (const auto& [k, v] : in.items()) {
    const std::string field = absl::StrCat(at, ".", k);
    if (k == "name" || k == "datatype") {
      if (!v.is_string()) return Invalid(field, "must be a string");
      if (k == "name") tensor->set_name(v.get<std::string>());
      if (k == "datatype") tensor->set_datatype(v.get<std::string>());
    } else if (k == "shape") {
      if (!v.is_array()) return Invalid(field, "must be an array of integers");
      for (const Json& d : v) {
        if (!d.is_number_integer()) return Invalid(field, "must be an array of integers");
        tensor->add_shape(d.get<std::int64_t>());
      }
    } else if (k == "parameters") {
      TS_RETURN_IF_ERROR(ReadParameters(v, field, tensor->mutable_parameters()));
    } else if (k != "data") {
      return Invalid(field, "unknown key (known: name, datatype, shape, parameters, data)");
    }
  }
  const auto size = tensor->parameters().find(kserve::kBinaryDataSize);
  if (size == tensor->parameters().end()) {
    if (!in.contains("data")) {
      return Invalid(at + ".data", absl::StrCat("required (or parameters.", kserve::kBinaryDataSize,
                                                " with the binary tensor data extension)"));
    }
    TS_RETURN_IF_ERROR(
        ReadData(in["data"], at + ".data", tensor->datatype(), tensor->mutable_contents()));
    return absl::OkStatus();
  }
  const std::string field = absl::StrCat(at, ".parameters.", kserve::kBinaryDataSize);
  if (in.contains("data")) {
    return Invalid(at + ".data", absl::StrCat("give either data or parameters.",
                                              kserve::kBinaryDataSize, ", not both"));
  }
  if (size->second.parameter_choice_case() != v2::InferParameter::kInt64Param ||
      size->second.int64_param() < 0) {
    return Invalid(field, "must be an integer ≥ 0 (the input's bytes after the JSON)");
  }
  const auto bytes = static_cast<std::uint64_t>(size->second.int64_param());
  if (bytes > binary->size()) {
    return Invalid(field, absl::StrCat(bytes, " bytes, but only ", binary->size(),
                                       " binary bytes are left after the JSON header (",
                                       kHeaderLengthName, ")"));
  }
  if (request->raw_input_contents_size() != request->inputs_size() - 1) {
    return Invalid(field, "every input or none must use binary data");
  }
  request->add_raw_input_contents(std::string(binary->substr(0, bytes)));
  binary->remove_prefix(bytes);
  return absl::OkStatus();
}

// A body's "model_name" or "model_version" (KServe's Python SDK sends model_name in every
// request) must be a string equal to the route's; without a version in the route, the body's
// version is the request's.
absl::Status CheckBodyNamesRoute(const Json& value, const std::string& key,
                                 const std::string& route_value) {
  if (!value.is_string()) return Invalid(key, "must be a string");
  const auto given = value.get<std::string>();
  if (key == "model_version" && route_value.empty()) return absl::OkStatus();
  if (given != route_value) {
    return Invalid(key,
                   absl::StrCat(Quoted(given), " differs from the route's ", Quoted(route_value)));
  }
  return absl::OkStatus();
}

// `binary`: the bytes after the JSON header (binary tensor data extension), taken in input order
// by the inputs with a binary_data_size parameter; every byte must be taken. `model_name` and
// `model_version` are the route's.
absl::StatusOr<v2::ModelInferRequest> InferRequestFromJson(const Json& body,
                                                           const std::string& model_name,
                                                           const std::string& model_version,
                                                           std::string_view binary = {}) {
  v2::ModelInferRequest request;
  for (const auto& [key, value] : body.items()) {
    if (key == "model_name") {
      TS_RETURN_IF_ERROR(CheckBodyNamesRoute(value, key, model_name));
    } else if (key == "model_version") {
      TS_RETURN_IF_ERROR(CheckBodyNamesRoute(value, key, model_version));
      request.set_model_version(value.get<std::string>());
    } else if (key == "id") {
      if (!value.is_string()) return Invalid("id", "must be a string");
      request.set_id(value.get<std::string>());
    } else if (key == "parameters") {
      TS_RETURN_IF_ERROR(ReadParameters(value, "parameters", request.mutable_parameters()));
    } else if (key == "inputs") {
      if (!value.is_array()) return Invalid("inputs", "must be an array");
      for (std::size_t i = 0; i < value.size(); ++i) {
        TS_RETURN_IF_ERROR(ReadInput(value[i], absl::StrCat("inputs[", i, "]"), &binary, &request));
      }
    } else if (key == "outputs") {
      if (!value.is_array()) return Invalid("outputs", "must be an array");
      for (std::size_t i = 0; i < value.size(); ++i) {
        const Json& out = value[i];
        const std::string at = absl::StrCat("outputs[", i, "]");
        if (!out.is_object() || !out.contains("name") || !out["name"].is_string()) {
          return Invalid(at, "must be an object with a string \"name\"");
        }
        auto* requested = request.add_outputs();
        requested->set_name(out["name"].get<std::string>());
        if (out.contains("parameters")) {
          TS_RETURN_IF_ERROR(ReadParameters(out["parameters"], at + ".parameters",
                                            requested->mutable_parameters()));
        }
      }
    } else {
      return Invalid(key,
                     "unknown key (known: id, model_name, model_version, parameters, inputs, "
                     "outputs)");
    }
  }
  if (!binary.empty()) {
    return Invalid(kHeaderLengthName, absl::StrCat(binary.size(),
                                                   " bytes follow the JSON header that no input's "
                                                   "parameters.binary_data_size claims"));
  }
  if (request.raw_input_contents_size() != 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return Invalid("inputs", "every input or none must use binary data");
  }
  return request;
}

// The answer: JSON, or with the binary tensor data extension the JSON header (outputs sent as
// binary carry parameters.binary_data_size instead of data) and then their bytes, in order.
HttpAnswer InferAnswer(const v2::ModelInferRequest& request, const kserve::InferResult& result) {
  Json outputs = Json::array();
  std::string binary;
  for (const kserve::OutputTensor& out : result.outputs) {
    if (BinaryOutput(request, out.name)) {
      const std::string raw = kserve::RawContents(out);
      outputs.push_back({{"name", out.name},
                         {"datatype", out.datatype},
                         {"shape", out.shape},
                         {"parameters", {{kserve::kBinaryDataSize, raw.size()}}}});
      binary += raw;
      continue;
    }
    Json data = Json::array();
    if (out.datatype == "FP32") {
      for (const float v : out.fp32) data.push_back(v);  // the double of the float: exact
    } else {
      for (const std::string& v : out.bytes) data.push_back(v);
    }
    outputs.push_back(
        {{"name", out.name}, {"datatype", out.datatype}, {"shape", out.shape}, {"data", data}});
  }
  Json body = {{"model_name", result.model_name}, {"model_version", result.model_version}};
  if (!result.id.empty()) body["id"] = result.id;
  body["outputs"] = outputs;
  HttpAnswer answer = JsonAnswer(200, body);
  if (!binary.empty()) {
    answer.headers[kHeaderLengthName] = absl::StrCat(answer.body.size());
    answer.content_type = "application/octet-stream";
    answer.body += binary;
  }
  return answer;
}

// Triton's model configuration as Triton's REST API answers it: protobuf's JSON with the proto
// field names and every field, 64-bit integers (dims, the queue delay) as JSON numbers.
Json ModelConfigJson(const v2::ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string text;
  (void)google::protobuf::util::MessageToJsonString(config, &text, print);
  Json json = Json::parse(text);
  const auto numbers = [](Json& tensors) {
    for (Json& tensor : tensors) {
      for (Json* dims : {&tensor["dims"], &tensor["reshape"]["shape"]}) {
        if (!dims->is_array()) continue;
        for (Json& d : *dims) d = std::stoll(d.get<std::string>());
      }
      if (tensor["reshape"].is_null()) tensor.erase("reshape");
    }
  };
  numbers(json["input"]);
  numbers(json["output"]);
  Json& delay = json["dynamic_batching"]["max_queue_delay_microseconds"];
  if (delay.is_string()) delay = std::stoull(delay.get<std::string>());
  return json;
}

// --- the plain route ----------------------------------------------------------------------

constexpr char kOneInput[] = "body: give exactly one of text, document_base64 or image";

// protobuf's JSON parser names the field three ways ("(image.width): invalid value -2 for type
// TYPE_UINT32", "(image) pixls: Cannot find field.", "top_k: Proto field is not repeating, …"):
// the front end's form is "image.width: …", an unknown key with the keys its object knows.
absl::Status ProtoJsonError(absl::string_view message) {
  std::string path;
  if (absl::ConsumePrefix(&message, "(")) {
    const std::size_t close = message.find(')');
    path = std::string(message.substr(0, close));
    message =
        close == message.npos ? "" : absl::StripLeadingAsciiWhitespace(message.substr(close + 1));
  }
  if (absl::ConsumeSuffix(&message, ": Cannot find field.")) {
    // The key's object: the body or its image.
    const google::protobuf::Descriptor* object = path.empty()
                                                     ? pb::RestClassifyRequest::descriptor()
                                                     : pb::RestClassifyRequest::Image::descriptor();
    std::vector<std::string> known(static_cast<std::size_t>(object->field_count()));
    for (int i = 0; i < object->field_count(); ++i) known[i] = object->field(i)->name();
    return Invalid(Cut(absl::StrCat(path, path.empty() ? "" : ".", message), kShownChars),
                   absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
  }
  if (absl::StrContains(message, "oneof field 'input' is already set")) {
    return absl::InvalidArgumentError(kOneInput);
  }
  const std::size_t colon = message.find(": ");
  if (colon != message.npos && message.substr(0, colon).find(' ') == message.npos) {
    if (colon > 0) absl::StrAppend(&path, path.empty() ? "" : ".", message.substr(0, colon));
    message.remove_prefix(colon + 2);
  }
  return Invalid(path.empty() ? "body" : path, Cut(std::string(message), 2 * kShownChars));
}

// The plain route's body (proto3 JSON of taylorshift.v1.RestClassifyRequest) as the request.
absl::StatusOr<pb::ClassifyRequest> ClassifyRequestFromJson(const std::string& body,
                                                            const std::string& model) {
  pb::RestClassifyRequest rest;
  if (auto parsed = google::protobuf::util::JsonStringToMessage(body, &rest); !parsed.ok()) {
    return ProtoJsonError(parsed.message().as_string());
  }
  pb::ClassifyRequest request;
  request.set_model(model);
  switch (rest.input_case()) {
    case pb::RestClassifyRequest::kText:
      request.set_document(rest.text());
      break;
    case pb::RestClassifyRequest::kDocumentBase64:
      request.set_document(rest.document_base64());
      break;
    case pb::RestClassifyRequest::kImage: {
      const auto& in = rest.image();
      if (in.pixels().empty() == in.pixels_base64().empty()) {
        return Invalid("image", "needs pixels or pixels_base64 (one of them)");
      }
      std::string pixels = in.pixels_base64();
      for (int i = 0; i < in.pixels_size(); ++i) {
        if (in.pixels(i) > 255) {
          return Invalid(absl::StrCat("image.pixels[", i, "]"), "must be an integer 0 to 255");
        }
        pixels.push_back(static_cast<char>(in.pixels(i)));
      }
      auto* image = request.mutable_image();
      image->set_width(in.width());
      image->set_height(in.height());
      image->set_channels(in.channels() == 0 ? 1 : in.channels());
      image->set_pixels(std::move(pixels));
      break;
    }
    case pb::RestClassifyRequest::INPUT_NOT_SET:
      return absl::InvalidArgumentError(kOneInput);
  }
  request.set_top_k(rest.top_k());
  if (!rest.path().empty()) {
    auto path = ParsePath(rest.path());
    if (!path.ok()) return Invalid("path", std::string(path.status().message()));
    request.set_path(*path);
  }
  request.set_over_length(rest.over_length());
  request.set_request_id(rest.request_id());
  return request;
}

// --- routes -------------------------------------------------------------------------------

HttpAnswer MethodNotAllowed(const std::string& allowed, const HttpExchange& request) {
  HttpAnswer answer = JsonAnswer(
      405, Json{{"error", absl::StrCat(request.method, " ", request.path, ": use ", allowed)},
                {"code", "UNIMPLEMENTED"}});
  answer.headers["Allow"] = allowed;
  return answer;
}

// The batcher drops requests whose deadline passes while they wait; one whose deadline passes
// while its batch runs is answered 504 too, as gRPC answers a call past its deadline.
HttpAnswer LateIsDeadlineExceeded(Clock* clock, absl::Time started, const CallContext& call,
                                  HttpAnswer answer) {
  if (answer.status == 200 && clock->Now() - started > call.timeout) {
    return ErrorAnswer(absl::DeadlineExceededError(
        "X-Timeout-Ms: the deadline passed while the request was computed"));
  }
  return answer;
}

HttpAnswer Infer(Inference* inference, const RouteOptions& options, const CallContext& call,
                 const v2::ModelInferRequest& request) {
  const absl::Time started = options.clock->Now();
  absl::Notification done;
  HttpAnswer answer;
  kserve::Infer(
      inference, call, request, options.max_infer_batch,
      [&](const absl::Status& status, const kserve::InferResult& result) {
        if (status.ok()) {
          answer = InferAnswer(request, result);
        } else {
          // The messages name the gRPC fields; REST bodies carry them as "data".
          std::string message(status.message());
          for (const std::string field : {".contents.bytes_contents", ".contents.uint_contents"}) {
            message = absl::StrReplaceAll(message, {{field, ".data"}});
          }
          message =
              absl::StrReplaceAll(message, {{"raw_input_contents[0]", "inputs[0]'s binary data"}});
          answer = ErrorAnswer(absl::Status(status.code(), message));
        }
        done.Notify();
      });
  done.WaitForNotification();
  return LateIsDeadlineExceeded(options.clock, started, call, std::move(answer));
}

HttpAnswer Classify(Inference* inference, Clock* clock, const CallContext& call,
                    const pb::ClassifyRequest& request) {
  const absl::Time started = clock->Now();
  absl::Notification done;
  HttpAnswer answer;
  inference->Classify(
      call, request, [&](const absl::Status& status, const pb::ClassifyResponse& r) {
        if (status.ok()) {
          ts::Json body = ts::Json::object();
          AddClassifyFields(body, r, absl::ToDoubleMilliseconds(clock->Now() - started));
          answer.body = DumpJson(body);
        } else {
          answer = ErrorAnswer(status);
        }
        done.Notify();
      });
  done.WaitForNotification();
  return LateIsDeadlineExceeded(clock, started, call, std::move(answer));
}

// The methods the listener routes (HEAD takes GET's routes).
constexpr const char* kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};

// A route's handler, given the call (token, deadline) read from the request's headers.
using RouteHandler = std::function<HttpAnswer(CallContext call, const HttpExchange& request)>;

// /v2/models/NAME[/versions/VERSION]: groups 1 and 2.
constexpr char kV2Model[] = "/v2/models/([^/]+)(?:/versions/([^/]+))?";

// Whether a route's caller needs a token (when the server has tokens); the classification
// routes also count an early refusal in the request metrics under their protocol.
enum class Access { kOpen, kToken, kClassifyRest, kClassifyV2Rest };

// Adds a route that answers `method` (and 405 to every other method).
using RouteAdder = std::function<void(const std::string& method, const std::string& pattern,
                                      RouteHandler handler, Access access)>;

// The routes that name a model (KServe v2 and the plain ones), each behind a token.
void AddModelRoutes(const RouteAdder& route, Inference* inference, const RouteOptions& options) {
  route(
      "GET", absl::StrCat(kV2Model, "(/ready)?"),
      [inference](const CallContext& call, const HttpExchange& request) {
        const std::string& name = request.path_groups[0];
        if (auto s = CheckModelName(name); !s.ok()) return ErrorAnswer(s);
        auto model = inference->GetModel(call, name);
        if (!model.ok()) return ErrorAnswer(model.status());
        if (auto s = kserve::CheckVersion(*model, request.path_groups[1]); !s.ok()) {
          return ErrorAnswer(s);
        }
        if (!request.path_groups[2].empty()) {
          const bool ready = inference->Ready();
          return JsonAnswer(ready ? 200 : 400, Json{{"name", name}, {"ready", ready}});
        }
        return JsonAnswer(200,
                          Json(MessageJson(kserve::ModelMetadata(*model), /*all_fields=*/true)));
      },
      Access::kToken);
  route(
      "GET", absl::StrCat(kV2Model, "/config"),
      [inference, options](const CallContext& call, const HttpExchange& request) {
        if (auto s = CheckModelName(request.path_groups[0]); !s.ok()) return ErrorAnswer(s);
        auto model = inference->GetModel(call, request.path_groups[0]);
        if (!model.ok()) return ErrorAnswer(model.status());
        if (auto s = kserve::CheckVersion(*model, request.path_groups[1]); !s.ok()) {
          return ErrorAnswer(s);
        }
        return JsonAnswer(200,
                          ModelConfigJson(kserve::ModelConfig(*model, options.max_infer_batch)));
      },
      Access::kToken);
  route(
      "POST", absl::StrCat(kV2Model, "/infer"),
      [inference, options](CallContext call, const HttpExchange& request) {
        if (auto s = CheckModelName(request.path_groups[0]); !s.ok()) return ErrorAnswer(s);
        auto split = SplitBody(request);
        if (!split.ok()) return ErrorAnswer(split.status());
        auto body = ParseJsonText(split->json, options.max_json_depth);
        if (!body.ok()) return ErrorAnswer(body.status());
        auto infer = InferRequestFromJson(*body, request.path_groups[0], request.path_groups[1],
                                          split->binary);
        if (!infer.ok()) return ErrorAnswer(infer.status());
        infer->set_model_name(request.path_groups[0]);
        if (!request.path_groups[1].empty()) infer->set_model_version(request.path_groups[1]);
        call.protocol = CallContext::kProtocolV2Rest;
        return Infer(inference, options, call, *infer);
      },
      Access::kClassifyV2Rest);
  route(
      "GET", "/v1/models",
      [inference](const CallContext& call, const HttpExchange&) {
        auto models = inference->ListModels(call);
        if (!models.ok()) return ErrorAnswer(models.status());
        ts::Json list = ts::Json::array();
        for (const auto& model : *models) list.push_back(ModelInfoJson(model));
        HttpAnswer answer;
        answer.body = DumpJson(ts::Json{{"models", std::move(list)}});
        return answer;
      },
      Access::kToken);
  route(
      "GET", "/v1/models/([^/:]+)",
      [inference](const CallContext& call, const HttpExchange& request) {
        if (auto s = CheckModelName(request.path_groups[0]); !s.ok()) return ErrorAnswer(s);
        auto model = inference->GetModel(call, request.path_groups[0]);
        if (!model.ok()) return ErrorAnswer(model.status());
        HttpAnswer answer;
        answer.body = DumpJson(ModelInfoJson(*model));
        return answer;
      },
      Access::kToken);
  route(
      "POST", "/v1/models(?:/([^/:]+))?:classify",
      [inference, options](CallContext call, const HttpExchange& request) {
        const std::string& name = request.path_groups[0];
        if (name.empty()) return ErrorAnswer(absl::NotFoundError("use /v1/models/NAME:classify"));
        if (auto s = CheckModelName(name); !s.ok()) return ErrorAnswer(s);
        // The JSON reader's depth and range limits first, then protobuf's (proto3 JSON).
        if (auto body = ParseBody(request, options.max_json_depth); !body.ok()) {
          return ErrorAnswer(body.status());
        }
        auto classify = ClassifyRequestFromJson(request.body, name);
        if (!classify.ok()) return ErrorAnswer(classify.status());
        call.protocol = CallContext::kProtocolRest;
        return Classify(inference, options.clock, call, *classify);
      },
      Access::kClassifyRest);
}

std::vector<HttpRoute> Routes(Inference* inference, const RouteOptions& options) {
  std::vector<HttpRoute> routes;
  // Every handler reads the call first: a bad X-Timeout-Ms is 400 on any path.
  const auto add = [&](const std::string& method, const std::string& pattern, RouteHandler handler,
                       Access access = Access::kOpen) {
    HttpRoute added{method, pattern,
                    [handler = std::move(handler), options](const HttpExchange& request) {
                      auto call = CallFromHttp(request, options.default_timeout);
                      if (!call.ok()) return ErrorAnswer(call.status());
                      return handler(*std::move(call), request);
                    }};
    // The token is checked from the headers, before the listener reads a byte of the body: a
    // caller without one is answered 401 (403 without the role) whatever it sends after.
    if (access != Access::kOpen) {
      const char* protocol = access == Access::kClassifyRest     ? CallContext::kProtocolRest
                             : access == Access::kClassifyV2Rest ? CallContext::kProtocolV2Rest
                                                                 : nullptr;
      added.before_body = [inference,
                           protocol](const HttpExchange& request) -> std::optional<HttpAnswer> {
        CallContext call;
        call.authorization = Header(request, "authorization");
        absl::Status allowed;
        if (protocol != nullptr) {
          call.protocol = protocol;
          const std::string model = request.path_groups.empty() ? "" : request.path_groups[0];
          allowed = inference->AuthorizeClassify(call, model);
        } else {
          allowed = inference->Authorize(call);
        }
        if (!allowed.ok()) return ErrorAnswer(allowed);
        return std::nullopt;
      };
    }
    routes.push_back(std::move(added));
  };
  // `pattern` answers `method`; every other method is 405 naming it.
  const auto route = [&](const std::string& method, const std::string& pattern,
                         RouteHandler handler, Access access = Access::kOpen) {
    add(method, pattern, std::move(handler), access);
    for (const char* other : kMethods) {
      if (method == other) continue;
      add(other, pattern, [method](const CallContext& /*call*/, const HttpExchange& request) {
        return MethodNotAllowed(method, request);
      });
    }
  };

  route("GET", "/v2/health/live", [](const CallContext& /*call*/, const HttpExchange&) {
    return JsonAnswer(200, Json{{"live", true}});
  });
  route("GET", "/v2/health/ready", [inference](const CallContext& /*call*/, const HttpExchange&) {
    // The specification's $ready_server_response names its field "live" (a slip for "ready",
    // which KServe's servers send): both, so a client of either reading works.
    // Not ready (draining) is 400, as Triton answers (the specification: any 4xx).
    const bool ready = inference->Ready();
    return JsonAnswer(ready ? 200 : 400, Json{{"ready", ready}, {"live", true}});
  });
  // Server metadata is GET v2 in the specification's table and /v2/ in its OpenAPI file: both.
  route("GET", "/v2/?", [](const CallContext& /*call*/, const HttpExchange&) {
    return JsonAnswer(200, Json(MessageJson(kserve::ServerMetadata(), /*all_fields=*/true)));
  });
  AddModelRoutes(route, inference, options);
  for (const char* method : kMethods) {
    add(method, ".*", [](const CallContext& /*call*/, const HttpExchange& request) {
      return ErrorAnswer(absl::NotFoundError(absl::StrCat(
          "no route ", request.method, " ", request.path,
          " (routes: /v2, /v2/health/{live,ready}, /v2/models/NAME[/ready|/config|/infer], "
          "/v1/models, "
          "/v1/models/NAME, /v1/models/NAME:classify)")));
    });
  }
  return routes;
}

}  // namespace

HttpAnswer Route(Inference* inference, const RouteOptions& options, const HttpExchange& request) {
  return AnswerInProcess(Routes(inference, options), request);
}

// --- the listener -------------------------------------------------------------------------

HttpFrontend::HttpFrontend(std::unique_ptr<HttpListener> listener)
    : listener_(std::move(listener)) {}

HttpFrontend::~HttpFrontend() { Stop(); }

void HttpFrontend::Stop() { listener_->Stop(); }

const std::string& HttpFrontend::address() const { return listener_->address(); }

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::Start(
    const HttpFrontendOptions& options, Inference* inference) {
  HttpListenerOptions listener;
  listener.name = "http";
  listener.listen = options.http.listen;
  listener.cert_file = options.tls.cert_file;
  listener.key_file = options.tls.key_file;
  listener.client_ca_file = options.tls.client_ca_file;
  listener.threads = options.http.threads;
  listener.io_threads = options.http.io_threads;
  listener.max_connections = options.http.max_connections;
  listener.max_connections_per_peer = options.http.max_connections_per_peer;
  listener.read_timeout = options.http.read_timeout;
  listener.header_timeout = options.http.header_timeout;
  listener.body_timeout = options.http.body_timeout;
  listener.write_timeout = options.http.write_timeout;
  listener.max_inflate_ratio = options.http.max_inflate_ratio;
  listener.max_buffered_body_bytes = options.http.max_buffered_body_bytes;
  listener.max_header_bytes = options.http.max_header_bytes;
  listener.max_body_bytes =
      options.http.max_body_bytes > 0 ? options.http.max_body_bytes : options.max_message_bytes;
  listener.keep_alive = options.http.keep_alive;
  listener.keep_alive_max_requests = options.http.keep_alive_max_requests;
  listener.on_response = options.on_response;
  RouteOptions route;
  route.max_infer_batch = options.max_infer_batch;
  route.default_timeout = options.http.default_timeout;
  route.max_json_depth = options.http.max_json_depth;
  route.clock = options.clock;
  TS_ASSIGN_OR_RETURN(auto started, HttpListener::Start(listener, Routes(inference, route)));
  return std::unique_ptr<HttpFrontend>(new HttpFrontend(std::move(started)));
}

}  // namespace ts::server

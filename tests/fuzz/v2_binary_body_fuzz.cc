// The KServe v2 REST binary tensor data extension, deep: POST /v2/models/NAME/infer through the
// HTTP front end's Route (server/serving/http_frontend.h) with a body that is a JSON header built
// from the fuzz bytes and the inputs' binary data after it, so the checks of
// Inference-Header-Content-Length, parameters.binary_data_size, BYTES length prefixes, UINT8
// pixel counts, binary_data_output and outputs[].parameters.binary_data are reached with
// well-formed JSON (v2_json_body_fuzz mostly stops at the JSON reader). The input:
//   byte 0, flags: bit 0 the pixel model ("img") instead of the document model ("doc");
//     bit 1 parameters.binary_data_output true; bit 2 outputs[].parameters.binary_data from byte 1;
//     bit 3 Inference-Header-Content-Length off by byte 3 (int8); bit 4 binary_data_size off by
//     byte 4 (int8); bit 5 the input also has "data"; bit 6 a second input with binary data;
//     bit 7 the binary data is the payload as it is (not built from it).
//   byte 1: bits 0-2 the batch (0 to 7); bit 3 the shape's extra 1 (doc: [b, 1]) or 3 (img: RGB);
//     bits 4-5 the outputs asked for (none, probabilities, label, both); bits 6-7 their
//     binary_data.
//   byte 2: img: height 1 + bits 0-1, width 1 + bits 2-3; bit 5 classification = 2.
//   bytes 3, 4: the two offsets; the rest: the payload (document lengths and bytes, or pixels).
// Promises checked: never a server error; a 2xx answer's outputs decode (binary ones by their
// binary_data_size, every byte after the JSON header claimed, FP32 in 4-byte floats, BYTES with
// length prefixes that end at the end) with as many elements as their shape; an error is a 4xx
// whose message starts with the field it is about; a consistent body (no offsets, no conflict,
// built data, batch ≥ 1) is answered 200 with the batch's rows.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "api/v2_raw.h"
#include "server/serving/http_frontend.h"
#include "tests/fuzz/fuzz_inference.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using Json = nlohmann::json;

// The payload's bytes in order; zeros once it runs out.
class Payload {
 public:
  explicit Payload(std::string_view bytes) : bytes_(bytes) {}
  std::uint8_t Next() { return at_ < bytes_.size() ? static_cast<std::uint8_t>(bytes_[at_++]) : 0; }
  std::string Take(std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(Next()));
    return out;
  }
  std::string_view Rest() const { return bytes_.substr(std::min(at_, bytes_.size())); }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

std::int64_t Elements(const Json& shape) {
  std::int64_t n = 1;
  for (const Json& d : shape) n *= d.get<std::int64_t>();
  return n;
}

std::size_t FlatSize(const Json& data) {
  if (!data.is_array()) return 1;
  std::size_t n = 0;
  for (const Json& d : data) n += FlatSize(d);
  return n;
}

// The fields a v2 infer error may start with (the JSON keys and the extension's header). An
// element the model's own input check refuses (model/api/inputs.h) is "batch element N: " and
// that check's message, or the message alone for a batch of one: "input is empty (0 tokens)"
// names no field (a finding of this target, left as it is: the JSON path answers the same).
bool NamesAField(std::string message) {
  if (message.rfind("batch element ", 0) == 0) {
    const std::size_t colon = message.find(": ");
    if (colon == std::string::npos) return false;
    message = message.substr(colon + 2);
  }
  if (message.rfind("input is empty (0 tokens)", 0) == 0) return true;
  for (const char* field : {"inputs", "outputs", "parameters", "raw_input_contents", "id", "body",
                            "Inference-Header-Content-Length"}) {
    const std::string_view f(field);
    if (message.compare(0, f.size(), f) == 0 && message.size() > f.size() &&
        (message[f.size()] == ':' || message[f.size()] == '[' || message[f.size()] == '.')) {
      return true;
    }
  }
  return false;
}

// Checks a 2xx answer's outputs against their shapes; the binary ones from the bytes after the
// JSON header, in order, every byte claimed.
void CheckOutputs(const ts::server::HttpAnswer& answer, std::int64_t batch, bool consistent) {
  std::string_view json = answer.body;
  std::string_view binary;
  if (const auto header = answer.headers.find("Inference-Header-Content-Length");
      header != answer.headers.end()) {
    std::size_t length = 0;
    if (!absl::SimpleAtoi(header->second, &length) || length > answer.body.size()) {
      ts::fuzz::Broken("header length " + header->second + " of a " +
                       std::to_string(answer.body.size()) + "-byte body");
    }
    json = json.substr(0, length);
    binary = std::string_view(answer.body).substr(length);
  }
  const Json body = Json::parse(json, nullptr, false);
  if (body.is_discarded() || !body.contains("outputs")) ts::fuzz::Broken("answer: " + answer.body);
  for (const Json& out : body["outputs"]) {
    const std::string name = out["name"].get<std::string>();
    const std::int64_t n = Elements(out["shape"]);
    if (consistent && out["shape"][0].get<std::int64_t>() != batch) {
      ts::fuzz::Broken(name + ": shape " + out["shape"].dump() + " for a batch of " +
                       std::to_string(batch));
    }
    if (!out.contains("parameters")) {
      if (FlatSize(out["data"]) != static_cast<std::size_t>(n)) {
        ts::fuzz::Broken(name + ": data " + out["data"].dump() + " for shape " +
                         out["shape"].dump());
      }
      continue;
    }
    const auto size = out["parameters"]["binary_data_size"].get<std::size_t>();
    if (size > binary.size()) ts::fuzz::Broken(name + ": binary_data_size past the body's end");
    const std::string raw(binary.substr(0, size));
    binary.remove_prefix(size);
    std::size_t decoded = 0;
    if (out["datatype"] == "FP32") {
      std::vector<float> values;
      if (!ts::DecodeRawFp32(raw, &values).ok()) ts::fuzz::Broken(name + ": FP32 does not decode");
      decoded = values.size();
    } else {
      std::vector<std::string> values;
      if (!ts::DecodeRawBytes(raw, &values).ok()) ts::fuzz::Broken(name + ": BYTES do not decode");
      decoded = values.size();
    }
    if (decoded != static_cast<std::size_t>(n)) {
      ts::fuzz::Broken(name + ": " + std::to_string(decoded) + " binary elements for shape " +
                       out["shape"].dump());
    }
  }
  if (!binary.empty()) ts::fuzz::Broken("binary bytes no output claims");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ts::fuzz::FuzzInference inference;
  if (size < 5) return 0;
  const std::uint8_t flags = data[0], layout = data[1], image = data[2];
  const auto header_delta = static_cast<std::int8_t>(data[3]);
  const auto size_delta = static_cast<std::int8_t>(data[4]);
  Payload payload(std::string_view(reinterpret_cast<const char*>(data) + 5, size - 5));
  const bool pixels = flags & 1;
  const std::int64_t batch = layout & 7;

  // The first input and its binary data.
  Json input = {{"name", pixels ? "image" : "document"}, {"datatype", pixels ? "UINT8" : "BYTES"}};
  std::string binary;
  if (pixels) {
    const std::int64_t height = 1 + (image & 3), width = 1 + ((image >> 2) & 3);
    const std::int64_t channels = (layout & 8) ? 3 : 1;
    input["shape"] = channels == 3 ? Json{batch, height, width, 3} : Json{batch, height, width};
    binary = payload.Take(static_cast<std::size_t>(batch * height * width * channels));
  } else {
    input["shape"] = (layout & 8) ? Json{batch, 1} : Json{batch};
    std::vector<std::string> documents;
    for (std::int64_t i = 0; i < batch; ++i)
      documents.push_back(payload.Take(1 + payload.Next() % 24));
    binary = ts::EncodeRawBytes(documents);
  }
  if (flags & 128) binary = std::string(payload.Rest());
  std::int64_t claimed = static_cast<std::int64_t>(binary.size());
  if (flags & 16) claimed += size_delta;
  input["parameters"] = {{"binary_data_size", claimed}};
  if (flags & 32) input["data"] = Json::array({"a"});
  Json body = {{"inputs", Json::array({input})}};
  if (flags & 64) {
    const std::string extra = payload.Take(payload.Next() % 8);
    body["inputs"].push_back({{"name", "extra"},
                              {"datatype", "BYTES"},
                              {"shape", {1}},
                              {"parameters", {{"binary_data_size", extra.size()}}}});
    binary += extra;
  }
  if (flags & 2) body["parameters"] = {{"binary_data_output", true}};
  const int asked = (layout >> 4) & 3;
  if (asked != 0) {
    body["outputs"] = Json::array();
    if (asked & 1) {
      Json out = {{"name", "probabilities"}};
      if (flags & 4) out["parameters"]["binary_data"] = static_cast<bool>(layout & 64);
      if (image & 32) out["parameters"]["classification"] = 2;
      body["outputs"].push_back(out);
    }
    if (asked & 2) {
      Json out = {{"name", "label"}};
      if (flags & 4) out["parameters"]["binary_data"] = static_cast<bool>(layout & 128);
      body["outputs"].push_back(out);
    }
  }

  ts::server::HttpExchange request;
  request.method = "POST";
  request.path = std::string("/v2/models/") + (pixels ? "img" : "doc") + "/infer";
  const std::string header = body.dump();
  std::int64_t header_length = static_cast<std::int64_t>(header.size());
  if (flags & 8) header_length += header_delta;
  request.headers["inference-header-content-length"] = std::to_string(header_length);
  request.body = header + binary;
  const ts::server::HttpAnswer answer =
      ts::server::Route(&inference, ts::server::RouteOptions{}, request);

  const bool consistent = (flags & (8 | 16 | 32 | 64 | 128)) == 0 && batch >= 1;
  if (answer.status >= 200 && answer.status < 300) {
    CheckOutputs(answer, batch, consistent);
    return 0;
  }
  if (consistent)
    ts::fuzz::Broken("a consistent body: HTTP " + std::to_string(answer.status) + ": " +
                     answer.body);
  const Json error = Json::parse(answer.body, nullptr, false);
  if (answer.status < 400 || answer.status >= 500 || error.is_discarded() ||
      !error.contains("error") || !error["error"].is_string() ||
      !NamesAField(error["error"].get<std::string>())) {
    ts::fuzz::Broken("HTTP " + std::to_string(answer.status) + ": " + answer.body);
  }
  return 0;
}

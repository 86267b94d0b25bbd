// The KServe v2 REST infer body: POST /v2/models/NAME/infer through the HTTP front end's Route
// (server/serving/http_frontend.h), so the bytes go through the JSON reader (depth and range
// limits), the v2 JSON mapping, kserve::Infer's plan (shapes, datatypes, parameters, the refused
// binary tensor data extension) and the answer's JSON encoding. Selector bit 0: the document model
// or the pixel model; bit 1: the versioned route; bit 2: the binary extension's
// Inference-Header-Content-Length header (the JSON header's length; the rest of the body is the
// inputs' binary data); bit 3: max_infer_batch's largest value instead of its default.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/numbers.h"
#include "server/serving/http_frontend.h"
#include "tests/fuzz/fuzz_inference.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ts::fuzz::FuzzInference inference;
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  ts::server::HttpExchange request;
  request.method = "POST";
  request.path = std::string("/v2/models/") + ((input.selector & 1) ? "img" : "doc") +
                 ((input.selector & 2) ? "/versions/1" : "") + "/infer";
  if (input.selector & 4) {
    request.headers["inference-header-content-length"] = std::to_string(input.bytes.size() / 2);
  }
  request.body = input.bytes;
  ts::server::RouteOptions options;
  if (input.selector & 8) options.max_infer_batch = std::numeric_limits<std::int64_t>::max();
  const ts::server::HttpAnswer answer = ts::server::Route(&inference, options, request);
  // Bad bodies are 400s naming the field, never a server error, and every answer is JSON: the
  // whole body, or (binary outputs asked for) the Inference-Header-Content-Length bytes before the
  // binary tensors, a length that fits in the body.
  std::string json = answer.body;
  if (const auto header = answer.headers.find("Inference-Header-Content-Length");
      header != answer.headers.end()) {
    std::size_t length = 0;
    if (!absl::SimpleAtoi(header->second, &length) || length > answer.body.size()) {
      ts::fuzz::Broken("HTTP " + std::to_string(answer.status) + ": header length " +
                       header->second + " of a " + std::to_string(answer.body.size()) +
                       "-byte body");
    }
    json = answer.body.substr(0, length);
  }
  if (answer.status >= 500 || !nlohmann::json::accept(json)) {
    ts::fuzz::Broken("HTTP " + std::to_string(answer.status) + ": " + answer.body);
  }
  return 0;
}

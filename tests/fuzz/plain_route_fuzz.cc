// The plain HTTP/JSON route's body: POST /v1/models/NAME:classify through the HTTP front end's
// Route (server/serving/http_frontend.h): the JSON reader (depth and range limits), the body's
// fields (text, document_base64, image with pixels or pixels_base64, top_k, path, over_length) and
// the input's way to the model (fuzz_inference.h: ImageToTokens, PrepareTokens). Selector bit 0:
// the document model or the pixel model.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/serving/http_frontend.h"
#include "tests/fuzz/fuzz_inference.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ts::fuzz::FuzzInference inference;
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  ts::server::HttpExchange request;
  request.method = "POST";
  request.path = std::string("/v1/models/") + ((input.selector & 1) ? "img" : "doc") + ":classify";
  request.body = input.bytes;
  const ts::server::HttpAnswer answer = ts::server::Route(&inference, {}, request);
  // Bad bodies are 400s naming the field, never a server error, and every answer is JSON.
  if (answer.status >= 500 || !nlohmann::json::accept(answer.body)) {
    ts::fuzz::Broken("HTTP " + std::to_string(answer.status) + ": " + answer.body);
  }
  return 0;
}

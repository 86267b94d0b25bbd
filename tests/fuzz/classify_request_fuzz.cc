// A Classifier.Classify request as the gRPC wire delivers it (serialized ClassifyRequest; with
// selector bit 7 its text form, proto_input.h): its image (width, height, channels, pixels),
// document and over_length policy, through what the server does to every input before batching
// (fuzz_inference.h: ImageToTokens, ParseLengthPolicy, PrepareTokens). When the request names no
// model, selector bit 0 picks the document or the pixel model.
#include <cstdint>

#include "taylorshift/v1/classifier.pb.h"
#include "tests/fuzz/fuzz_inference.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/proto_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ts::fuzz::FuzzInference inference;
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  taylorshift::v1::ClassifyRequest request;
  if (!ts::fuzz::ParseMessage(input, &request)) return 0;  // gRPC refuses it before the service
  if (request.model().empty()) request.set_model((input.selector & 1) ? "img" : "doc");
  inference.Classify({}, request,
                     [](const absl::Status&, const taylorshift::v1::ClassifyResponse&) {});
  return 0;
}

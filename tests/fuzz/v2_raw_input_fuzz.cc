// A KServe v2 gRPC ModelInferRequest as the wire delivers it (serialized; with selector bit 7 its
// text form, proto_input.h), through kserve::Infer (server/serving/kserve_v2.h): its
// raw_input_contents (BYTES elements with their 4-byte length prefixes, UINT8 pixels), contents,
// shapes and parameters, against the document model or the pixel model (selector bit 0, when the
// request names none) and max_infer_batch's default or largest value (bit 1). An answer is encoded
// as the gRPC service sends it (raw_output_contents) and decoded as tsctl reads it (api/v2_raw.h):
// the round trip must give back every element. Every raw_input_contents entry also goes through
// both decoders on its own.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "api/v2_raw.h"
#include "server/serving/kserve_v2.h"
#include "tests/fuzz/fuzz_inference.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/proto_input.h"

namespace {

void CheckRoundTrip(const ts::server::kserve::InferResult& result) {
  const inference::ModelInferResponse response = ts::server::kserve::ToProto(result);
  if (response.raw_output_contents_size() != static_cast<int>(result.outputs.size())) {
    ts::fuzz::Broken("one raw_output_contents entry per output");
  }
  for (std::size_t i = 0; i < result.outputs.size(); ++i) {
    const auto& out = result.outputs[i];
    const std::string& raw = response.raw_output_contents(static_cast<int>(i));
    if (out.datatype == "FP32") {
      std::vector<float> values;
      if (!ts::DecodeRawFp32(raw, &values).ok() || values != out.fp32) {
        ts::fuzz::Broken("FP32 raw output does not decode to its values");
      }
    } else {
      std::vector<std::string> elements;
      if (!ts::DecodeRawBytes(raw, &elements).ok() || elements != out.bytes) {
        ts::fuzz::Broken("BYTES raw output does not decode to its elements");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ts::fuzz::FuzzInference inference;
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  inference::ModelInferRequest request;
  if (!ts::fuzz::ParseMessage(input, &request)) return 0;  // gRPC refuses it before the service
  for (const std::string& raw : request.raw_input_contents()) {
    std::vector<float> fp32;
    std::vector<std::string> elements;
    (void)ts::DecodeRawFp32(raw, &fp32);
    (void)ts::DecodeRawBytes(raw, &elements);
  }
  if (request.model_name().empty()) request.set_model_name((input.selector & 1) ? "img" : "doc");
  // max_infer_batch: its default, or (selector bit 1) the largest a configuration may give.
  const std::int64_t max_batch =
      (input.selector & 2) ? std::numeric_limits<std::int64_t>::max() : 256;
  ts::server::kserve::Infer(
      &inference, {}, request, max_batch,
      [](const absl::Status& status, const ts::server::kserve::InferResult& result) {
        if (status.ok()) CheckRoundTrip(result);
      });
  return 0;
}

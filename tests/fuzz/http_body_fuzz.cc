// The HTTP listener's body decoder (server/serving/http_body.h): identity, gzip and deflate
// bodies, added in pieces as a connection reads them. Selector bits 0-1: the Content-Encoding
// (identity, gzip, deflate, gzip again); bits 2-7: the piece size. Small limits (64 KiB,
// ratio 100) so that the limits are reached.
#include <cstdint>
#include <string>

#include "server/serving/http_body.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

absl::StatusOr<std::string> Decode(const std::string& coding, const std::string& bytes,
                                   std::size_t piece) {
  ts::server::HttpBodyOptions options;
  options.max_body_bytes = 64 << 10;
  options.max_inflate_ratio = 100;
  auto decoder = ts::server::HttpBodyDecoder::Create(coding, options);
  if (!decoder.ok()) return decoder.status();
  for (std::size_t i = 0; i < bytes.size(); i += piece) {
    absl::Status added = (*decoder)->Add(std::string_view(bytes).substr(i, piece));
    if ((*decoder)->decoded_bytes() > options.max_body_bytes) {
      ts::fuzz::Broken("the decoded body grew past max_body_bytes");
    }
    if (!added.ok()) return added;
  }
  return (*decoder)->Finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  static const char* const kCodings[] = {"identity", "gzip", "deflate", "x-gzip"};
  const std::string coding = kCodings[input.selector & 3];
  const std::size_t piece = 1 + (input.selector >> 2) * 97;
  const absl::StatusOr<std::string> pieces = Decode(coding, input.bytes, piece);
  const absl::StatusOr<std::string> whole = Decode(coding, input.bytes, input.bytes.size() + 1);
  // Only the client's errors: a limit (413) or corrupt bytes (400).
  for (const auto* result : {&pieces, &whole}) {
    const absl::StatusCode code = result->status().code();
    if (code != absl::StatusCode::kOk && code != absl::StatusCode::kResourceExhausted &&
        code != absl::StatusCode::kInvalidArgument) {
      ts::fuzz::Broken(std::string(result->status().ToString()));
    }
  }
  // A body decodes the same however it arrives (the ratio limit aside: it is checked as the
  // compressed bytes arrive).
  if (pieces.ok() && whole.ok() && *pieces != *whole) {
    ts::fuzz::Broken("the body depends on how its bytes arrived");
  }
  if ((input.selector & 3) == 0 && pieces.ok() && *pieces != input.bytes) {
    ts::fuzz::Broken("an identity body changed");
  }
  return 0;
}

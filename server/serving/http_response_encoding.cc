#include "server/serving/http_response_encoding.h"

#include <zlib.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ts::server {
namespace {

// The q-value of one Accept-Encoding element's parameters ("q=0.5"); 1 without one, 0 for a
// malformed one (a coding the client did not clearly accept is not used).
double QValue(const std::vector<absl::string_view>& parameters) {
  for (std::size_t i = 1; i < parameters.size(); ++i) {
    absl::string_view parameter = absl::StripAsciiWhitespace(parameters[i]);
    if (!absl::ConsumePrefix(&parameter, "q=") && !absl::ConsumePrefix(&parameter, "Q=")) continue;
    double q = 0;
    if (!absl::SimpleAtod(parameter, &q) || q < 0 || q > 1) return 0;
    return q;
  }
  return 1;
}

}  // namespace

bool AcceptsGzip(std::string_view accept_encoding) {
  // The explicit gzip element wins over "*" (RFC 9110: "*" matches codings not listed).
  double gzip = -1, any = -1;
  const absl::string_view header(accept_encoding.data(), accept_encoding.size());
  for (absl::string_view element : absl::StrSplit(header, ',')) {
    const std::vector<absl::string_view> parameters = absl::StrSplit(element, ';');
    const std::string coding =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(parameters.front()));
    if (coding == "gzip" || coding == "x-gzip") gzip = QValue(parameters);
    if (coding == "*") any = QValue(parameters);
  }
  return gzip >= 0 ? gzip > 0 : any > 0;
}

std::string GzipBytes(std::string_view body) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    std::abort();  // only out of memory or a zlib built without deflate
  }
  std::string out(deflateBound(&stream, static_cast<uLong>(body.size())), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  stream.avail_in = static_cast<uInt>(body.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&stream, Z_FINISH);  // deflateBound leaves room for all of it
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (result != Z_STREAM_END) std::abort();
  return out;
}

void EncodeForClient(const std::map<std::string, std::string>& request_headers,
                     std::map<std::string, std::string>* response_headers, std::string* body) {
  for (const auto& [name, value] : *response_headers) {
    if (absl::EqualsIgnoreCase(name, "Content-Encoding")) return;
  }
  if (body->size() < kMinGzipBodyBytes) return;
  (*response_headers)["Vary"] = "Accept-Encoding";
  const auto accept = request_headers.find("accept-encoding");
  if (accept == request_headers.end() || !AcceptsGzip(accept->second)) return;
  std::string compressed = GzipBytes(*body);
  if (compressed.size() >= body->size()) return;
  *body = std::move(compressed);
  (*response_headers)["Content-Encoding"] = "gzip";
}

}  // namespace ts::server

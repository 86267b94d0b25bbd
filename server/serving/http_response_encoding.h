// Response compression of the HTTP listener (server/serving/http_listener.h): an answer is sent
// gzip-compressed only when the request's Accept-Encoding accepts gzip (RFC 9110 §12.5.3: "gzip"
// or "x-gzip" or "*" with a q-value above 0) and its body is at least kMinGzipBodyBytes; no other
// coding is ever produced (a client asking only for br gets identity). Compressible answers carry
// "Vary: Accept-Encoding" either way, so caches keep the two forms apart. Stateless and
// thread-safe; zlib does the compressing.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace ts::server {

// Bodies shorter than this go uncompressed: gzip's 18-byte frame and the CPU outweigh the saving.
inline constexpr std::size_t kMinGzipBodyBytes = 1024;

// Whether `accept_encoding` (the header's value; "" when absent) accepts gzip.
bool AcceptsGzip(std::string_view accept_encoding);

// `body` as one gzip member (RFC 1952).
std::string GzipBytes(std::string_view body);

// Compresses `*body` in place for a request whose lower-case headers are `request_headers`, adding
// Content-Encoding and Vary to `*response_headers` (the answer's extra headers). Leaves an answer
// that already has a Content-Encoding, a short body, or a body gzip does not shrink as it is.
void EncodeForClient(const std::map<std::string, std::string>& request_headers,
                     std::map<std::string, std::string>* response_headers, std::string* body);

}  // namespace ts::server

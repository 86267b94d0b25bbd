// A request body as it arrives: the bytes after the transfer framing (Content-Length or chunked,
// which the listener removes) are counted and, for `Content-Encoding: gzip` or `deflate`,
// inflated incrementally with zlib, so that no body grows past its limits in memory however it
// is framed or compressed. Used by the HTTP listener (server/serving/http_listener.h); torch-free
// and socket-free, so that a fuzzer drives it directly. Not thread-safe (one per request).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ts::server {

struct HttpBodyOptions {
  std::string name = "http";  // prefixes the limits' names in messages ("http.max_body_bytes")
  // The body after decoding (inflated, when compressed) and the encoded body as it arrives are
  // each at most this many bytes.
  std::int64_t max_body_bytes = 1 << 20;
  // A compressed body may inflate to at most this many times the compressed bytes read so far
  // (bodies of up to kRatioFreeBytes are not checked: a small JSON body compresses well).
  std::int64_t max_inflate_ratio = 100;
  static constexpr std::int64_t kRatioFreeBytes = 64 << 10;
};

// The content codings the decoder takes, as a 415 answer names them.
inline constexpr char kAcceptedContentEncodings[] = "identity, gzip, deflate";

class HttpBodyDecoder {
 public:
  // `content_encoding`: the request's Content-Encoding header ("" = identity; names are
  // case-insensitive). Any other coding, or more than one, is UNIMPLEMENTED naming the accepted
  // ones (HTTP 415).
  static absl::StatusOr<std::unique_ptr<HttpBodyDecoder>> Create(std::string_view content_encoding,
                                                                 const HttpBodyOptions& options);
  ~HttpBodyDecoder();
  HttpBodyDecoder(const HttpBodyDecoder&) = delete;
  HttpBodyDecoder& operator=(const HttpBodyDecoder&) = delete;

  // The next bytes of the body. RESOURCE_EXHAUSTED naming the limit (HTTP 413) when the body
  // passes max_body_bytes (encoded or decoded) or max_inflate_ratio; INVALID_ARGUMENT (HTTP 400)
  // when compressed bytes are corrupt. After an error the decoder takes nothing more.
  absl::Status Add(std::string_view bytes);
  // The whole body, once every byte was added: INVALID_ARGUMENT when a compressed stream is
  // truncated.
  absl::StatusOr<std::string> Finish();

  std::int64_t encoded_bytes() const { return encoded_bytes_; }
  std::int64_t decoded_bytes() const { return static_cast<std::int64_t>(body_.size()); }

 private:
  struct Inflater;
  HttpBodyDecoder(const HttpBodyOptions& options, std::unique_ptr<Inflater> inflater);
  absl::Status Inflate(std::string_view bytes);
  // Room in body_ for `more` bytes (see the definition for how a large body is held).
  void MakeRoom(std::size_t more);
  static constexpr std::size_t kHeapBodyBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMappedBodyBytes = (std::size_t{32} << 20) + (std::size_t{1} << 20);
  absl::Status CheckDecoded() const;

  const HttpBodyOptions options_;
  std::unique_ptr<Inflater> inflater_;  // null: identity
  std::string body_;
  std::int64_t encoded_bytes_ = 0;
  absl::Status failed_;
};

}  // namespace ts::server

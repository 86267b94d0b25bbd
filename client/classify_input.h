// Turns tsctl's inputs into ClassifyRequest inputs: a .pgm/.ppm/.pnm file becomes an Image,
// any other file (or stdin) a byte document. A document is read only as far as the model will use
// it under the request's over-length policy (DocumentLimits), so a 50 MB file under `truncate`
// costs max_length + 1 bytes of reading and of wire, and an input the server would refuse (over
// the window cap, `reject`, or over the message limit) is refused before anything is sent, naming
// the limit and the flag or server config key that sets it. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::client {

// What the server keeps of a byte document: the model's GetModel answer with --over-length
// applied. max_length 0 means "unknown" (GetModel failed): the whole document is sent, up to the
// message limit.
struct DocumentLimits {
  std::string model;
  std::int64_t max_length = 0;
  std::string policy;  // truncate, keep_tail, reject or window
  std::int64_t window_stride = 0;
  std::int64_t max_windows = 0;
  // tsctl's --max-message-bytes (the channel's send limit).
  std::int64_t max_message_bytes = std::int64_t{64} << 20;
};

// The limits for a request with `over_length` ("" = the model's policy) to the model `info`
// describes; `info` null = unknown.
DocumentLimits LimitsFor(const taylorshift::v1::ModelInfo* info, const std::string& over_length,
                         std::int64_t max_message_bytes);

// The part of a `length`-byte document the server uses: `bytes` bytes from the head or the tail
// (truncate / keep_tail send max_length + 1, so the server still reports `truncated`). Errors:
// INVALID_ARGUMENT naming the length and the limit with its flag or config key, for a
// document the server would refuse (reject; window over max_windows; over the message limit).
struct DocumentPart {
  bool from_tail = false;
  std::int64_t bytes = 0;
};
// `at_least`: `length` is a lower bound (a stream read no further than needed).
absl::StatusOr<DocumentPart> PlanDocument(std::int64_t length, bool at_least,
                                          const DocumentLimits& limits);

// Reads `path` into the request's input (image or document, by extension); a document only as
// far as PlanDocument says. Errors: the file's read or parse error naming the path, or
// PlanDocument's refusal; a request over --max-message-bytes is refused here too.
absl::Status SetInputFromFile(const std::string& path, const DocumentLimits& limits,
                              taylorshift::v1::ClassifyRequest* request);

// The document on `in` (stdin), read as a stream: under truncate only max_length + 1 bytes are
// read, under keep_tail only the last max_length + 1 are kept, otherwise reading stops with
// PlanDocument's refusal once the stream passes the largest length the server accepts.
absl::StatusOr<std::string> ReadDocumentStream(std::istream& in, const std::string& name,
                                               const DocumentLimits& limits);

}  // namespace ts::client

#include "client/classify_input.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/image_reader.h"
#include "common/file_slice.h"
#include "common/status_macros.h"

namespace ts::client {
namespace {

// Both ends of the wire cap a message: ours with --max-message-bytes, the server's with its
// max_message_bytes config key.
absl::Status OverMessageLimit(const std::string& what, std::int64_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " would exceed the message limit of ", limit,
                   " bytes (tsctl --max-message-bytes; the server's own limit is its ",
                   "max_message_bytes config key); nothing was sent"));
}

}  // namespace

DocumentLimits LimitsFor(const taylorshift::v1::ModelInfo* info, const std::string& over_length,
                         std::int64_t max_message_bytes) {
  DocumentLimits limits;
  limits.max_message_bytes = max_message_bytes;
  if (info == nullptr) return limits;
  limits.model = info->name();
  limits.max_length = info->max_length();
  limits.policy = over_length.empty() ? info->over_length_policy() : over_length;
  limits.window_stride = info->window_stride();
  limits.max_windows = info->max_windows();
  return limits;
}

absl::StatusOr<DocumentPart> PlanDocument(std::int64_t length, bool at_least,
                                          const DocumentLimits& limits) {
  DocumentPart part;
  part.bytes = length;
  const std::int64_t max_length = limits.max_length;
  if (max_length > 0 && length > max_length) {
    if (limits.policy == "truncate" || limits.policy == "keep_tail") {
      // One byte past max_length, so the server still sees the input as over-long and answers
      // truncated: true; it keeps the same max_length bytes it would keep of the whole file.
      part.from_tail = limits.policy == "keep_tail";
      part.bytes = max_length + 1;
    } else if (limits.policy == "reject") {
      return absl::InvalidArgumentError(absl::StrCat(
          at_least ? "more than " : "", length, " bytes, over model '", limits.model,
          "''s max_length of ", max_length,
          " under over-length policy reject (choose --over-length truncate, "
          "keep_tail or window, or change the model's over_length in the server config); "
          "nothing was sent"));
    } else if (limits.policy == "window" && limits.window_stride > 0 && limits.max_windows > 0) {
      const std::int64_t stride = limits.window_stride;
      const std::int64_t windows = 1 + (length - max_length + stride - 1) / stride;
      if (windows > limits.max_windows) {
        return absl::InvalidArgumentError(absl::StrCat(
            at_least ? "more than " : "", length, " bytes need ", windows, " windows of ",
            max_length, " (stride ", stride, "), over model '", limits.model, "''s max_windows of ",
            limits.max_windows, ": at most ", max_length + (limits.max_windows - 1) * stride,
            " bytes under over-length policy window (the model's max_windows and window_stride "
            "in the server config; --over-length truncate or keep_tail reads only the first or "
            "last max_length bytes); nothing was sent"));
      }
    }
  }
  if (part.bytes > limits.max_message_bytes) {
    const std::string uses =
        limits.max_length > 0
            ? absl::StrCat("what the model uses under over-length policy ", limits.policy)
            : "the server did not answer GetModel, so the whole document";
    return OverMessageLimit(
        absl::StrCat("sending ", part.bytes, " of ", at_least ? "more than " : "", length,
                     " bytes (", uses, ")"),
        limits.max_message_bytes);
  }
  return part;
}

absl::Status SetInputFromFile(const std::string& path, const DocumentLimits& limits,
                              taylorshift::v1::ClassifyRequest* request) {
  if (IsPnmPath(path)) {
    TS_ASSIGN_OR_RETURN(PnmImage image, ReadPnmFile(path));
    taylorshift::v1::Image* out = request->mutable_image();
    out->set_width(image.width);
    out->set_height(image.height);
    out->set_channels(image.channels);
    out->set_pixels(std::move(image.pixels));
  } else {
    // The size first (nothing read), then only the part the server will use.
    TS_ASSIGN_OR_RETURN(const FileSlice size, ReadFileSlice(path, FileEnd::kHead, 0));
    TS_ASSIGN_OR_RETURN(const DocumentPart part,
                        PlanDocument(size.file_bytes, /*at_least=*/false, limits));
    TS_ASSIGN_OR_RETURN(
        FileSlice slice,
        ReadFileSlice(path, part.from_tail ? FileEnd::kTail : FileEnd::kHead, part.bytes));
    request->set_document(std::move(slice.bytes));
  }
  const auto request_bytes = static_cast<std::int64_t>(request->ByteSizeLong());
  if (request_bytes > limits.max_message_bytes) {
    return OverMessageLimit(absl::StrCat("a request of ", request_bytes, " bytes"),
                            limits.max_message_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadDocumentStream(std::istream& in, const std::string& name,
                                               const DocumentLimits& limits) {
  // The longest document PlanDocument could accept whole: past it, the plan is either a bounded
  // part (truncate / keep_tail) or a refusal, so reading more is never needed.
  std::int64_t accept = limits.max_message_bytes;
  if (limits.max_length > 0 && limits.policy == "reject") accept = limits.max_length;
  if (limits.max_length > 0 && limits.policy == "window" && limits.window_stride > 0 &&
      limits.max_windows > 0) {
    accept = std::min(accept, limits.max_length + (limits.max_windows - 1) * limits.window_stride);
  }
  const bool bounded_part =
      limits.max_length > 0 && (limits.policy == "truncate" || limits.policy == "keep_tail");
  const std::int64_t keep = limits.max_length + 1;
  std::string bytes;
  std::int64_t length = 0;  // bytes seen on the stream
  char buffer[1 << 16];
  while (in) {
    std::int64_t want = sizeof buffer;
    if (!bounded_part) want = std::min<std::int64_t>(want, accept + 1 - length);
    if (bounded_part && limits.policy == "truncate") want = std::min(want, keep - length);
    if (want <= 0) break;
    in.read(buffer, want);
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    bytes.append(buffer, static_cast<std::size_t>(got));
    length += got;
    // keep_tail: only the last max_length + 1 bytes matter; drop the rest in large steps.
    if (bounded_part && static_cast<std::int64_t>(bytes.size()) > 2 * keep + (1 << 16)) {
      bytes.erase(0, bytes.size() - static_cast<std::size_t>(keep));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("error while reading ", name));
  // Reading stopped past the longest acceptable length: `length` is only a lower bound.
  const bool stopped = !bounded_part && length > accept;
  TS_ASSIGN_OR_RETURN(const DocumentPart part, PlanDocument(length, stopped, limits));
  if (static_cast<std::int64_t>(bytes.size()) > part.bytes) {
    bytes = part.from_tail ? bytes.substr(bytes.size() - static_cast<std::size_t>(part.bytes))
                           : bytes.substr(0, static_cast<std::size_t>(part.bytes));
  }
  return bytes;
}

}  // namespace ts::client

#include "server/serving/http_body.h"

#include <zlib.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ts::server {

namespace {

// Inflated a piece at a time: the body grows by at most this much past a limit before the
// limit is checked (and the piece is dropped).
constexpr std::size_t kInflatePieceBytes = 16 << 10;

}  // namespace

struct HttpBodyDecoder::Inflater {
  explicit Inflater(bool gzip) : gzip(gzip) {}
  ~Inflater() {
    if (initialised) inflateEnd(&stream);
  }
  bool gzip;
  bool initialised = false;
  bool ended = false;  // the current stream (gzip member) is complete
  z_stream stream{};
};

absl::StatusOr<std::unique_ptr<HttpBodyDecoder>> HttpBodyDecoder::Create(
    std::string_view content_encoding, const HttpBodyOptions& options) {
  const std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(
      absl::string_view(content_encoding.data(), content_encoding.size())));
  std::unique_ptr<Inflater> inflater;
  if (coding == "gzip" || coding == "x-gzip") {
    inflater = std::make_unique<Inflater>(/*gzip=*/true);
  } else if (coding == "deflate") {
    inflater = std::make_unique<Inflater>(/*gzip=*/false);
  } else if (!coding.empty() && coding != "identity") {
    // Shown cut: a message never grows with the request.
    const std::string shown(content_encoding.substr(0, 64));
    return absl::UnimplementedError(
        absl::StrCat("Content-Encoding: \"", shown,
                     "\" is not accepted (accepted: ", kAcceptedContentEncodings, ")"));
  }
  if (inflater != nullptr) {
    // gzip: one or more gzip members; deflate: the zlib format (RFC 9110 8.4.1.2).
    if (inflateInit2(&inflater->stream, inflater->gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
      return absl::ResourceExhaustedError("Content-Encoding: cannot start zlib");
    }
    inflater->initialised = true;
  }
  return std::unique_ptr<HttpBodyDecoder>(new HttpBodyDecoder(options, std::move(inflater)));
}

HttpBodyDecoder::HttpBodyDecoder(const HttpBodyOptions& options, std::unique_ptr<Inflater> inflater)
    : options_(options), inflater_(std::move(inflater)) {}

HttpBodyDecoder::~HttpBodyDecoder() = default;

absl::Status HttpBodyDecoder::CheckDecoded() const {
  const auto decoded = static_cast<std::int64_t>(body_.size());
  if (decoded > options_.max_body_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("body: larger than ", options_.name,
                                                     ".max_body_bytes ", options_.max_body_bytes,
                                                     inflater_ != nullptr ? " once inflated" : ""));
  }
  if (inflater_ != nullptr && decoded > HttpBodyOptions::kRatioFreeBytes &&
      decoded > options_.max_inflate_ratio * encoded_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("body: inflates to more than ", options_.name, ".max_inflate_ratio ",
                     options_.max_inflate_ratio, " times its compressed size"));
  }
  return absl::OkStatus();
}

void HttpBodyDecoder::MakeRoom(std::size_t more) {
  const std::size_t needed = body_.size() + more;
  if (needed <= body_.capacity() || needed <= kHeapBodyBytes) return;
  // Past kHeapBodyBytes the buffer jumps to kMappedBodyBytes, above the largest threshold at
  // which glibc's malloc maps a block (32 MiB), so that it is mapped and goes back to the system
  // when freed however much freed memory the heap keeps (heap_keep_freed_bytes); only the pages
  // written are resident. Never more than the limit allows.
  const auto limit = static_cast<std::size_t>(options_.max_body_bytes) + kInflatePieceBytes;
  const std::size_t room = std::max({needed, 2 * body_.capacity(), kMappedBodyBytes});
  body_.reserve(std::max(needed, std::min(room, limit)));
}

absl::Status HttpBodyDecoder::Add(std::string_view bytes) {
  if (!failed_.ok()) return failed_;
  encoded_bytes_ += static_cast<std::int64_t>(bytes.size());
  if (encoded_bytes_ > options_.max_body_bytes) {
    failed_ = absl::ResourceExhaustedError(absl::StrCat(
        "body: larger than ", options_.name, ".max_body_bytes ", options_.max_body_bytes));
  } else if (inflater_ == nullptr) {
    MakeRoom(bytes.size());
    body_.append(bytes);
  } else {
    failed_ = Inflate(bytes);
  }
  if (!failed_.ok()) std::string().swap(body_);  // the memory too, not only the bytes
  return failed_;
}

absl::Status HttpBodyDecoder::Inflate(std::string_view bytes) {
  z_stream& z = inflater_->stream;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  while (z.avail_in > 0) {
    if (inflater_->ended) {
      // Bytes after a complete stream: gzip's next member (RFC 1952 2.2); nothing for zlib's.
      if (!inflater_->gzip) {
        return absl::InvalidArgumentError("body: bytes after the end of the deflate stream");
      }
      if (inflateReset(&z) != Z_OK) return absl::InvalidArgumentError("body: corrupt gzip");
      inflater_->ended = false;
    }
    MakeRoom(kInflatePieceBytes);
    const std::size_t before = body_.size();
    body_.resize(before + kInflatePieceBytes);
    z.next_out = reinterpret_cast<Bytef*>(body_.data() + before);
    z.avail_out = static_cast<uInt>(kInflatePieceBytes);
    const int result = inflate(&z, Z_NO_FLUSH);
    body_.resize(before + kInflatePieceBytes - z.avail_out);
    if (result == Z_STREAM_END) {
      inflater_->ended = true;
    } else if (result == Z_BUF_ERROR && z.avail_in > 0 && z.avail_out > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("body: corrupt ", inflater_->gzip ? "gzip" : "deflate", " stream"));
    } else if (result != Z_OK && result != Z_BUF_ERROR) {
      return absl::InvalidArgumentError(
          absl::StrCat("body: corrupt ", inflater_->gzip ? "gzip" : "deflate", " stream",
                       z.msg != nullptr ? absl::StrCat(" (", z.msg, ")") : ""));
    }
    if (absl::Status limits = CheckDecoded(); !limits.ok()) return limits;
  }
  // inflate may hold output back while input is consumed: drain what it has.
  while (!inflater_->ended) {
    MakeRoom(kInflatePieceBytes);
    const std::size_t before = body_.size();
    body_.resize(before + kInflatePieceBytes);
    z.next_out = reinterpret_cast<Bytef*>(body_.data() + before);
    z.avail_out = static_cast<uInt>(kInflatePieceBytes);
    const int result = inflate(&z, Z_NO_FLUSH);
    const std::size_t produced = kInflatePieceBytes - z.avail_out;
    body_.resize(before + produced);
    if (result == Z_STREAM_END) inflater_->ended = true;
    if (absl::Status limits = CheckDecoded(); !limits.ok()) return limits;
    if (produced == 0 || (result != Z_OK && result != Z_STREAM_END)) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HttpBodyDecoder::Finish() {
  if (!failed_.ok()) return failed_;
  if (inflater_ != nullptr && !inflater_->ended && encoded_bytes_ > 0) {
    failed_ = absl::InvalidArgumentError(absl::StrCat(
        "body: the ", inflater_->gzip ? "gzip" : "deflate", " stream ends before its end"));
    return failed_;
  }
  failed_ = absl::FailedPreconditionError("body: already taken");
  return std::move(body_);
}

}  // namespace ts::server

#include "client/image_reader.h"

#include <charconv>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace ts::client {
namespace {

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

// Reads whitespace-separated decimal numbers from the header (or a plain raster), skipping
// '#' comments, which run to the end of the line.
class TokenReader {
 public:
  explicit TokenReader(absl::string_view data, std::size_t pos) : data_(data), pos_(pos) {}

  // Skips whitespace and comments; false at the end of the data.
  bool SkipSeparators() {
    while (pos_ < data_.size()) {
      if (IsSpace(data_[pos_])) {
        ++pos_;
      } else if (data_[pos_] == '#') {
        while (pos_ < data_.size() && data_[pos_] != '\n' && data_[pos_] != '\r') ++pos_;
      } else {
        return true;
      }
    }
    return false;
  }

  // The next unsigned number; `what` names it in errors.
  absl::StatusOr<std::uint64_t> Number(absl::string_view what) {
    if (!SkipSeparators()) {
      return absl::InvalidArgumentError(absl::StrCat("ends before the ", what));
    }
    if (!absl::ascii_isdigit(static_cast<unsigned char>(data_[pos_]))) {
      return absl::InvalidArgumentError(absl::StrCat("expected a number for the ", what,
                                                     " at byte ", pos_, ", found '",
                                                     absl::string_view(&data_[pos_], 1), "'"));
    }
    std::uint64_t value = 0;
    const auto [end, error] =
        std::from_chars(data_.data() + pos_, data_.data() + data_.size(), value);
    if (error != std::errc() || value > (std::uint64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " is too large"));
    }
    pos_ = static_cast<std::size_t>(end - data_.data());
    return value;
  }

  std::size_t pos() const { return pos_; }

 private:
  absl::string_view data_;
  std::size_t pos_;
};

// Maps sample `i`, in 0..maxval, onto 0..255, rounding to nearest; INVALID_ARGUMENT above maxval.
absl::StatusOr<char> Rescale(std::uint64_t i, std::uint64_t sample, std::uint64_t maxval) {
  if (sample > maxval) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", i, " is ", sample, ", above maxval ", maxval));
  }
  if (maxval == 255) return static_cast<char>(sample);
  return static_cast<char>((sample * 255 + maxval / 2) / maxval);
}

}  // namespace

absl::StatusOr<PnmImage> ParsePnm(absl::string_view data) {
  if (data.size() < 2 || data[0] != 'P' ||
      (data[1] != '2' && data[1] != '3' && data[1] != '5' && data[1] != '6')) {
    return absl::InvalidArgumentError(
        "not a PGM/PPM image: the file must start with P2, P3, P5 or P6");
  }
  const char kind = data[1];
  const bool plain = kind == '2' || kind == '3';
  PnmImage image;
  image.channels = (kind == '2' || kind == '5') ? 1 : 3;
  if (data.size() > 2 && !IsSpace(data[2]) && data[2] != '#') {
    return absl::InvalidArgumentError(
        absl::StrCat("not a PGM/PPM image: no whitespace after the magic P", std::string(1, kind)));
  }

  TokenReader reader(data, 2);
  const auto header_error = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad P", std::string(1, kind), " header: ", status.message()));
  };
  absl::StatusOr<std::uint64_t> width = reader.Number("width");
  if (!width.ok()) return header_error(width.status());
  absl::StatusOr<std::uint64_t> height = reader.Number("height");
  if (!height.ok()) return header_error(height.status());
  absl::StatusOr<std::uint64_t> maxval = reader.Number("maxval");
  if (!maxval.ok()) return header_error(maxval.status());
  if (*width == 0 || *height == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad image size ", *width, "x", *height, ": both must be at least 1"));
  }
  if (*maxval == 0 || *maxval > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported maxval ", *maxval, ": must be 1..255 (8-bit samples only)"));
  }
  // Bounding each side first keeps the product from overflowing.
  if (*width > kMaxPnmPixelBytes || *height > kMaxPnmPixelBytes ||
      *width * *height * image.channels > kMaxPnmPixelBytes) {
    return absl::InvalidArgumentError(absl::StrCat("image ", *width, "x", *height, "x",
                                                   image.channels, " is too large (over ",
                                                   kMaxPnmPixelBytes, " samples)"));
  }
  const std::uint64_t sample_count = *width * *height * image.channels;
  image.width = static_cast<std::uint32_t>(*width);
  image.height = static_cast<std::uint32_t>(*height);
  image.pixels.resize(sample_count);

  if (plain) {
    for (std::uint64_t i = 0; i < sample_count; ++i) {
      if (!reader.SkipSeparators()) {
        return absl::InvalidArgumentError(
            absl::StrCat("wrong raster size: expected ", sample_count, " samples, found ", i));
      }
      absl::StatusOr<std::uint64_t> sample = reader.Number("sample");
      if (!sample.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad sample ", i, ": ", sample.status().message()));
      }
      TS_ASSIGN_OR_RETURN(image.pixels[i], Rescale(i, *sample, *maxval));
    }
    if (reader.SkipSeparators()) {
      return absl::InvalidArgumentError(
          absl::StrCat("wrong raster size: more than the expected ", sample_count, " samples"));
    }
    return image;
  }

  // Raw: exactly one whitespace byte separates maxval from the raster.
  std::size_t pos = reader.pos();
  if (pos >= data.size() || !IsSpace(data[pos])) {
    return absl::InvalidArgumentError(absl::StrCat("wrong raster size: expected ", sample_count,
                                                   " pixel bytes after the header, found 0"));
  }
  ++pos;
  const std::size_t raster_bytes = data.size() - pos;
  if (raster_bytes != sample_count) {
    return absl::InvalidArgumentError(absl::StrCat("wrong raster size: expected ", sample_count,
                                                   " pixel bytes (", *width, "x", *height, "x",
                                                   image.channels, "), found ", raster_bytes));
  }
  for (std::uint64_t i = 0; i < sample_count; ++i) {
    TS_ASSIGN_OR_RETURN(image.pixels[i],
                        Rescale(i, static_cast<unsigned char>(data[pos + i]), *maxval));
  }
  return image;
}

absl::StatusOr<PnmImage> ReadPnmFile(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, "image"));
  absl::StatusOr<PnmImage> image = ParsePnm(bytes);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

bool IsPnmPath(absl::string_view path) {
  return absl::EndsWithIgnoreCase(path, ".pgm") || absl::EndsWithIgnoreCase(path, ".ppm") ||
         absl::EndsWithIgnoreCase(path, ".pnm");
}

}  // namespace ts::client

// Netpbm image reading for tsctl: plain (P2 gray, P3 RGB) and raw (P5 gray, P6 RGB) PGM/PPM
// with maxval 1..255, '#' comments in the header, into the 8-bit layout of the API's Image
// message. Samples are rescaled to 0..255 when maxval is below 255. Errors are
// INVALID_ARGUMENT with a message that names the problem (bad magic, wrong raster size,
// maxval over 255, sample above maxval); reading a file adds NOT_FOUND / DATA_LOSS style
// I/O errors. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ts::client {

struct PnmImage {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint32_t channels = 0;  // 1 (gray) or 3 (RGB, interleaved)
  std::string pixels;          // width * height * channels bytes, row by row
};

// Largest accepted width * height * channels, far above any model's input.
inline constexpr std::uint64_t kMaxPnmPixelBytes = std::uint64_t{1} << 28;

// Parses a whole PGM/PPM file held in `data`.
absl::StatusOr<PnmImage> ParsePnm(absl::string_view data);

// Reads and parses the file at `path`; errors name the path.
absl::StatusOr<PnmImage> ReadPnmFile(const std::string& path);

// Whether `path` ends in .pgm, .ppm or .pnm (any case): tsctl sends such files as images.
bool IsPnmPath(absl::string_view path);

}  // namespace ts::client

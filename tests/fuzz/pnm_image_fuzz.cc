// Image bytes: tsctl's Netpbm reader (client/image_reader.h: P2, P3, P5, P6 with comments and
// maxval rescaling), then what the server does with the pixels it is sent (model/api/inputs.h:
// ImageToTokens, RGB to gray). A parsed image must be one the server takes.
#include <cstdint>
#include <string>

#include "client/image_reader.h"
#include "model/api/inputs.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto image =
      ts::client::ParsePnm(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!image.ok()) return 0;
  const auto tokens =
      ts::ImageToTokens(image->width, image->height, image->channels, image->pixels);
  if (!tokens.ok()) {
    ts::fuzz::Broken("a parsed image is refused by ImageToTokens: " +
                     std::string(tokens.status().message()));
  }
  if (tokens->size() != static_cast<std::size_t>(image->width) * image->height) {
    ts::fuzz::Broken("ImageToTokens must give one token per pixel");
  }
  return 0;
}

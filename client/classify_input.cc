#include "client/classify_input.h"

#include <utility>

#include "absl/status/statusor.h"
#include "client/file_util.h"

namespace ts::client {

void SetImage(const PnmImage& image, taylorshift::v1::ClassifyRequest* request) {
  taylorshift::v1::Image* out = request->mutable_image();
  out->set_width(image.width);
  out->set_height(image.height);
  out->set_channels(image.channels);
  out->set_pixels(image.pixels);
}

absl::Status SetInputFromFile(const std::string& path, taylorshift::v1::ClassifyRequest* request) {
  if (IsPnmPath(path)) {
    absl::StatusOr<PnmImage> image = ReadPnmFile(path);
    if (!image.ok()) return image.status();
    SetImage(*image, request);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  request->set_document(*std::move(bytes));
  return absl::OkStatus();
}

}  // namespace ts::client

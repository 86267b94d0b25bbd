#include "client/classify_input.h"

#include <utility>

#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "common/status_macros.h"

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
    TS_ASSIGN_OR_RETURN(PnmImage image, ReadPnmFile(path));
    SetImage(image, request);
    return absl::OkStatus();
  }
  TS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  request->set_document(std::move(bytes));
  return absl::OkStatus();
}

}  // namespace ts::client

#include "client/classify_input.h"

#include <utility>

#include "absl/status/statusor.h"
#include "client/image_reader.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace ts::client {

absl::Status SetInputFromFile(const std::string& path, taylorshift::v1::ClassifyRequest* request) {
  if (IsPnmPath(path)) {
    TS_ASSIGN_OR_RETURN(PnmImage image, ReadPnmFile(path));
    taylorshift::v1::Image* out = request->mutable_image();
    out->set_width(image.width);
    out->set_height(image.height);
    out->set_channels(image.channels);
    out->set_pixels(std::move(image.pixels));
    return absl::OkStatus();
  }
  TS_ASSIGN_OR_RETURN(*request->mutable_document(), ReadFile(path));
  return absl::OkStatus();
}

}  // namespace ts::client

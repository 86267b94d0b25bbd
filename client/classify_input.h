// Turns tsctl's inputs into ClassifyRequest inputs: a .pgm/.ppm/.pnm file becomes an Image,
// any other file (or stdin) a byte document sent as is. Stateless and thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::client {

// Reads `path` into the request's input (image or document, by extension). Errors are the
// file's read or parse error, naming the path.
absl::Status SetInputFromFile(const std::string& path, taylorshift::v1::ClassifyRequest* request);

}  // namespace ts::client

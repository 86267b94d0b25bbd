// The one mapping from absl::Status (what every module returns) to grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace ts::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
// "OK", "INVALID_ARGUMENT", … (the metrics' `code` label).
std::string StatusCodeName(absl::StatusCode code);

}  // namespace ts::server

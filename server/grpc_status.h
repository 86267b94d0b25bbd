// The one mapping from absl::Status (what every module returns) to grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace ts::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
// "OK", "INVALID_ARGUMENT", … (the metrics' `code` label).
std::string StatusCodeName(absl::StatusCode code);

// The HTTP status the HTTP front end answers for a code (Google's mapping of google.rpc.Code,
// as grpc-gateway uses it): INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, CANCELLED 499, UNAVAILABLE 503, DEADLINE_EXCEEDED 504…
int HttpStatusFor(absl::StatusCode code);

}  // namespace ts::server

// The one place for status mapping: absl::Status (what every module returns) to gRPC codes,
// their names, and HTTP statuses.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "common/proto_names.h"

namespace ts::server {

// ToGrpcStatus (absl → gRPC) is ts::ToGrpcStatus in common/proto_names.h, which the client
// uses too.
using ::ts::ToGrpcStatus;
// "OK", "INVALID_ARGUMENT", … (the metrics' `code` label).
std::string StatusCodeName(absl::StatusCode code);

// The HTTP status the HTTP front end answers for a code (Google's mapping of google.rpc.Code,
// as grpc-gateway uses it): INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, CANCELLED 499, UNAVAILABLE 503, DEADLINE_EXCEEDED 504…
int HttpStatusFor(absl::StatusCode code);

}  // namespace ts::server

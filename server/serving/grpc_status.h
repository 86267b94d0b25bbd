// The one place for status mapping: absl::Status (what every module returns) to gRPC codes,
// their names, and HTTP statuses.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "api/proto_names.h"

namespace ts::server {

// ToGrpcStatus (absl → gRPC) is ts::ToGrpcStatus in api/proto_names.h, which the client
// uses too.
using ::ts::HttpStatusFor;
using ::ts::ToGrpcStatus;
// "OK", "INVALID_ARGUMENT", … (the metrics' `code` label).
std::string StatusCodeName(absl::StatusCode code);

// HttpStatusFor (a code → the HTTP front end's status) and its inverse are in
// api/proto_names.h, which tsctl uses too.

}  // namespace ts::server

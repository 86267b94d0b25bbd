// Client of gRPC's standard health service, grpc.health.v1.Health/Check, which tsserver runs
// with the entries "" (the server as a whole), "taylorshift.v1.Classifier",
// "taylorshift.v1.Jobs" and one per served model name.
//
// Debian's gRPC packages ship neither health.proto nor code generated from it, so the call
// goes through grpc::GenericStub and the two one-field messages are encoded here. Their wire
// format is fixed by the published proto:
//   message HealthCheckRequest  { string service = 1; }
//   message HealthCheckResponse { ServingStatus status = 1; }
// Stateless and thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace ts::client {

// HealthCheckResponse.ServingStatus. Values a newer server may add are kept as their number.
enum class ServingStatus : int {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,  // only sent by Watch; Check answers NOT_FOUND instead
};

// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"; "STATUS_<n>" outside the enum.
std::string ServingStatusName(ServingStatus status);

// A serialized HealthCheckRequest for `service` ("" = the server as a whole).
std::string EncodeHealthCheckRequest(absl::string_view service);

// The status of a serialized HealthCheckResponse: UNKNOWN when the field is absent (proto3's
// default), the last value when it repeats; other fields are skipped. INVALID_ARGUMENT when
// the bytes are not a well-formed message or field 1 is not a varint.
absl::StatusOr<ServingStatus> DecodeHealthCheckResponse(absl::string_view bytes);

// Calls Check for `service` on `channel` with `context` (deadline and token already set) and
// blocks until it ends. Returns the call's status (NOT_FOUND for a service the server does not
// know, UNAVAILABLE when it cannot be reached, ...); when OK, `*status` is the answer. A
// response that does not decode is INTERNAL.
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         grpc::ClientContext* context, ServingStatus* status);

}  // namespace ts::client

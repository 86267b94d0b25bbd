// Names tsctl prints and accepts for API enums: gRPC status codes as their canonical
// upper-case names ("INVALID_ARGUMENT") and attention paths as lower-case words ("direct");
// and the one mapping between gRPC codes and HTTP statuses, both ways.
// Stateless and thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts {

// "OK", "CANCELLED", …, "UNAUTHENTICATED"; "CODE_<n>" for numbers outside the enum.
std::string GrpcCodeName(grpc::StatusCode code);

// A local absl::Status (the numbering is gRPC's) as the gRPC status tsctl reports.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "auto", "direct", "efficient", "softmax"; "unknown" for values this client does not know.
std::string PathName(taylorshift::v1::AttentionPath path);

// Inverse of PathName (case-insensitive, also accepts the full enum name); INVALID_ARGUMENT
// otherwise.
absl::StatusOr<taylorshift::v1::AttentionPath> ParsePath(absl::string_view name);

// A gRPC code from its canonical name ("INVALID_ARGUMENT", as GrpcCodeName writes it);
// INVALID_ARGUMENT for anything else.
absl::StatusOr<grpc::StatusCode> ParseGrpcCodeName(absl::string_view name);

// The HTTP status the HTTP front end answers for a code (Google's mapping of google.rpc.Code,
// as grpc-gateway uses it): INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, CANCELLED 499, UNAVAILABLE 503, DEADLINE_EXCEEDED 504…
int HttpStatusFor(absl::StatusCode code);

// The gRPC code an HTTP error status stands for (the inverse of HttpStatusFor, one code per
// status; docs/PROTOCOLS.md): 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED,
// 404 NOT_FOUND, 409 ABORTED, 429 RESOURCE_EXHAUSTED, 499 CANCELLED, 501 UNIMPLEMENTED,
// 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED; OK for 2xx; UNKNOWN for anything else.
grpc::StatusCode GrpcCodeForHttpStatus(int http_status);

}  // namespace ts

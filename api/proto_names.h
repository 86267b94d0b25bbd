// Names tsctl prints and accepts for API enums: gRPC status codes as their canonical
// upper-case names ("INVALID_ARGUMENT"), any API enum's values without their prefix ("QUEUED",
// "direct"); and the one mapping between gRPC codes and HTTP statuses, both ways.
// Stateless and thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/status.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts {

// "OK", "CANCELLED", …, "UNAUTHENTICATED"; "CODE_<n>" for numbers outside the enum.
std::string GrpcCodeName(grpc::StatusCode code);

// A local absl::Status (the numbering is gRPC's) as the gRPC status tsctl reports.
grpc::Status ToGrpcStatus(const absl::Status& status);

// An enum value's name without the prefix proto style puts on the enum's values
// ("JOB_STATE_QUEUED" → "QUEUED", "ATTENTION_PATH_AUTO" → "AUTO"); "" for a number the enum
// does not have.
std::string EnumValueName(const google::protobuf::EnumDescriptor& type, int number);

// The number of the value whose EnumValueName or full name is `name`, in any case; *_UNSPECIFIED
// values are not accepted. INVALID_ARGUMENT "unknown <what> '<name>': expected a, b or c" (the
// accepted names in lower case) otherwise.
absl::StatusOr<int> ParseEnumValueName(const google::protobuf::EnumDescriptor& type,
                                       absl::string_view name, absl::string_view what);

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

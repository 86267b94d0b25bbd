// Names tsctl prints and accepts for API enums: gRPC status codes as their canonical
// upper-case names ("INVALID_ARGUMENT") and attention paths as lower-case words ("direct").
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

}  // namespace ts

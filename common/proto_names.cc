#include "common/proto_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ts {

using taylorshift::v1::AttentionPath;

std::string GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.raw_code()),
                      std::string(status.message()));
}

std::string PathName(AttentionPath path) {
  switch (path) {
    case taylorshift::v1::ATTENTION_PATH_AUTO:
      return "auto";
    case taylorshift::v1::ATTENTION_PATH_DIRECT:
      return "direct";
    case taylorshift::v1::ATTENTION_PATH_EFFICIENT:
      return "efficient";
    case taylorshift::v1::ATTENTION_PATH_SOFTMAX:
      return "softmax";
    default:
      return "unknown";
  }
}

absl::StatusOr<AttentionPath> ParsePath(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (absl::StartsWith(lower, "attention_path_")) lower = lower.substr(15);
  for (AttentionPath path :
       {taylorshift::v1::ATTENTION_PATH_AUTO, taylorshift::v1::ATTENTION_PATH_DIRECT,
        taylorshift::v1::ATTENTION_PATH_EFFICIENT, taylorshift::v1::ATTENTION_PATH_SOFTMAX}) {
    if (lower == PathName(path)) return path;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown path '", name, "': expected auto, direct, efficient or softmax"));
}

}  // namespace ts

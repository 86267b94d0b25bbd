#include "api/proto_names.h"

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

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::StatusOr<grpc::StatusCode> ParseGrpcCodeName(absl::string_view name) {
  for (int code = grpc::StatusCode::OK; code <= grpc::StatusCode::UNAUTHENTICATED; ++code) {
    if (name == GrpcCodeName(static_cast<grpc::StatusCode>(code))) {
      return static_cast<grpc::StatusCode>(code);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a gRPC status code name"));
}

grpc::StatusCode GrpcCodeForHttpStatus(int http_status) {
  if (http_status >= 200 && http_status < 300) return grpc::StatusCode::OK;
  switch (http_status) {
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 409:
      return grpc::StatusCode::ABORTED;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    case 501:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::UNKNOWN;
  }
}

}  // namespace ts

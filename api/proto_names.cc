#include "api/proto_names.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ts {
namespace {

namespace pb = google::protobuf;

// The one mapping between codes and HTTP statuses: HttpStatusFor reads it from code to status,
// GrpcCodeForHttpStatus from status to code, taking the first code listed for a status.
struct CodeAndStatus {
  absl::StatusCode code;
  int http_status;
};
constexpr CodeAndStatus kHttpStatuses[] = {
    {absl::StatusCode::kOk, 200},
    {absl::StatusCode::kInvalidArgument, 400},
    {absl::StatusCode::kFailedPrecondition, 400},
    {absl::StatusCode::kOutOfRange, 400},
    {absl::StatusCode::kUnauthenticated, 401},
    {absl::StatusCode::kPermissionDenied, 403},
    {absl::StatusCode::kNotFound, 404},
    {absl::StatusCode::kAborted, 409},
    {absl::StatusCode::kAlreadyExists, 409},
    {absl::StatusCode::kResourceExhausted, 429},
    {absl::StatusCode::kCancelled, 499},
    {absl::StatusCode::kUnimplemented, 501},
    {absl::StatusCode::kUnavailable, 503},
    {absl::StatusCode::kDeadlineExceeded, 504},
};

// "AttentionPath" → "ATTENTION_PATH_".
std::string EnumValuePrefix(const pb::EnumDescriptor& type) {
  std::string prefix;
  for (const char c : type.name()) {
    if (absl::ascii_isupper(static_cast<unsigned char>(c)) && !prefix.empty()) prefix += '_';
    prefix += absl::ascii_toupper(static_cast<unsigned char>(c));
  }
  return prefix + "_";
}

}  // namespace

std::string GrpcCodeName(grpc::StatusCode code) {
  // gRPC's codes are absl's, and absl names them as gRPC does.
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", static_cast<int>(code)) : name;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.raw_code()),
                      std::string(status.message()));
}

std::string EnumValueName(const pb::EnumDescriptor& type, int number) {
  const pb::EnumValueDescriptor* value = type.FindValueByNumber(number);
  if (value == nullptr) return "";
  absl::string_view name = value->name();
  absl::ConsumePrefix(&name, EnumValuePrefix(type));
  return std::string(name);
}

absl::StatusOr<int> ParseEnumValueName(const pb::EnumDescriptor& type, absl::string_view name,
                                       absl::string_view what) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    const pb::EnumValueDescriptor& value = *type.value(i);
    if (absl::EndsWith(value.name(), "_UNSPECIFIED")) continue;
    const std::string short_name = EnumValueName(type, value.number());
    if (absl::EqualsIgnoreCase(name, short_name) || absl::EqualsIgnoreCase(name, value.name())) {
      return value.number();
    }
    names.push_back(absl::AsciiStrToLower(short_name));
  }
  std::string expected = names.back();
  if (names.size() > 1) {
    names.pop_back();
    expected = absl::StrCat(absl::StrJoin(names, ", "), " or ", expected);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "': expected ", expected));
}

std::string PathName(taylorshift::v1::AttentionPath path) {
  const std::string name = EnumValueName(*taylorshift::v1::AttentionPath_descriptor(), path);
  return name.empty() ? "unknown" : absl::AsciiStrToLower(name);
}

absl::StatusOr<taylorshift::v1::AttentionPath> ParsePath(absl::string_view name) {
  TS_ASSIGN_OR_RETURN(
      const int path,
      ParseEnumValueName(*taylorshift::v1::AttentionPath_descriptor(), name, "path"));
  return static_cast<taylorshift::v1::AttentionPath>(path);
}

int HttpStatusFor(absl::StatusCode code) {
  for (const CodeAndStatus& entry : kHttpStatuses) {
    if (entry.code == code) return entry.http_status;
  }
  return 500;
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
  for (const CodeAndStatus& entry : kHttpStatuses) {
    if (entry.http_status == http_status) return static_cast<grpc::StatusCode>(entry.code);
  }
  return grpc::StatusCode::UNKNOWN;
}

}  // namespace ts

#include "client/health_check.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace ts::client {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr int kStatusField = 1;
constexpr int kServiceField = 1;

}  // namespace

std::string ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kUnknown:
      return "UNKNOWN";
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return absl::StrCat("STATUS_", static_cast<int>(status));
}

std::string EncodeHealthCheckRequest(absl::string_view service) {
  std::string out;
  // proto3 leaves a field at its default ("") out of the message.
  if (service.empty()) return out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(WireFormatLite::MakeTag(kServiceField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint32(static_cast<std::uint32_t>(service.size()));
  coded.WriteRaw(service.data(), static_cast<int>(service.size()));
  coded.Trim();
  return out;
}

absl::StatusOr<ServingStatus> DecodeHealthCheckResponse(absl::string_view bytes) {
  google::protobuf::io::CodedInputStream coded(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                               static_cast<int>(bytes.size()));
  ServingStatus status = ServingStatus::kUnknown;
  while (const std::uint32_t tag = coded.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kStatusField) {
      std::uint64_t value = 0;
      if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_VARINT ||
          !coded.ReadVarint64(&value)) {
        return absl::InvalidArgumentError("HealthCheckResponse: malformed status field");
      }
      // Enums are int32 on the wire (negative values as 10-byte varints).
      status = static_cast<ServingStatus>(static_cast<std::int32_t>(value));
    } else if (!WireFormatLite::SkipField(&coded, tag)) {
      return absl::InvalidArgumentError("HealthCheckResponse: malformed message");
    }
  }
  // ReadTag returns 0 at the end of the input and on a malformed tag.
  if (!coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError("HealthCheckResponse: malformed message");
  }
  return status;
}

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         grpc::ClientContext* context, ServingStatus* status) {
  const std::string encoded = EncodeHealthCheckRequest(service);
  grpc::Slice slice(encoded);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::GenericStub stub(channel);
  grpc::Status result;
  absl::Notification done;
  stub.UnaryCall(context, kCheckMethod, grpc::StubOptions(), &request, &response,
                 [&result, &done](grpc::Status call_status) {
                   result = std::move(call_status);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!result.ok()) return result;

  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "cannot read the HealthCheckResponse");
  }
  std::string bytes;
  for (const grpc::Slice& part : slices) {
    bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  absl::StatusOr<ServingStatus> decoded = DecodeHealthCheckResponse(bytes);
  if (!decoded.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(decoded.status().message()));
  }
  *status = *decoded;
  return grpc::Status::OK;
}

}  // namespace ts::client

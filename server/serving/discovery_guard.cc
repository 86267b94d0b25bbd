#include "server/serving/discovery_guard.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ts::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

constexpr std::string_view kReflectionPrefix = "/grpc.reflection.";
constexpr std::string_view kHealthPrefix = "/grpc.health.v1.Health/";

// The `authorization` metadata of a call at POST_RECV_INITIAL_METADATA ("" when absent).
std::string_view Authorization(InterceptorBatchMethods* methods) {
  const auto* metadata = methods->GetRecvInitialMetadata();
  if (metadata == nullptr) return {};
  const auto it = metadata->find("authorization");
  if (it == metadata->end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

// HealthCheckRequest.service (field 1); nullopt when the bytes are not such a message.
std::optional<std::string> HealthService(const grpc::ByteBuffer& request) {
  std::vector<grpc::Slice> slices;
  if (!request.Dump(&slices).ok()) return std::nullopt;
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  std::string service;  // proto3: absent = ""; the last occurrence wins
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.number() != 1) continue;
    if (field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) return std::nullopt;
    service = field.length_delimited();
  }
  return service;
}

// A HealthCheckRequest for `service` (shorter than 128 bytes: its length is one varint byte).
grpc::ByteBuffer HealthRequestFor(std::string_view service) {
  std::string bytes = {'\x0a', static_cast<char>(service.size())};  // field 1, length
  bytes.append(service);
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class DiscoveryGuard : public grpc::experimental::Interceptor {
 public:
  DiscoveryGuard(grpc::experimental::ServerRpcInfo* info, const Authorizer* authorizer,
                 const std::set<std::string>* open_names, bool reflection)
      : info_(info), authorizer_(authorizer), open_names_(open_names), reflection_(reflection) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      authenticated_ = authorizer_->Authenticate(Authorization(methods)).ok();
      if (!authenticated_ && reflection_) info_->server_context()->TryCancel();
    }
    if (!authenticated_ && !reflection_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // The health service's request type is grpc::ByteBuffer (it is a raw service).
      auto* request = static_cast<grpc::ByteBuffer*>(methods->GetRecvMessage());
      if (request != nullptr) {
        const std::optional<std::string> service = HealthService(*request);
        if (!service.has_value() || open_names_->count(*service) == 0) {
          *request = HealthRequestFor(DiscoveryGuardFactory::kHiddenName);
          hidden_ = true;
        }
      }
    }
    if (hidden_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          "health of a model needs 'authorization: Bearer <token>' (auth.protect_discovery)"));
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  const Authorizer* authorizer_;
  const std::set<std::string>* open_names_;
  const bool reflection_;
  bool authenticated_ = true;  // until the metadata says otherwise
  bool hidden_ = false;        // the request was replaced
};

}  // namespace

grpc::experimental::Interceptor* DiscoveryGuardFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (!authorizer_->enabled() || info->method() == nullptr) return nullptr;
  const std::string_view method = info->method();
  const bool reflection = method.substr(0, kReflectionPrefix.size()) == kReflectionPrefix;
  if (!reflection && method.substr(0, kHealthPrefix.size()) != kHealthPrefix) return nullptr;
  return new DiscoveryGuard(info, authorizer_, &open_names_, reflection);
}

}  // namespace ts::server

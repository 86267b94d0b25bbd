#include "client/health_check.h"

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ts::client {

using grpc::health::v1::HealthCheckResponse;

std::string ServingStatusName(ServingStatus status) {
  const std::string& name = HealthCheckResponse::ServingStatus_Name(status);
  return name.empty() ? absl::StrCat("STATUS_", static_cast<int>(status)) : name;
}

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         grpc::ClientContext* context, ServingStatus* status) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status result =
      grpc::health::v1::Health::NewStub(channel)->Check(context, request, &response);
  if (result.ok()) *status = response.status();
  return result;
}

}  // namespace ts::client

#include "client/health_check.h"

#include "absl/strings/str_cat.h"

namespace ts::client {

std::string ServingStatusName(ServingStatus status) {
  const std::string& name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status);
  return name.empty() ? absl::StrCat("STATUS_", static_cast<int>(status)) : name;
}

}  // namespace ts::client

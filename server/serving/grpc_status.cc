#include "server/serving/grpc_status.h"

namespace ts::server {

std::string StatusCodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  return name.empty() ? "UNKNOWN" : name;
}

}  // namespace ts::server

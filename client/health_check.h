// tsctl health's names for the answers of gRPC's standard health service,
// grpc.health.v1.Health/Check (proto/grpc/health/v1/health.proto), which tsserver runs with the
// entries "" (the server as a whole), "taylorshift.v1.Classifier", "taylorshift.v1.Jobs" and one
// per served model name. Stateless and thread-safe.
#pragma once

#include <string>

#include "grpc/health/v1/health.pb.h"

namespace ts::client {

using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"; "STATUS_<n>" for a value a newer
// server may add (proto3 keeps it as its number).
std::string ServingStatusName(ServingStatus status);

}  // namespace ts::client

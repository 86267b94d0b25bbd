// Client of gRPC's standard health service, grpc.health.v1.Health/Check
// (proto/grpc/health/v1/health.proto), which tsserver runs with the entries "" (the server as a
// whole), "taylorshift.v1.Classifier", "taylorshift.v1.Jobs" and one per served model name.
// Stateless and thread-safe.
#pragma once

#include <memory>
#include <string>

#include "grpc/health/v1/health.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace ts::client {

using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"; "STATUS_<n>" for a value a newer
// server may add (proto3 keeps it as its number).
std::string ServingStatusName(ServingStatus status);

// Calls Check for `service` ("" = the server as a whole) on `channel` with `context` (deadline
// and token already set). Returns the call's status (NOT_FOUND for a service the server does
// not know, UNAVAILABLE when it cannot be reached, ...); when OK, `*status` is the answer.
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         grpc::ClientContext* context, ServingStatus* status);

}  // namespace ts::client

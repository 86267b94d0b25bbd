#include "server/serving/grpc_call.h"

#include "absl/time/clock.h"
#include "server/serving/grpc_status.h"

namespace ts::server {

CallContext CallFrom(grpc::CallbackServerContext& context) {
  CallContext call;
  const auto& metadata = context.client_metadata();
  if (const auto it = metadata.find("authorization"); it != metadata.end()) {
    call.authorization.assign(it->second.data(), it->second.size());
  }
  if (context.deadline() != std::chrono::system_clock::time_point::max()) {
    // gRPC's deadline is a point on the system clock, so it is read against that clock once,
    // here; from now on it is a duration.
    call.timeout = absl::FromChrono(context.deadline()) - absl::Now();
  }
  call.cancelled = [&context] { return context.IsCancelled(); };
  return call;
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext& context,
                                      const absl::Status& status) {
  auto* reactor = context.DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace ts::server

// What tells a caller which models and services a server has — gRPC server reflection and
// grpc.health.v1.Health Check/Watch of a model's name — behind a bearer token (any role) when
// tokens are on (auth.protect_discovery, server/config.h). A gRPC server interceptor, because both
// services are gRPC's own classes:
// - reflection (every method under /grpc.reflection.): a call without a known token is cancelled
//   as soon as its metadata arrives, before the service reads a request; the client sees
//   CANCELLED and no service name.
// - health: a call without a known token that asks for a name not in `open_names` (the whole
//   server "" and the gRPC services, which probes and load balancers check) is answered
//   UNAUTHENTICATED whether the model exists or not — its request is replaced by one for a name
//   that is never registered before the health service sees it, so the answer cannot depend on
//   the name. Watch answers SERVICE_UNKNOWN for such a name.
// gRPC's health service is raw (it reads its request as a ByteBuffer); the guard decodes the
// HealthCheckRequest's `service` field itself.
// Thread-safe: one interceptor per call; the factory only reads what it was built with.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <set>
#include <string>

#include "server/serving/auth.h"

namespace ts::server {

class DiscoveryGuardFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `authorizer` must outlive the server; with authentication off the guard lets all through.
  DiscoveryGuardFactory(const Authorizer* authorizer, std::set<std::string> open_names)
      : authorizer_(authorizer), open_names_(std::move(open_names)) {}

  // nullptr (no interceptor) for every method but reflection's and health's.
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // The health service's name that the guard puts in an unauthenticated request: not a valid
  // model or service name, so never registered.
  static constexpr char kHiddenName[] = "/hidden";

 private:
  const Authorizer* authorizer_;
  std::set<std::string> open_names_;
};

}  // namespace ts::server

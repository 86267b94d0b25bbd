// gRPC server reflection v1 (grpc.reflection.v1.ServerReflection), beside the v1alpha service
// that gRPC's reflection plugin registers: Debian's gRPC 1.51 has only v1alpha, and newer clients
// (grpcurl, Postman, grpcio-reflection) ask for v1 first. The same answers as gRPC's own service:
// - list_services: the services the server was built with (given at construction);
// - file_by_filename, file_containing_symbol, file_containing_extension: the file from the
//   generated descriptor pool, with each of its (transitive) dependencies that this stream has not
//   sent yet — every file goes once per stream;
// - all_extension_numbers_of_type: the extension numbers the pool knows for a message type.
// A request that cannot be answered gets an error_response (NOT_FOUND naming what was asked for;
// INVALID_ARGUMENT when no request kind is set) and the stream goes on. One response per request,
// in order; the stream ends OK when the client closes its side.
// Who may call it is the discovery guard's business (discovery_guard.h: every /grpc.reflection.
// method). Thread-safe: the service only reads what it was built with; each stream has its own
// reactor.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace ts::server {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: full names of the services to list (this one is added).
  explicit ReflectionV1Service(std::vector<std::string> services);

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to one request; `sent_files` holds the names of the files this stream has sent
  // (updated). Public for the reactor and for tests.
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request,
      std::vector<std::string>* sent_files) const;

 private:
  const std::vector<std::string> services_;
};

}  // namespace ts::server

// What tsserver answers for a gRPC method no registered service takes: UNIMPLEMENTED with a
// message that names the method and what is served instead (the methods of that service, read
// from its descriptor, or the services this server has), rather than gRPC's empty default. Triton
// clients call RPCs of Triton's GRPCInferenceService that KServe v2 does not have (RepositoryIndex,
// ModelStatistics, the shared-memory and trace RPCs); they learn that here.
#pragma once

#include <grpcpp/generic/async_generic_service.h>

#include <string>
#include <string_view>
#include <vector>

namespace ts::server {

// The UNIMPLEMENTED status for `method` ("/package.Service/Method"). `served_services`: the full
// names of the services this server registers (their methods are listed from the generated
// descriptor pool).
grpc::Status UnknownMethodStatus(std::string_view method,
                                 const std::vector<std::string>& served_services);

// A generic (ByteBuffer) service answering every call it gets with UnknownMethodStatus, at once,
// without reading the request. gRPC hands it only the calls that no registered service takes.
// Thread-safe.
class UnknownMethodService final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethodService(std::vector<std::string> served_services)
      : served_services_(std::move(served_services)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) final;

 private:
  const std::vector<std::string> served_services_;
};

// Finishes the call with `status` as soon as it starts; never reads or writes a message.
class FinishingReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit FinishingReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace ts::server

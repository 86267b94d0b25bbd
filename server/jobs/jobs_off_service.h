// What a server with jobs.enabled false answers for taylorshift.v1.Jobs: every RPC of the
// service, unary or streaming and whatever its request, finishes at once with
// FAILED_PRECONDITION "jobs are disabled on this server (jobs.enabled: false)" and, when
// jobs.elsewhere is set, where they run. Callers of any other unknown method get UNIMPLEMENTED
// naming the method and what is served instead (server/serving/unknown_method.h).
//
// It is a generic (ByteBuffer) service, so it needs no list of the Jobs RPCs and answers the
// ones added later too; gRPC hands it only the calls that no registered service takes. With
// authentication on, the caller needs the admin role first (as the Jobs service), so that only
// those who may run jobs learn where. The request is never read. Thread-safe; the authorizer
// must outlive it.
#pragma once

#include <grpcpp/generic/async_generic_service.h>

#include <string>
#include <vector>

#include "server/serving/auth.h"

namespace ts::server {

class JobsOffService final : public grpc::CallbackGenericService {
 public:
  // `elsewhere`: jobs.elsewhere, the hint where jobs run ("" = none). `served_services`: as
  // UnknownMethodStatus's.
  JobsOffService(const Authorizer* authorizer, const std::string& elsewhere,
                 std::vector<std::string> served_services);

  // The answer's message.
  const std::string& message() const { return message_; }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) final;

 private:
  const Authorizer* authorizer_;
  const std::string message_;
  const std::vector<std::string> served_services_;
};

}  // namespace ts::server

#include "server/jobs/jobs_off_service.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/serving/grpc_status.h"

namespace ts::server {
namespace {

constexpr char kJobsMethodPrefix[] = "/taylorshift.v1.Jobs/";

std::string JobsOffMessage(const std::string& elsewhere) {
  std::string message =
      "jobs are disabled on this server (jobs.enabled: false): it serves models only";
  if (elsewhere.empty()) {
    absl::StrAppend(&message, "; submit, watch and promote jobs on the server that runs them");
  } else {
    absl::StrAppend(&message, "; jobs run at ", elsewhere, " (jobs.elsewhere)");
  }
  return message;
}

// Finishes the call with `status` as soon as it starts; never reads or writes a message.
class FinishingReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit FinishingReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

JobsOffService::JobsOffService(const Authorizer* authorizer, const std::string& elsewhere)
    : authorizer_(authorizer), message_(JobsOffMessage(elsewhere)) {}

grpc::ServerGenericBidiReactor* JobsOffService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  const std::string& method = context->method();
  if (!absl::StartsWith(method, kJobsMethodPrefix)) {
    return new FinishingReactor(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED, absl::StrCat("unknown method ", method)));
  }
  if (const absl::Status allowed = authorizer_->Check(*context, "admin"); !allowed.ok()) {
    return new FinishingReactor(ToGrpcStatus(allowed));
  }
  return new FinishingReactor(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, message_));
}

}  // namespace ts::server

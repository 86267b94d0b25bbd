#include "server/jobs/jobs_off_service.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/serving/grpc_status.h"
#include "server/serving/unknown_method.h"

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

}  // namespace

JobsOffService::JobsOffService(const Authorizer* authorizer, const std::string& elsewhere,
                               std::vector<std::string> served_services)
    : authorizer_(authorizer),
      message_(JobsOffMessage(elsewhere)),
      served_services_(std::move(served_services)) {}

grpc::ServerGenericBidiReactor* JobsOffService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  const std::string& method = context->method();
  if (!absl::StartsWith(method, kJobsMethodPrefix)) {
    return new FinishingReactor(UnknownMethodStatus(method, served_services_));
  }
  if (const absl::Status allowed = authorizer_->Check(*context, "admin"); !allowed.ok()) {
    return new FinishingReactor(ToGrpcStatus(allowed));
  }
  return new FinishingReactor(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, message_));
}

}  // namespace ts::server

#include "server/serving/unknown_method.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ts::server {
namespace {

constexpr std::string_view kKServeService = "inference.GRPCInferenceService";

}  // namespace

grpc::Status UnknownMethodStatus(std::string_view method,
                                 const std::vector<std::string>& served_services) {
  // "/package.Service/Method"; anything else is named whole.
  std::string_view service, name = method;
  if (method.size() > 1 && method[0] == '/') {
    const std::size_t slash = method.find('/', 1);
    if (slash != std::string_view::npos) {
      service = method.substr(1, slash - 1);
      name = method.substr(slash + 1);
    }
  }
  const bool served =
      std::find(served_services.begin(), served_services.end(), service) != served_services.end();
  const google::protobuf::ServiceDescriptor* descriptor =
      served ? google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
                   std::string(service))
             : nullptr;
  std::string message;
  if (descriptor != nullptr) {
    std::vector<std::string> methods;
    methods.reserve(static_cast<std::size_t>(descriptor->method_count()));
    for (int i = 0; i < descriptor->method_count(); ++i) {
      methods.push_back(descriptor->method(i)->name());
    }
    message = absl::StrCat(std::string(name), " is not implemented by ", std::string(service),
                           " on this server; it answers ", absl::StrJoin(methods, ", "));
    if (service == kKServeService) {
      absl::StrAppend(&message,
                      " (KServe v2 plus Triton's ModelStreamInfer and ModelConfig; Triton's "
                      "model repository, statistics, shared-memory, trace and logging RPCs are "
                      "not served: models come from the server config's models: and from job "
                      "promotion, statistics from GET /metrics)");
    }
  } else {
    message = absl::StrCat("unknown method ", std::string(method), ": service '",
                           std::string(service), "' is not served here; this server serves ",
                           absl::StrJoin(served_services, ", "));
  }
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message);
}

grpc::ServerGenericBidiReactor* UnknownMethodService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  return new FinishingReactor(UnknownMethodStatus(context->method(), served_services_));
}

}  // namespace ts::server

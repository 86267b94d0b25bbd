// Bearer-token authorisation: a call carries `authorization: Bearer TOKEN`; each token has roles
// ("classify", "admin"). Health checks are not subject to it (the health service never calls
// Check). Thread-safe (immutable after Create).
#pragma once

#include <grpcpp/server_context.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"

namespace ts::server {

class Authorizer {
 public:
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(const AuthConfig& config);

  // OK when authentication is off, or the call's token has `role`. UNAUTHENTICATED when the
  // token is missing or unknown, PERMISSION_DENIED when it lacks the role.
  absl::Status Check(const grpc::CallbackServerContext& context, const std::string& role) const;
  // The same for a front end that has the header's value ("Bearer TOKEN"; empty = none).
  absl::Status Check(std::string_view authorization, const std::string& role) const;
  bool enabled() const { return !tokens_.empty(); }

 private:
  explicit Authorizer(std::map<std::string, std::set<std::string>> tokens)
      : tokens_(std::move(tokens)) {}
  std::map<std::string, std::set<std::string>> tokens_;
};

}  // namespace ts::server

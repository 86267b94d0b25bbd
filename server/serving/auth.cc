#include "server/serving/auth.h"

#include "absl/strings/str_cat.h"

namespace ts::server {

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(const AuthConfig& config) {
  std::map<std::string, std::set<std::string>> tokens;
  for (const auto& [token, roles] : config.tokens) {
    if (token.empty()) return absl::InvalidArgumentError("auth.tokens: empty token");
    tokens[token].insert(roles.begin(), roles.end());
  }
  return std::unique_ptr<Authorizer>(new Authorizer(std::move(tokens)));
}

absl::Status Authorizer::Check(const grpc::CallbackServerContext& context,
                               const std::string& role) const {
  if (tokens_.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  return Check(std::string_view(it->second.data(), it->second.size()), role);
}

absl::Status Authorizer::Check(std::string_view authorization, const std::string& role) const {
  if (tokens_.empty()) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>'");
  }
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.substr(0, kPrefix.size()) != kPrefix) {
    return absl::UnauthenticatedError("authorization must be 'Bearer <token>'");
  }
  const auto token = tokens_.find(std::string(authorization.substr(kPrefix.size())));
  if (token == tokens_.end()) return absl::UnauthenticatedError("unknown bearer token");
  if (token->second.count(role) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("this token lacks the '", role, "' role"));
  }
  return absl::OkStatus();
}

}  // namespace ts::server

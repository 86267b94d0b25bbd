// Bearer-token authorisation: a call carries `authorization: Bearer TOKEN`; each token has roles
// ("classify", "admin", "metrics"). Health checks of the server and its services are not subject
// to it (the health service never calls Check; server/serving/discovery_guard.h guards health of
// model names and reflection). Thread-safe (immutable after Create).
//
// Tokens are kept only as SHA-256 digests, and a presented token is compared with every
// configured one in constant time (CRYPTO_memcmp over the digests, no early exit), so neither the
// answer's timing nor a lookup structure tells a caller how much of a token it guessed right.
#pragma once

#include <grpcpp/server_context.h>

#include <array>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

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
  // OK when authentication is off or the token is known, whatever its roles; else
  // UNAUTHENTICATED as Check.
  absl::Status Authenticate(std::string_view authorization) const;
  bool enabled() const { return !tokens_.empty(); }

  // Who made a call, for records such as promotions (never a secret): "token:<first 12 hex
  // digits of the token's SHA-256>" when authentication is on and the call carries a token,
  // else "cert:<subject>" for a verified client certificate, else "anonymous".
  std::string Identity(const grpc::CallbackServerContext& context) const;
  // The same from the header's value and the certificate's subject (either may be empty).
  std::string Identity(std::string_view authorization, std::string_view cert_subject) const;

  static constexpr std::size_t kDigestBytes = 32;  // SHA-256
  using Digest = std::array<unsigned char, kDigestBytes>;

 private:
  struct Token {
    Digest digest;
    std::set<std::string> roles;
  };
  explicit Authorizer(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  // The roles of the token in `authorization`, or UNAUTHENTICATED.
  absl::StatusOr<const std::set<std::string>*> Roles(std::string_view authorization) const;

  std::vector<Token> tokens_;  // one per distinct token
};

}  // namespace ts::server

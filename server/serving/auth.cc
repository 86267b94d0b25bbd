#include "server/serving/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <map>

#include "absl/strings/str_cat.h"

namespace ts::server {
namespace {

Authorizer::Digest Sha256(std::string_view text) {
  Authorizer::Digest digest;
  static_assert(SHA256_DIGEST_LENGTH == Authorizer::kDigestBytes);
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(const AuthConfig& config) {
  std::map<Digest, std::set<std::string>> merged;
  for (const auto& [token, roles] : config.tokens) {
    if (token.empty()) return absl::InvalidArgumentError("auth.tokens: empty token");
    merged[Sha256(token)].insert(roles.begin(), roles.end());
  }
  std::vector<Token> tokens;
  tokens.reserve(merged.size());
  for (auto& [digest, roles] : merged) tokens.push_back({digest, std::move(roles)});
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

absl::StatusOr<const std::set<std::string>*> Authorizer::Roles(
    std::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>'");
  }
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.substr(0, kPrefix.size()) != kPrefix) {
    return absl::UnauthenticatedError("authorization must be 'Bearer <token>'");
  }
  const Digest presented = Sha256(authorization.substr(kPrefix.size()));
  // Every configured token is compared, to the last byte of its digest, whichever matches.
  const std::set<std::string>* roles = nullptr;
  for (const Token& token : tokens_) {
    const bool equal = CRYPTO_memcmp(token.digest.data(), presented.data(), kDigestBytes) == 0;
    if (equal) roles = &token.roles;
  }
  if (roles == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  return roles;
}

absl::Status Authorizer::Check(std::string_view authorization, const std::string& role) const {
  if (tokens_.empty()) return absl::OkStatus();
  absl::StatusOr<const std::set<std::string>*> roles = Roles(authorization);
  if (!roles.ok()) return roles.status();
  if ((*roles)->count(role) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("this token lacks the '", role, "' role"));
  }
  return absl::OkStatus();
}

std::string Authorizer::Identity(const grpc::CallbackServerContext& context) const {
  std::string_view authorization;
  const auto& metadata = context.client_metadata();
  if (const auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = std::string_view(it->second.data(), it->second.size());
  }
  std::string subject;
  if (const auto auth_context = context.auth_context(); auth_context != nullptr) {
    for (const auto& value : auth_context->FindPropertyValues("x509_subject")) {
      subject.assign(value.data(), value.size());
    }
  }
  return Identity(authorization, subject);
}

std::string Authorizer::Identity(std::string_view authorization,
                                 std::string_view cert_subject) const {
  constexpr std::string_view kPrefix = "Bearer ";
  if (enabled() && authorization.substr(0, kPrefix.size()) == kPrefix) {
    const Digest digest = Sha256(authorization.substr(kPrefix.size()));
    constexpr char kHex[] = "0123456789abcdef";
    std::string fingerprint = "token:";
    for (std::size_t i = 0; i < 6; ++i) {
      fingerprint += kHex[digest[i] >> 4];
      fingerprint += kHex[digest[i] & 0xf];
    }
    return fingerprint;
  }
  if (!cert_subject.empty()) return "cert:" + std::string(cert_subject);
  return "anonymous";
}

absl::Status Authorizer::Authenticate(std::string_view authorization) const {
  if (tokens_.empty()) return absl::OkStatus();
  return Roles(authorization).status();
}

}  // namespace ts::server

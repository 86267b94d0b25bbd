// Authorizer (server/serving/auth.h): roles per token, and a presented token matched only when
// it equals a configured one byte for byte — its prefixes, extensions and same-length neighbours
// are all unknown — with every configured token compared (by SHA-256 digest, in constant time).
#include "server/serving/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace ts::server {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Authorizer> Make(std::map<std::string, std::vector<std::string>> tokens) {
  AuthConfig config;
  config.tokens = std::move(tokens);
  auto authorizer = Authorizer::Create(config);
  EXPECT_TRUE(authorizer.ok()) << authorizer.status();
  return authorizer.ok() ? *std::move(authorizer) : nullptr;
}

TEST(AuthorizerTest, OffWithoutTokens) {
  auto authorizer = Make({});
  EXPECT_FALSE(authorizer->enabled());
  EXPECT_TRUE(authorizer->Check("", "admin").ok());
  EXPECT_TRUE(authorizer->Authenticate("").ok());
}

TEST(AuthorizerTest, RolesPerToken) {
  auto authorizer = Make({{"s3cret-classify", {"classify"}},
                          {"s3cret-admin", {"admin", "classify"}},
                          {"s3cret-prom", {"metrics"}}});
  ASSERT_TRUE(authorizer->enabled());
  EXPECT_TRUE(authorizer->Check("Bearer s3cret-classify", "classify").ok());
  EXPECT_EQ(authorizer->Check("Bearer s3cret-classify", "admin").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(authorizer->Check("Bearer s3cret-admin", "admin").ok());
  EXPECT_TRUE(authorizer->Check("Bearer s3cret-admin", "classify").ok());
  EXPECT_TRUE(authorizer->Check("Bearer s3cret-prom", "metrics").ok());
  const absl::Status lacks = authorizer->Check("Bearer s3cret-prom", "classify");
  EXPECT_EQ(lacks.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(lacks.message()), HasSubstr("lacks the 'classify' role"));
  // Authenticate: any known token, whatever its roles.
  EXPECT_TRUE(authorizer->Authenticate("Bearer s3cret-prom").ok());
  EXPECT_EQ(authorizer->Authenticate("Bearer nope").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authorizer->Authenticate("").code(), absl::StatusCode::kUnauthenticated);
}

// Issue 45: who promoted is recorded as a fingerprint of the token (never the token), the client
// certificate's subject, or "anonymous".
TEST(AuthorizerTest, IdentityIsATokenFingerprintACertificateSubjectOrAnonymous) {
  auto on = Make({{"s3cret-admin", {"admin"}}});
  // The first 12 hex digits of SHA-256("s3cret-admin").
  EXPECT_EQ(on->Identity("Bearer s3cret-admin", "CN=ops"), "token:77a4e2062962");
  EXPECT_EQ(on->Identity("", "CN=ops"), "cert:CN=ops");
  EXPECT_EQ(on->Identity("", ""), "anonymous");
  auto off = Make({});
  EXPECT_EQ(off->Identity("Bearer s3cret-admin", ""), "anonymous");
  EXPECT_EQ(off->Identity("Bearer s3cret-admin", "CN=ops"), "cert:CN=ops");
}

TEST(AuthorizerTest, OnlyTheExactTokenMatches) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  auto authorizer = Make({{token, {"classify"}}, {"other-token", {"admin"}}});
  std::vector<std::string> near = {
      "",           token.substr(0, 1), token.substr(0, token.size() - 1),
      token + "0",  token + " ",        std::string(token.size(), '0'),
      "other-token"};
  for (std::size_t i = 0; i < token.size(); ++i) {
    std::string flipped = token;
    flipped[i] = static_cast<char>(flipped[i] ^ 1);
    near.push_back(flipped);
  }
  for (const std::string& guess : near) {
    const absl::Status status = authorizer->Check("Bearer " + guess, "classify");
    EXPECT_FALSE(status.ok()) << guess;
    if (guess != "other-token") {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << guess;
      EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr(token))) << guess;
    }
  }
  EXPECT_TRUE(authorizer->Check("Bearer " + token, "classify").ok());
  EXPECT_EQ(authorizer->Check("bearer " + token, "classify").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authorizer->Check(token, "classify").code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthorizerTest, EmptyTokenIsRefused) {
  AuthConfig config;
  config.tokens[""] = {"classify"};
  EXPECT_EQ(Authorizer::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts::server

// The grpc.health.v1 messages compiled from proto/grpc/health/v1/health.proto: byte for byte
// the published wire format that gRPC's health service (upb-encoded) speaks, and the status
// names tsctl health prints (the call itself is tested against tsserver in
// tests/server/tsctl_integration_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "client/result_format.h"

namespace ts::client {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using namespace std::string_literals;

std::string RequestBytes(const std::string& service) {
  HealthCheckRequest request;
  request.set_service(service);
  return request.SerializeAsString();
}

TEST(HealthCheckTest, RequestIsFieldOneAsALengthDelimitedString) {
  // Tag (1 << 3) | 2 = 0x0a, length, bytes.
  EXPECT_EQ(RequestBytes("listops"), "\x0a\x07listops"s);
  // proto3 leaves the default out: the server as a whole is an empty message.
  EXPECT_EQ(RequestBytes(""), ""s);
  // Lengths from 128 on take a two-byte varint.
  const std::string long_name(200, 'm');
  EXPECT_EQ(RequestBytes(long_name), "\x0a\xc8\x01"s + long_name);
}

TEST(HealthCheckTest, ResponseStatusIsFieldOneAsAVarint) {
  HealthCheckResponse response;
  ASSERT_TRUE(response.ParseFromString("\x08\x01"s));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(response.ParseFromString("\x08\x02"s));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  // An absent field is the enum's default, UNKNOWN; fields it does not know are skipped.
  ASSERT_TRUE(response.ParseFromString(""));
  EXPECT_EQ(response.status(), HealthCheckResponse::UNKNOWN);
  ASSERT_TRUE(response.ParseFromString("\x12\x01x\x18\x05\x08\x01"s));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  // A value this client does not know is kept, and named by its number.
  ASSERT_TRUE(response.ParseFromString("\x08\x07"s));
  EXPECT_EQ(ServingStatusName(response.status()), "STATUS_7");
}

TEST(HealthCheckTest, StatusNames) {
  EXPECT_EQ(ServingStatusName(HealthCheckResponse::UNKNOWN), "UNKNOWN");
  EXPECT_EQ(ServingStatusName(HealthCheckResponse::SERVING), "SERVING");
  EXPECT_EQ(ServingStatusName(HealthCheckResponse::NOT_SERVING), "NOT_SERVING");
  EXPECT_EQ(ServingStatusName(HealthCheckResponse::SERVICE_UNKNOWN), "SERVICE_UNKNOWN");
}

}  // namespace
}  // namespace ts::client

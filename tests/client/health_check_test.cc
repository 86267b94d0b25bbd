// The hand-encoded grpc.health.v1 messages of client/health_check.h, byte for byte against
// the protobuf wire format (the call itself is tested against tsserver in
// tests/server/tsctl_integration_test.cc).
#include "client/health_check.h"

#include <gtest/gtest.h>

#include <string>

namespace ts::client {
namespace {

using namespace std::string_literals;

TEST(HealthCheckTest, RequestIsFieldOneAsALengthDelimitedString) {
  // Tag (1 << 3) | 2 = 0x0a, length, bytes.
  EXPECT_EQ(EncodeHealthCheckRequest("listops"), "\x0a\x07listops"s);
  // proto3 leaves the default out: the server as a whole is an empty message.
  EXPECT_EQ(EncodeHealthCheckRequest(""), ""s);
  // Lengths from 128 on take a two-byte varint.
  const std::string long_name(200, 'm');
  EXPECT_EQ(EncodeHealthCheckRequest(long_name), "\x0a\xc8\x01"s + long_name);
}

TEST(HealthCheckTest, ResponseStatusIsFieldOneAsAVarint) {
  EXPECT_EQ(*DecodeHealthCheckResponse("\x08\x01"s), ServingStatus::kServing);
  EXPECT_EQ(*DecodeHealthCheckResponse("\x08\x02"s), ServingStatus::kNotServing);
  // An absent field is the enum's default, UNKNOWN.
  EXPECT_EQ(*DecodeHealthCheckResponse(""), ServingStatus::kUnknown);
  // A value this client does not know is kept, and named by its number.
  const auto future = DecodeHealthCheckResponse("\x08\x07"s);
  ASSERT_TRUE(future.ok());
  EXPECT_EQ(ServingStatusName(*future), "STATUS_7");
}

TEST(HealthCheckTest, ResponseSkipsFieldsItDoesNotKnow) {
  // Field 2 (string "x"), field 3 (varint 5), then status SERVING.
  EXPECT_EQ(*DecodeHealthCheckResponse("\x12\x01x\x18\x05\x08\x01"s), ServingStatus::kServing);
}

TEST(HealthCheckTest, MalformedResponsesAreErrors) {
  // Truncated varint, status as a string, a truncated length-delimited field, tag 0.
  for (const std::string& bytes :
       {"\x08\x81"s, "\x0a\x01\x01"s, "\x12\x05\x61\x62"s, "\x00\x01"s}) {
    const auto decoded = DecodeHealthCheckResponse(bytes);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
        << "bytes of size " << bytes.size();
  }
}

TEST(HealthCheckTest, StatusNames) {
  EXPECT_EQ(ServingStatusName(ServingStatus::kUnknown), "UNKNOWN");
  EXPECT_EQ(ServingStatusName(ServingStatus::kServing), "SERVING");
  EXPECT_EQ(ServingStatusName(ServingStatus::kNotServing), "NOT_SERVING");
  EXPECT_EQ(ServingStatusName(ServingStatus::kServiceUnknown), "SERVICE_UNKNOWN");
}

}  // namespace
}  // namespace ts::client

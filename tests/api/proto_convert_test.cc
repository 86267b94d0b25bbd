#include "api/proto_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace ts {
namespace {

namespace pb = taylorshift::v1;

TEST(ProtoConvertTest, EveryApiPathMapsToTheModelsAndBack) {
  const std::pair<pb::AttentionPath, AttentionPath> pairs[] = {
      {pb::ATTENTION_PATH_AUTO, AttentionPath::kAuto},
      {pb::ATTENTION_PATH_DIRECT, AttentionPath::kDirect},
      {pb::ATTENTION_PATH_EFFICIENT, AttentionPath::kEfficient},
      {pb::ATTENTION_PATH_SOFTMAX, AttentionPath::kSoftmax},
  };
  for (const auto& [api, model] : pairs) {
    absl::StatusOr<AttentionPath> converted = FromProtoPath(api);
    ASSERT_TRUE(converted.ok()) << converted.status();
    EXPECT_EQ(*converted, model);
    EXPECT_EQ(ToProtoPath(model), api);
  }
  // Every value the API defines is covered above.
  EXPECT_EQ(pb::AttentionPath_descriptor()->value_count(), 4);
}

TEST(ProtoConvertTest, UnknownApiValueIsInvalidArgumentNamingPath) {
  const absl::StatusOr<AttentionPath> converted = FromProtoPath(static_cast<pb::AttentionPath>(42));
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(converted.status().message()),
              ::testing::StartsWith("path: unknown attention path value 42"));
}

TEST(ProtoConvertTest, ReferencePathsAreReportedAsAuto) {
  EXPECT_EQ(ToProtoPath(AttentionPath::kDirectReference), pb::ATTENTION_PATH_AUTO);
  EXPECT_EQ(ToProtoPath(AttentionPath::kEfficientReference), pb::ATTENTION_PATH_AUTO);
}

}  // namespace
}  // namespace ts

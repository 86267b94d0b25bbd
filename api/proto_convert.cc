#include "api/proto_convert.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ts {

namespace pb = taylorshift::v1;

// Every API path and the model's path it stands for, read both ways.
constexpr std::pair<pb::AttentionPath, AttentionPath> kPaths[] = {
    {pb::ATTENTION_PATH_AUTO, AttentionPath::kAuto},
    {pb::ATTENTION_PATH_DIRECT, AttentionPath::kDirect},
    {pb::ATTENTION_PATH_EFFICIENT, AttentionPath::kEfficient},
    {pb::ATTENTION_PATH_SOFTMAX, AttentionPath::kSoftmax},
};

absl::StatusOr<AttentionPath> FromProtoPath(pb::AttentionPath path) {
  for (const auto& [api, model] : kPaths) {
    if (api == path) return model;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("path: unknown attention path value ", static_cast<int>(path)));
}

pb::AttentionPath ToProtoPath(AttentionPath path) {
  for (const auto& [api, model] : kPaths) {
    if (model == path) return api;
  }
  return pb::ATTENTION_PATH_AUTO;
}

}  // namespace ts

#include "api/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace ts {

namespace pb = taylorshift::v1;

absl::StatusOr<AttentionPath> FromProtoPath(pb::AttentionPath path) {
  switch (path) {
    case pb::ATTENTION_PATH_AUTO:
      return AttentionPath::kAuto;
    case pb::ATTENTION_PATH_DIRECT:
      return AttentionPath::kDirect;
    case pb::ATTENTION_PATH_EFFICIENT:
      return AttentionPath::kEfficient;
    case pb::ATTENTION_PATH_SOFTMAX:
      return AttentionPath::kSoftmax;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("path: unknown attention path value ", static_cast<int>(path)));
  }
}

pb::AttentionPath ToProtoPath(AttentionPath path) {
  switch (path) {
    case AttentionPath::kDirect:
      return pb::ATTENTION_PATH_DIRECT;
    case AttentionPath::kEfficient:
      return pb::ATTENTION_PATH_EFFICIENT;
    case AttentionPath::kSoftmax:
      return pb::ATTENTION_PATH_SOFTMAX;
    default:
      return pb::ATTENTION_PATH_AUTO;
  }
}

}  // namespace ts

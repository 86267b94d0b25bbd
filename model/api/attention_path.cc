#include "model/api/attention_path.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ts {
namespace {

constexpr std::array<std::pair<AttentionPath, std::string_view>, 6> kNames = {{
    {AttentionPath::kAuto, "auto"},
    {AttentionPath::kDirect, "direct"},
    {AttentionPath::kEfficient, "efficient"},
    {AttentionPath::kSoftmax, "softmax"},
    {AttentionPath::kDirectReference, "direct_reference"},
    {AttentionPath::kEfficientReference, "efficient_reference"},
}};

}  // namespace

std::string_view AttentionPathName(AttentionPath path) {
  for (const auto& [value, name] : kNames) {
    if (value == path) return name;
  }
  return "unknown";
}

absl::StatusOr<AttentionPath> ParseAttentionPath(std::string_view name) {
  for (const auto& [value, known] : kNames) {
    if (known == name) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown attention path '", std::string(name),
                   "'; expected one of auto, direct, efficient, softmax, direct_reference, "
                   "efficient_reference"));
}

}  // namespace ts

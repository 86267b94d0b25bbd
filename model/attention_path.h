// Names of the attention implementations. Torch-free so that config and RPC code can use it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ts {

enum class AttentionPath {
  kAuto,                // direct or efficient, whichever the cost model says is faster
  kDirect,              // O(N²d), fused, blocked over queries
  kEfficient,           // O(N·d³), symmetric features, chunked over N
  kSoftmax,             // standard scaled dot-product attention (baseline)
  kDirectReference,     // unfused port of the reference implementation (tests/benchmarks)
  kEfficientReference,  // full d² features, unchunked (tests/benchmarks)
};

std::string_view AttentionPathName(AttentionPath path);
// Accepts the names AttentionPathName returns ("auto", "direct", ...).
absl::StatusOr<AttentionPath> ParseAttentionPath(std::string_view name);

}  // namespace ts

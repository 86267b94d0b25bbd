// Names of the attention implementations. Torch-free so that config and RPC code can use it.
#pragma once

#include <cstdint>
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

// The concrete path of `path` for sequences of `tokens` tokens: kAuto is efficient above
// `crossover_tokens` and direct up to it; any other path is itself.
inline AttentionPath ResolveAuto(AttentionPath path, std::int64_t tokens,
                                 std::int64_t crossover_tokens) {
  if (path != AttentionPath::kAuto) return path;
  return tokens > crossover_tokens ? AttentionPath::kEfficient : AttentionPath::kDirect;
}
// Accepts the names AttentionPathName returns ("auto", "direct", ...).
absl::StatusOr<AttentionPath> ParseAttentionPath(std::string_view name);

}  // namespace ts

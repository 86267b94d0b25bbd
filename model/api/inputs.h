// Turning user inputs into token sequences: documents (bytes) under an over-length policy, and
// 8-bit images into grayscale pixel tokens. Torch-free; shared by the server, tsmodel and the
// dataset readers, so a document is tokenised the same way everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ts {

enum class LengthPolicy {
  kTruncate,  // keep the first max_length tokens (the LRA convention)
  kKeepTail,  // keep the last max_length tokens
  kReject,    // INVALID_ARGUMENT naming the limit
  kWindow,    // overlapping windows of max_length, stride `window_stride`; probabilities averaged
};

// "truncate", "keep_tail", "reject", "window": the names configs and requests use.
std::string_view LengthPolicyName(LengthPolicy policy);
// Inverse of LengthPolicyName; INVALID_ARGUMENT naming the choices.
absl::StatusOr<LengthPolicy> ParseLengthPolicy(std::string_view name);

struct LengthPolicyOptions {
  std::int64_t max_length = 0;  // > 0
  LengthPolicy policy = LengthPolicy::kTruncate;
  std::int64_t window_stride = 0;  // 0 = max_length / 2 (at least 1)
  std::int64_t max_windows = 16;   // more windows needed → INVALID_ARGUMENT
};

struct PreparedInput {
  std::vector<std::string> windows;  // each one sequence of byte tokens, ≤ max_length
  bool truncated = false;            // tokens were dropped (truncate / keep_tail)
  std::int64_t input_tokens = 0;     // tokens before the policy
};

// The window policy's stride: window_stride, or max_length / 2 (at least 1) when that is 0.
std::int64_t WindowStride(const LengthPolicyOptions& options);

// INVALID_ARGUMENT for an empty input, or (reject / window) an input over the limits; the
// message names the limit and the input's length.
absl::StatusOr<PreparedInput> PrepareTokens(std::string_view tokens,
                                            const LengthPolicyOptions& options);

// Row-major 8-bit pixels (channels 1 or 3, interleaved) → one grayscale byte per pixel. RGB uses
// the CIFAR pixel task's conversion, round(0.2989 R + 0.5870 G + 0.1140 B). Errors name the
// expected and actual byte counts.
absl::StatusOr<std::string> ImageToTokens(std::int64_t width, std::int64_t height,
                                          std::int64_t channels, std::string_view pixels);

}  // namespace ts

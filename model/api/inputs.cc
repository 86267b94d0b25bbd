#include "model/api/inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ts {

std::string_view LengthPolicyName(LengthPolicy policy) {
  switch (policy) {
    case LengthPolicy::kTruncate:
      return "truncate";
    case LengthPolicy::kKeepTail:
      return "keep_tail";
    case LengthPolicy::kReject:
      return "reject";
    case LengthPolicy::kWindow:
      return "window";
  }
  return "unknown";
}

absl::StatusOr<LengthPolicy> ParseLengthPolicy(std::string_view name) {
  for (LengthPolicy policy : {LengthPolicy::kTruncate, LengthPolicy::kKeepTail,
                              LengthPolicy::kReject, LengthPolicy::kWindow}) {
    if (name == LengthPolicyName(policy)) return policy;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "must be one of truncate, keep_tail, reject, window; got \"", std::string(name), "\""));
}

std::int64_t WindowStride(const LengthPolicyOptions& options) {
  return options.window_stride > 0 ? options.window_stride
                                   : std::max<std::int64_t>(1, options.max_length / 2);
}

absl::StatusOr<PreparedInput> PrepareTokens(std::string_view tokens,
                                            const LengthPolicyOptions& options) {
  if (options.max_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_length must be > 0, got ", options.max_length));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("input is empty (0 tokens)");
  const auto length = static_cast<std::int64_t>(tokens.size());
  PreparedInput out;
  out.input_tokens = length;
  if (length <= options.max_length) {
    out.windows.emplace_back(tokens);
    return out;
  }
  switch (options.policy) {
    case LengthPolicy::kTruncate:
      out.windows.emplace_back(tokens.substr(0, options.max_length));
      out.truncated = true;
      return out;
    case LengthPolicy::kKeepTail:
      out.windows.emplace_back(tokens.substr(length - options.max_length));
      out.truncated = true;
      return out;
    case LengthPolicy::kReject:
      return absl::InvalidArgumentError(absl::StrCat(
          "input has ", length, " tokens, over the model's max_length of ", options.max_length));
    case LengthPolicy::kWindow: {
      const std::int64_t stride = WindowStride(options);
      // Windows start at 0, stride, 2·stride, …; the last one is aligned to the end so every
      // token is covered and no window is short.
      const std::int64_t windows = 1 + (length - options.max_length + stride - 1) / stride;
      if (windows > options.max_windows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input has ", length, " tokens: ", windows, " windows of ", options.max_length,
            " (stride ", stride, ") exceed max_windows=", options.max_windows));
      }
      for (std::int64_t i = 0; i < windows; ++i) {
        const std::int64_t start = std::min(i * stride, length - options.max_length);
        out.windows.emplace_back(tokens.substr(start, options.max_length));
      }
      return out;
    }
  }
  return absl::InternalError("unknown length policy");
}

absl::StatusOr<std::string> ImageToTokens(std::int64_t width, std::int64_t height,
                                          std::int64_t channels, std::string_view pixels) {
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image width and height must be > 0, got ", width, "x", height));
  }
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("image channels must be 1 (gray) or 3 (RGB), got ", channels));
  }
  // The API's Image has 32-bit sides: their product with the channels can overflow 64 bits.
  if (width > std::numeric_limits<std::int64_t>::max() / height / channels) {
    return absl::InvalidArgumentError(absl::StrCat("image of ", width, "x", height, "x", channels,
                                                   " is too large (over 2^63 pixel bytes)"));
  }
  const std::int64_t expected = width * height * channels;
  if (static_cast<std::int64_t>(pixels.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("image of ", width, "x", height, "x", channels,
                                                   " needs ", expected, " pixel bytes, got ",
                                                   pixels.size()));
  }
  if (channels == 1) return std::string(pixels);
  std::string gray(static_cast<std::size_t>(width * height), '\0');
  for (std::int64_t i = 0; i < width * height; ++i) {
    const auto r = static_cast<unsigned char>(pixels[3 * i]);
    const auto g = static_cast<unsigned char>(pixels[3 * i + 1]);
    const auto b = static_cast<unsigned char>(pixels[3 * i + 2]);
    const double y = 0.2989 * r + 0.5870 * g + 0.1140 * b;
    gray[i] = static_cast<char>(std::min(255L, std::lround(y)));
  }
  return gray;
}

}  // namespace ts

#include "model/api/inputs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ts {
namespace {

TEST(ImageToTokensTest, RgbBecomesOneGrayTokenPerPixel) {
  const auto gray = ImageToTokens(2, 1, 3, std::string("\x0a\x14\xfa\xff\xff\xff", 6));
  ASSERT_TRUE(gray.ok()) << gray.status();
  // round(0.2989·10 + 0.5870·20 + 0.1140·250) = 43; white stays 255.
  EXPECT_EQ(*gray, std::string("\x2b\xff", 2));
  EXPECT_EQ(*ImageToTokens(1, 2, 1, "ab"), "ab");
}

TEST(ImageToTokensTest, SizesThatDoNotMatchThePixelsAreInvalid) {
  const auto short_pixels = ImageToTokens(8, 8, 3, std::string(100, '\x10'));
  EXPECT_EQ(short_pixels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(short_pixels.status().message(), "image of 8x8x3 needs 192 pixel bytes, got 100");
  EXPECT_EQ(ImageToTokens(0, 8, 1, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImageToTokens(1, 1, 2, "ab").status().code(), absl::StatusCode::kInvalidArgument);
}

// The API's Image has 32-bit sides; their product overflowed 64 bits (found by
// tests/fuzz/classify_request_fuzz under UndefinedBehaviorSanitizer).
TEST(ImageToTokensTest, SidesWhoseProductOverflowsAreInvalid) {
  constexpr std::int64_t kSide = 4294967295;  // uint32's largest
  for (const std::int64_t channels : {1, 3}) {
    const auto huge = ImageToTokens(kSide, kSide, channels, "ab");
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(huge.status().message(), "image of 4294967295x4294967295x" +
                                           std::to_string(channels) +
                                           " is too large (over 2^63 pixel bytes)");
  }
  EXPECT_EQ(ImageToTokens(2952429823, 3221222128, 1, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts

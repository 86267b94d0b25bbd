#include "client/image_reader.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using ::testing::HasSubstr;

TEST(ImageReaderTest, ParsesRawGrayWithComments) {
  const std::string pixels = {'\x00', '\x7f', '\xff', '\x10', '\x20', '\x30'};
  const std::string data = "P5\n# made by a test\n3 # width\n2\n# maxval next\n255\n" + pixels;
  absl::StatusOr<PnmImage> image = ParsePnm(data);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 3u);
  EXPECT_EQ(image->height, 2u);
  EXPECT_EQ(image->channels, 1u);
  EXPECT_EQ(image->pixels, pixels);
}

TEST(ImageReaderTest, RawRasterMayStartWithWhitespaceBytes) {
  // The single separator after maxval is the only header whitespace; a raster starting
  // with '\n' (10) or ' ' (32) must not be skipped.
  const std::string pixels = {'\n', ' '};
  absl::StatusOr<PnmImage> image = ParsePnm("P5 2 1 255\n" + pixels);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->pixels, pixels);
}

TEST(ImageReaderTest, ParsesRawRgb) {
  const std::string pixels = {'\x01', '\x02', '\x03', '\x04', '\x05', '\x06'};
  absl::StatusOr<PnmImage> image = ParsePnm("P6\n#c\n2 1\n255\n" + pixels);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 2u);
  EXPECT_EQ(image->height, 1u);
  EXPECT_EQ(image->channels, 3u);
  EXPECT_EQ(image->pixels, pixels);
}

TEST(ImageReaderTest, ParsesPlainGrayWithComments) {
  absl::StatusOr<PnmImage> image =
      ParsePnm("P2\n# plain gray\n2 2\n255\n0 128 # first row\n  255\n\t7\n");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 2u);
  EXPECT_EQ(image->height, 2u);
  EXPECT_EQ(image->channels, 1u);
  EXPECT_EQ(image->pixels, std::string({'\x00', '\x80', '\xff', '\x07'}));
}

TEST(ImageReaderTest, ParsesPlainRgb) {
  absl::StatusOr<PnmImage> image = ParsePnm("P3 1 2 255 1 2 3 250 251 252");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->channels, 3u);
  EXPECT_EQ(image->pixels, std::string({'\x01', '\x02', '\x03', '\xfa', '\xfb', '\xfc'}));
}

TEST(ImageReaderTest, RescalesSmallMaxvalTo255) {
  absl::StatusOr<PnmImage> plain = ParsePnm("P2 3 1 15 0 8 15");
  ASSERT_TRUE(plain.ok()) << plain.status();
  // round(8 * 255 / 15) = 136.
  EXPECT_EQ(plain->pixels, std::string({'\x00', '\x88', '\xff'}));
  absl::StatusOr<PnmImage> raw = ParsePnm(std::string("P5 2 1 1\n") + '\x00' + '\x01');
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->pixels, std::string({'\x00', '\xff'}));
}

TEST(ImageReaderTest, RejectsShortAndLongRawRasters) {
  absl::StatusOr<PnmImage> short_raster = ParsePnm("P6 2 2 255\n" + std::string(11, 'x'));
  EXPECT_EQ(short_raster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_raster.status().message(), HasSubstr("expected 12 pixel bytes"));
  EXPECT_THAT(short_raster.status().message(), HasSubstr("found 11"));

  absl::StatusOr<PnmImage> long_raster = ParsePnm("P5 2 2 255\n" + std::string(5, 'x'));
  EXPECT_THAT(long_raster.status().message(), HasSubstr("expected 4 pixel bytes"));
  EXPECT_THAT(long_raster.status().message(), HasSubstr("found 5"));

  EXPECT_THAT(ParsePnm("P5 2 2 255").status().message(), HasSubstr("wrong raster size"));
}

TEST(ImageReaderTest, RejectsWrongPlainSampleCounts) {
  EXPECT_THAT(ParsePnm("P2 2 2 255 1 2 3").status().message(),
              HasSubstr("expected 4 samples, found 3"));
  EXPECT_THAT(ParsePnm("P3 1 1 255 1 2 3 4").status().message(),
              HasSubstr("more than the expected 3 samples"));
}

TEST(ImageReaderTest, RejectsMaxvalOver255AndZero) {
  absl::StatusOr<PnmImage> wide = ParsePnm("P5 1 1 65535\n\x01\x02");
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wide.status().message(), HasSubstr("unsupported maxval 65535"));
  EXPECT_THAT(ParsePnm("P2 1 1 0 0").status().message(), HasSubstr("unsupported maxval 0"));
}

TEST(ImageReaderTest, RejectsSampleAboveMaxval) {
  EXPECT_THAT(ParsePnm("P2 2 1 100 5 101").status().message(),
              HasSubstr("sample 1 is 101, above maxval 100"));
  EXPECT_THAT(ParsePnm(std::string("P5 1 1 100\n") + '\xc8').status().message(),
              HasSubstr("sample 0 is 200, above maxval 100"));
}

TEST(ImageReaderTest, RejectsBadMagicSizesAndHeaders) {
  EXPECT_THAT(ParsePnm("P4 1 1\n\x00").status().message(), HasSubstr("P2, P3, P5 or P6"));
  EXPECT_THAT(ParsePnm("GIF89a").status().message(), HasSubstr("not a PGM/PPM image"));
  EXPECT_THAT(ParsePnm("").status().message(), HasSubstr("not a PGM/PPM image"));
  EXPECT_THAT(ParsePnm("P5 0 3 255\n").status().message(), HasSubstr("bad image size 0x3"));
  EXPECT_THAT(ParsePnm("P5 2 # no height").status().message(), HasSubstr("ends before the height"));
  EXPECT_THAT(ParsePnm("P2 2 x 255").status().message(),
              HasSubstr("expected a number for the height"));
  EXPECT_THAT(ParsePnm("P5 100000 100000 255\n").status().message(), HasSubstr("too large"));
}

TEST(ImageReaderTest, ReadPnmFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "/image_reader_test_bad.pgm";
  {
    std::ofstream out(path, std::ios::binary);
    out << "P5 2 2 255\n"
        << "ab";
  }
  absl::StatusOr<PnmImage> image = ReadPnmFile(path);
  EXPECT_THAT(image.status().message(), HasSubstr(path));
  EXPECT_THAT(image.status().message(), HasSubstr("expected 4 pixel bytes"));
  std::remove(path.c_str());

  EXPECT_EQ(ReadPnmFile(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(ImageReaderTest, RecognisesNetpbmExtensions) {
  EXPECT_TRUE(IsPnmPath("cat.pgm"));
  EXPECT_TRUE(IsPnmPath("dir/CAT.PPM"));
  EXPECT_TRUE(IsPnmPath("x.pnm"));
  EXPECT_FALSE(IsPnmPath("review.txt"));
  EXPECT_FALSE(IsPnmPath("pgm"));
}

}  // namespace
}  // namespace ts::client

#include "model/checkpoints/pickle_sizes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

using std::string_literals::operator""s;

// PROTO 2, EMPTY_DICT, BINPUT 0, MARK, BINUNICODE "ab", BININT1 7, SETITEMS, STOP.
const std::string kSmallDict =
    "\x80\x02}q\x00(X\x02\x00\x00\x00"
    "abK\x07u."s;

void ExpectDataLoss(const std::string& pickle, const std::string& says) {
  const absl::Status status = CheckPickleSizes(pickle);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(says), std::string::npos) << status;
}

TEST(PickleSizesTest, APickleWithinItsBytesPasses) {
  EXPECT_TRUE(CheckPickleSizes(kSmallDict).ok());
  // GLOBAL's two names, LONG_BINPUT and LONG_BINGET, BINFLOAT, LONG1; bytes after STOP are not
  // read (the unpickler stops there too).
  const std::string pickle =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n"
      "r\x00\x00\x00\x00"
      "j\x00\x00\x00\x00"
      "G\x3f\xf0\x00\x00\x00\x00\x00\x00"
      "\x8a\x08\x01\x02\x03\x04\x05\x06\x07\x08"
      ".junk"s;
  EXPECT_TRUE(CheckPickleSizes(pickle).ok()) << CheckPickleSizes(pickle);
}

TEST(PickleSizesTest, AStringLongerThanThePickleIsDataLoss) {
  // BINUNICODE stating 4 GiB - 13 bytes: LibTorch 1.13 allocated and zero-filled it first.
  ExpectDataLoss(
      "\x80\x02X\xf3\xff\xff\xff"
      "abc."s,
      "states 4294967283 bytes, 4 follow");
  ExpectDataLoss(
      "\x80\x02X\x05\x00\x00\x00"
      "abcd"s,
      "states 5 bytes, 4 follow");
  ExpectDataLoss("\x80\x02X\x05\x00"s, "is cut short");
  ExpectDataLoss("\x80\x02\x8a\x09\x00."s, "states 9 bytes, 2 follow");
}

TEST(PickleSizesTest, AMemoIndexAheadOfTheEntriesIsDataLoss) {
  // LONG_BINPUT 2^31 as the first memo entry: LibTorch grew its memo table to 2^31 entries.
  ExpectDataLoss("\x80\x02}r\x00\x00\x00\x80."s, "stores memo entry 2147483648 after 0 entries");
  ExpectDataLoss("\x80\x02}q\x00}q\x02."s, "stores memo entry 2 after 1 entries");
  // Storing over an entry already made is what a pickler may do.
  EXPECT_TRUE(CheckPickleSizes("\x80\x02}q\x00}q\x00}q\x01."s).ok());
}

TEST(PickleSizesTest, OpcodesTheUnpicklerDoesNotReadAndMissingEndsAreDataLoss) {
  ExpectDataLoss("\x80\x02\x8d\x00\x00\x00\x00\x00\x00\x00\x00."s,
                 "is not one LibTorch's unpickler reads");
  ExpectDataLoss("\x80\x02}"s, "ends without its STOP opcode");
  ExpectDataLoss(""s, "ends without its STOP opcode");
  ExpectDataLoss(
      "\x80\x02"
      "ctorch\nTensor"s,
      "has a name without its newline");
  ExpectDataLoss("\x80\x02J\x01\x02"s, "is cut short");
}

// The inputs checkpoint_fuzz found (tests/fuzz/regressions/checkpoint_fuzz/): after the selector
// byte (2: the target writes the archive around them), the archive's data.pkl.
TEST(PickleSizesTest, TheFuzzTargetsFindingsAreDataLoss) {
  for (const auto& [name, says] :
       {std::pair<std::string, std::string>{"pickle_string_length_4gib", "states 4294967282 bytes"},
        {"memo_index_2_31", "stores memo entry"}}) {
    std::ifstream in(testing::SourcePath("tests/fuzz/regressions/checkpoint_fuzz/" + name),
                     std::ios::binary);
    const std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(input.size(), 1u) << name;
    ASSERT_EQ(input[0], '\x02') << name;
    SCOPED_TRACE(name);
    ExpectDataLoss(input.substr(1), says);
  }
}

}  // namespace
}  // namespace ts

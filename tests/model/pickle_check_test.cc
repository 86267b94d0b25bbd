#include "model/checkpoints/pickle_check.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

using std::string_literals::operator""s;

// PROTO 2, EMPTY_DICT, MARK, BINUNICODE "ab", BININT1 7, SETITEMS, STOP.
const std::string kSmallDict =
    "\x80\x02}(X\x02\x00\x00\x00"
    "abK\x07u."s;

void ExpectDataLoss(const std::string& pickle, const std::string& says) {
  const absl::Status status = CheckPickle(pickle);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(says), std::string::npos) << status;
}

TEST(PickleCheckTest, APickleWithinItsBytesPasses) {
  EXPECT_TRUE(CheckPickle(kSmallDict).ok());
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
  EXPECT_TRUE(CheckPickle(pickle).ok()) << CheckPickle(pickle);
}

TEST(PickleCheckTest, AStringLongerThanThePickleIsDataLoss) {
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

TEST(PickleCheckTest, AMemoIndexAheadOfTheEntriesIsDataLoss) {
  // LONG_BINPUT 2^31 as the first memo entry: LibTorch grew its memo table to 2^31 entries.
  ExpectDataLoss("\x80\x02}r\x00\x00\x00\x80."s, "stores memo entry 2147483648 after 0 entries");
  ExpectDataLoss("\x80\x02}q\x00}q\x02."s, "stores memo entry 2 after 1 entries");
  // Storing over an entry already made is what a pickler may do.
  EXPECT_TRUE(CheckPickle("\x80\x02}q\x00}q\x00}q\x01."s).ok());
}

TEST(PickleCheckTest, OpcodesTheUnpicklerDoesNotReadAndMissingEndsAreDataLoss) {
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

TEST(PickleCheckTest, OpcodesThatFindTooFewValuesOrNoMarkAreDataLoss) {
  // TUPLE3 on one value: LibTorch 1.13 popped an empty stack (SIGSEGV).
  ExpectDataLoss("\x80\x02K\x01\x87."s, "takes 3 values, the stack holds 1 above its last MARK");
  ExpectDataLoss("\x80\x02K\x01(\x86."s, "takes 2 values, the stack holds 0");
  ExpectDataLoss("\x80\x02K\x01t."s, "has no MARK to take values from");
  ExpectDataLoss(
      "\x80\x02(K\x01"
      "d."s,
      "pairs 1 values");
  ExpectDataLoss(
      "\x80\x02(K\x01"
      "e."s,
      "has no container below its MARK");
  ExpectDataLoss("\x80\x02}K\x01s."s, "takes 3 values");
  ExpectDataLoss("\x80\x02."s, "takes 1 values");
}

std::string NestedLists(int depth) {
  std::string pickle = "\x80\x02"s;
  for (int i = 1; i < depth; ++i) pickle += "](";  // EMPTY_LIST, MARK
  pickle += "]";
  for (int i = 1; i < depth; ++i) pickle += "e";  // APPENDS
  return pickle + ".";
}

TEST(PickleCheckTest, NestingDeeperThanTheLimitIsDataLoss) {
  EXPECT_TRUE(CheckPickle(NestedLists(kMaxPickleNesting)).ok())
      << CheckPickle(NestedLists(kMaxPickleNesting));
  ExpectDataLoss(NestedLists(kMaxPickleNesting + 1), "nests containers 65 deep (at most 64)");
  // Through TUPLE1 too.
  ExpectDataLoss("\x80\x02)"s + std::string(kMaxPickleNesting, '\x85') + ".", "65 deep");
}

TEST(PickleCheckTest, AContainerChangedAfterTheMemoRefersToItIsDataLoss) {
  // A list appended to itself: a cycle of references LibTorch never frees.
  ExpectDataLoss(
      "\x80\x02]q\x00(h\x00"
      "e."s,
      "changes a container the memo refers to");
  // Memoized once complete, as a pickler does, and read back: fine.
  EXPECT_TRUE(CheckPickle("\x80\x02](K\x01"
                          "eq\x00h\x00\x86."s)
                  .ok());
}

// The inputs checkpoint_fuzz found (tests/fuzz/regressions/checkpoint_fuzz/): after the selector
// byte (2: the target writes the archive around them), the archive's data.pkl.
TEST(PickleCheckTest, TheFuzzTargetsFindingsAreDataLoss) {
  for (const auto& [name, says] :
       {std::pair<std::string, std::string>{"pickle_string_length_4gib", "states 4294967282 bytes"},
        {"memo_index_2_31", "stores memo entry"},
        {"tuple3_empty_stack", "takes 3 values"}}) {
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

#include "common/status_macros.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "common/file_io.h"
#include "gtest/gtest.h"

namespace ts {
namespace {

absl::Status FailWhen(bool fail) {
  return fail ? absl::InvalidArgumentError("asked to fail") : absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> Boxed(int value) {
  if (value < 0) return absl::OutOfRangeError("negative");
  return std::make_unique<int>(value);
}

int calls_after_return = 0;

absl::Status TwoSteps(bool fail_first) {
  TS_RETURN_IF_ERROR(FailWhen(fail_first));
  ++calls_after_return;
  return absl::OkStatus();
}

absl::StatusOr<int> DoubledBoxes(int a, int b) {
  TS_ASSIGN_OR_RETURN(auto first, Boxed(a));  // move-only value
  TS_ASSIGN_OR_RETURN(std::unique_ptr<int> second, Boxed(b));
  int sum = 0;
  TS_ASSIGN_OR_RETURN(sum, absl::StatusOr<int>(*first + *second));  // existing lvalue
  return 2 * sum;
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheCalleesStatusAndStopsThere) {
  calls_after_return = 0;
  const absl::Status failed = TwoSteps(true);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.message(), "asked to fail");
  EXPECT_EQ(calls_after_return, 0);
  EXPECT_TRUE(TwoSteps(false).ok());
  EXPECT_EQ(calls_after_return, 1);
}

TEST(StatusMacrosTest, AssignOrReturnDeclaresAssignsOrReturns) {
  const absl::StatusOr<int> ok = DoubledBoxes(2, 3);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, 10);
  const absl::StatusOr<int> second_failed = DoubledBoxes(2, -1);
  EXPECT_EQ(second_failed.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(second_failed.status().message(), "negative");
}

TEST(FileIoTest, ReadsBytesAndNamesWhatIsMissing) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/file_io_test.bin";
  const std::string bytes("a\0b\xff\n", 5);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  const absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);

  const absl::StatusOr<std::string> missing = ReadFile(dir + "/no_such_file", "checkpoint");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(missing.status().message()),
            "checkpoint " + dir + "/no_such_file does not exist");

  const absl::StatusOr<std::string> directory = ReadFile(dir, "config file");
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(directory.status().message()), "config file " + dir + " is a directory");

  const std::string fifo = dir + "/file_io_test.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const absl::StatusOr<std::string> from_fifo = ReadFile(fifo, "text");  // must not block
  EXPECT_EQ(from_fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(from_fifo.status().message()), "text " + fifo + " is not a regular file");
  ::unlink(fifo.c_str());
}

}  // namespace
}  // namespace ts

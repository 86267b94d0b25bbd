// The worker event framing: messages written by EventWriter to a real pipe come back whole and
// in order through EventDecoder, whatever the chunks they are read in; a corrupt stream is
// DATA_LOSS, not a crash. Also the capped quoting of client input (common/quoted.h).
#include "job_contract/event_pipe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/quoted.h"

namespace ts::job {
namespace {
namespace pb = taylorshift::v1;

std::string ReadAll(int fd) {
  std::string bytes;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) bytes.append(buffer, n);
  return bytes;
}

TEST(EventPipeTest, MessagesSurviveAPipeAndAnyChunking) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EventWriter writer(fds[1], 3);
  for (int i = 0; i < 50; ++i) {
    pb::WorkerMessage message;
    if (i % 2 == 0) {
      message.mutable_progress()->set_step(static_cast<std::uint64_t>(i));
    } else {
      message.set_log(std::string(static_cast<std::size_t>(i) * 37, 'x'));
    }
    ASSERT_TRUE(writer.Write(message).ok());
  }
  close(fds[1]);
  const std::string bytes = ReadAll(fds[0]);
  close(fds[0]);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, bytes.size()}) {
    EventDecoder decoder;
    std::vector<pb::WorkerMessage> got;
    for (std::size_t at = 0; at < bytes.size(); at += chunk) {
      decoder.Append(bytes.data() + at, std::min(chunk, bytes.size() - at));
      for (;;) {
        auto next = decoder.Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (!next->has_value()) break;
        got.push_back(**next);
      }
    }
    ASSERT_EQ(got.size(), 50u) << "chunk " << chunk;
    EXPECT_EQ(decoder.pending_bytes(), 0u);
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(got[i].rank(), 3);
      if (i % 2 == 0) {
        EXPECT_EQ(got[i].progress().step(), static_cast<std::uint64_t>(i));
      } else {
        EXPECT_EQ(got[i].log().size(), static_cast<std::size_t>(i) * 37);
      }
    }
  }
}

TEST(EventPipeTest, CorruptFramesAreDataLoss) {
  EventDecoder oversized;
  const char huge[4] = {'\xff', '\xff', '\xff', '\x7f'};
  oversized.Append(huge, 4);
  EXPECT_EQ(oversized.Next().status().code(), absl::StatusCode::kDataLoss);

  EventDecoder garbage;
  const char frame[7] = {3, 0, 0, 0, '\xff', '\xff', '\xff'};
  garbage.Append(frame, 7);
  EXPECT_EQ(garbage.Next().status().code(), absl::StatusCode::kDataLoss);

  EventDecoder partial;
  partial.Append(frame, 5);
  auto next = partial.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());  // waits for the rest
}

TEST(EventPipeTest, WritingToAVanishedReaderIsUnavailable) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  EventWriter writer(fds[1], 0);
  pb::WorkerMessage message;
  message.set_heartbeat(true);
  EXPECT_EQ(writer.Write(message).code(), absl::StatusCode::kUnavailable);
  close(fds[1]);
}

TEST(QuotedTest, CapsLongInputAtACharacterBoundary) {
  EXPECT_EQ(Quoted("docs"), "\"docs\"");
  const std::string long_name(10000, 'm');
  const std::string quoted = Quoted(long_name);
  EXPECT_LT(quoted.size(), 240u);
  EXPECT_NE(quoted.find("(10000 bytes)"), std::string::npos);
  // "é" is two bytes; a cut at 199 would split the one that starts at byte 199.
  const std::string accents = std::string(199, 'a') + "\xc3\xa9" + std::string(50, 'b');
  const std::string capped = Capped(accents);
  EXPECT_EQ(capped.substr(0, 199), std::string(199, 'a'));
  EXPECT_EQ(capped.substr(199, 3), "...");
}

}  // namespace
}  // namespace ts::job

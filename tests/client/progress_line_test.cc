// The progress display of tsctl's long-running commands: its text, the terminal bar redrawn in
// place, the plain lines elsewhere and their pacing — all on injected times, no clock.
#include "client/progress_line.h"

#include <sstream>
#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Progress Steps(double done, double total = 300) {
  Progress progress;
  progress.done = done;
  progress.total = total;
  progress.unit = "steps";
  return progress;
}

TEST(FormatDurationTest, MinutesAndHours) {
  EXPECT_EQ(FormatDuration(0), "0:00");
  EXPECT_EQ(FormatDuration(7.4), "0:07");
  EXPECT_EQ(FormatDuration(754), "12:34");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "--:--");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "--:--");
}

TEST(ProgressLineTest, TextHasDoneTotalRateElapsedAndEta) {
  std::ostringstream out;
  ProgressLine line(ProgressLineOptions{}, &out);
  // A watch that starts at step 100: the rate counts from there, not from step 0.
  line.Update(0, Steps(100));
  EXPECT_EQ(line.Text(0, Steps(100)), "100/300 steps (33%), - steps/s, elapsed 0:00, eta --:--");
  Progress later = Steps(150);
  later.detail = "loss 1.234";
  // 50 steps in 10 s = 5 steps/s; 150 left = 30 s.
  EXPECT_EQ(line.Text(10, later),
            "150/300 steps (50%), 5.0 steps/s, elapsed 0:10, eta 0:30, loss 1.234");
}

TEST(ProgressLineTest, AnUnknownTotalHasNoPercentageButAGivenTimeLeft) {
  std::ostringstream out;
  ProgressLine line(ProgressLineOptions{}, &out);
  Progress requests;
  requests.unit = "requests";
  line.Update(0, requests);
  requests.done = 250;
  requests.remaining_s = 15;  // bench --duration-s 20, 5 s in
  EXPECT_EQ(line.Text(5, requests), "250 requests, 50.0 requests/s, elapsed 0:05, eta 0:15");
}

TEST(ProgressLineTest, WithoutAUnitOnlyTimeAndDetailAndTheRateStartsWithTheUnit) {
  std::ostringstream out;
  ProgressLine line(ProgressLineOptions{}, &out);
  Progress waiting;
  waiting.detail = "evaluating 512 examples";
  line.Update(0, waiting);
  EXPECT_EQ(line.Text(3, waiting), "elapsed 0:03, eta --:--, evaluating 512 examples");
  // A watch that learns only at 3 s that the job is at step 100: the rate counts from there.
  line.Update(3, Steps(100));
  EXPECT_EQ(line.Text(5, Steps(110)), "110/300 steps (36%), 5.0 steps/s, elapsed 0:05, eta 0:38");
}

TEST(ProgressLineTest, OnATerminalTheBarIsRedrawnInPlace) {
  std::ostringstream out;
  ProgressLineOptions options;
  options.terminal = true;
  options.bar_width = 10;
  options.redraw_interval_s = 0.5;
  ProgressLine line(options, &out);
  line.Update(0, Steps(0, 100));
  EXPECT_EQ(out.str(), "\r[..........] 0/100 steps (0%), - steps/s, elapsed 0:00, eta --:--\033[K");
  out.str("");
  line.Update(0.2, Steps(10, 100));  // too soon: nothing
  EXPECT_EQ(out.str(), "");
  line.Update(2, Steps(40, 100));
  EXPECT_EQ(out.str(),
            "\r[####......] 40/100 steps (40%), 20.0 steps/s, elapsed 0:02, eta 0:03\033[K");
  EXPECT_THAT(out.str(), Not(HasSubstr("\n")));
  // Clear erases it, and the next update draws at once.
  out.str("");
  line.Clear();
  EXPECT_EQ(out.str(), "\r\033[K");
  line.Clear();  // nothing drawn: nothing to erase
  EXPECT_EQ(out.str(), "\r\033[K");
  out.str("");
  line.Update(2.1, Steps(41, 100));
  EXPECT_THAT(out.str(), HasSubstr("41/100 steps"));
}

TEST(ProgressLineTest, ElsewherePlainLinesEveryIntervalAndNoCarriageReturn) {
  std::ostringstream out;
  ProgressLineOptions options;
  options.line_interval_s = 5;
  ProgressLine line(options, &out);
  line.Update(0, Steps(0));
  line.Update(4.9, Steps(10));
  EXPECT_EQ(out.str(), "");  // a run shorter than the interval prints nothing
  line.Update(5, Steps(20));
  EXPECT_EQ(out.str(), "progress: 20/300 steps (6%), 4.0 steps/s, elapsed 0:05, eta 1:10\n");
  line.Update(9, Steps(30));
  line.Update(10, Steps(40));
  line.Clear();  // not a terminal: nothing to erase
  EXPECT_EQ(out.str(),
            "progress: 20/300 steps (6%), 4.0 steps/s, elapsed 0:05, eta 1:10\n"
            "progress: 40/300 steps (13%), 4.0 steps/s, elapsed 0:10, eta 1:05\n");
  EXPECT_THAT(out.str(), Not(HasSubstr("\r")));
}

// A string buffer that says when its first bytes arrive.
class FirstWriteBuffer : public std::stringbuf {
 public:
  absl::Notification written;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::streamsize put = std::stringbuf::xsputn(s, n);
    if (!written.HasBeenNotified()) written.Notify();
    return put;
  }
  int_type overflow(int_type c) override {
    const int_type put = std::stringbuf::overflow(c);
    if (!written.HasBeenNotified()) written.Notify();
    return put;
  }
};

TEST(ProgressTickerTest, DrawsAtOnceAndClearsOnStop) {
  FirstWriteBuffer buffer;
  std::ostream out(&buffer);
  ProgressLineOptions options;
  options.terminal = true;
  ProgressTicker ticker(
      options, &out, [] { return Steps(3, 10); }, /*tick_s=*/3600);
  // The ticker draws its first sample under its lock, so once the first bytes are written, the
  // result waits for the whole bar. (Waiting for the sample alone raced with the drawing: under
  // AddressSanitizer the result came first and the bar after it.)
  buffer.written.WaitForNotification();
  ticker.PrintAbove([&] { out << "a result\n"; });
  ticker.Stop();
  const std::string text = buffer.str();
  // The first sample is drawn, cleared before the result, and nothing is left on the line.
  EXPECT_THAT(text, HasSubstr("3/10 steps"));
  EXPECT_THAT(text, HasSubstr("\r\033[Ka result\n"));
  EXPECT_EQ(text.substr(text.size() - 1), "\n");
}

}  // namespace
}  // namespace ts::client

// A one-line progress display for tsctl's long-running commands (train/eval --wait, jobs watch,
// bench), written to stderr so that stdout keeps only the results and the final report.
//  - On a terminal: a bar redrawn in place ('\r', then erase to the end of the line), at most
//    every `redraw_interval_s`.
//  - Elsewhere (a file, a pipe, a CI log): plain lines, at most one every `line_interval_s`
//    (the first after that long, so a short run prints none), never '\r'.
// Both show what is done of the total, the rate since the first update, the elapsed time and the
// time left (from the rate, or given). ProgressLine takes the time as an argument (seconds since
// the start), so formatting and pacing are tested without a clock; it is thread-compatible.
// ProgressTicker drives one from a thread on the steady clock and is thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace ts::client {

// What is known at one moment.
struct Progress {
  double done = 0;   // units done so far
  double total = 0;  // units in all; 0 = unknown (no bar, no percentage, no count-based ETA)
  // "steps", "requests"; "" = nothing counted (only the time and the detail are shown). The
  // rate counts from the first Update with this unit.
  std::string unit;
  // Seconds left when the end is a time rather than a count (bench --duration-s); < 0 = derive
  // the ETA from the rate and the count.
  double remaining_s = -1;
  std::string detail;  // appended as is, e.g. "loss 1.234"
};

// "0:07", "12:34", "1:02:03"; "--:--" when unknown (negative, NaN or infinite).
std::string FormatDuration(double seconds);

struct ProgressLineOptions {
  // A terminal (isatty(stderr)): redraw one line in place; otherwise print plain lines.
  bool terminal = false;
  // Terminal: the least time between two redraws.
  double redraw_interval_s = 0.2;
  // Not a terminal: the least time between two lines (and before the first).
  double line_interval_s = 5;
  // Characters inside the bar's brackets.
  int bar_width = 20;
};

class ProgressLine {
 public:
  // `out` (usually &std::cerr) must outlive this.
  ProgressLine(ProgressLineOptions options, std::ostream* out);

  // Shows `progress` as of `now_s` seconds since the start, when a redraw or line is due.
  void Update(double now_s, const Progress& progress);
  // Terminal: erases the bar, so what is printed next starts on a clean line (the next Update
  // draws it again). Otherwise nothing.
  void Clear();

  // The line without the bar: "40/300 steps (13%), 12.3 steps/s, elapsed 0:12, eta 1:20, loss
  // 1.2". The rate counts from the first Update (a watch may start half way); "-" until known.
  std::string Text(double now_s, const Progress& progress) const;

 private:
  // The rate in units/s since the first Update; nullopt until time and units have moved.
  std::optional<double> Rate(double now_s, const Progress& progress) const;

  const ProgressLineOptions options_;
  std::ostream* const out_;
  bool started_ = false;
  std::string first_unit_;
  double first_s_ = 0;
  double first_done_ = 0;
  double last_shown_s_ = -std::numeric_limits<double>::infinity();
  bool drawn_ = false;  // a bar is on the terminal's current line
};

// Updates a ProgressLine from a thread, every `tick_s` seconds (and once at the start), with
// what `sample` returns; time counts from construction. Stop() (or the destructor) ends it and
// clears the bar. PrintAbove may be called from any thread; Stop from the owner.
class ProgressTicker {
 public:
  ProgressTicker(ProgressLineOptions options, std::ostream* out, std::function<Progress()> sample,
                 double tick_s = 0.25);
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

  // Runs `print` (which writes the command's own output) with the bar cleared, so the two do
  // not end up on one line.
  void PrintAbove(const std::function<void()>& print);
  void Stop();

 private:
  void Run();

  const std::function<Progress()> sample_;
  const double tick_s_;
  const std::chrono::steady_clock::time_point start_;
  absl::Mutex mu_;
  ProgressLine line_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;  // last: it uses the members above
};

// The options for stderr: terminal when isatty(stderr).
ProgressLineOptions StderrProgressOptions();

}  // namespace ts::client

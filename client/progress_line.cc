#include "client/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace ts::client {
namespace {

// Erases from the cursor to the end of the line (ECMA-48 EL), so a shorter line leaves nothing
// of a longer one behind.
constexpr char kEraseLine[] = "\033[K";

std::string FormatRate(double rate) {
  return rate >= 100 ? absl::StrFormat("%.0f", rate) : absl::StrFormat("%.1f", rate);
}

std::string FormatCount(double value) {
  return value == std::floor(value) ? absl::StrFormat("%.0f", value)
                                    : absl::StrFormat("%.1f", value);
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long hours = total / 3600, minutes = total / 60 % 60, rest = total % 60;
  if (hours > 0) return absl::StrFormat("%d:%02d:%02d", hours, minutes, rest);
  return absl::StrFormat("%d:%02d", minutes, rest);
}

ProgressLine::ProgressLine(ProgressLineOptions options, std::ostream* out)
    : options_(options), out_(out) {}

std::optional<double> ProgressLine::Rate(double now_s, const Progress& progress) const {
  const double seconds = now_s - first_s_;
  if (!started_ || progress.unit != first_unit_ || seconds <= 0 || progress.done <= first_done_) {
    return std::nullopt;
  }
  return (progress.done - first_done_) / seconds;
}

std::string ProgressLine::Text(double now_s, const Progress& progress) const {
  std::string out;
  const std::optional<double> rate = Rate(now_s, progress);
  if (!progress.unit.empty()) {
    out = FormatCount(progress.done);
    if (progress.total > 0) {
      const double percent = std::clamp(100 * progress.done / progress.total, 0.0, 100.0);
      absl::StrAppend(&out, "/", FormatCount(progress.total), " ", progress.unit,
                      absl::StrFormat(" (%.0f%%)", std::floor(percent)));
    } else {
      absl::StrAppend(&out, " ", progress.unit);
    }
    absl::StrAppend(&out, ", ", rate ? FormatRate(*rate) : "-", " ", progress.unit, "/s, ");
  }
  absl::StrAppend(&out, "elapsed ", FormatDuration(now_s));
  double eta = -1;
  if (progress.remaining_s >= 0) {
    eta = progress.remaining_s;
  } else if (progress.total > 0 && rate) {
    eta = std::max(0.0, progress.total - progress.done) / *rate;
  }
  absl::StrAppend(&out, ", eta ", FormatDuration(eta));
  if (!progress.detail.empty()) absl::StrAppend(&out, ", ", progress.detail);
  return out;
}

void ProgressLine::Update(double now_s, const Progress& progress) {
  // Plain lines wait one interval before the first, so a short run adds none.
  if (!started_ && !options_.terminal) last_shown_s_ = now_s;
  if (!started_ || progress.unit != first_unit_) {
    // The first count of this kind (a watch learns the job's step from its first event).
    started_ = true;
    first_unit_ = progress.unit;
    first_s_ = now_s;
    first_done_ = progress.done;
  }
  const double interval = options_.terminal ? options_.redraw_interval_s : options_.line_interval_s;
  if (now_s - last_shown_s_ < interval) return;
  last_shown_s_ = now_s;
  const std::string text = Text(now_s, progress);
  if (!options_.terminal) {
    *out_ << "progress: " << text << "\n" << std::flush;
    return;
  }
  std::string bar;
  if (progress.total > 0) {
    const double fraction = std::clamp(progress.done / progress.total, 0.0, 1.0);
    const int filled = static_cast<int>(std::floor(fraction * options_.bar_width));
    bar = absl::StrCat("[", std::string(filled, '#'), std::string(options_.bar_width - filled, '.'),
                       "] ");
  }
  *out_ << "\r" << bar << text << kEraseLine << std::flush;
  drawn_ = true;
}

void ProgressLine::Clear() {
  if (!drawn_) return;
  *out_ << "\r" << kEraseLine << std::flush;
  drawn_ = false;
  // Redraw at the next Update, not an interval later: the bar should not vanish for long.
  last_shown_s_ = -std::numeric_limits<double>::infinity();
}

ProgressTicker::ProgressTicker(ProgressLineOptions options, std::ostream* out,
                               std::function<Progress()> sample, double tick_s)
    : sample_(std::move(sample)),
      tick_s_(tick_s),
      start_(std::chrono::steady_clock::now()),
      line_(options, out),
      thread_([this] { Run(); }) {}

ProgressTicker::~ProgressTicker() { Stop(); }

void ProgressTicker::Run() {
  do {
    const Progress progress = sample_();
    const double now_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    absl::MutexLock lock(&mu_);
    line_.Update(now_s, progress);
  } while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(tick_s_)));
}

void ProgressTicker::PrintAbove(const std::function<void()>& print) {
  absl::MutexLock lock(&mu_);
  line_.Clear();
  print();
}

void ProgressTicker::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  line_.Clear();
}

ProgressLineOptions StderrProgressOptions() {
  ProgressLineOptions options;
  options.terminal = ::isatty(STDERR_FILENO) == 1;
  return options;
}

}  // namespace ts::client

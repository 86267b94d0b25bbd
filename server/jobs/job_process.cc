#include "server/jobs/job_process.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", signal);
}

std::string ExitDescription(const WorkerExit& exit) {
  if (exit.signal != 0) {
    return absl::StrCat("was killed by signal ", exit.signal, " (", SignalName(exit.signal), ")");
  }
  return absl::StrCat("exited with code ", exit.code);
}

// After every rank exited, a grandchild holding a pipe open must not keep the job alive longer
// than this after the ranks were last heard from.
constexpr absl::Duration kDrain = absl::Seconds(2);

}  // namespace

struct JobProcess::Rank {
  int index = 0;
  pid_t pid = -1;
  bool events_open = true;
  bool log_open = true;
  std::deque<std::string> log_tail;
  absl::Time last_heard;
  bool exited = false;
  WorkerExit exit;
  bool have_result = false;
  pb::WorkerResult result;
};

JobProcess::JobProcess(const JobProcessOptions& options) : options_(options) {}

JobProcess::~JobProcess() = default;

std::vector<pid_t> JobProcess::pids() const { return workers_->pids(); }

absl::StatusOr<std::unique_ptr<JobProcess>> JobProcess::Start(const JobProcessOptions& options,
                                                              WorkerLauncher& launcher,
                                                              MessageHandler on_message,
                                                              LogHandler on_log) {
  std::unique_ptr<JobProcess> process(new JobProcess(options));
  process->on_message_ = std::move(on_message);
  process->on_log_ = std::move(on_log);
  TS_ASSIGN_OR_RETURN(process->workers_, launcher.Launch(options.launch));
  const absl::Time now = options.clock->Now();
  const std::vector<pid_t> pids = process->workers_->pids();
  for (std::size_t r = 0; r < pids.size(); ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = static_cast<int>(r);
    rank->pid = pids[r];
    rank->last_heard = now;
    process->ranks_.push_back(std::move(rank));
  }
  return process;
}

void JobProcess::Stop() {
  if (stop_requested_.exchange(true)) return;
  workers_->SignalAll(WorkerSignal::kTerminate);
}

void JobProcess::Apply(const WorkerEvent& event, const EndAll& end_all) {
  Rank& rank = *ranks_[static_cast<std::size_t>(event.rank)];
  using Kind = WorkerEvent::Kind;
  switch (event.kind) {
    case Kind::kEventsClosed:
      rank.events_open = false;
      return;
    case Kind::kLogClosed:
      if (!event.text.empty()) rank.log_tail.push_back(event.text);
      rank.log_open = false;
      return;
    case Kind::kExited:
      rank.exited = true;
      rank.exit = event.exit;
      return;
    default:
      break;
  }
  rank.last_heard = options_.clock->Now();
  switch (event.kind) {
    case Kind::kLogLine:
      if (on_log_) on_log_(rank.index, event.text);
      rank.log_tail.push_back(event.text);
      while (rank.log_tail.size() > options_.log_lines_kept) rank.log_tail.pop_front();
      return;
    case Kind::kProtocolError:
      rank.events_open = false;
      end_all(rank.index, absl::StrCat("rank ", rank.index, ": ", event.text));
      return;
    case Kind::kMessage: {
      const pb::WorkerMessage& m = event.message;
      if (m.kind_case() == pb::WorkerMessage::kHeartbeat) return;
      if (m.kind_case() == pb::WorkerMessage::kResult) {
        rank.have_result = true;
        rank.result = m.result();
      }
      if (on_message_) on_message_(m);
      return;
    }
    default:
      return;
  }
}

JobProcessOutcome JobProcess::Outcome(const std::string& failure, int failing_rank) const {
  JobProcessOutcome outcome;
  const Rank& zero = *ranks_.front();
  const Rank* reported =
      failing_rank >= 0 ? ranks_[static_cast<std::size_t>(failing_rank)].get() : &zero;
  outcome.last_log_lines.assign(reported->log_tail.begin(), reported->log_tail.end());
  if (!failure.empty()) {
    outcome.status = absl::InternalError(failure);
  } else if (stop_requested_) {
    const bool saved = zero.have_result && zero.result.stopped();
    if (zero.have_result && zero.result.code() == 0) {
      outcome.status = absl::OkStatus();  // it finished before it saw the request
    } else {
      outcome.stopped = true;
      outcome.status =
          absl::AbortedError(saved ? zero.result.message()
                                   : absl::StrCat("worker rank 0 ", ExitDescription(zero.exit),
                                                  " before saving its state"));
    }
  } else if (zero.have_result) {
    outcome.status =
        absl::Status(static_cast<absl::StatusCode>(zero.result.code()), zero.result.message());
    // A rank other than 0 that failed explains a rank 0 that then failed in a collective.
    for (const auto& rank : ranks_) {
      if (rank.get() != &zero && rank->have_result && rank->result.code() != 0) {
        outcome.status =
            absl::Status(static_cast<absl::StatusCode>(rank->result.code()),
                         absl::StrCat("rank ", rank->index, ": ", rank->result.message()));
        outcome.last_log_lines.assign(rank->log_tail.begin(), rank->log_tail.end());
        break;
      }
    }
  } else {
    outcome.status = absl::InternalError(absl::StrCat("worker rank 0 (pid ", zero.pid, ") ",
                                                      ExitDescription(zero.exit),
                                                      " without reporting a result"));
  }
  for (const auto& rank : ranks_) {
    if (!rank->have_result || !rank->exited || rank->exit.clean()) continue;
    // Exit code 1 after a failed result is the worker's own way to say it failed.
    if (rank->exit.signal == 0 && rank->result.code() != 0 && !rank->result.stopped()) continue;
    outcome.exit_problem =
        absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid,
                     ") reported its result, then ", ExitDescription(rank->exit));
    break;
  }
  if (!outcome.status.ok() && !outcome.stopped) {
    // A worker logs the result it reports too ("tsworker[rank 0] failed: <result>"): such a line
    // would only say the reason twice.
    std::vector<std::string> lines;
    for (const std::string& line : outcome.last_log_lines) {
      const bool repeats_a_result =
          std::any_of(ranks_.begin(), ranks_.end(), [&line](const auto& rank) {
            return rank->have_result && !rank->result.message().empty() &&
                   absl::StrContains(line, rank->result.message());
          });
      if (!repeats_a_result) lines.push_back(line);
    }
    if (!lines.empty()) {
      const std::vector<std::string> tail(lines.end() - std::min<std::size_t>(lines.size(), 3),
                                          lines.end());
      outcome.status = absl::Status(
          outcome.status.code(),
          absl::StrCat(outcome.status.message(), "; last log lines: ", absl::StrJoin(tail, " | ")));
    }
  }
  return outcome;
}

absl::Time JobProcess::NextDeadline(absl::Time stop_sent, bool killed) const {
  absl::Time deadline = absl::InfiniteFuture();
  if (!killed) deadline = std::min(deadline, stop_sent + options_.stop_grace);
  bool all_exited = true;
  absl::Time last_heard = absl::InfinitePast();
  for (const auto& rank : ranks_) {
    all_exited = all_exited && rank->exited;
    last_heard = std::max(last_heard, rank->last_heard);
    if (!rank->exited && !killed) {
      deadline = std::min(deadline, rank->last_heard + options_.heartbeat_timeout);
    }
  }
  if (all_exited) deadline = std::min(deadline, last_heard + kDrain);
  return deadline;
}

JobProcessOutcome JobProcess::Wait() {
  std::string failure;  // the first reason the supervisor ended the job
  int failing_rank = -1;
  bool killed = false;
  absl::Time stop_sent = absl::InfiniteFuture();
  const EndAll end_all = [&](int rank, const std::string& reason) {
    if (failure.empty()) {
      failure = reason;
      failing_rank = rank;
    }
    if (!killed) {
      killed = true;
      workers_->SignalAll(WorkerSignal::kKill);
    }
  };

  for (;;) {
    if (stop_requested_ && stop_sent == absl::InfiniteFuture()) stop_sent = options_.clock->Now();
    if (stop_sent != absl::InfiniteFuture() && !killed &&
        options_.clock->Now() - stop_sent >= options_.stop_grace) {
      killed = true;
      workers_->SignalAll(WorkerSignal::kKill);
    }
    for (const WorkerEvent& event : workers_->Next(NextDeadline(stop_sent, killed))) {
      Apply(event, end_all);
    }
    bool all_exited = true;
    for (auto& rank : ranks_) {
      all_exited = all_exited && rank->exited;
      if (rank->exited && !killed && !stop_requested_) {
        // A rank that failed on its own ends the others (they would wait for it).
        if (rank->exit.signal != 0) {
          end_all(rank->index, absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid, ") ",
                                            ExitDescription(rank->exit),
                                            rank->exit.signal == SIGKILL
                                                ? "; out of memory (the kernel's OOM killer) or "
                                                  "killed from outside"
                                                : ""));
        } else if (!rank->exit.clean() && ranks_.size() > 1) {
          end_all(rank->index, "");
        }
      }
      if (!rank->exited && !killed &&
          options_.clock->Now() - rank->last_heard >= options_.heartbeat_timeout) {
        end_all(rank->index, absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid,
                                          ") sent no heartbeat for ",
                                          absl::FormatDuration(options_.heartbeat_timeout),
                                          " (hung or stopped); killed"));
      }
    }
    bool outputs_open = false;
    for (auto& rank : ranks_) outputs_open = outputs_open || rank->events_open || rank->log_open;
    if (all_exited && !outputs_open) break;
    // A grandchild holding a pipe open must not keep the job alive once every rank is gone.
    if (all_exited) {
      bool any_heard_recently = false;
      for (auto& rank : ranks_) {
        any_heard_recently |= options_.clock->Now() - rank->last_heard < kDrain;
      }
      if (!any_heard_recently) break;
    }
  }

  return Outcome(failure, failing_rank);
}

}  // namespace ts::server

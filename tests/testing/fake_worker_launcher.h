// FakeWorkerLauncher: an in-process WorkerLauncher (server/jobs/worker_launcher.h) whose workers
// are the test's puppets. Each launch (an attempt of a job) makes one FakeWorker per rank, which
// sends what the test says (messages, heartbeats, stderr lines), exits or dies when told, and
// records the signals it gets: SIGKILL always ends it (killed by signal 9); SIGTERM ends it as
// tsworker does (a "stopped" result with its state saved, then exit 0) unless
// set_ignore_sigterm(true). The handle's Next() waits on the injected clock, so the supervisor's
// heartbeat timeout and stop grace fire exactly when the test advances a fake clock; the test
// needs no sleeps. Waits for the code under test (AwaitWorker, AwaitSignal) take a real-time
// timeout only as a guard against a hung test.
// Thread-safe. The launcher must outlive its handles and every FakeWorker the test holds.
#pragma once

#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/jobs/worker_launcher.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::testing {

class FakeWorkerLauncher;

// One rank of one attempt.
class FakeWorker {
 public:
  FakeWorker(FakeWorkerLauncher* launcher, int rank, pid_t pid)
      : launcher_(launcher), rank_(rank), pid_(pid) {}
  FakeWorker(const FakeWorker&) = delete;
  FakeWorker& operator=(const FakeWorker&) = delete;

  // What the worker writes to its event stream (ignored once it exited).
  void Send(taylorshift::v1::WorkerMessage message);
  void Heartbeat() {
    taylorshift::v1::WorkerMessage message;
    message.set_heartbeat(true);
    Send(std::move(message));
  }
  void Progress(std::uint64_t step, double loss) {
    taylorshift::v1::WorkerMessage message;
    message.mutable_progress()->set_step(step);
    message.mutable_progress()->set_loss(loss);
    Send(std::move(message));
  }
  // The result it reports last: `status` (OK = finished), `stopped` = stopped with its state saved.
  void Result(const absl::Status& status, bool stopped = false) {
    taylorshift::v1::WorkerMessage message;
    message.mutable_result()->set_code(static_cast<int>(status.code()));
    message.mutable_result()->set_message(std::string(status.message()));
    message.mutable_result()->set_stopped(stopped);
    Send(std::move(message));
  }
  // A line of its stderr.
  void Log(const std::string& line);
  // Ends the process: exit(code), or killed by `signal`; its outputs close with it.
  void Exit(int code) { End(server::WorkerExit{code, 0}); }
  void Die(int signal) { End(server::WorkerExit{0, signal}); }

  // Blocks until it has received `signal` at least once; false after `real_timeout`.
  bool AwaitSignal(server::WorkerSignal signal, absl::Duration real_timeout = absl::Seconds(10));
  int terminations() const;  // SIGTERMs received
  int kills() const;         // SIGKILLs received while it ran
  bool exited() const;

  pid_t pid() const { return pid_; }

 private:
  friend class FakeWorkerLauncher;
  void End(server::WorkerExit exit);

  FakeWorkerLauncher* const launcher_;
  const int rank_;
  const pid_t pid_;
  // Guarded by the launcher's mutex.
  bool exited_ = false;
  int terminations_ = 0;
  int kills_ = 0;
};

class FakeWorkerLauncher final : public server::WorkerLauncher {
 public:
  // `clock`: the one the supervisor measures the heartbeat timeout and the grace on.
  explicit FakeWorkerLauncher(Clock* clock) : clock_(clock) {}

  absl::StatusOr<std::unique_ptr<server::WorkerHandle>> Launch(
      const server::WorkerLaunchOptions& options) override;

  // Rank `rank` of launch number `attempt` (0 = the first), once that launch happened; null
  // after `real_timeout`.
  FakeWorker* AwaitWorker(int attempt, int rank = 0,
                          absl::Duration real_timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto launched = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(attempts_.size()) > attempt;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&launched), real_timeout)) return nullptr;
    const Attempt& launched_attempt = *attempts_[static_cast<std::size_t>(attempt)];
    if (rank >= static_cast<int>(launched_attempt.workers.size())) return nullptr;
    return launched_attempt.workers[static_cast<std::size_t>(rank)].get();
  }
  int launches() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(attempts_.size());
  }
  server::WorkerLaunchOptions launch_options(int attempt) const {
    absl::MutexLock lock(&mu_);
    return attempts_.at(static_cast<std::size_t>(attempt))->options;
  }
  // Whether the workers of later launches ignore SIGTERM (as a hung worker does).
  void set_ignore_sigterm(bool ignore) {
    absl::MutexLock lock(&mu_);
    ignore_sigterm_ = ignore;
  }

 private:
  friend class FakeWorker;
  class Handle;

  struct Attempt {
    server::WorkerLaunchOptions options;
    bool ignore_sigterm = false;
    std::vector<std::unique_ptr<FakeWorker>> workers;
    std::vector<server::WorkerEvent> pending;  // not yet taken by Next()
    bool poked = false;                        // a signal arrived: Next() returns
  };

  Attempt& AttemptOf(const FakeWorker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& attempt : attempts_) {
      for (auto& w : attempt->workers) {
        if (w.get() == &worker) return *attempt;
      }
    }
    return *attempts_.back();  // unreachable: every worker belongs to an attempt
  }
  void Push(const FakeWorker& worker, server::WorkerEvent event) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (worker.exited_) return;
      event.rank = worker.rank_;
      AttemptOf(worker).pending.push_back(std::move(event));
    }
    cv_.SignalAll();
  }
  // Ends `worker` as `exit` says: its exit and its closed outputs are queued.
  void EndLocked(FakeWorker& worker, server::WorkerExit exit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (worker.exited_) return;
    worker.exited_ = true;
    auto& pending = AttemptOf(worker).pending;
    using Kind = server::WorkerEvent::Kind;
    for (const Kind kind : {Kind::kEventsClosed, Kind::kLogClosed, Kind::kExited}) {
      server::WorkerEvent& event = pending.emplace_back();
      event.rank = worker.rank_;
      event.kind = kind;
      event.exit = exit;
    }
  }

  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // events queued or a signal sent: a Next() waiting on it returns
  std::deque<std::unique_ptr<Attempt>> attempts_ ABSL_GUARDED_BY(mu_);
  bool ignore_sigterm_ ABSL_GUARDED_BY(mu_) = false;
};

class FakeWorkerLauncher::Handle final : public server::WorkerHandle {
 public:
  Handle(FakeWorkerLauncher* launcher, Attempt* attempt) : launcher_(launcher), attempt_(attempt) {}
  ~Handle() override {
    absl::MutexLock lock(&launcher_->mu_);
    for (auto& worker : attempt_->workers) {
      if (!worker->exited_) ++worker->kills_;
      launcher_->EndLocked(*worker, server::WorkerExit{0, 9});
    }
  }

  std::vector<pid_t> pids() const override {
    std::vector<pid_t> pids;
    for (const auto& worker : attempt_->workers) pids.push_back(worker->pid());
    return pids;
  }

  std::vector<server::WorkerEvent> Next(absl::Time deadline) override {
    absl::MutexLock lock(&launcher_->mu_);
    while (attempt_->pending.empty() && !attempt_->poked) {
      if (launcher_->clock_->WaitUntil(launcher_->cv_, launcher_->mu_, deadline)) break;
    }
    attempt_->poked = false;
    return std::exchange(attempt_->pending, {});
  }

  void SignalAll(server::WorkerSignal signal) override {
    {
      absl::MutexLock lock(&launcher_->mu_);
      for (auto& worker : attempt_->workers) {
        if (worker->exited_) continue;
        if (signal == server::WorkerSignal::kKill) {
          ++worker->kills_;
          launcher_->EndLocked(*worker, server::WorkerExit{0, 9});
          continue;
        }
        ++worker->terminations_;
        if (attempt_->ignore_sigterm) continue;
        server::WorkerEvent& result = attempt_->pending.emplace_back();
        result.rank = worker->rank_;
        result.kind = server::WorkerEvent::Kind::kMessage;
        result.message.mutable_result()->set_code(static_cast<int>(absl::StatusCode::kAborted));
        result.message.mutable_result()->set_message("stopped; its state is saved");
        result.message.mutable_result()->set_stopped(true);
        launcher_->EndLocked(*worker, server::WorkerExit{0, 0});
      }
      attempt_->poked = true;
    }
    launcher_->cv_.SignalAll();
  }

 private:
  FakeWorkerLauncher* const launcher_;
  Attempt* const attempt_;  // owned by the launcher
};

inline absl::StatusOr<std::unique_ptr<server::WorkerHandle>> FakeWorkerLauncher::Launch(
    const server::WorkerLaunchOptions& options) {
  absl::MutexLock lock(&mu_);
  auto attempt = std::make_unique<Attempt>();
  attempt->options = options;
  attempt->ignore_sigterm = ignore_sigterm_;
  const int index = static_cast<int>(attempts_.size());
  for (int rank = 0; rank < std::max(options.world_size, 1); ++rank) {
    // Made-up pids, distinct per attempt and rank (only logs and metrics show them).
    attempt->workers.push_back(std::make_unique<FakeWorker>(this, rank, 90000 + 10 * index + rank));
  }
  attempts_.push_back(std::move(attempt));
  return std::make_unique<Handle>(this, attempts_.back().get());
}

inline void FakeWorker::Send(taylorshift::v1::WorkerMessage message) {
  server::WorkerEvent event;
  event.kind = server::WorkerEvent::Kind::kMessage;
  message.set_rank(rank_);
  event.message = std::move(message);
  launcher_->Push(*this, std::move(event));
}

inline void FakeWorker::Log(const std::string& line) {
  server::WorkerEvent event;
  event.kind = server::WorkerEvent::Kind::kLogLine;
  event.text = line;
  launcher_->Push(*this, std::move(event));
}

inline void FakeWorker::End(server::WorkerExit exit) {
  {
    absl::MutexLock lock(&launcher_->mu_);
    launcher_->EndLocked(*this, exit);
  }
  launcher_->cv_.SignalAll();
}

inline bool FakeWorker::AwaitSignal(server::WorkerSignal signal, absl::Duration real_timeout) {
  absl::MutexLock lock(&launcher_->mu_);
  auto received = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(launcher_->mu_) {
    return (signal == server::WorkerSignal::kKill ? kills_ : terminations_) > 0;
  };
  return launcher_->mu_.AwaitWithTimeout(absl::Condition(&received), real_timeout);
}

inline int FakeWorker::terminations() const {
  absl::MutexLock lock(&launcher_->mu_);
  return terminations_;
}

inline int FakeWorker::kills() const {
  absl::MutexLock lock(&launcher_->mu_);
  return kills_;
}

inline bool FakeWorker::exited() const {
  absl::MutexLock lock(&launcher_->mu_);
  return exited_;
}

}  // namespace ts::testing

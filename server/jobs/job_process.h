// JobProcess: supervises the workers of one attempt of a job (one per data-parallel rank),
// started by a WorkerLauncher (server/jobs/worker_launcher.h: tsworker processes in tsserver, an
// in-process fake in unit tests). Supervision ends the attempt when:
//   - every rank exited: the rank-0 result says finished / stopped / failed;
//   - a rank died (signal or non-zero exit without a result), or sent nothing for the heartbeat
//     timeout: every other rank is killed at once (they would wait in their next all-reduce);
//   - Stop(): SIGTERM to every rank, SIGKILL to those still alive after the grace period.
// The heartbeat timeout and the grace are measured on the injected clock. Torch-free and
// gRPC-free; the job runner turns the outcome into the job's state.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/jobs/worker_launcher.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

struct JobProcessOptions {
  WorkerLaunchOptions launch;  // what the launcher starts
  absl::Duration heartbeat_timeout = absl::Seconds(60);
  absl::Duration stop_grace = absl::Seconds(10);  // SIGTERM → SIGKILL
  std::size_t log_lines_kept = 20;                // of each rank's stderr, for failure reasons
  // What the heartbeat timeout and the stop grace are measured on (the job manager's clock).
  Clock* clock = RealClock();
};

struct JobProcessOutcome {
  // OK: finished; ABORTED with stopped = true: stopped on Stop() with the state saved;
  // otherwise why the job failed (the worker's own error, or the signal / exit code, the hang).
  absl::Status status;
  bool stopped = false;
  std::vector<std::string> last_log_lines;  // rank 0's (or the failing rank's) last stderr lines
  // Set when a rank reported its result and then did not exit cleanly (a crash while exiting:
  // "worker rank 0 (pid N) reported its result, then was killed by signal 6 (SIGABRT)"). The
  // result still decides `status`; this makes the crash visible.
  std::string exit_problem;
};

class JobProcess {
 public:
  using MessageHandler = std::function<void(const taylorshift::v1::WorkerMessage& message)>;
  using LogHandler = std::function<void(int rank, const std::string& line)>;

  // Starts every rank through `launcher` (which must outlive the call only). `on_message` gets
  // each rank's messages but heartbeats, `on_log` each stderr line, both on the thread that
  // calls Wait().
  static absl::StatusOr<std::unique_ptr<JobProcess>> Start(const JobProcessOptions& options,
                                                           WorkerLauncher& launcher,
                                                           MessageHandler on_message,
                                                           LogHandler on_log);
  ~JobProcess();  // kills and reaps whatever still runs (the handle's destructor)

  // Thread-safe: asks the ranks to stop (SIGTERM now, SIGKILL after options.stop_grace).
  void Stop();
  // Supervises until every rank has exited (call once).
  JobProcessOutcome Wait();

  std::vector<pid_t> pids() const;

 private:
  struct Rank;
  // Ends the job: the first call's reason (from `rank`) becomes the failure; kills every rank.
  using EndAll = std::function<void(int rank, const std::string& reason)>;

  explicit JobProcess(const JobProcessOptions& options);
  // Takes one event of a rank: messages go to on_message_, lines to on_log_ and the rank's log
  // tail; a protocol error ends the job.
  void Apply(const WorkerEvent& event, const EndAll& end_all);
  // When Wait() must look again even if no rank does anything: the stop grace's end, the
  // heartbeat timeouts, the drain once every rank exited (InfiniteFuture when none applies).
  absl::Time NextDeadline(absl::Time stop_sent, bool killed) const;
  // Once every rank has exited: rank 0's result decides unless the supervisor ended the job
  // (`failure`, from `failing_rank`; empty and -1 when it did not).
  JobProcessOutcome Outcome(const std::string& failure, int failing_rank) const;

  const JobProcessOptions options_;
  MessageHandler on_message_;
  LogHandler on_log_;
  std::unique_ptr<WorkerHandle> workers_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace ts::server

// WorkerLauncher: starts the workers of one attempt of a job (one per data-parallel rank) and
// hands back a WorkerHandle, through which JobProcess (server/jobs/job_process.h) supervises them:
// what each rank sends (messages, stderr lines), when its outputs close and when it exits, and the
// signals it gets. The policy (heartbeat timeout, stop grace, the attempt's outcome) is
// JobProcess's; a launcher only starts, reads, signals and reaps. ProcessWorkerLauncher
// (server/jobs/process_worker_launcher.h) runs tsworker processes; unit tests drive an in-process
// fake (tests/testing/fake_worker_launcher.h) on a fake clock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

struct WorkerLaunchOptions {
  std::string binary;     // tsworker
  std::string task_file;  // a serialized WorkerTask
  int world_size = 1;
  int threads = 1;                          // OMP_NUM_THREADS of each rank
  int onednn_primitive_cache_capacity = 0;  // ONEDNN_PRIMITIVE_CACHE_CAPACITY of each rank
  std::uint64_t address_space_bytes = 0;    // RLIMIT_AS of each rank; 0 = unlimited
};

// How a rank's process ended: killed by `signal`, or exited with `code` (signal 0).
struct WorkerExit {
  int code = 0;
  int signal = 0;
  bool clean() const { return signal == 0 && code == 0; }
};

// One thing a rank did, as WorkerHandle::Next reports it.
struct WorkerEvent {
  enum class Kind {
    kActivity,       // it wrote bytes that make no whole message or line yet
    kMessage,        // `message` (heartbeats too)
    kLogLine,        // `text`: a line of its stderr
    kProtocolError,  // `text`: its event stream cannot be decoded (and is closed)
    kEventsClosed,   // its event stream ended
    kLogClosed,      // its stderr ended; `text`: an unterminated last line, if any
    kExited,         // `exit`
  };
  int rank = 0;
  Kind kind = Kind::kActivity;
  taylorshift::v1::WorkerMessage message;
  std::string text;
  WorkerExit exit;
};

enum class WorkerSignal {
  kTerminate,  // SIGTERM: save the state and stop (tsworker takes it at its next step)
  kKill,       // SIGKILL
};

// The running ranks of one attempt. Next() is called from one thread (the supervisor's);
// SignalAll() from any thread.
class WorkerHandle {
 public:
  virtual ~WorkerHandle() = default;  // kills and reaps whatever still runs

  // The ranks' process ids, by rank (for logs and metrics).
  virtual std::vector<pid_t> pids() const = 0;
  // Blocks until some rank did something or `deadline` passed on the job's clock, whichever is
  // first (the processes' implementation returns after at most 100 ms of real time, with or
  // without events); returns what the ranks did, in order for each rank.
  virtual std::vector<WorkerEvent> Next(absl::Time deadline) = 0;
  // Sends `signal` to every rank that has not exited.
  virtual void SignalAll(WorkerSignal signal) = 0;
};

class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Starts every rank, or none (the first error).
  virtual absl::StatusOr<std::unique_ptr<WorkerHandle>> Launch(
      const WorkerLaunchOptions& options) = 0;
};

}  // namespace ts::server

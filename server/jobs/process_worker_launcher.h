// ProcessWorkerLauncher: a job's workers as tsworker processes, one per data-parallel rank. Each
// rank gets the task file, its rank in the environment (MASTER_ADDR 127.0.0.1, a free
// MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK), an events pipe (fd 3) and a pipe for its stderr,
// an address-space limit (RLIMIT_AS), its own process group, and dies with the server
// (PR_SET_PDEATHSIG, and the worker exits when its pipe breaks or it is re-parented). Ranks start
// with SIGTERM blocked (tsworker takes it on a thread of its own, never on a thread that
// computes; one sent before it is ready waits). Its handles poll the pipes for up to 100 ms of
// real time per Next() and reap the ranks with waitpid. Torch-free and gRPC-free; stateless, so
// thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/jobs/worker_launcher.h"

namespace ts::server {

class ProcessWorkerLauncher final : public WorkerLauncher {
 public:
  // FAILED_PRECONDITION when options.binary is not executable; INTERNAL when a pipe or a fork
  // fails (the ranks started until then are killed).
  absl::StatusOr<std::unique_ptr<WorkerHandle>> Launch(const WorkerLaunchOptions& options) override;
};

}  // namespace ts::server

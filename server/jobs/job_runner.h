// JobRunner: runs one job in workers until it is final: writes the WorkerTask to
// jobs/<id>/task.pb, starts one worker per rank under the memory limit through the
// WorkerLauncher (server/jobs/worker_launcher.h: tsworker processes, or a test's fake) and
// supervises them (server/jobs/job_process.h), hands their messages to the JobRecorder, and turns
// each attempt's outcome into the job's next state (JudgeAttempt): a cancel → CANCELLED; a shutdown
// leaves it RUNNING in the store (it resumes on the next start); a worker that died, hung or ran
// out of memory is retried from its last saved state up to the spec's max_retries; otherwise
// SUCCEEDED or FAILED with the reason. Time comes from the context's clock (heartbeat timeout, stop
// grace). Thread-safe: one Run per job, on the calling thread; what it points to must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"
#include "server/jobs/job_checkpoints.h"
#include "server/jobs/job_context.h"
#include "server/jobs/job_queue.h"
#include "server/jobs/job_recorder.h"
#include "server/jobs/worker_launcher.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

class ModelRegistry;

// What follows one run of a job's workers.
enum class AttemptVerdict {
  kCancelled,    // cancelled by request
  kInterrupted,  // stopped by a shutdown: stays RUNNING in the store, resumes on the next start
  kSucceeded,
  kRetry,   // a worker died, hung or ran out of memory and retries are left
  kFailed,  // anything else: the spec or the data fails the same way again
};
AttemptVerdict JudgeAttempt(const absl::Status& status, bool stopped, bool cancelled,
                            bool shutting_down, std::uint32_t retries, std::uint32_t max_retries);

struct JobRunnerOptions {
  JobsConfig jobs;                         // threads_per_job resolved
  std::string jobs_dir;                    // <state_dir>/jobs: each job's files under jobs/<id>/
  std::string data_root;                   // the canonical data root (DataRoot::root())
  std::int64_t heap_keep_freed_bytes = 0;  // passed to the workers (model/heap_policy.h)
};

class JobRunner {
 public:
  JobRunner(JobRunnerOptions options, JobQueue* queue, JobRecorder* recorder,
            const CheckpointResolver* checkpoints, const ModelRegistry* registry,
            const JobContext* context, WorkerLauncher* launcher);

  // RUNNING, then attempts until the job is final or a shutdown interrupts it.
  void Run(ActiveJob& active);

  // The task its workers start with: the job, its directory, the resolved checkpoint (init_from
  // of a training job; the target of an evaluation), threads, heartbeat, limits.
  absl::StatusOr<taylorshift::v1::WorkerTask> MakeTask(const ActiveJob& active) const;

 private:
  // One run of the job's workers; `stopped` = they stopped on request with the state saved.
  absl::Status RunAttempt(ActiveJob& active, bool* stopped);
  std::string WorkerBinary() const;

  const JobRunnerOptions options_;
  WorkerLauncher* const launcher_;
  JobQueue* const queue_;
  JobRecorder* const recorder_;
  const CheckpointResolver* const checkpoints_;
  const ModelRegistry* const registry_;
  const JobContext* const context_;
};

}  // namespace ts::server

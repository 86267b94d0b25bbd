// JobDeleter: deletes finished jobs — on request (DeleteJob) and in the retention sweep, which
// every jobs.retention_sweep_interval deletes the jobs that finished more than jobs.retention ago.
//
// A deletion removes jobs/<id>/ and then the job's record (its loss curve, validation runs and
// checkpoint records go with it; promoted copies under models/ stay). Files first: when they
// cannot be removed the record stays, so the deletion can be asked for again. Refused
// (FAILED_PRECONDITION) while the job is queued or running, or while a queued or running job
// reads its checkpoint (JobQueue::CheckDeletable); NOT_FOUND for an unknown id.
// Thread-safe; deletions are serialised with promotions (JobContext::files_mu). Time comes only
// from the context's clock.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/job_context.h"
#include "server/jobs/job_queue.h"
#include "server/jobs/job_store.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class JobDeleter {
 public:
  // At most this many jobs per sweep, so that a shutdown is not held up for long.
  static constexpr std::int64_t kMaxPerSweep = 1000;

  // `jobs_dir` = <state_dir>/jobs. `queue`, `jobs` and `context` must outlive the deleter.
  JobDeleter(std::string jobs_dir, JobQueue* queue, JobStore* jobs, JobContext* context)
      : jobs_dir_(std::move(jobs_dir)), queue_(queue), jobs_(jobs), context_(context) {}

  // `reason` labels taylorshift_jobs_deleted_total: "request" or "retention".
  absl::StatusOr<taylorshift::v1::DeleteJobResponse> Delete(const std::string& id,
                                                            const std::string& reason);

  // One sweep: deletes the jobs that finished before now - `retention` (a job that cannot be
  // deleted is logged and kept). Returns how many were deleted.
  int Sweep(absl::Duration retention);
  // Sweeps now and then every `interval` until StopRetention(); blocks (run it on a thread).
  void RunRetention(absl::Duration retention, absl::Duration interval);
  void StopRetention();

 private:
  const std::string jobs_dir_;
  JobQueue* const queue_;
  JobStore* const jobs_;
  JobContext* const context_;

  absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ts::server

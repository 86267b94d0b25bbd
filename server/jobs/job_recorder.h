// JobRecorder: puts what a job's workers report (job_contract/event_pipe.h's WorkerMessages) into
// the job, the store, the metrics and the job's watchers:
//   started     → labels, totals, the spec with epochs as steps, the total-steps gauges; a
//                 resumed or retried job drops the history after its resume step (0 when it
//                 had no saved state: it trains those steps again, and each step is kept once);
//                 the step rate starts again                                   → PROGRESS event
//   progress    → the job's progress (its ETA from the step rate of its recent reports,
//                 server/jobs/step_rate.h), a loss-curve row, the job's gauges (step, loss,
//                 progress ratio, ETA)                                         → PROGRESS event
//   evaluation_progress → an evaluation's examples evaluated of its total, and its ETA from
//                 the rate of those (the same StepRate, in examples)           → PROGRESS event
//   validation  → the latest and best validation, a validation row, the gauge   → VALIDATION
//   checkpoint  → the checkpoint list and records (job_checkpoints.h)           → CHECKPOINT
//   report      → an evaluation job's report and its row (no event; the final STATE carries it);
//                 a row the store refuses sets active.unrecorded_result, which fails the attempt
//   log         → a log line
// A failed store write is logged and counted (JobContext::StoreWriteOk); the job goes on, except
// for an evaluation report: without it the job has no result (see ActiveJob::unrecorded_result).
// Thread-safe; calls for one job come from its runner's thread, in order.
#pragma once

#include "server/jobs/job_context.h"
#include "server/jobs/job_history_store.h"
#include "server/jobs/job_queue.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

class JobRecorder {
 public:
  // `queue`, `history` and `context` must outlive the recorder.
  JobRecorder(JobQueue* queue, JobHistoryStore* history, const JobContext* context)
      : queue_(queue), history_(history), context_(context) {}

  void Apply(ActiveJob& active, const taylorshift::v1::WorkerMessage& message);

 private:
  JobQueue* const queue_;
  JobHistoryStore* const history_;
  const JobContext* const context_;
};

}  // namespace ts::server

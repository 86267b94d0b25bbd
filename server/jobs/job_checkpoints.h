// The checkpoints of training jobs as the server sees them: which one a reference names, and
// which ones a job keeps.
//
// - Choosing: a job's "best" checkpoint (best validation accuracy; the last one when the job has
//   none) or its "last" one (the highest step), for promotion, init_from and evaluation.
// - Resolving a reference: "job:<id>" is that job's best checkpoint; anything else is a file
//   that must resolve inside the data root.
// - Keeping: rank 0 of a training job keeps the last jobs.keep_checkpoints step checkpoints and
//   one best.tsckpt, and says in each checkpoint message which older files it deleted;
//   KeepCheckpoints turns the job's list into the files now on disk, and RecordCheckpoint does
//   the same to the store's records (a failed write is logged and counted, never dropped).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data_root.h"
#include "server/jobs/job_context.h"
#include "server/jobs/job_history_store.h"
#include "taylorshift/v1/jobs.pb.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

class JobQueue;

// The path of `job`'s chosen checkpoint; FAILED_PRECONDITION for an evaluation job and for a
// job with no such checkpoint yet (the message names the job and its state).
absl::StatusOr<std::string> ChooseCheckpoint(const taylorshift::v1::Job& job,
                                             taylorshift::v1::CheckpointChoice which);

// The job's checkpoint list after `message`: a new best replaces the previous best, the removed
// paths go, and the new checkpoint comes last.
void KeepCheckpoints(const taylorshift::v1::WorkerCheckpoint& message,
                     google::protobuf::RepeatedPtrField<taylorshift::v1::CheckpointInfo>* list);

// The same change to job `job_id`'s checkpoint records in `history`. A record to remove that
// the store does not have is not an error; any other failed write is reported through the
// context (logged, counted) and the rest still written.
void RecordCheckpoint(JobHistoryStore* history, const JobContext& context,
                      const std::string& job_id, const taylorshift::v1::WorkerCheckpoint& message);

// Resolves checkpoint references of specs and promotions. Thread-safe; `data_root` and `jobs`
// must outlive it.
class CheckpointResolver {
 public:
  CheckpointResolver(const DataRoot* data_root, const JobQueue* jobs)
      : data_root_(data_root), jobs_(jobs) {}

  // ChooseCheckpoint of job `job_id` (NOT_FOUND for an unknown id).
  absl::StatusOr<std::string> JobCheckpoint(const std::string& job_id,
                                            taylorshift::v1::CheckpointChoice which) const;
  // The job `job_id` as the queue has it (NOT_FOUND for an unknown id).
  absl::StatusOr<taylorshift::v1::Job> GetJob(const std::string& job_id) const;
  // "job:<id>" → its best checkpoint; otherwise a regular file inside the data root
  // (PERMISSION_DENIED / INVALID_ARGUMENT outside it, NOT_FOUND when missing). Errors start with
  // "<field>: ".
  absl::StatusOr<std::string> Resolve(const std::string& reference, const std::string& field) const;

 private:
  const DataRoot* const data_root_;
  const JobQueue* const jobs_;
};

}  // namespace ts::server

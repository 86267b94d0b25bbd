// JobHistoryStore: what a job's workers report as it runs, kept per job — its loss curve, its
// validation runs (an evaluation job's report among them) and the checkpoint files it has on
// disk — in the StoreDatabase (store_database.h), whose jobs table they reference: rows of an
// unknown job are NOT_FOUND, and they go with their job (JobStore::DeleteJob).
//
// Contract: durability, atomicity (each call one transaction), errors and thread safety as
// JobStore's (job_store.h); a stored report that does not parse is DATA_LOSS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/jobs/store_database.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

// One point of a training job's loss curve (a progress event).
struct JobMetricRow {
  std::int64_t step = 0;
  double loss = 0;
  double learning_rate = 0;
  double examples_per_second = 0;
  std::int64_t time_ms = 0;  // Unix time
};

class JobHistoryStore {
 public:
  // History page sizes (entries: loss points plus validation runs).
  static constexpr std::uint32_t kDefaultHistoryPageSize = 1000;
  static constexpr std::uint32_t kMaxHistoryPageSize = 10000;

  // `database` is not owned and must outlive the store.
  explicit JobHistoryStore(StoreDatabase* database) : database_(database) {}

  // Each in the order appended (a resumed job first drops the steps it will train again:
  // TruncateHistory). Appending to or reading an unknown job is NOT_FOUND.
  absl::Status AppendMetric(const std::string& job_id, const JobMetricRow& row);
  absl::StatusOr<std::vector<JobMetricRow>> Metrics(const std::string& job_id) const;
  absl::Status AppendEvaluation(const std::string& job_id,
                                const taylorshift::v1::EvaluationReport& report);
  absl::StatusOr<std::vector<taylorshift::v1::EvaluationReport>> Evaluations(
      const std::string& job_id) const;

  // One page of the job's history (the paging contract is GetJobHistoryRequest's in
  // jobs.proto): page_size 0 means kDefaultHistoryPageSize, more than kMaxHistoryPageSize is
  // INVALID_ARGUMENT, and so is a malformed token or one issued for another job; NOT_FOUND for
  // an unknown job. Validation runs keep their per-class reports and confusion matrix only with
  // request.include_class_reports().
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> History(
      const taylorshift::v1::GetJobHistoryRequest& request) const;

  // Drops the loss-curve rows and validation runs of steps after `step` (a job resuming from a
  // state saved at `step` trains those steps again), both in one transaction. NOT_FOUND for an
  // unknown job.
  absl::Status TruncateHistory(const std::string& job_id, std::int64_t step);

  // Checkpoint files a job has on disk, in the order first recorded. Recording a (kind, path)
  // the job already has replaces that entry; RemoveCheckpoint removes every kind of `path`,
  // NOT_FOUND when there is none. Times are kept to the millisecond.
  absl::Status RecordCheckpoint(const std::string& job_id,
                                const taylorshift::v1::CheckpointInfo& checkpoint);
  absl::Status RemoveCheckpoint(const std::string& job_id, const std::string& path);
  absl::StatusOr<std::vector<taylorshift::v1::CheckpointInfo>> Checkpoints(
      const std::string& job_id) const;

 private:
  StoreDatabase* const database_;
};

}  // namespace ts::server

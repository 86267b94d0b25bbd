// JobStore: the server's persistent record of jobs (training and evaluation), their loss curves,
// validation runs and checkpoints, and of checkpoint promotions — one SQLite database file.
//
// Contract:
// - Durability: every call that returns OK has committed its transaction; the database is in
//   WAL mode with synchronous=FULL, so a committed write survives a process crash (kill -9),
//   an OS crash and a power loss (the WAL is fsynced at each commit; storage must honour fsync).
// - Atomicity: each call is one transaction (multi-statement writes use BEGIN IMMEDIATE, so a
//   second process writing the same file waits up to the busy timeout, then UNAVAILABLE).
// - Schema: versioned with PRAGMA user_version; Open() creates it in an empty file and applies
//   pending migrations; a file written by a newer binary is FAILED_PRECONDITION.
// - Errors: absl::Status whose message names the database file and SQLite's message.
//   NOT_FOUND names the missing job id; a stored record that does not parse is DATA_LOSS.
// - Thread safety: all methods may be called from any thread (one connection, one mutex).
//   Jobs are value snapshots; the store keeps no pointers into callers' data.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "taylorshift/v1/jobs.pb.h"

struct sqlite3;

namespace ts::server {

// One point of a training job's loss curve (a progress event).
struct JobMetricRow {
  std::int64_t step = 0;
  double loss = 0;
  double learning_rate = 0;
  double examples_per_second = 0;
  std::int64_t time_ms = 0;  // Unix time
};

// One promotion of a checkpoint to a served model version.
struct PromotionRecord {
  std::string model;       // served model name
  std::string version;     // the version it was served as
  std::string checkpoint;  // the promoted .tsckpt path
  std::string source;      // where it came from, e.g. "job:job-7" or the requested path
  std::optional<double> validation_accuracy;  // the candidate's, when recorded
  std::int64_t time_ms = 0;                   // Unix time
};

class JobStore {
 public:
  // The schema version this binary writes (PRAGMA user_version).
  static constexpr int kSchemaVersion = 1;
  // ListJobs page sizes.
  static constexpr std::uint32_t kDefaultPageSize = 50;
  static constexpr std::uint32_t kMaxPageSize = 1000;
  // History page sizes (entries: loss points plus validation runs).
  static constexpr std::uint32_t kDefaultHistoryPageSize = 1000;
  static constexpr std::uint32_t kMaxHistoryPageSize = 10000;

  // Opens (creating the file and its parent directories if missing) the database at `path`
  // and brings its schema to kSchemaVersion. FAILED_PRECONDITION when the file is not a
  // SQLite database, is another application's database, or has a newer schema version.
  // `clock` (not owned; it must outlive the store) stamps each job's last write.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path,
                                                        Clock* clock = RealClock());

  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;
  ~JobStore();

  const std::string& path() const { return path_; }

  // Jobs. The id is "job-<n>" with n increasing and never reused, even after rows are deleted.
  // CreateJob assigns it (overwriting job.id) and returns the job as stored.
  absl::StatusOr<taylorshift::v1::Job> CreateJob(taylorshift::v1::Job job);
  // Replaces the stored snapshot of job.id; NOT_FOUND for an unknown id.
  absl::Status UpdateJob(const taylorshift::v1::Job& job);
  absl::StatusOr<taylorshift::v1::Job> GetJob(const std::string& id);
  // Newest first; request.state / request.kind filter unless UNSPECIFIED; page_size 0 means
  // kDefaultPageSize, more than kMaxPageSize is INVALID_ARGUMENT. next_page_token is empty on
  // the last page; a token is only valid with the filters it was issued for (INVALID_ARGUMENT
  // otherwise, or when malformed).
  absl::StatusOr<taylorshift::v1::ListJobsResponse> ListJobs(
      const taylorshift::v1::ListJobsRequest& request);
  // QUEUED and RUNNING jobs, oldest first: what to resume after a restart.
  absl::StatusOr<std::vector<taylorshift::v1::Job>> UnfinishedJobs();
  // Ids of the SUCCEEDED, FAILED and CANCELLED jobs last written before `cutoff` (their final
  // state's time, by the store's clock), oldest first, at most `limit`.
  absl::StatusOr<std::vector<std::string>> FinishedJobsBefore(absl::Time cutoff,
                                                              std::int64_t limit);
  // Deletes the job and its loss curve, validation runs and checkpoint records (one
  // transaction; promotions stay). NOT_FOUND for an unknown id. The file shrinks once a quarter
  // of it is free (VACUUM, then the WAL truncated).
  absl::Status DeleteJob(const std::string& id);

  // Per-job history, each in the order appended (a resumed job first drops the steps it will
  // train again: TruncateHistory).
  // Appending to or reading an unknown job is NOT_FOUND.
  absl::Status AppendMetric(const std::string& job_id, const JobMetricRow& row);
  absl::StatusOr<std::vector<JobMetricRow>> Metrics(const std::string& job_id);
  absl::Status AppendEvaluation(const std::string& job_id,
                                const taylorshift::v1::EvaluationReport& report);
  absl::StatusOr<std::vector<taylorshift::v1::EvaluationReport>> Evaluations(
      const std::string& job_id);

  // One page of the job's history (the paging contract is GetJobHistoryRequest's in
  // jobs.proto): page_size 0 means kDefaultHistoryPageSize, more than kMaxHistoryPageSize is
  // INVALID_ARGUMENT, and so is a malformed token or one issued for another job; NOT_FOUND for
  // an unknown job. Validation runs keep their per-class reports and confusion matrix only with
  // request.include_class_reports().
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> History(
      const taylorshift::v1::GetJobHistoryRequest& request);

  // Drops the loss-curve rows and validation runs of steps after `step` (a job resuming from a
  // state saved at `step` trains those steps again). NOT_FOUND for an unknown job.
  absl::Status TruncateHistory(const std::string& job_id, std::int64_t step);

  // Checkpoint files a job has on disk, in the order first recorded. Recording a (kind, path)
  // the job already has replaces that entry; RemoveCheckpoint removes every kind of `path`,
  // NOT_FOUND when there is none. Times are kept to the millisecond.
  absl::Status RecordCheckpoint(const std::string& job_id,
                                const taylorshift::v1::CheckpointInfo& checkpoint);
  absl::Status RemoveCheckpoint(const std::string& job_id, const std::string& path);
  absl::StatusOr<std::vector<taylorshift::v1::CheckpointInfo>> Checkpoints(
      const std::string& job_id);

  // Promotions. `model` must not be empty (INVALID_ARGUMENT).
  absl::Status RecordPromotion(const PromotionRecord& record);
  // The latest promotion of each model name, sorted by model name.
  absl::StatusOr<std::vector<PromotionRecord>> CurrentPromotions();
  // Every promotion of `model`, oldest first (empty for a name never promoted).
  absl::StatusOr<std::vector<PromotionRecord>> PromotionHistory(const std::string& model);

 private:
  struct DbCloser {
    void operator()(sqlite3* db) const;
  };

  JobStore(std::string path, Clock* clock, std::unique_ptr<sqlite3, DbCloser> db);

  // Now on the store's clock, in Unix milliseconds.
  std::int64_t NowMillis() const;

  // VACUUM when a quarter of the file is free pages (after a delete).
  absl::Status GiveSpaceBack() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND unless `job_id` names a stored job.
  absl::Status CheckJobExists(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  Clock* const clock_;
  absl::Mutex mu_;
  std::unique_ptr<sqlite3, DbCloser> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ts::server

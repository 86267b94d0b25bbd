// JobStore: the server's persistent record of jobs (training and evaluation): one row per job,
// the job's latest snapshot, in the jobs table of the StoreDatabase (store_database.h).
//
// Contract:
// - Durability and atomicity as the StoreDatabase's: every call that returns OK has committed;
//   each call is one transaction.
// - Errors: absl::Status whose message names the database file and SQLite's message.
//   NOT_FOUND names the missing job id; a stored record that does not parse is DATA_LOSS.
// - Each job's submitter (Job.submitted_by) is also a column, so that ListJobs filters on it.
// - Thread safety: all methods may be called from any thread (the database serializes them).
//   Jobs are value snapshots; the store keeps no pointers into callers' data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/jobs/store_database.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

// Whether a job's submitted_by names an owner: jobs stored before submitters were recorded
// (empty) and jobs submitted without authentication ("anonymous") have none, and any caller
// allowed to use the Jobs service reaches them.
bool HasOwner(const std::string& submitted_by);

class JobStore {
 public:
  // ListJobs page sizes.
  static constexpr std::uint32_t kDefaultPageSize = 50;
  static constexpr std::uint32_t kMaxPageSize = 1000;

  // `database` and `clock` (which stamps each job's last write) are not owned and must outlive
  // the store.
  JobStore(StoreDatabase* database, Clock* clock) : database_(database), clock_(clock) {}

  // The id is "job-<n>" with n increasing and never reused, even after rows are deleted.
  // CreateJob assigns it (overwriting job.id) and returns the job as stored.
  absl::StatusOr<taylorshift::v1::Job> CreateJob(taylorshift::v1::Job job);
  // Replaces the stored snapshot of job.id; NOT_FOUND for an unknown id.
  absl::Status UpdateJob(const taylorshift::v1::Job& job);
  absl::StatusOr<taylorshift::v1::Job> GetJob(const std::string& id) const;
  // Newest first; request.state / request.kind filter unless UNSPECIFIED; page_size 0 means
  // kDefaultPageSize, more than kMaxPageSize is INVALID_ARGUMENT. next_page_token is empty on
  // the last page; a token is only valid with the filters it was issued for (INVALID_ARGUMENT
  // otherwise, or when malformed). `pending` holds, by id, snapshots of jobs newer than their
  // stored records (a queued or running job's, a final state the store refused): such a job is
  // listed, and filtered by state, as its pending snapshot says, in its stored place (a pending
  // job without a record is left out), so the filter and the page tokens agree with what reads
  // of single jobs answer. A non-empty `owner` (an Authorizer identity) lists only the jobs it
  // submitted and those with no owner (HasOwner); empty lists every job.
  absl::StatusOr<taylorshift::v1::ListJobsResponse> ListJobs(
      const taylorshift::v1::ListJobsRequest& request,
      const std::map<std::string, taylorshift::v1::Job>& pending = {},
      const std::string& owner = "") const;
  // QUEUED and RUNNING jobs, oldest first: what to resume after a restart.
  absl::StatusOr<std::vector<taylorshift::v1::Job>> UnfinishedJobs() const;
  // Ids of the SUCCEEDED, FAILED and CANCELLED jobs last written before `cutoff` (their final
  // state's time, by the store's clock), oldest first, at most `limit`.
  absl::StatusOr<std::vector<std::string>> FinishedJobsBefore(absl::Time cutoff,
                                                              std::int64_t limit) const;
  // Deletes the job and, with it (ON DELETE CASCADE, in the same statement), its history and
  // checkpoint records (job_history_store.h); promotions stay. NOT_FOUND for an unknown id. The
  // file shrinks once a quarter of it is free (VACUUM, then the WAL truncated).
  absl::Status DeleteJob(const std::string& id);
  // OK when the database takes writes; UNAVAILABLE naming why not (StoreDatabase::OpenOrReadOnly).
  absl::Status CheckWritable() const;

 private:
  StoreDatabase* const database_;
  Clock* const clock_;
};

}  // namespace ts::server

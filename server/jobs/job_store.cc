#include "server/jobs/job_store.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace ts::server {
namespace {

using google::protobuf::util::TimeUtil;
using taylorshift::v1::Job;
using taylorshift::v1::ListJobsRequest;
using taylorshift::v1::ListJobsResponse;

absl::StatusOr<Job> ParseJob(const std::string& blob, std::int64_t seq, const std::string& path) {
  Job job;
  if (!job.ParseFromString(blob)) {
    return absl::DataLossError(
        absl::StrCat("job store ", path, ": the record of job-", seq, " does not parse"));
  }
  return job;
}

// Page tokens: web-safe base64 of "<last seq>.<state>.<kind>", so a token only continues the
// listing it came from.
std::string EncodePageToken(std::int64_t last_seq, int state, int kind) {
  return absl::WebSafeBase64Escape(absl::StrCat(last_seq, ".", state, ".", kind));
}

absl::StatusOr<std::int64_t> DecodePageToken(const std::string& token, int state, int kind) {
  const absl::Status malformed = absl::InvalidArgumentError(
      "page_token is malformed; pass the next_page_token of a previous ListJobs response");
  std::string text;
  if (!absl::WebSafeBase64Unescape(token, &text)) return malformed;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  std::int64_t last_seq = 0;
  int token_state = 0;
  int token_kind = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &last_seq) || last_seq <= 0 ||
      !absl::SimpleAtoi(parts[1], &token_state) || !absl::SimpleAtoi(parts[2], &token_kind)) {
    return malformed;
  }
  if (token_state != state || token_kind != kind) {
    return absl::InvalidArgumentError(
        "page_token was issued for a different state/kind filter than this request's");
  }
  return last_seq;
}

}  // namespace

bool HasOwner(const std::string& submitted_by) {
  return !submitted_by.empty() && submitted_by != "anonymous";
}

absl::StatusOr<Job> JobStore::CreateJob(Job job) {
  StoreDatabase::Session db(database_);
  const std::int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  TS_RETURN_IF_ERROR(db.Transaction([&]() -> absl::Status {
    {
      // The id depends on the row's seq: insert with a placeholder id, then set it. Both happen
      // in this transaction, so the placeholder is never visible.
      TS_ASSIGN_OR_RETURN(
          SqliteStatement insert,
          db.Prepare("INSERT INTO jobs(id, kind, state, name, create_ms, update_ms, job, "
                     "submitted_by) VALUES('', ?1, ?2, ?3, ?4, ?5, x'', ?6)"));
      insert.BindInt(1, job.kind())
          .BindInt(2, job.state())
          .BindText(3, job.name())
          .BindInt(4, TimeUtil::TimestampToMilliseconds(job.create_time()))
          .BindInt(5, now_ms)
          .BindText(6, job.submitted_by());
      TS_RETURN_IF_ERROR(insert.Run());
    }
    const std::int64_t seq = db.LastInsertRowid();
    job.set_id(absl::StrCat("job-", seq));
    TS_ASSIGN_OR_RETURN(SqliteStatement update,
                        db.Prepare("UPDATE jobs SET id = ?1, job = ?2 WHERE seq = ?3"));
    update.BindText(1, job.id()).BindBlob(2, job.SerializeAsString()).BindInt(3, seq);
    return update.Run();
  }));
  return job;
}

absl::Status JobStore::UpdateJob(const Job& job) {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement update,
      db.Prepare(
          "UPDATE jobs SET kind = ?2, state = ?3, name = ?4, create_ms = ?5, update_ms = ?6, "
          "job = ?7, submitted_by = ?8 WHERE id = ?1"));
  update.BindText(1, job.id())
      .BindInt(2, job.kind())
      .BindInt(3, job.state())
      .BindText(4, job.name())
      .BindInt(5, TimeUtil::TimestampToMilliseconds(job.create_time()))
      .BindInt(6, absl::ToUnixMillis(clock_->Now()))
      .BindBlob(7, job.SerializeAsString())
      .BindText(8, job.submitted_by());
  TS_RETURN_IF_ERROR(update.Run());
  if (db.Changes() == 0) return JobNotFound(job.id());
  return absl::OkStatus();
}

absl::StatusOr<Job> JobStore::GetJob(const std::string& id) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement select,
                      db.Prepare("SELECT seq, job FROM jobs WHERE id = ?1"));
  select.BindText(1, id);
  TS_ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return JobNotFound(id);
  return ParseJob(select.ColumnBlob(1), select.ColumnInt(0), database_->path());
}

absl::StatusOr<ListJobsResponse> JobStore::ListJobs(const ListJobsRequest& request,
                                                    const std::map<std::string, Job>& pending,
                                                    const std::string& owner) const {
  if (request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", request.page_size(), " is over the limit of ", kMaxPageSize));
  }
  const std::int64_t page_size = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  const int state = request.state();
  const int kind = request.kind();
  std::int64_t before_seq = std::numeric_limits<std::int64_t>::max();
  if (!request.page_token().empty()) {
    TS_ASSIGN_OR_RETURN(before_seq, DecodePageToken(request.page_token(), state, kind));
  }
  const auto matches = [state, kind, &owner](const Job& job) {
    return (state == 0 || job.state() == state) && (kind == 0 || job.kind() == kind) &&
           (owner.empty() || !HasOwner(job.submitted_by()) || job.submitted_by() == owner);
  };

  // One constant statement per filter combination, so each can use its index.
  // An owner keeps to that identity's jobs and those with no owner (HasOwner).
  const char* sql = nullptr;
  if (state != 0 && kind != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND state = :state AND kind = :kind "
        "AND (:owner = '' OR submitted_by IN (:owner, '', 'anonymous')) "
        "ORDER BY seq DESC LIMIT :limit";
  } else if (state != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND state = :state "
        "AND (:owner = '' OR submitted_by IN (:owner, '', 'anonymous')) "
        "ORDER BY seq DESC LIMIT :limit";
  } else if (kind != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND kind = :kind "
        "AND (:owner = '' OR submitted_by IN (:owner, '', 'anonymous')) "
        "ORDER BY seq DESC LIMIT :limit";
  } else {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before "
        "AND (:owner = '' OR submitted_by IN (:owner, '', 'anonymous')) "
        "ORDER BY seq DESC LIMIT :limit";
  }

  // The page's candidates by seq, newest first: the stored rows that match, without the pending
  // jobs, and the pending jobs that match. Each pending job can take at most one row out of the
  // query's, so it reads that many rows more than a page and one (whether that one exists says
  // whether there is a next page): a full query then still holds the page_size newest stored
  // candidates, all newer than any row it did not read.
  std::vector<std::pair<std::int64_t, Job>> candidates;
  const auto limit = static_cast<std::int64_t>(page_size + 1 + pending.size());
  StoreDatabase::Session db(database_);
  {
    TS_ASSIGN_OR_RETURN(SqliteStatement select, db.Prepare(sql));
    select.BindInt(":before", before_seq)
        .BindInt(":state", state)
        .BindInt(":kind", kind)
        .BindText(":owner", owner)
        .BindInt(":limit", limit);
    while (true) {
      TS_ASSIGN_OR_RETURN(bool row, select.Step());
      if (!row) break;
      const std::int64_t seq = select.ColumnInt(0);
      TS_ASSIGN_OR_RETURN(Job job, ParseJob(select.ColumnBlob(1), seq, database_->path()));
      if (pending.count(job.id()) > 0) continue;
      candidates.emplace_back(seq, std::move(job));
    }
  }
  for (const auto& [id, job] : pending) {
    if (!matches(job)) continue;
    TS_ASSIGN_OR_RETURN(SqliteStatement select,
                        db.Prepare("SELECT seq FROM jobs WHERE id = ?1 AND seq < ?2"));
    select.BindText(1, id).BindInt(2, before_seq);
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (row) candidates.emplace_back(select.ColumnInt(0), job);
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });

  ListJobsResponse response;
  for (auto& [seq, job] : candidates) {
    if (response.jobs_size() == page_size) {
      response.set_next_page_token(
          EncodePageToken(candidates[static_cast<std::size_t>(page_size) - 1].first, state, kind));
      break;
    }
    *response.add_jobs() = std::move(job);
  }
  return response;
}

absl::StatusOr<std::vector<Job>> JobStore::UnfinishedJobs() const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement select,
                      db.Prepare("SELECT seq, job FROM jobs WHERE state IN (?1, ?2) ORDER BY seq"));
  select.BindInt(1, taylorshift::v1::JOB_STATE_QUEUED)
      .BindInt(2, taylorshift::v1::JOB_STATE_RUNNING);
  std::vector<Job> jobs;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    TS_ASSIGN_OR_RETURN(Job job,
                        ParseJob(select.ColumnBlob(1), select.ColumnInt(0), database_->path()));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<std::string>> JobStore::FinishedJobsBefore(absl::Time cutoff,
                                                                      std::int64_t limit) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement select,
                      db.Prepare("SELECT id FROM jobs WHERE state IN (?1, ?2, ?3) AND "
                                 "update_ms < ?4 ORDER BY seq LIMIT ?5"));
  select.BindInt(1, taylorshift::v1::JOB_STATE_SUCCEEDED)
      .BindInt(2, taylorshift::v1::JOB_STATE_FAILED)
      .BindInt(3, taylorshift::v1::JOB_STATE_CANCELLED)
      .BindInt(4, absl::ToUnixMillis(cutoff))
      .BindInt(5, limit);
  std::vector<std::string> ids;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    ids.push_back(select.ColumnText(0));
  }
  return ids;
}

absl::Status JobStore::CheckWritable() const { return database_->CheckWritable(); }

absl::Status JobStore::DeleteJob(const std::string& id) {
  StoreDatabase::Session db(database_);
  // Child rows go with it (ON DELETE CASCADE), in the same implicit transaction.
  TS_ASSIGN_OR_RETURN(SqliteStatement remove, db.Prepare("DELETE FROM jobs WHERE id = ?1"));
  remove.BindText(1, id);
  TS_RETURN_IF_ERROR(remove.Run());
  if (db.Changes() == 0) return JobNotFound(id);
  return db.GiveSpaceBack();
}

}  // namespace ts::server

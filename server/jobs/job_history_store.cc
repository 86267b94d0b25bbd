#include "server/jobs/job_history_store.h"

#include <google/protobuf/util/time_util.h>
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/quoted.h"
#include "common/status_macros.h"

namespace ts::server {
namespace {

using google::protobuf::util::TimeUtil;
using taylorshift::v1::CheckpointInfo;
using taylorshift::v1::EvaluationReport;

// History pages. An entry's place in a job's history: (step, kind, rowid) with the loss
// point (kind 0) before the validation run (kind 1) of a step; rowid only breaks ties a step
// should never have. A token is web-safe base64 of "<step>.<kind>.<rowid>.<job id>" for the
// last entry returned, so it only continues the history it came from.
struct HistoryPosition {
  std::int64_t step = -1;  // before every entry: steps are >= 0
  int kind = 1;
  std::int64_t rowid = 0;
};
constexpr int kLossPointEntry = 0;
constexpr int kValidationEntry = 1;

std::string EncodeHistoryToken(const HistoryPosition& position, const std::string& job_id) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(position.step, ".", position.kind, ".", position.rowid, ".", job_id));
}

absl::StatusOr<HistoryPosition> DecodeHistoryToken(const std::string& token,
                                                   const std::string& job_id) {
  const absl::Status malformed = absl::InvalidArgumentError(
      "page_token is malformed; pass the next_page_token of a previous GetJobHistory response");
  std::string text;
  if (!absl::WebSafeBase64Unescape(token, &text)) return malformed;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits('.', 3));
  HistoryPosition position;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &position.step) || position.step < 0 ||
      !absl::SimpleAtoi(parts[1], &position.kind) ||
      (position.kind != kLossPointEntry && position.kind != kValidationEntry) ||
      !absl::SimpleAtoi(parts[2], &position.rowid)) {
    return malformed;
  }
  if (parts[3] != job_id) {
    return absl::InvalidArgumentError(absl::StrCat("page_token was issued for job ",
                                                   Capped(parts[3], kEchoedIdBytes), ", not for ",
                                                   Capped(job_id, kEchoedIdBytes)));
  }
  return position;
}

// Runs an INSERT of a row that references jobs(id): the foreign key failing means no such job.
absl::Status RunChildInsert(SqliteStatement& insert, const std::string& job_id) {
  absl::Status status = insert.Run();
  if (!status.ok() && insert.error_code() == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return JobNotFound(job_id);
  }
  return status;
}

}  // namespace

absl::Status JobHistoryStore::AppendMetric(const std::string& job_id, const JobMetricRow& row) {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement insert,
                      db.Prepare("INSERT INTO job_metrics(job_id, step, loss, "
                                 "learning_rate, examples_per_second, time_ms) "
                                 "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"));
  insert.BindText(1, job_id)
      .BindInt(2, row.step)
      .BindDouble(3, row.loss)
      .BindDouble(4, row.learning_rate)
      .BindDouble(5, row.examples_per_second)
      .BindInt(6, row.time_ms);
  return RunChildInsert(insert, job_id);
}

absl::StatusOr<std::vector<JobMetricRow>> JobHistoryStore::Metrics(
    const std::string& job_id) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db.Prepare("SELECT step, loss, learning_rate, examples_per_second, time_ms FROM job_metrics "
                 "WHERE job_id = ?1 ORDER BY rowid"));
  select.BindText(1, job_id);
  std::vector<JobMetricRow> rows;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    rows.push_back({select.ColumnInt(0), select.ColumnDouble(1), select.ColumnDouble(2),
                    select.ColumnDouble(3), select.ColumnInt(4)});
  }
  if (rows.empty()) {
    TS_RETURN_IF_ERROR(CheckJobExists(db, job_id));
  }
  return rows;
}

absl::Status JobHistoryStore::AppendEvaluation(const std::string& job_id,
                                               const EvaluationReport& report) {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement insert,
      db.Prepare("INSERT INTO job_evaluations(job_id, step, accuracy, macro_f1, loss, report) "
                 "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"));
  insert.BindText(1, job_id)
      .BindInt(2, static_cast<std::int64_t>(report.step()))
      .BindDouble(3, report.accuracy())
      .BindDouble(4, report.macro_f1())
      .BindDouble(5, report.loss())
      .BindBlob(6, report.SerializeAsString());
  return RunChildInsert(insert, job_id);
}

absl::StatusOr<std::vector<EvaluationReport>> JobHistoryStore::Evaluations(
    const std::string& job_id) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db.Prepare("SELECT report FROM job_evaluations WHERE job_id = ?1 ORDER BY rowid"));
  select.BindText(1, job_id);
  std::vector<EvaluationReport> reports;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    EvaluationReport report;
    if (!report.ParseFromString(select.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat("job store ", database_->path(),
                                              ": an evaluation report of ", job_id,
                                              " does not parse"));
    }
    reports.push_back(std::move(report));
  }
  if (reports.empty()) {
    TS_RETURN_IF_ERROR(CheckJobExists(db, job_id));
  }
  return reports;
}

absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> JobHistoryStore::History(
    const taylorshift::v1::GetJobHistoryRequest& request) const {
  const std::string& job_id = request.id();
  if (job_id.empty()) return absl::InvalidArgumentError("id is required");
  if (request.page_size() > kMaxHistoryPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size ", request.page_size(),
                                                   " is over the limit of ", kMaxHistoryPageSize));
  }
  const std::int64_t page_size =
      request.page_size() == 0 ? kDefaultHistoryPageSize : request.page_size();
  HistoryPosition after;
  if (!request.page_token().empty()) {
    TS_ASSIGN_OR_RETURN(after, DecodeHistoryToken(request.page_token(), job_id));
  }

  StoreDatabase::Session db(database_);
  TS_RETURN_IF_ERROR(CheckJobExists(db, job_id));
  // Up to one page plus one entry of each kind after `after`: merged by position, the first
  // page_size of them are this page and anything left over means there is a next one.
  TS_ASSIGN_OR_RETURN(
      SqliteStatement points,
      db.Prepare(
          "SELECT rowid, step, loss, learning_rate, examples_per_second, time_ms FROM job_metrics "
          "WHERE job_id = :job AND (step > :step OR (step = :step AND :kind = 0 AND rowid > "
          ":rowid)) "
          "ORDER BY step, rowid LIMIT :limit"));
  TS_ASSIGN_OR_RETURN(SqliteStatement validations,
                      db.Prepare("SELECT rowid, step, report FROM job_evaluations "
                                 "WHERE job_id = :job AND (step > :step OR (step = :step "
                                 "AND (:kind = 0 OR rowid > :rowid))) "
                                 "ORDER BY step, rowid LIMIT :limit"));
  for (SqliteStatement* select : {&points, &validations}) {
    select->BindText(":job", job_id)
        .BindInt(":step", after.step)
        .BindInt(":kind", after.kind)
        .BindInt(":rowid", after.rowid)
        .BindInt(":limit", page_size + 1);
  }

  taylorshift::v1::GetJobHistoryResponse response;
  TS_ASSIGN_OR_RETURN(bool point_row, points.Step());
  TS_ASSIGN_OR_RETURN(bool validation_row, validations.Step());
  HistoryPosition last;
  std::int64_t taken = 0;
  const auto position = [](const SqliteStatement& select, int kind) {
    return HistoryPosition{select.ColumnInt(1), kind, select.ColumnInt(0)};
  };
  while (point_row || validation_row) {
    bool take_point = point_row;
    if (point_row && validation_row) {
      const HistoryPosition point = position(points, kLossPointEntry);
      const HistoryPosition validation = position(validations, kValidationEntry);
      take_point = std::tie(point.step, point.kind, point.rowid) <
                   std::tie(validation.step, validation.kind, validation.rowid);
    }
    if (taken == page_size) {
      response.set_next_page_token(EncodeHistoryToken(last, job_id));
      break;
    }
    ++taken;
    if (take_point) {
      last = position(points, kLossPointEntry);
      const std::int64_t step = last.step;
      taylorshift::v1::LossPoint* entry = response.add_loss_curve();
      entry->set_step(static_cast<std::uint64_t>(step));
      entry->set_loss(points.ColumnDouble(2));
      entry->set_learning_rate(points.ColumnDouble(3));
      entry->set_examples_per_second(points.ColumnDouble(4));
      *entry->mutable_time() = TimeUtil::MillisecondsToTimestamp(points.ColumnInt(5));
      TS_ASSIGN_OR_RETURN(point_row, points.Step());
    } else {
      last = position(validations, kValidationEntry);
      EvaluationReport* report = response.add_validations();
      if (!report->ParseFromString(validations.ColumnBlob(2))) {
        return absl::DataLossError(absl::StrCat("job store ", database_->path(),
                                                ": an evaluation report of ",
                                                Capped(job_id, kEchoedIdBytes), " does not parse"));
      }
      if (!request.include_class_reports()) {
        report->clear_classes();
        report->clear_confusion();
      }
      TS_ASSIGN_OR_RETURN(validation_row, validations.Step());
    }
  }
  return response;
}

absl::Status JobHistoryStore::RecordCheckpoint(const std::string& job_id,
                                               const CheckpointInfo& checkpoint) {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement upsert,
      db.Prepare("INSERT INTO checkpoints(job_id, kind, step, path, validation_accuracy, time_ms) "
                 "VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(job_id, kind, path) DO UPDATE SET "
                 "step = excluded.step, validation_accuracy = excluded.validation_accuracy, "
                 "time_ms = excluded.time_ms"));
  upsert.BindText(1, job_id)
      .BindText(2, checkpoint.kind())
      .BindInt(3, static_cast<std::int64_t>(checkpoint.step()))
      .BindText(4, checkpoint.path())
      .BindOptionalDouble(5, checkpoint.has_validation_accuracy()
                                 ? std::optional<double>(checkpoint.validation_accuracy())
                                 : std::nullopt)
      .BindInt(6, TimeUtil::TimestampToMilliseconds(checkpoint.time()));
  return RunChildInsert(upsert, job_id);
}

absl::Status JobHistoryStore::TruncateHistory(const std::string& job_id, std::int64_t step) {
  StoreDatabase::Session db(database_);
  TS_RETURN_IF_ERROR(CheckJobExists(db, job_id));
  return db.Transaction([&]() -> absl::Status {
    for (const char* sql : {"DELETE FROM job_metrics WHERE job_id = ?1 AND step > ?2",
                            "DELETE FROM job_evaluations WHERE job_id = ?1 AND step > ?2"}) {
      TS_ASSIGN_OR_RETURN(SqliteStatement remove, db.Prepare(sql));
      remove.BindText(1, job_id).BindInt(2, step);
      TS_RETURN_IF_ERROR(remove.Run());
    }
    return absl::OkStatus();
  });
}

absl::Status JobHistoryStore::RemoveCheckpoint(const std::string& job_id, const std::string& path) {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement remove,
                      db.Prepare("DELETE FROM checkpoints WHERE job_id = ?1 AND path = ?2"));
  remove.BindText(1, job_id).BindText(2, path);
  TS_RETURN_IF_ERROR(remove.Run());
  if (db.Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoint ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointInfo>> JobHistoryStore::Checkpoints(
    const std::string& job_id) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db.Prepare("SELECT kind, step, path, validation_accuracy, time_ms FROM checkpoints "
                 "WHERE job_id = ?1 ORDER BY rowid"));
  select.BindText(1, job_id);
  std::vector<CheckpointInfo> checkpoints;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    CheckpointInfo& checkpoint = checkpoints.emplace_back();
    checkpoint.set_kind(select.ColumnText(0));
    checkpoint.set_step(static_cast<std::uint64_t>(select.ColumnInt(1)));
    checkpoint.set_path(select.ColumnText(2));
    if (std::optional<double> accuracy = select.ColumnOptionalDouble(3)) {
      checkpoint.set_validation_accuracy(*accuracy);
      checkpoint.set_has_validation_accuracy(true);
    }
    *checkpoint.mutable_time() = TimeUtil::MillisecondsToTimestamp(select.ColumnInt(4));
  }
  if (checkpoints.empty()) {
    TS_RETURN_IF_ERROR(CheckJobExists(db, job_id));
  }
  return checkpoints;
}

}  // namespace ts::server

#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/quoted.h"
#include "common/status_macros.h"

namespace ts::server {
namespace {

using taylorshift::v1::CheckpointInfo;
using taylorshift::v1::EvaluationReport;
using taylorshift::v1::Job;
using taylorshift::v1::ListJobsRequest;
using taylorshift::v1::ListJobsResponse;

// ---------------------------------------------------------------------------------------------
// Schema

// Version 1. Jobs are stored whole (the serialized taylorshift.v1.Job) with the columns that
// queries filter on copied out of it. AUTOINCREMENT keeps `seq` (and so the "job-<seq>" id)
// from being reused after deletes. Child rows reference jobs(id) and go with their job.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE jobs(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  kind INTEGER NOT NULL,
  state INTEGER NOT NULL,
  name TEXT NOT NULL,
  create_ms INTEGER NOT NULL,
  update_ms INTEGER NOT NULL,
  job BLOB NOT NULL
);
CREATE INDEX jobs_by_state ON jobs(state);
CREATE INDEX jobs_by_kind ON jobs(kind);

CREATE TABLE job_metrics(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  loss REAL NOT NULL,
  learning_rate REAL NOT NULL,
  examples_per_second REAL NOT NULL,
  time_ms INTEGER NOT NULL
);
CREATE INDEX job_metrics_by_job ON job_metrics(job_id);

CREATE TABLE job_evaluations(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  accuracy REAL NOT NULL,
  macro_f1 REAL NOT NULL,
  loss REAL NOT NULL,
  report BLOB NOT NULL
);
CREATE INDEX job_evaluations_by_job ON job_evaluations(job_id);

CREATE TABLE checkpoints(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  validation_accuracy REAL,
  time_ms INTEGER NOT NULL,
  UNIQUE(job_id, kind, path)
);

CREATE TABLE promotions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  model TEXT NOT NULL,
  version TEXT NOT NULL,
  checkpoint TEXT NOT NULL,
  source TEXT NOT NULL,
  validation_accuracy REAL,
  time_ms INTEGER NOT NULL
);
CREATE INDEX promotions_by_model ON promotions(model);
)sql";

// kMigrations[v] takes a database from schema version v to v + 1; kMigrations[0] creates the
// schema in an empty file. A schema change appends a step (and bumps kSchemaVersion); a step
// that has shipped is never edited.
constexpr const char* kMigrations[] = {kSchemaV1};
static_assert(std::size(kMigrations) == JobStore::kSchemaVersion,
              "one migration step per schema version");

constexpr int kBusyTimeoutMs = 5000;

// ---------------------------------------------------------------------------------------------
// SQLite helpers

absl::StatusCode StatusCodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;  // another writer held the file too long: retry
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "job store PATH: WHAT: SQLITE MESSAGE".
absl::Status SqliteError(sqlite3* db, int rc, const std::string& path, absl::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return absl::Status(StatusCodeFor(rc),
                      absl::StrCat("job store ", path, ": ", what, ": ", message));
}

// Ids and tokens in messages: at most this many bytes of them.
constexpr std::size_t kEchoedIdBytes = 100;

absl::Status JobNotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("job ", Capped(id, kEchoedIdBytes), " not found"));
}

// A prepared statement; finalized on destruction. Bind errors are kept and reported by the
// next Step(), so call sites bind without checking each call.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, const std::string& path, const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return SqliteError(db, rc, path, absl::StrCat("preparing \"", Summary(sql), "\""));
    }
    return Statement(db, path, sql, stmt);
  }

  Statement(Statement&& other) noexcept
      : db_(other.db_),
        path_(other.path_),
        sql_(other.sql_),
        stmt_(std::exchange(other.stmt_, nullptr)),
        rc_(other.rc_) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Parameters are 1-based, or named (":name"; skipped when the statement lacks the name).
  Statement& BindInt(int index, std::int64_t value) {
    return Check(sqlite3_bind_int64(stmt_, index, value));
  }
  Statement& BindInt(const char* name, std::int64_t value) {
    const int index = sqlite3_bind_parameter_index(stmt_, name);
    return index == 0 ? *this : BindInt(index, value);
  }
  Statement& BindDouble(int index, double value) {
    return Check(sqlite3_bind_double(stmt_, index, value));
  }
  Statement& BindOptionalDouble(int index, std::optional<double> value) {
    return value.has_value() ? BindDouble(index, *value) : Check(sqlite3_bind_null(stmt_, index));
  }
  Statement& BindText(int index, const std::string& value) {
    return Check(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                     SQLITE_UTF8));
  }
  Statement& BindText(const char* name, const std::string& value) {
    const int index = sqlite3_bind_parameter_index(stmt_, name);
    return index == 0 ? *this : BindText(index, value);
  }
  Statement& BindBlob(int index, const std::string& value) {
    return Check(sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT));
  }

  // true: a row is ready to read; false: the statement is done.
  absl::StatusOr<bool> Step() {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_step(stmt_);
    if (rc_ == SQLITE_ROW) {
      rc_ = SQLITE_OK;
      return true;
    }
    if (rc_ == SQLITE_DONE) {
      rc_ = SQLITE_OK;
      return false;
    }
    return SqliteError(db_, rc_, path_, Summary(sql_));
  }

  // Runs a statement that returns no rows.
  absl::Status Run() {
    TS_ASSIGN_OR_RETURN(bool row, Step());
    if (row) {
      return absl::InternalError(
          absl::StrCat("job store ", path_, ": ", Summary(sql_), ": unexpected result row"));
    }
    return absl::OkStatus();
  }

  // The extended result code of the last failed step (SQLITE_OK otherwise).
  int error_code() const { return rc_; }

  std::int64_t ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }
  double ColumnDouble(int column) const { return sqlite3_column_double(stmt_, column); }
  bool ColumnIsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::optional<double> ColumnOptionalDouble(int column) const {
    if (ColumnIsNull(column)) return std::nullopt;
    return ColumnDouble(column);
  }
  std::string ColumnText(int column) const {
    const unsigned char* text = sqlite3_column_text(stmt_, column);
    const int bytes = sqlite3_column_bytes(stmt_, column);
    return text == nullptr ? std::string()
                           : std::string(reinterpret_cast<const char*>(text), bytes);
  }
  std::string ColumnBlob(int column) const {
    const void* blob = sqlite3_column_blob(stmt_, column);
    const int bytes = sqlite3_column_bytes(stmt_, column);
    return blob == nullptr ? std::string() : std::string(static_cast<const char*>(blob), bytes);
  }

 private:
  Statement(sqlite3* db, const std::string& path, const char* sql, sqlite3_stmt* stmt)
      : db_(db), path_(path), sql_(sql), stmt_(stmt) {}

  // The start of the SQL text, for error messages.
  static std::string Summary(const char* sql) {
    absl::string_view text(sql);
    constexpr std::size_t kMaxChars = 48;
    return text.size() <= kMaxChars ? std::string(text)
                                    : absl::StrCat(text.substr(0, kMaxChars), "...");
  }

  Statement& Check(int rc) {
    if (rc != SQLITE_OK && rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }

  sqlite3* db_;
  const std::string& path_;  // the JobStore's, which outlives every statement
  const char* sql_;          // a string literal
  sqlite3_stmt* stmt_;
  int rc_ = SQLITE_OK;
};

// Runs constant SQL (no values: anything variable goes through Statement's bound parameters).
absl::Status Exec(sqlite3* db, const std::string& path, const char* sql, absl::string_view what) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, path, what);
  return absl::OkStatus();
}

// A write transaction: BEGIN IMMEDIATE takes the write lock up front, so it waits (busy
// timeout) for another writer instead of failing halfway through. Rolled back on destruction
// unless committed.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    // SQLite may already have rolled back (e.g. after SQLITE_FULL); autocommit then is on.
    if (begun_ && sqlite3_get_autocommit(db_) == 0) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  absl::Status Begin() {
    absl::Status status = Exec(db_, path_, "BEGIN IMMEDIATE", "beginning a transaction");
    begun_ = status.ok();
    return status;
  }
  absl::Status Commit() {
    absl::Status status = Exec(db_, path_, "COMMIT", "committing");
    if (status.ok()) begun_ = false;
    return status;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool begun_ = false;
};

absl::StatusOr<std::int64_t> QueryInt(sqlite3* db, const std::string& path, const char* sql) {
  TS_ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, path, sql));
  TS_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError(absl::StrCat("job store ", path, ": ", sql, ": no row"));
  return stmt.ColumnInt(0);
}

// Brings the schema to JobStore::kSchemaVersion, in one transaction.
absl::Status Migrate(sqlite3* db, const std::string& path) {
  const auto too_new = [&path](std::int64_t version) {
    return absl::FailedPreconditionError(
        absl::StrCat("job store ", path, " has schema version ", version,
                     ", newer than the versions this binary knows (up to ",
                     JobStore::kSchemaVersion, "); run a newer tsserver or use another state_dir"));
  };
  TS_ASSIGN_OR_RETURN(std::int64_t version, QueryInt(db, path, "PRAGMA user_version"));
  if (version > JobStore::kSchemaVersion) return too_new(version);
  if (version == JobStore::kSchemaVersion) return absl::OkStatus();

  Transaction txn(db, path);
  TS_RETURN_IF_ERROR(txn.Begin());
  // Another process may have migrated the file between the read above and the lock.
  TS_ASSIGN_OR_RETURN(version, QueryInt(db, path, "PRAGMA user_version"));
  if (version > JobStore::kSchemaVersion) return too_new(version);
  if (version < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job store ", path, " has invalid schema version ", version));
  }
  if (version == 0) {
    TS_ASSIGN_OR_RETURN(std::int64_t tables,
                        QueryInt(db, path, "SELECT count(*) FROM sqlite_master"));
    if (tables > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job store ", path, " holds tables but no schema version: not a job store database"));
    }
  }
  for (std::int64_t v = version; v < JobStore::kSchemaVersion; ++v) {
    TS_RETURN_IF_ERROR(Exec(db, path, kMigrations[v],
                            absl::StrCat("migrating schema version ", v, " to ", v + 1)));
  }
  // PRAGMA takes no bound parameters; the value is this binary's constant.
  const std::string set_version = absl::StrCat("PRAGMA user_version = ", JobStore::kSchemaVersion);
  TS_RETURN_IF_ERROR(Exec(db, path, set_version.c_str(), "setting the schema version"));
  return txn.Commit();
}

// ---------------------------------------------------------------------------------------------
// Conversions

std::int64_t ToUnixMillis(const google::protobuf::Timestamp& time) {
  return time.seconds() * 1000 + time.nanos() / 1000000;
}

google::protobuf::Timestamp FromUnixMillis(std::int64_t ms) {
  google::protobuf::Timestamp time;
  std::int64_t seconds = ms / 1000;
  std::int64_t rest_ms = ms % 1000;
  if (rest_ms < 0) {  // nanos must be non-negative
    --seconds;
    rest_ms += 1000;
  }
  time.set_seconds(seconds);
  time.set_nanos(static_cast<std::int32_t>(rest_ms * 1000000));
  return time;
}

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// JobStore

void JobStore::DbCloser::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

JobStore::JobStore(std::string path, Clock* clock, std::unique_ptr<sqlite3, DbCloser> db)
    : path_(std::move(path)), clock_(clock), db_(std::move(db)) {}

JobStore::~JobStore() = default;

std::int64_t JobStore::NowMillis() const { return absl::ToUnixMillis(clock_->Now()); }

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path, Clock* clock) {
  if (path.empty()) return absl::InvalidArgumentError("job store: empty database path");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      return absl::FailedPreconditionError(absl::StrCat("job store ", path, ": creating directory ",
                                                        parent.string(), ": ", error.message()));
    }
  }

  sqlite3* raw_db = nullptr;
  // NOMUTEX: the JobStore's mutex serializes every use of the connection.
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw_db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite3, DbCloser> db(raw_db);  // SQLite allocates a handle even on failure
  if (rc != SQLITE_OK) return SqliteError(db.get(), rc, path, "opening");
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);

  // WAL: readers never block the writer, and a commit is one append to the -wal file.
  {
    TS_ASSIGN_OR_RETURN(Statement journal,
                        Statement::Prepare(db.get(), path, "PRAGMA journal_mode=WAL"));
    TS_ASSIGN_OR_RETURN(bool row, journal.Step());
    const std::string mode = row ? journal.ColumnText(0) : std::string();
    if (mode != "wal") {
      return absl::FailedPreconditionError(absl::StrCat(
          "job store ", path, ": cannot use write-ahead logging (journal_mode is '", mode, "')"));
    }
  }  // finalized here: an unfinished statement would keep COMMIT from succeeding
  // Durability. WAL with synchronous=NORMAL survives a process crash (kill -9) — the WAL is
  // written before COMMIT returns — but fsyncs only at checkpoints, so an OS crash or power
  // loss can roll back the last committed transactions (e.g. a job's SUCCEEDED state, or a
  // promotion, that a client was already told about). FULL fsyncs the WAL at every commit;
  // the store's write rate (state changes, a metric row per log interval) makes that cheap.
  TS_RETURN_IF_ERROR(Exec(db.get(), path, "PRAGMA synchronous=FULL", "setting synchronous"));
  TS_RETURN_IF_ERROR(Exec(db.get(), path, "PRAGMA foreign_keys=ON", "enabling foreign keys"));
  TS_RETURN_IF_ERROR(Migrate(db.get(), path));
  return std::unique_ptr<JobStore>(new JobStore(path, clock, std::move(db)));
}

absl::StatusOr<Job> JobStore::CreateJob(Job job) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  Transaction txn(db, path_);
  TS_RETURN_IF_ERROR(txn.Begin());
  const std::int64_t now_ms = NowMillis();
  {
    // The id depends on the row's seq: insert with a placeholder id, then set it. Both happen
    // in this transaction, so the placeholder is never visible.
    TS_ASSIGN_OR_RETURN(
        Statement insert,
        Statement::Prepare(db, path_,
                           "INSERT INTO jobs(id, kind, state, name, create_ms, update_ms, job) "
                           "VALUES('', ?1, ?2, ?3, ?4, ?5, x'')"));
    insert.BindInt(1, job.kind())
        .BindInt(2, job.state())
        .BindText(3, job.name())
        .BindInt(4, ToUnixMillis(job.create_time()))
        .BindInt(5, now_ms);
    TS_RETURN_IF_ERROR(insert.Run());
  }
  const std::int64_t seq = sqlite3_last_insert_rowid(db);
  job.set_id(absl::StrCat("job-", seq));
  TS_ASSIGN_OR_RETURN(
      Statement update,
      Statement::Prepare(db, path_, "UPDATE jobs SET id = ?1, job = ?2 WHERE seq = ?3"));
  update.BindText(1, job.id()).BindBlob(2, job.SerializeAsString()).BindInt(3, seq);
  TS_RETURN_IF_ERROR(update.Run());
  TS_RETURN_IF_ERROR(txn.Commit());
  return job;
}

absl::Status JobStore::UpdateJob(const Job& job) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement update,
      Statement::Prepare(
          db_.get(), path_,
          "UPDATE jobs SET kind = ?2, state = ?3, name = ?4, create_ms = ?5, update_ms = ?6, "
          "job = ?7 WHERE id = ?1"));
  update.BindText(1, job.id())
      .BindInt(2, job.kind())
      .BindInt(3, job.state())
      .BindText(4, job.name())
      .BindInt(5, ToUnixMillis(job.create_time()))
      .BindInt(6, NowMillis())
      .BindBlob(7, job.SerializeAsString());
  TS_RETURN_IF_ERROR(update.Run());
  if (sqlite3_changes(db_.get()) == 0) return JobNotFound(job.id());
  return absl::OkStatus();
}

absl::StatusOr<Job> JobStore::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_, "SELECT seq, job FROM jobs WHERE id = ?1"));
  select.BindText(1, id);
  TS_ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return JobNotFound(id);
  return ParseJob(select.ColumnBlob(1), select.ColumnInt(0), path_);
}

absl::StatusOr<ListJobsResponse> JobStore::ListJobs(const ListJobsRequest& request) {
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

  // One constant statement per filter combination, so each can use its index.
  const char* sql = nullptr;
  if (state != 0 && kind != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND state = :state AND kind = :kind "
        "ORDER BY seq DESC LIMIT :limit";
  } else if (state != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND state = :state "
        "ORDER BY seq DESC LIMIT :limit";
  } else if (kind != 0) {
    sql =
        "SELECT seq, job FROM jobs WHERE seq < :before AND kind = :kind "
        "ORDER BY seq DESC LIMIT :limit";
  } else {
    sql = "SELECT seq, job FROM jobs WHERE seq < :before ORDER BY seq DESC LIMIT :limit";
  }

  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(Statement select, Statement::Prepare(db_.get(), path_, sql));
  // One row more than the page: whether it exists says whether there is a next page.
  select.BindInt(":before", before_seq)
      .BindInt(":state", state)
      .BindInt(":kind", kind)
      .BindInt(":limit", page_size + 1);
  ListJobsResponse response;
  std::int64_t last_seq = 0;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    if (response.jobs_size() == page_size) {
      response.set_next_page_token(EncodePageToken(last_seq, state, kind));
      break;
    }
    last_seq = select.ColumnInt(0);
    TS_ASSIGN_OR_RETURN(Job job, ParseJob(select.ColumnBlob(1), last_seq, path_));
    *response.add_jobs() = std::move(job);
  }
  return response;
}

absl::StatusOr<std::vector<Job>> JobStore::UnfinishedJobs() {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_,
                         "SELECT seq, job FROM jobs WHERE state IN (?1, ?2) ORDER BY seq"));
  select.BindInt(1, taylorshift::v1::JOB_STATE_QUEUED)
      .BindInt(2, taylorshift::v1::JOB_STATE_RUNNING);
  std::vector<Job> jobs;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    TS_ASSIGN_OR_RETURN(Job job, ParseJob(select.ColumnBlob(1), select.ColumnInt(0), path_));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<std::string>> JobStore::FinishedJobsBefore(absl::Time cutoff,
                                                                      std::int64_t limit) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(Statement select,
                      Statement::Prepare(db_.get(), path_,
                                         "SELECT id FROM jobs WHERE state IN (?1, ?2, ?3) AND "
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

absl::Status JobStore::DeleteJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  // Child rows go with it (ON DELETE CASCADE), in the same implicit transaction.
  TS_ASSIGN_OR_RETURN(Statement remove,
                      Statement::Prepare(db_.get(), path_, "DELETE FROM jobs WHERE id = ?1"));
  remove.BindText(1, id);
  TS_RETURN_IF_ERROR(remove.Run());
  if (sqlite3_changes(db_.get()) == 0) return JobNotFound(id);
  return GiveSpaceBack();
}

absl::Status JobStore::GiveSpaceBack() {
  // SQLite keeps a deleted job's pages on its free list and the -wal file at its largest size:
  // a job with a large spec or history would keep its space for good. Once the free pages are a
  // quarter of the file, VACUUM rewrites it compactly; the checkpoint then truncates the WAL.
  TS_ASSIGN_OR_RETURN(const std::int64_t free_pages,
                      QueryInt(db_.get(), path_, "PRAGMA freelist_count"));
  TS_ASSIGN_OR_RETURN(const std::int64_t pages, QueryInt(db_.get(), path_, "PRAGMA page_count"));
  if (free_pages == 0 || free_pages * 4 < pages) return absl::OkStatus();
  TS_RETURN_IF_ERROR(Exec(db_.get(), path_, "VACUUM", "compacting after a delete"));
  return Exec(db_.get(), path_, "PRAGMA wal_checkpoint(TRUNCATE)", "truncating the WAL");
}

absl::Status JobStore::CheckJobExists(const std::string& job_id) {
  TS_ASSIGN_OR_RETURN(Statement select,
                      Statement::Prepare(db_.get(), path_, "SELECT 1 FROM jobs WHERE id = ?1"));
  select.BindText(1, job_id);
  TS_ASSIGN_OR_RETURN(bool row, select.Step());
  return row ? absl::OkStatus() : JobNotFound(job_id);
}

namespace {

// Runs an INSERT of a row that references jobs(id): the foreign key failing means no such job.
absl::Status RunChildInsert(Statement& insert, const std::string& job_id) {
  absl::Status status = insert.Run();
  if (!status.ok() && insert.error_code() == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return JobNotFound(job_id);
  }
  return status;
}

}  // namespace

absl::Status JobStore::AppendMetric(const std::string& job_id, const JobMetricRow& row) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(Statement insert,
                      Statement::Prepare(db_.get(), path_,
                                         "INSERT INTO job_metrics(job_id, step, loss, "
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

absl::StatusOr<std::vector<JobMetricRow>> JobStore::Metrics(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(
          db_.get(), path_,
          "SELECT step, loss, learning_rate, examples_per_second, time_ms FROM job_metrics "
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
    TS_RETURN_IF_ERROR(CheckJobExists(job_id));
  }
  return rows;
}

absl::Status JobStore::AppendEvaluation(const std::string& job_id, const EvaluationReport& report) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::Prepare(
          db_.get(), path_,
          "INSERT INTO job_evaluations(job_id, step, accuracy, macro_f1, loss, report) "
          "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"));
  insert.BindText(1, job_id)
      .BindInt(2, static_cast<std::int64_t>(report.step()))
      .BindDouble(3, report.accuracy())
      .BindDouble(4, report.macro_f1())
      .BindDouble(5, report.loss())
      .BindBlob(6, report.SerializeAsString());
  return RunChildInsert(insert, job_id);
}

absl::StatusOr<std::vector<EvaluationReport>> JobStore::Evaluations(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_,
                         "SELECT report FROM job_evaluations WHERE job_id = ?1 ORDER BY rowid"));
  select.BindText(1, job_id);
  std::vector<EvaluationReport> reports;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    EvaluationReport report;
    if (!report.ParseFromString(select.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat("job store ", path_, ": an evaluation report of ",
                                              job_id, " does not parse"));
    }
    reports.push_back(std::move(report));
  }
  if (reports.empty()) {
    TS_RETURN_IF_ERROR(CheckJobExists(job_id));
  }
  return reports;
}

absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> JobStore::History(
    const taylorshift::v1::GetJobHistoryRequest& request) {
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

  absl::MutexLock lock(&mu_);
  TS_RETURN_IF_ERROR(CheckJobExists(job_id));
  // Up to one page plus one entry of each kind after `after`: merged by position, the first
  // page_size of them are this page and anything left over means there is a next one.
  TS_ASSIGN_OR_RETURN(
      Statement points,
      Statement::Prepare(
          db_.get(), path_,
          "SELECT rowid, step, loss, learning_rate, examples_per_second, time_ms FROM job_metrics "
          "WHERE job_id = :job AND (step > :step OR (step = :step AND :kind = 0 AND rowid > "
          ":rowid)) "
          "ORDER BY step, rowid LIMIT :limit"));
  TS_ASSIGN_OR_RETURN(Statement validations,
                      Statement::Prepare(db_.get(), path_,
                                         "SELECT rowid, step, report FROM job_evaluations "
                                         "WHERE job_id = :job AND (step > :step OR (step = :step "
                                         "AND (:kind = 0 OR rowid > :rowid))) "
                                         "ORDER BY step, rowid LIMIT :limit"));
  for (Statement* select : {&points, &validations}) {
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
  const auto position = [](const Statement& select, int kind) {
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
      *entry->mutable_time() = FromUnixMillis(points.ColumnInt(5));
      TS_ASSIGN_OR_RETURN(point_row, points.Step());
    } else {
      last = position(validations, kValidationEntry);
      EvaluationReport* report = response.add_validations();
      if (!report->ParseFromString(validations.ColumnBlob(2))) {
        return absl::DataLossError(absl::StrCat("job store ", path_, ": an evaluation report of ",
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

absl::Status JobStore::RecordCheckpoint(const std::string& job_id,
                                        const CheckpointInfo& checkpoint) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement upsert,
      Statement::Prepare(
          db_.get(), path_,
          "INSERT INTO checkpoints(job_id, kind, step, path, validation_accuracy, time_ms) "
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
      .BindInt(6, ToUnixMillis(checkpoint.time()));
  return RunChildInsert(upsert, job_id);
}

absl::Status JobStore::TruncateHistory(const std::string& job_id, std::int64_t step) {
  absl::MutexLock lock(&mu_);
  TS_RETURN_IF_ERROR(CheckJobExists(job_id));
  Transaction transaction(db_.get(), path_);
  TS_RETURN_IF_ERROR(transaction.Begin());
  for (const char* sql : {"DELETE FROM job_metrics WHERE job_id = ?1 AND step > ?2",
                          "DELETE FROM job_evaluations WHERE job_id = ?1 AND step > ?2"}) {
    TS_ASSIGN_OR_RETURN(Statement remove, Statement::Prepare(db_.get(), path_, sql));
    remove.BindText(1, job_id).BindInt(2, step);
    TS_RETURN_IF_ERROR(remove.Run());
  }
  return transaction.Commit();
}

absl::Status JobStore::RemoveCheckpoint(const std::string& job_id, const std::string& path) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement remove,
      Statement::Prepare(db_.get(), path_,
                         "DELETE FROM checkpoints WHERE job_id = ?1 AND path = ?2"));
  remove.BindText(1, job_id).BindText(2, path);
  TS_RETURN_IF_ERROR(remove.Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoint ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointInfo>> JobStore::Checkpoints(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_,
                         "SELECT kind, step, path, validation_accuracy, time_ms FROM checkpoints "
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
    *checkpoint.mutable_time() = FromUnixMillis(select.ColumnInt(4));
  }
  if (checkpoints.empty()) {
    TS_RETURN_IF_ERROR(CheckJobExists(job_id));
  }
  return checkpoints;
}

namespace {

absl::StatusOr<std::vector<PromotionRecord>> ReadPromotions(Statement& select) {
  std::vector<PromotionRecord> records;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    records.push_back({select.ColumnText(0), select.ColumnText(1), select.ColumnText(2),
                       select.ColumnText(3), select.ColumnOptionalDouble(4), select.ColumnInt(5)});
  }
  return records;
}

}  // namespace

absl::Status JobStore::RecordPromotion(const PromotionRecord& record) {
  if (record.model.empty()) {
    return absl::InvalidArgumentError("job store: a promotion needs a model name");
  }
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(Statement insert,
                      Statement::Prepare(db_.get(), path_,
                                         "INSERT INTO promotions(model, version, checkpoint, "
                                         "source, validation_accuracy, time_ms) "
                                         "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"));
  insert.BindText(1, record.model)
      .BindText(2, record.version)
      .BindText(3, record.checkpoint)
      .BindText(4, record.source)
      .BindOptionalDouble(5, record.validation_accuracy)
      .BindInt(6, record.time_ms);
  return insert.Run();
}

absl::StatusOr<std::vector<PromotionRecord>> JobStore::CurrentPromotions() {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_,
                         "SELECT model, version, checkpoint, source, validation_accuracy, time_ms "
                         "FROM promotions AS p WHERE seq = (SELECT max(seq) FROM promotions WHERE "
                         "model = p.model) "
                         "ORDER BY model"));
  return ReadPromotions(select);
}

absl::StatusOr<std::vector<PromotionRecord>> JobStore::PromotionHistory(const std::string& model) {
  absl::MutexLock lock(&mu_);
  TS_ASSIGN_OR_RETURN(
      Statement select,
      Statement::Prepare(db_.get(), path_,
                         "SELECT model, version, checkpoint, source, validation_accuracy, time_ms "
                         "FROM promotions WHERE model = ?1 ORDER BY seq"));
  select.BindText(1, model);
  return ReadPromotions(select);
}

}  // namespace ts::server

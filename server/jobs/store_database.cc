#include "server/jobs/store_database.h"

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/quoted.h"
#include "common/status_macros.h"

namespace ts::server {
namespace {

// ---------------------------------------------------------------------------------------------
// Schema: every table of every store, here and nowhere else.

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

// Version 2 (issue 45): who promoted, from which job, whether the served version's guard was
// overridden, and rollbacks (a rollback row names the version it serves again; an empty
// checkpoint is the configuration's own).
constexpr char kSchemaV2[] = R"sql(
ALTER TABLE promotions ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN actor TEXT NOT NULL DEFAULT '';
ALTER TABLE promotions ADD COLUMN kind TEXT NOT NULL DEFAULT 'promote';
ALTER TABLE promotions ADD COLUMN forced INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 3 (issue 45): who submitted each job (Authorizer::Identity; '' for jobs stored before:
// they have no owner), so that a caller's own jobs are listed by index.
constexpr char kSchemaV3[] = R"sql(
ALTER TABLE jobs ADD COLUMN submitted_by TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_by_submitter ON jobs(submitted_by);
)sql";

// kMigrations[v] takes a database from schema version v to v + 1; kMigrations[0] creates the
// schema in an empty file. A schema change appends a step (and bumps kSchemaVersion); a step
// that has shipped is never edited (store_database_test.cc keeps a copy of each to check).
constexpr const char* kMigrations[] = {kSchemaV1, kSchemaV2, kSchemaV3};
static_assert(std::size(kMigrations) == StoreDatabase::kSchemaVersion,
              "one migration step per schema version");

constexpr int kBusyTimeoutMs = 5000;

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

// A file written by a newer binary, or one that is not a job store: refused, never changed.
absl::Status TooNew(const std::string& path, std::int64_t version) {
  return absl::FailedPreconditionError(absl::StrCat(
      "job store ", path, " has schema version ", version,
      ", newer than the versions this binary knows (up to ", StoreDatabase::kSchemaVersion,
      "); run a newer tsserver or use another state_dir"));
}

absl::Status NotAJobStore(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      "job store ", path, " holds tables but no schema version: not a job store database"));
}

// Runs `sql` (no result rows) on `db`.
absl::Status Exec(sqlite3* db, const std::string& path, const char* sql, absl::string_view what) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : SqliteError(db, rc, path, what);
}

// The first column of the first row of `sql` into `value`; returns SQLite's result code of the
// step (SQLITE_ROW when there was a row) or of preparing.
int QueryInt(sqlite3* db, const char* sql, std::int64_t* value) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) *value = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  return rc;
}

// Runs `body` in one transaction, rolled back when anything fails. BEGIN IMMEDIATE takes the
// write lock up front, so it waits (busy timeout) for another writer instead of failing halfway
// through.
absl::Status InTransaction(sqlite3* db, const std::string& path,
                           absl::FunctionRef<absl::Status()> body) {
  TS_RETURN_IF_ERROR(Exec(db, path, "BEGIN IMMEDIATE", "beginning a transaction"));
  absl::Status status = body();
  if (status.ok()) status = Exec(db, path, "COMMIT", "committing");
  // SQLite may already have rolled back (e.g. after SQLITE_FULL); autocommit then is on.
  if (!status.ok() && sqlite3_get_autocommit(db) == 0) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return status;
}

// The start of the SQL text, for error messages.
std::string Summary(const char* sql) {
  absl::string_view text(sql);
  constexpr std::size_t kMaxChars = 48;
  return text.size() <= kMaxChars ? std::string(text)
                                  : absl::StrCat(text.substr(0, kMaxChars), "...");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SqliteStatement

absl::StatusOr<bool> SqliteStatement::Step() {
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

absl::Status SqliteStatement::Run() {
  TS_ASSIGN_OR_RETURN(bool row, Step());
  if (row) {
    return absl::InternalError(
        absl::StrCat("job store ", path_, ": ", Summary(sql_), ": unexpected result row"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// StoreDatabase::Session

StoreDatabase::Session::Session(StoreDatabase* database)
    : lock_(&database->mu_), database_(database) {}

StoreDatabase::Session::~Session() = default;

absl::StatusOr<SqliteStatement> StoreDatabase::Session::Prepare(const char* sql) {
  sqlite3* db = database_->db_.get();
  if (db == nullptr) return database_->RefusedWrite();
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return SqliteError(db, rc, database_->path_, absl::StrCat("preparing \"", Summary(sql), "\""));
  }
  if (!database_->write_error_.ok() && sqlite3_stmt_readonly(stmt) == 0) {
    sqlite3_finalize(stmt);
    return database_->RefusedWrite();
  }
  return SqliteStatement(db, database_->path_, sql, stmt);
}

absl::Status StoreDatabase::Session::Exec(const char* sql, absl::string_view what) {
  // Exec runs the writes: transactions, compaction, the schema.
  if (!database_->write_error_.ok()) return database_->RefusedWrite();
  return ts::server::Exec(database_->db_.get(), database_->path_, sql, what);
}

absl::StatusOr<std::int64_t> StoreDatabase::Session::QueryInt(const char* sql) {
  TS_ASSIGN_OR_RETURN(SqliteStatement stmt, Prepare(sql));
  TS_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError(Describe(absl::StrCat(sql, ": no row")));
  return stmt.ColumnInt(0);
}

std::int64_t StoreDatabase::Session::Changes() const {
  return sqlite3_changes(database_->db_.get());
}

std::int64_t StoreDatabase::Session::LastInsertRowid() const {
  return sqlite3_last_insert_rowid(database_->db_.get());
}

absl::Status StoreDatabase::Session::Transaction(absl::FunctionRef<absl::Status()> body) {
  if (!database_->write_error_.ok()) return database_->RefusedWrite();
  return InTransaction(database_->db_.get(), database_->path_, body);
}

absl::Status StoreDatabase::Session::GiveSpaceBack() {
  // SQLite keeps a deleted job's pages on its free list and the -wal file at its largest size:
  // a job with a large spec or history would keep its space for good. Once the free pages are a
  // quarter of the file, VACUUM rewrites it compactly; the checkpoint then truncates the WAL.
  TS_ASSIGN_OR_RETURN(const std::int64_t free_pages, QueryInt("PRAGMA freelist_count"));
  TS_ASSIGN_OR_RETURN(const std::int64_t pages, QueryInt("PRAGMA page_count"));
  if (free_pages == 0 || free_pages * 4 < pages) return absl::OkStatus();
  TS_RETURN_IF_ERROR(Exec("VACUUM", "compacting after a delete"));
  return Exec("PRAGMA wal_checkpoint(TRUNCATE)", "truncating the WAL");
}

std::string StoreDatabase::Session::Describe(absl::string_view what) const {
  return absl::StrCat("job store ", database_->path_, ": ", what);
}

// ---------------------------------------------------------------------------------------------
// StoreDatabase

void StoreDatabase::Closer::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

StoreDatabase::StoreDatabase(std::string path, std::unique_ptr<sqlite3, Closer> db)
    : path_(std::move(path)), db_(std::move(db)) {}

StoreDatabase::~StoreDatabase() = default;

absl::StatusOr<std::unique_ptr<StoreDatabase>> StoreDatabase::Open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto db, OpenWritable(path));
  return std::unique_ptr<StoreDatabase>(new StoreDatabase(path, std::move(db)));
}

absl::StatusOr<std::unique_ptr<StoreDatabase>> StoreDatabase::OpenOrReadOnly(
    const std::string& path) {
  auto writable = OpenWritable(path);
  if (writable.ok())
    return std::unique_ptr<StoreDatabase>(new StoreDatabase(path, *std::move(writable)));
  // Why it failed decides: a file that reads as a job store of this version (or as nothing) failed
  // for want of writing; one that does not is refused as Open refuses it.
  TS_ASSIGN_OR_RETURN(auto readable, OpenReadOnly(path));
  std::unique_ptr<StoreDatabase> database(new StoreDatabase(path, std::move(readable)));
  database->write_error_ = writable.status();
  return database;
}

absl::Status StoreDatabase::WriteError() const {
  absl::MutexLock lock(&mu_);
  return write_error_;
}

absl::Status StoreDatabase::CheckWritable() const {
  absl::MutexLock lock(&mu_);
  return write_error_.ok() ? absl::OkStatus() : RefusedWrite();
}

absl::Status StoreDatabase::RefusedWrite() const {
  return absl::UnavailableError(absl::StrCat("job store ", path_, " cannot be ",
                                             db_ == nullptr ? "read or written" : "written",
                                             " (since the server started: ", write_error_.message(),
                                             "); it is tried again every few "
                                             "seconds"));
}

absl::Status StoreDatabase::ReopenWritable() {
  absl::MutexLock lock(&mu_);
  if (write_error_.ok()) return absl::OkStatus();
  db_.reset();  // its lock would keep the read-write connection from writing
  auto writable = OpenWritable(path_);
  if (writable.ok()) {
    db_ = *std::move(writable);
    write_error_ = absl::OkStatus();
    return absl::OkStatus();
  }
  write_error_ = writable.status();
  auto readable = OpenReadOnly(path_);
  if (readable.ok()) db_ = *std::move(readable);
  return write_error_;
}

absl::StatusOr<std::unique_ptr<sqlite3, StoreDatabase::Closer>> StoreDatabase::OpenWritable(
    const std::string& path) {
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
  // NOMUTEX: the StoreDatabase's mutex serializes every use of the connection.
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw_db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite3, Closer> db(raw_db);  // SQLite allocates a handle even on failure
  if (rc != SQLITE_OK) return SqliteError(db.get(), rc, path, "opening");
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  // WAL: readers never block the writer, and a commit is one append to the -wal file.
  {
    sqlite3_stmt* journal = nullptr;
    int step = sqlite3_prepare_v2(db.get(), "PRAGMA journal_mode=WAL", -1, &journal, nullptr);
    if (step == SQLITE_OK) step = sqlite3_step(journal);
    const unsigned char* text = step == SQLITE_ROW ? sqlite3_column_text(journal, 0) : nullptr;
    const std::string mode = text != nullptr ? reinterpret_cast<const char*>(text) : "";
    // Finalized here: an unfinished statement would keep COMMIT from succeeding.
    sqlite3_finalize(journal);
    if (step != SQLITE_ROW) return SqliteError(db.get(), step, path, "PRAGMA journal_mode=WAL");
    if (mode != "wal") {
      return absl::FailedPreconditionError(absl::StrCat(
          "job store ", path, ": cannot use write-ahead logging (journal_mode is '", mode, "')"));
    }
  }
  // Durability. WAL with synchronous=NORMAL survives a process crash (kill -9) — the WAL is
  // written before COMMIT returns — but fsyncs only at checkpoints, so an OS crash or power
  // loss can roll back the last committed transactions (e.g. a job's SUCCEEDED state, or a
  // promotion, that a client was already told about). FULL fsyncs the WAL at every commit;
  // the store's write rate (state changes, a metric row per log interval) makes that cheap.
  TS_RETURN_IF_ERROR(Exec(db.get(), path, "PRAGMA synchronous=FULL", "setting synchronous"));
  TS_RETURN_IF_ERROR(Exec(db.get(), path, "PRAGMA foreign_keys=ON", "enabling foreign keys"));
  TS_RETURN_IF_ERROR(Migrate(db.get(), path));
  return db;
}

absl::StatusOr<std::unique_ptr<sqlite3, StoreDatabase::Closer>> StoreDatabase::OpenReadOnly(
    const std::string& path) {
  sqlite3* raw_db = nullptr;
  // Not created: a missing file has nothing to read. Read-write only for SQLite's locks; every
  // write is refused (query_only, and the Session).
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite3, Closer> db(raw_db);
  if (rc != SQLITE_OK) return std::unique_ptr<sqlite3, Closer>();
  sqlite3_extended_result_codes(db.get(), 1);
  // Exclusive locking before the first read keeps the WAL index in this process's memory: a
  // WAL-mode file is read without the -shm file, which a full disk cannot grow. It also keeps
  // other processes out while read-only.
  for (const char* pragma : {"PRAGMA locking_mode=EXCLUSIVE", "PRAGMA query_only=ON"}) {
    if (sqlite3_exec(db.get(), pragma, nullptr, nullptr, nullptr) != SQLITE_OK) {
      return std::unique_ptr<sqlite3, Closer>();
    }
  }
  std::int64_t version = -1;
  std::int64_t tables = -1;
  int step = QueryInt(db.get(), "PRAGMA user_version", &version);
  if (version >= 0) step = QueryInt(db.get(), "SELECT count(*) FROM sqlite_master", &tables);
  // Content the read-write opening refuses too: never served.
  if ((step & 0xff) == SQLITE_NOTADB || (step & 0xff) == SQLITE_CORRUPT) {
    return SqliteError(db.get(), step, path, "reading the schema version");
  }
  if (version > kSchemaVersion) return TooNew(path, version);
  if (version == 0 && tables > 0) return NotAJobStore(path);
  if (version != kSchemaVersion || tables <= 0) return std::unique_ptr<sqlite3, Closer>();
  return db;
}

absl::Status StoreDatabase::Migrate(sqlite3* db, const std::string& path) {
  const auto query_int = [db, &path](const char* sql) -> absl::StatusOr<std::int64_t> {
    std::int64_t value = 0;
    const int rc = QueryInt(db, sql, &value);
    if (rc != SQLITE_ROW) return SqliteError(db, rc, path, sql);
    return value;
  };
  TS_ASSIGN_OR_RETURN(std::int64_t version, query_int("PRAGMA user_version"));
  if (version > kSchemaVersion) return TooNew(path, version);
  if (version == kSchemaVersion) return absl::OkStatus();

  return InTransaction(db, path, [&]() -> absl::Status {
    // Another process may have migrated the file between the read above and the lock.
    TS_ASSIGN_OR_RETURN(version, query_int("PRAGMA user_version"));
    if (version > kSchemaVersion) return TooNew(path, version);
    if (version < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("job store ", path, " has invalid schema version ", version));
    }
    if (version == 0) {
      TS_ASSIGN_OR_RETURN(std::int64_t tables, query_int("SELECT count(*) FROM sqlite_master"));
      if (tables > 0) return NotAJobStore(path);
    }
    for (std::int64_t v = version; v < kSchemaVersion; ++v) {
      TS_RETURN_IF_ERROR(Exec(db, path, kMigrations[v],
                              absl::StrCat("migrating schema version ", v, " to ", v + 1)));
    }
    // PRAGMA takes no bound parameters; the value is this binary's constant.
    const std::string set_version = absl::StrCat("PRAGMA user_version = ", kSchemaVersion);
    return Exec(db, path, set_version.c_str(), "setting the schema version");
  });
}

// ---------------------------------------------------------------------------------------------
// Shared by the stores

absl::Status JobNotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("job ", Capped(id, kEchoedIdBytes), " not found"));
}

absl::Status CheckJobExists(StoreDatabase::Session& db, const std::string& job_id) {
  TS_ASSIGN_OR_RETURN(SqliteStatement select, db.Prepare("SELECT 1 FROM jobs WHERE id = ?1"));
  select.BindText(1, job_id);
  TS_ASSIGN_OR_RETURN(bool row, select.Step());
  return row ? absl::OkStatus() : JobNotFound(job_id);
}

}  // namespace ts::server

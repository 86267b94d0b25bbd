// StoreDatabase: the one SQLite connection under the job stores (job_store.h,
// job_history_store.h, promotion_store.h), with the schema of all their tables and its
// migrations, and the statement and transaction helpers the stores write their SQL with.
//
// Contract:
// - Durability: WAL mode with synchronous=FULL, so a committed write survives a process crash
//   (kill -9), an OS crash and a power loss (the WAL is fsynced at each commit; storage must
//   honour fsync).
// - Atomicity: a statement outside Session::Transaction is its own transaction; a transaction
//   begins IMMEDIATE, so a second process writing the same file waits up to the busy timeout,
//   then UNAVAILABLE.
// - Schema: one ordered list of migrations (store_database.cc), versioned with PRAGMA
//   user_version; Open() creates the schema in an empty file and applies the pending migrations
//   in one transaction; a file written by a newer binary is FAILED_PRECONDITION.
// - Errors: absl::Status whose message names the database file and SQLite's message.
// - Read-only (OpenOrReadOnly): when the file cannot be written at start (a full disk, a
//   read-only filesystem, a lock held by another process), the database is opened for reading
//   only — with an exclusive lock and the WAL index in memory, so that reading needs no shared
//   memory file, which a full disk refuses — and every write (a statement that writes, Exec) is
//   UNAVAILABLE naming the first error; a file without the current schema cannot even be read
//   then (every call UNAVAILABLE). ReopenWritable tries the read-write opening again.
// - Thread safety: every use of the connection holds a Session, which holds the one mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ts::server {

class SqliteStatement;

class StoreDatabase {
 public:
  // The schema version this binary writes (PRAGMA user_version).
  static constexpr int kSchemaVersion = 3;

  // Opens (creating the file and its parent directories if missing) the database at `path` and
  // brings its schema to kSchemaVersion. FAILED_PRECONDITION when the file is not a SQLite
  // database, is another application's database, or has a newer schema version.
  static absl::StatusOr<std::unique_ptr<StoreDatabase>> Open(const std::string& path);
  // As Open, but a file that cannot be written (opening it, its write-ahead log, its schema or
  // its migration failed, and it reads as a job store or as nothing yet) is opened read-only (see
  // the contract) instead of failing; the refusals of its content stay errors.
  static absl::StatusOr<std::unique_ptr<StoreDatabase>> OpenOrReadOnly(const std::string& path);

  // OK when the database takes writes; otherwise why not (the error of the read-write opening).
  absl::Status WriteError() const;
  // OK when the database takes writes; otherwise the UNAVAILABLE every write gets, naming why.
  absl::Status CheckWritable() const;
  // When read-only: closes the connection and opens the file read-write as Open does; on failure
  // opens it read-only again and returns the error (also WriteError's from then on). OK at once
  // when writable.
  absl::Status ReopenWritable();

  StoreDatabase(const StoreDatabase&) = delete;
  StoreDatabase& operator=(const StoreDatabase&) = delete;
  ~StoreDatabase();

  const std::string& path() const { return path_; }

  // Exclusive use of the connection for one operation of a store, from construction to
  // destruction. Statements it prepares must not outlive it; a thread holds one at a time (the
  // mutex is not re-entrant).
  class ABSL_SCOPED_LOCKABLE Session {
   public:
    explicit Session(StoreDatabase* database) ABSL_EXCLUSIVE_LOCK_FUNCTION(database->mu_);
    ~Session() ABSL_UNLOCK_FUNCTION();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Variable values go through the statement's bound parameters, never into `sql`.
    absl::StatusOr<SqliteStatement> Prepare(const char* sql);
    // Runs constant SQL that returns no rows; `what` names it in the error.
    absl::Status Exec(const char* sql, absl::string_view what);
    // The first column of the first row (INTERNAL when there is none).
    absl::StatusOr<std::int64_t> QueryInt(const char* sql);
    // Rows changed by the last INSERT, UPDATE or DELETE; the rowid of the last INSERT.
    std::int64_t Changes() const;
    std::int64_t LastInsertRowid() const;

    // Runs `body` in one write transaction (BEGIN IMMEDIATE): committed when it returns OK,
    // rolled back otherwise. Statements that must land together go in one body, whichever
    // tables they write (JobStore::DeleteJob's one statement takes the history rows with it).
    absl::Status Transaction(absl::FunctionRef<absl::Status()> body);

    // VACUUM when a quarter of the file is free pages (after a delete), then the WAL truncated.
    absl::Status GiveSpaceBack();

    // "job store PATH: WHAT".
    std::string Describe(absl::string_view what) const;

   private:
    absl::MutexLock lock_;
    StoreDatabase* const database_;
  };

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };

  StoreDatabase(std::string path, std::unique_ptr<sqlite3, Closer> db);

  // The read-write connection with its schema brought to kSchemaVersion (Open's work).
  static absl::StatusOr<std::unique_ptr<sqlite3, Closer>> OpenWritable(const std::string& path);
  // A connection that only reads (the contract's read-only mode); null when the file does not
  // hold the current schema. The error when its content is refused (OpenWritable's reasons).
  static absl::StatusOr<std::unique_ptr<sqlite3, Closer>> OpenReadOnly(const std::string& path);
  // Brings the schema of `db` to kSchemaVersion, in one transaction.
  static absl::Status Migrate(sqlite3* db, const std::string& path);
  // UNAVAILABLE for a write while read-only (called by a Session, which holds mu_).
  absl::Status RefusedWrite() const;

  const std::string path_;
  mutable absl::Mutex mu_;
  // Both are replaced only by ReopenWritable, under mu_; Sessions use them holding mu_. db_ is
  // null when the file cannot be read either.
  std::unique_ptr<sqlite3, Closer> db_ ABSL_PT_GUARDED_BY(mu_);
  absl::Status write_error_;  // OK: writable
};

// A prepared statement; finalized on destruction. Bind errors are kept and reported by the next
// Step(), so call sites bind without checking each call. Used only while its Session lives.
class SqliteStatement {
 public:
  SqliteStatement(SqliteStatement&& other) noexcept
      : db_(other.db_),
        path_(other.path_),
        sql_(other.sql_),
        stmt_(std::exchange(other.stmt_, nullptr)),
        rc_(other.rc_) {}
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  ~SqliteStatement() { sqlite3_finalize(stmt_); }

  // Parameters are 1-based, or named (":name"; skipped when the statement lacks the name).
  SqliteStatement& BindInt(int index, std::int64_t value) {
    return Check(sqlite3_bind_int64(stmt_, index, value));
  }
  SqliteStatement& BindInt(const char* name, std::int64_t value) {
    const int index = sqlite3_bind_parameter_index(stmt_, name);
    return index == 0 ? *this : BindInt(index, value);
  }
  SqliteStatement& BindDouble(int index, double value) {
    return Check(sqlite3_bind_double(stmt_, index, value));
  }
  SqliteStatement& BindOptionalDouble(int index, std::optional<double> value) {
    return value.has_value() ? BindDouble(index, *value) : Check(sqlite3_bind_null(stmt_, index));
  }
  SqliteStatement& BindText(int index, const std::string& value) {
    return Check(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                     SQLITE_UTF8));
  }
  SqliteStatement& BindText(const char* name, const std::string& value) {
    const int index = sqlite3_bind_parameter_index(stmt_, name);
    return index == 0 ? *this : BindText(index, value);
  }
  SqliteStatement& BindBlob(int index, const std::string& value) {
    return Check(sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT));
  }

  // true: a row is ready to read; false: the statement is done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows.
  absl::Status Run();
  // The extended result code of the last failed step (SQLITE_OK otherwise).
  int error_code() const { return rc_; }

  std::int64_t ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }
  double ColumnDouble(int column) const { return sqlite3_column_double(stmt_, column); }
  std::optional<double> ColumnOptionalDouble(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
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
  friend class StoreDatabase::Session;
  SqliteStatement(sqlite3* db, const std::string& path, const char* sql, sqlite3_stmt* stmt)
      : db_(db), path_(path), sql_(sql), stmt_(stmt) {}
  SqliteStatement& Check(int rc) {
    if (rc != SQLITE_OK && rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }

  sqlite3* db_;
  const std::string& path_;  // the StoreDatabase's, which outlives every statement
  const char* sql_;          // a string literal
  sqlite3_stmt* stmt_;
  int rc_ = SQLITE_OK;
};

// Shared by the stores.

// Ids and tokens in messages: at most this many bytes of them.
inline constexpr std::size_t kEchoedIdBytes = 100;
// "job ID not found" (NOT_FOUND), the id capped.
absl::Status JobNotFound(absl::string_view id);
// NOT_FOUND unless `job_id` names a stored job.
absl::Status CheckJobExists(StoreDatabase::Session& db, const std::string& job_id);

}  // namespace ts::server

// Crash consistency of the job stores (server/jobs/store_database.h: "a committed write survives
// a process crash (kill -9)", each call one transaction). A child process writes to one store
// file through the stores' API — a job, its state and progress, its loss curve, validation runs,
// checkpoint records (recorded and removed), promotions, a history truncation, the final state,
// and for every third child the job's deletion — and acknowledges each call that returned OK on
// a pipe. The test SIGKILLs it at a random point (after a seeded random number of
// acknowledgements, then a random 0-3 ms into the next call, which lands in SQLite's writes and
// fsyncs and, at the start, in Open), 200 times, one store file throughout. After each kill the
// store passes SQLite's integrity and foreign-key checks, opens, and holds exactly the
// acknowledged writes, or those and the one call that was in flight — never less, never a part
// of a call, never anything else; the rounds before stay as they were.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/jobs/job_store.h"
#include "tests/testing/job_stores.h"
#include "tests/testing/scratch_dir.h"

namespace ts::server {
namespace {

using ::ts::testing::JobStores;
namespace pb = taylorshift::v1;

constexpr int kKills = 200;
// Rounds whose child finished before its kill are not counted; this bounds the loop.
constexpr int kMaxRounds = 400;
constexpr int kSteps = 8;  // training steps each child records

// One call of a child's.
struct Op {
  enum Kind {
    kCreate,            // CreateJob: QUEUED
    kRun,               // UpdateJob: RUNNING at `step`
    kMetric,            // AppendMetric at `step`
    kEvaluation,        // AppendEvaluation at `step`
    kCheckpoint,        // RecordCheckpoint `text`
    kRemoveCheckpoint,  // RemoveCheckpoint `text`
    kPromote,           // RecordPromotion of version `text`
    kTruncate,          // TruncateHistory after `step`
    kFinish,            // UpdateJob: SUCCEEDED
    kDelete,            // DeleteJob
  };
  Op(Kind kind, std::int64_t step = 0, std::string text = "")
      : kind(kind), step(step), text(std::move(text)) {}
  Kind kind;
  std::int64_t step;
  std::string text;
};

std::string JobName(int round) { return absl::StrCat("crash-", round); }
std::string PromotedModel(int round) { return absl::StrCat("model-", round % 3); }
std::string CheckpointPath(int round, std::int64_t step) {
  return absl::StrCat("jobs/crash-", round, "/step-", step, ".tsckpt");
}

// The calls the child of `round` makes, in order: fixed, so the test knows which call follows
// the last acknowledged one.
std::vector<Op> ChildOps(int round) {
  std::vector<Op> ops = {{Op::kCreate}};
  for (std::int64_t s = 1; s <= kSteps; ++s) {
    ops.push_back({Op::kRun, s});
    ops.push_back({Op::kMetric, s});
    if (s % 3 == 0) ops.push_back({Op::kEvaluation, s});
    if (s % 2 == 0) ops.push_back({Op::kCheckpoint, s, CheckpointPath(round, s)});
    if (s % 4 == 0) ops.push_back({Op::kRemoveCheckpoint, s, CheckpointPath(round, s - 2)});
    if (s % 5 == 0) ops.push_back({Op::kPromote, s, absl::StrCat("v", round, ".", s)});
    if (s == 6) ops.push_back({Op::kTruncate, 3});  // as a job resumed from step 3 does
  }
  ops.push_back({Op::kFinish, kSteps});
  if (round % 3 == 0) ops.push_back({Op::kDelete});
  return ops;
}

// What the store holds of one round, through the API.
struct RoundView {
  bool exists = false;
  int state = 0;
  std::uint64_t step = 0;
  std::vector<std::int64_t> metric_steps;
  std::vector<std::uint64_t> evaluation_steps;
  std::vector<std::string> checkpoints;
  std::vector<std::string> promotions;  // this round's versions; they outlive the job

  bool operator==(const RoundView& o) const {
    return exists == o.exists && state == o.state && step == o.step &&
           metric_steps == o.metric_steps && evaluation_steps == o.evaluation_steps &&
           checkpoints == o.checkpoints && promotions == o.promotions;
  }
  std::string Describe() const {
    return absl::StrCat(exists ? "job" : "no job", " state ", state, " step ", step, "; metrics [",
                        absl::StrJoin(metric_steps, ","), "]; evaluations [",
                        absl::StrJoin(evaluation_steps, ","), "]; checkpoints [",
                        absl::StrJoin(checkpoints, ","), "]; promotions [",
                        absl::StrJoin(promotions, ","), "]");
  }
};

// The model: `view` after `op` took effect.
void Apply(const Op& op, RoundView* view) {
  switch (op.kind) {
    case Op::kCreate:
      view->exists = true;
      view->state = pb::JOB_STATE_QUEUED;
      break;
    case Op::kRun:
      view->state = pb::JOB_STATE_RUNNING;
      view->step = static_cast<std::uint64_t>(op.step);
      break;
    case Op::kMetric:
      view->metric_steps.push_back(op.step);
      break;
    case Op::kEvaluation:
      view->evaluation_steps.push_back(static_cast<std::uint64_t>(op.step));
      break;
    case Op::kCheckpoint:
      view->checkpoints.push_back(op.text);
      break;
    case Op::kRemoveCheckpoint:
      view->checkpoints.erase(
          std::remove(view->checkpoints.begin(), view->checkpoints.end(), op.text),
          view->checkpoints.end());
      break;
    case Op::kPromote:
      view->promotions.push_back(op.text);
      break;
    case Op::kTruncate:
      view->metric_steps.erase(std::remove_if(view->metric_steps.begin(), view->metric_steps.end(),
                                              [&](std::int64_t s) { return s > op.step; }),
                               view->metric_steps.end());
      view->evaluation_steps.erase(
          std::remove_if(view->evaluation_steps.begin(), view->evaluation_steps.end(),
                         [&](std::uint64_t s) { return s > static_cast<std::uint64_t>(op.step); }),
          view->evaluation_steps.end());
      break;
    case Op::kFinish:
      view->state = pb::JOB_STATE_SUCCEEDED;
      break;
    case Op::kDelete: {
      RoundView deleted;
      deleted.promotions = view->promotions;  // promotions stay (job_store.h)
      *view = deleted;
      break;
    }
  }
}

RoundView AfterOps(const std::vector<Op>& ops, std::size_t count) {
  RoundView view;
  for (std::size_t i = 0; i < count && i < ops.size(); ++i) Apply(ops[i], &view);
  return view;
}

// The child's side of `op`, on the job it created (`job`).
absl::Status Run(const Op& op, int round, JobStores& store, pb::Job* job) {
  switch (op.kind) {
    case Op::kCreate: {
      pb::Job fresh;
      fresh.set_kind(pb::JOB_KIND_TRAINING);
      fresh.set_state(pb::JOB_STATE_QUEUED);
      fresh.set_name(JobName(round));
      absl::StatusOr<pb::Job> created = store.jobs.CreateJob(fresh);
      if (!created.ok()) return created.status();
      *job = *std::move(created);
      return absl::OkStatus();
    }
    case Op::kRun:
      job->set_state(pb::JOB_STATE_RUNNING);
      job->mutable_progress()->set_step(static_cast<std::uint64_t>(op.step));
      return store.jobs.UpdateJob(*job);
    case Op::kMetric:
      return store.history.AppendMetric(job->id(), {op.step, 1.0 / static_cast<double>(op.step),
                                                    1e-3, 100, 1700000000000 + op.step});
    case Op::kEvaluation: {
      pb::EvaluationReport report;
      report.set_step(static_cast<std::uint64_t>(op.step));
      report.set_accuracy(0.5);
      return store.history.AppendEvaluation(job->id(), report);
    }
    case Op::kCheckpoint: {
      pb::CheckpointInfo checkpoint;
      checkpoint.set_kind("latest");
      checkpoint.set_step(static_cast<std::uint64_t>(op.step));
      checkpoint.set_path(op.text);
      return store.history.RecordCheckpoint(job->id(), checkpoint);
    }
    case Op::kRemoveCheckpoint:
      return store.history.RemoveCheckpoint(job->id(), op.text);
    case Op::kPromote: {
      PromotionRecord record;
      record.model = PromotedModel(round);
      record.version = op.text;
      record.checkpoint = CheckpointPath(round, op.step);
      record.source = "job:" + job->id();
      record.validation_accuracy = 0.5;
      record.time_ms = 1700000000000 + op.step;
      record.job_id = job->id();
      record.actor = "anonymous";
      return store.promotions.RecordPromotion(record);
    }
    case Op::kTruncate:
      return store.history.TruncateHistory(job->id(), op.step);
    case Op::kFinish:
      job->set_state(pb::JOB_STATE_SUCCEEDED);
      return store.jobs.UpdateJob(*job);
    case Op::kDelete:
      return store.jobs.DeleteJob(job->id());
  }
  return absl::InternalError("unknown op");
}

// The child process: no gtest here, only the pipe, stderr and exit codes.
[[noreturn]] void RunChild(const std::string& path, int round, int ack_fd) {
  absl::StatusOr<std::unique_ptr<JobStores>> store = JobStores::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "child %d: %s\n", round, std::string(store.status().message()).c_str());
    _exit(3);
  }
  pb::Job job;
  const std::vector<Op> ops = ChildOps(round);
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    const absl::Status status = Run(ops[i], round, **store, &job);
    if (!status.ok()) {
      std::fprintf(stderr, "child %d, call %u: %s\n", round, i, status.ToString().c_str());
      _exit(4);
    }
    // The acknowledgement: its call returned OK. 4 bytes: one write(2) to a pipe is atomic.
    while (write(ack_fd, &i, sizeof(i)) < 0 && errno == EINTR) {
    }
  }
  _exit(0);
}

// Kills and reaps the child on every way out of the test body.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ~ChildGuard() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Reap();
    }
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  // waitpid's status.
  int Reap() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// Reads one acknowledgement; false at the end of the pipe (the child is gone).
bool ReadAck(int fd, std::uint32_t* index) {
  std::size_t got = 0;
  while (got < sizeof(*index)) {
    const ssize_t n = read(fd, reinterpret_cast<char*>(index) + got, sizeof(*index) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// The rows of a PRAGMA that reports problems as rows ("ok" alone for integrity_check).
std::vector<std::string> PragmaRows(const std::string& path, const char* pragma) {
  sqlite3* db = nullptr;
  std::vector<std::string> rows;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    rows.push_back(absl::StrCat("cannot open: ", sqlite3_errmsg(db)));
    sqlite3_close_v2(db);
    return rows;
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, pragma, -1, &stmt, nullptr);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    std::vector<std::string> columns;
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      const unsigned char* text = sqlite3_column_text(stmt, c);
      columns.push_back(text == nullptr ? "NULL" : reinterpret_cast<const char*>(text));
    }
    rows.push_back(absl::StrJoin(columns, " "));
  }
  if (rc != SQLITE_DONE) rows.push_back(absl::StrCat(pragma, ": ", sqlite3_errmsg(db)));
  sqlite3_finalize(stmt);
  sqlite3_close_v2(db);
  return rows;
}

// The round's job as the store holds it, by name (its id depends on the calls before it).
absl::StatusOr<RoundView> ReadRound(JobStores& store, int round) {
  RoundView view;
  pb::ListJobsRequest request;
  request.set_page_size(JobStore::kMaxPageSize);
  absl::StatusOr<pb::ListJobsResponse> jobs = store.jobs.ListJobs(request);
  if (!jobs.ok()) return jobs.status();
  std::vector<pb::Job> named;
  for (const pb::Job& job : jobs->jobs()) {
    if (job.name() == JobName(round)) named.push_back(job);
  }
  if (named.size() > 1) return absl::InternalError(absl::StrCat(named.size(), " jobs of a round"));
  absl::StatusOr<std::vector<PromotionRecord>> promotions =
      store.promotions.PromotionHistory(PromotedModel(round));
  if (!promotions.ok()) return promotions.status();
  for (const PromotionRecord& promotion : *promotions) {
    if (absl::StartsWith(promotion.version, absl::StrCat("v", round, "."))) {
      view.promotions.push_back(promotion.version);
    }
  }
  if (named.empty()) return view;
  const pb::Job& job = named[0];
  view.exists = true;
  view.state = job.state();
  view.step = job.progress().step();
  absl::StatusOr<std::vector<JobMetricRow>> metrics = store.history.Metrics(job.id());
  if (!metrics.ok()) return metrics.status();
  for (const JobMetricRow& row : *metrics) view.metric_steps.push_back(row.step);
  absl::StatusOr<std::vector<pb::EvaluationReport>> evaluations =
      store.history.Evaluations(job.id());
  if (!evaluations.ok()) return evaluations.status();
  for (const auto& report : *evaluations) view.evaluation_steps.push_back(report.step());
  absl::StatusOr<std::vector<pb::CheckpointInfo>> checkpoints = store.history.Checkpoints(job.id());
  if (!checkpoints.ok()) return checkpoints.status();
  for (const auto& checkpoint : *checkpoints) view.checkpoints.push_back(checkpoint.path());
  return view;
}

class JobStoreCrashTest : public testing::ScratchDirTest {};

TEST_F(JobStoreCrashTest, EveryAcknowledgedWriteSurvivesSigkillAtRandomPoints) {
  const std::string path = (dir_ / "state" / "jobs.db").string();
  std::mt19937_64 rng(20240611);
  const auto started = std::chrono::steady_clock::now();
  std::vector<RoundView> verified;  // each round's view after its kill
  int kills = 0;
  int in_flight_landed = 0;  // kills after which the call in flight was found committed
  for (int round = 0; kills < kKills && round < kMaxRounds; ++round) {
    const std::vector<Op> ops = ChildOps(round);
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0) << std::strerror(errno);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      close(pipe_fds[0]);
      RunChild(path, round, pipe_fds[1]);
    }
    close(pipe_fds[1]);
    ChildGuard child(pid);
    const std::size_t kill_after =
        std::uniform_int_distribution<std::size_t>(0, ops.size() - 1)(rng);
    const int delay_us = std::uniform_int_distribution<int>(0, 3000)(rng);

    std::size_t acked = 0;
    std::uint32_t index = 0;
    bool child_gone = false;
    while (acked < kill_after) {
      if (!ReadAck(pipe_fds[0], &index)) {
        child_gone = true;
        break;
      }
      ASSERT_EQ(index, acked) << "round " << round << ": acknowledgements out of order";
      ++acked;
    }
    if (!child_gone) {
      // A real wait: the kill must land inside the child's next call (a SQLite write or fsync).
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      kill(child.pid(), SIGKILL);
    }
    const int status = child.Reap();
    while (ReadAck(pipe_fds[0], &index)) {  // acknowledged before the kill took effect
      ASSERT_EQ(index, acked) << "round " << round << ": acknowledgements out of order";
      ++acked;
    }
    close(pipe_fds[0]);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    ASSERT_TRUE(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "round " << round << ": the child failed (exit status " << WEXITSTATUS(status)
        << "; its message is above)";
    if (killed) ++kills;

    EXPECT_EQ(PragmaRows(path, "PRAGMA integrity_check"), std::vector<std::string>{"ok"})
        << "round " << round;
    EXPECT_EQ(PragmaRows(path, "PRAGMA foreign_key_check"), std::vector<std::string>{})
        << "round " << round;
    absl::StatusOr<std::unique_ptr<JobStores>> store = JobStores::Open(path);
    ASSERT_TRUE(store.ok()) << "round " << round << ": " << store.status();
    absl::StatusOr<RoundView> actual = ReadRound(**store, round);
    ASSERT_TRUE(actual.ok()) << "round " << round << ": " << actual.status();
    const RoundView acknowledged = AfterOps(ops, acked);
    const RoundView with_in_flight = AfterOps(ops, acked + 1);
    ASSERT_TRUE(*actual == acknowledged || *actual == with_in_flight)
        << "round " << round << ", killed after " << acked << " acknowledged calls of "
        << ops.size() << "\n  store:        " << actual->Describe()
        << "\n  acknowledged: " << acknowledged.Describe()
        << "\n  + in flight:  " << with_in_flight.Describe();
    if (killed && !(acknowledged == with_in_flight) && *actual == with_in_flight) {
      ++in_flight_landed;
    }
    verified.push_back(*std::move(actual));
  }
  EXPECT_EQ(kills, kKills);

  // Later kills left the earlier rounds as they were, and the store holds no other job.
  absl::StatusOr<std::unique_ptr<JobStores>> store = JobStores::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  int live_jobs = 0;
  for (std::size_t round = 0; round < verified.size(); ++round) {
    absl::StatusOr<RoundView> now = ReadRound(**store, static_cast<int>(round));
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(now->Describe(), verified[round].Describe()) << "round " << round;
    live_jobs += verified[round].exists ? 1 : 0;
  }
  pb::ListJobsRequest all;
  all.set_page_size(JobStore::kMaxPageSize);
  absl::StatusOr<pb::ListJobsResponse> jobs = (*store)->jobs.ListJobs(all);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), live_jobs);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%d kills in %zu rounds, %.1f s; the call in flight had committed after %d\n", kills,
              verified.size(), seconds, in_flight_landed);
}

}  // namespace
}  // namespace ts::server

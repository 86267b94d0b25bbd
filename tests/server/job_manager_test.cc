// JobManager across restarts, with in-process fake workers on the fake clock: a job the store
// says is RUNNING (the server stopped or died while it ran) is queued again when the next
// manager starts, counted as a resume, and runs to its end; a shutdown stops a running job's
// workers and leaves it RUNNING in the store for the next start. A store that cannot be written
// at start (a full disk) leaves the manager read-only until it can; a final state the store
// refused is kept across a restart, and its job is not run again.
#include "server/jobs/job_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/metrics.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_worker_launcher.h"
#include "tests/testing/file_writes_fail.h"
#include "tests/testing/job_stores.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ts::testing::FakeWorker;

class JobManagerRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/ts_job_manager_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // A training job as a server that stopped while it ran left it in the store.
  std::string StoreRunningJob() {
    std::filesystem::create_directories(dir_ + "/state");
    auto store = testing::JobStores::Open(dir_ + "/state/jobs.db", &clock_);
    EXPECT_TRUE(store.ok()) << store.status();
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_state(pb::JOB_STATE_RUNNING);
    job.set_name("interrupted");
    job.mutable_training()->set_threads(1);
    job.mutable_progress()->set_step(40);
    auto stored = (*store)->jobs.CreateJob(job);
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? stored->id() : "";
  }

  std::unique_ptr<JobManager> StartManager() {
    JobManagerOptions options;
    options.state_dir = dir_ + "/state";
    options.data_root = dir_ + "/data";
    options.worker_launcher = &launcher_;
    options.log = [this](const std::string& line) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(line);
    };
    auto manager = JobManager::Create(options, /*registry=*/nullptr, metrics_.get(), &clock_);
    EXPECT_TRUE(manager.ok()) << manager.status();
    return manager.ok() ? std::move(*manager) : nullptr;
  }

  // The task launch `attempt` was started with (what the worker reads).
  pb::WorkerTask TaskOf(int attempt) {
    pb::WorkerTask task;
    std::ifstream in(launcher_.launch_options(attempt).task_file, std::ios::binary);
    EXPECT_TRUE(task.ParseFromIstream(&in));
    return task;
  }

  bool Logged(const std::string& part) {
    absl::MutexLock lock(&log_mu_);
    for (const auto& line : log_) {
      if (absl::StrContains(line, part)) return true;
    }
    return false;
  }
  // Logged, for a line another thread writes after what the test awaited: up to 10 s of polling.
  bool LoggedSoon(const std::string& part) {
    for (int i = 0; i < 10000 && !Logged(part); ++i) absl::SleepFor(absl::Milliseconds(1));
    return Logged(part);
  }
  double StoreErrors(const std::string& operation) {
    const std::string series =
        "taylorshift_job_store_errors_total{operation=\"" + operation + "\"} ";
    const std::string text = metrics_->Serialize();
    const auto at = text.find(series);
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size()));
  }

  // The stored record, read with the store's own connection (no manager running).
  pb::Job Stored(const std::string& id) {
    auto store = testing::JobStores::Open(dir_ + "/state/jobs.db", &clock_);
    EXPECT_TRUE(store.ok()) << store.status();
    auto job = (*store)->jobs.GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : pb::Job();
  }

  std::string dir_;
  ts::testing::FakeClock clock_;
  ts::testing::FakeWorkerLauncher launcher_{&clock_};
  std::unique_ptr<Metrics> metrics_ = *Metrics::Create("");
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(JobManagerRestartTest, AJobLeftRunningIsResumedOnTheNextStartAndAgainAfterAShutdown) {
  const std::string id = StoreRunningJob();
  ASSERT_EQ(id, "job-1");

  // The first start: the job is queued again (one resume) and its worker starts.
  auto manager = StartManager();
  ASSERT_NE(manager, nullptr);
  FakeWorker* first = launcher_.AwaitWorker(0);
  ASSERT_NE(first, nullptr);
  const pb::WorkerTask task = TaskOf(0);
  EXPECT_EQ(task.job().id(), id);
  EXPECT_EQ(task.job().state(), pb::JOB_STATE_RUNNING);
  EXPECT_EQ(task.job().progress().resumes(), 1u);
  first->Progress(50, 0.5);

  // A shutdown asks the worker to stop; the job stays RUNNING in the store.
  manager->Shutdown();
  EXPECT_EQ(first->terminations(), 1);
  EXPECT_EQ(first->kills(), 0);
  auto interrupted = manager->GetJob(id);
  ASSERT_TRUE(interrupted.ok()) << interrupted.status();
  EXPECT_EQ(interrupted->state(), pb::JOB_STATE_RUNNING);
  EXPECT_EQ(interrupted->progress().step(), 50u);
  manager.reset();

  // The next start resumes it again, and this time it finishes.
  manager = StartManager();
  ASSERT_NE(manager, nullptr);
  FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(TaskOf(1).job().progress().resumes(), 2u);
  absl::Notification finished;
  auto watch = manager->Watch(id, [&](const pb::JobEvent& event) {
    if (event.type() == pb::JobEvent::STATE && event.job().state() == pb::JOB_STATE_SUCCEEDED) {
      finished.Notify();
    }
  });
  ASSERT_TRUE(watch.ok()) << watch.status();
  second->Progress(100, 0.1);
  second->Result(absl::OkStatus());
  second->Exit(0);
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  auto done = manager->GetJob(id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done->progress().resumes(), 2u);
  EXPECT_EQ(done->progress().step(), 100u);
  EXPECT_EQ(launcher_.launches(), 2);
}

// Issue 45: a second server on the same state_dir is refused before it reads the store, so the
// interrupted job is resumed once, by the first, and the refusal names the holder; once the first
// has stopped, the directory can be taken again.
TEST_F(JobManagerRestartTest, ASecondManagerOnTheSameStateDirIsRefused) {
  const std::string id = StoreRunningJob();
  auto first = StartManager();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(launcher_.AwaitWorker(0), nullptr);

  JobManagerOptions options;
  options.state_dir = dir_ + "/state";
  options.data_root = dir_ + "/data";
  options.worker_launcher = &launcher_;
  auto second = JobManager::Create(options, /*registry=*/nullptr, metrics_.get(), &clock_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              ::testing::HasSubstr(absl::StrCat("is in use by another server (pid ", ::getpid())))
      << second.status();
  EXPECT_EQ(launcher_.launches(), 1);

  first->Shutdown();
  first.reset();
  auto again = StartManager();
  ASSERT_NE(again, nullptr);
  ASSERT_NE(launcher_.AwaitWorker(1), nullptr);
  EXPECT_EQ(TaskOf(1).job().id(), id);
  again->Shutdown();
}

// A full disk at start (every write fails; the last stop was clean, so SQLite must size its files
// anew): the server starts anyway, reads answer from the store, what writes is UNAVAILABLE saying
// why, the failure is counted and logged, nothing runs — and once writes work again the retry
// queues the interrupted job, which resumes.
TEST_F(JobManagerRestartTest, AStoreThatCannotBeWrittenAtStartLeavesJobsReadOnlyUntilItCan) {
  const std::string id = StoreRunningJob();
  ASSERT_EQ(id, "job-1");
  std::unique_ptr<JobManager> manager;
  {
    const ts::testing::FileWritesFail full;
    manager = StartManager();
    ASSERT_NE(manager, nullptr);
    auto job = manager->GetJob(id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), pb::JOB_STATE_RUNNING);  // as stored: it waits
    auto listed = manager->ListJobs(pb::ListJobsRequest());
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->jobs_size(), 1);
    pb::GetJobHistoryRequest history;
    history.set_id(id);
    EXPECT_TRUE(manager->GetJobHistory(history).ok());
    pb::TrainingSpec spec;
    const absl::Status submitted = manager->SubmitTraining(spec).status();
    EXPECT_EQ(submitted.code(), absl::StatusCode::kUnavailable) << submitted;
    EXPECT_TRUE(absl::StrContains(submitted.message(), "jobs are read-only")) << submitted;
    EXPECT_EQ(manager->CancelJob(id).status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(manager->DeleteJob(id).status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(StoreErrors("open_store"), 1);
    EXPECT_TRUE(Logged("the job store cannot be written (open_store): "));
    EXPECT_TRUE(Logged("jobs are read-only until the job store takes writes"));
    // Still full at the first retry, which fails and counts. The final-state retries wait on the
    // same 5 s: both threads must be waiting before the clock moves, and the count (not a
    // waiter) says that the retry ran.
    const absl::Time first = clock_.Now() + JobManager::kStoreRetryInterval;
    ASSERT_TRUE(clock_.BlockUntilWaiting(first, absl::Seconds(10), 2));
    clock_.Advance(JobManager::kStoreRetryInterval);
    for (int i = 0; i < 10000 && StoreErrors("open_store") < 2; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(StoreErrors("open_store"), 2);
    ASSERT_TRUE(clock_.BlockUntilWaiting(first + JobManager::kStoreRetryInterval));
    EXPECT_FALSE(manager->CheckStarted().ok());
  }
  EXPECT_EQ(launcher_.launches(), 0);
  // Room again: the next retry starts the jobs.
  clock_.Advance(JobManager::kStoreRetryInterval);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  // The retry launches the job before it logs and marks the start done.
  EXPECT_TRUE(LoggedSoon("the job store takes writes again (attempt 3)"));
  EXPECT_TRUE(manager->CheckStarted().ok());
  EXPECT_EQ(TaskOf(0).job().progress().resumes(), 1u);
  worker->Result(absl::OkStatus());
  worker->Exit(0);
  manager->Shutdown();
  EXPECT_EQ(Stored(id).state(), pb::JOB_STATE_SUCCEEDED);
}

// The store refuses a job's final state and the server stops before it is written: the next
// start writes it from the journal — the job is not queued again, and reads FAILED throughout.
TEST_F(JobManagerRestartTest, AFinalStateTheStoreRefusedIsKeptAcrossARestartAndNotRunAgain) {
  const std::string id = StoreRunningJob();
  auto manager = StartManager();
  ASSERT_NE(manager, nullptr);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  absl::Notification failed;
  ASSERT_TRUE(manager
                  ->Watch(id,
                          [&](const pb::JobEvent& event) {
                            if (event.job().state() == pb::JOB_STATE_FAILED) failed.Notify();
                          })
                  .ok());
  {
    const ts::testing::FileWritesFail full;
    worker->Result(absl::InvalidArgumentError("data.train: bad record"));
    worker->Exit(1);
    ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(manager->GetJob(id)->state(), pb::JOB_STATE_FAILED);
    manager->Shutdown();  // its last write of the final state fails too
    EXPECT_TRUE(Logged("kept in " + dir_ + "/state/final_states"));
    manager.reset();
    // A start on the still full disk: read-only, the kept end answered from memory.
    manager = StartManager();
    ASSERT_NE(manager, nullptr);
    EXPECT_FALSE(manager->CheckStarted().ok());
    auto kept = manager->GetJob(id);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->state(), pb::JOB_STATE_FAILED);
    pb::ListJobsRequest failed_only;
    failed_only.set_state(pb::JOB_STATE_FAILED);
    EXPECT_EQ(manager->ListJobs(failed_only)->jobs_size(), 1);
    manager->Shutdown();
    manager.reset();
  }
  EXPECT_EQ(Stored(id).state(), pb::JOB_STATE_RUNNING);  // what used to run it again

  manager = StartManager();
  ASSERT_NE(manager, nullptr);
  auto job = manager->GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(job->reason(), "data.train: bad record");
  EXPECT_EQ(job->progress().resumes(), 1u);  // the first start's, no other
  EXPECT_TRUE(Logged("which the job store refused before the restart, is written to it now"));
  manager->Shutdown();
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_EQ(Stored(id).state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(Stored(id).reason(), "data.train: bad record");
}

}  // namespace
}  // namespace ts::server

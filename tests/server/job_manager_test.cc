// JobManager across restarts, with in-process fake workers on the fake clock: a job the store
// says is RUNNING (the server stopped or died while it ran) is queued again when the next
// manager starts, counted as a resume, and runs to its end; a shutdown stops a running job's
// workers and leaves it RUNNING in the store for the next start.
#include "server/jobs/job_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_worker_launcher.h"
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
    auto manager = JobManager::Create(options, /*registry=*/nullptr, /*metrics=*/nullptr, &clock_);
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

  std::string dir_;
  ts::testing::FakeClock clock_;
  ts::testing::FakeWorkerLauncher launcher_{&clock_};
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

}  // namespace
}  // namespace ts::server

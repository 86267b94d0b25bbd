// JobRunner without processes: what follows an attempt (JudgeAttempt), and the WorkerTask a job
// starts with.
#include "server/jobs/job_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::HasSubstr;

TEST(JudgeAttemptTest, CancelShutdownSuccessRetryAndFailure) {
  const absl::Status ok = absl::OkStatus();
  const absl::Status died = absl::InternalError("worker rank 0 was killed by signal 9");
  const absl::Status bad_data = absl::InvalidArgumentError("data.train: no examples");
  // A cancel wins over everything.
  EXPECT_EQ(JudgeAttempt(died, true, true, true, 0, 3), AttemptVerdict::kCancelled);
  // A shutdown that stopped the workers (or broke them) leaves the job to resume.
  EXPECT_EQ(JudgeAttempt(absl::AbortedError("stopped"), true, false, true, 0, 0),
            AttemptVerdict::kInterrupted);
  EXPECT_EQ(JudgeAttempt(died, false, false, true, 0, 0), AttemptVerdict::kInterrupted);
  // A job that finished before it saw the shutdown succeeded.
  EXPECT_EQ(JudgeAttempt(ok, false, false, true, 0, 0), AttemptVerdict::kSucceeded);
  EXPECT_EQ(JudgeAttempt(ok, false, false, false, 0, 0), AttemptVerdict::kSucceeded);
  // Dead, hung or out-of-memory workers are retried while retries are left.
  for (const absl::Status& retriable :
       {died, absl::ResourceExhaustedError("out of memory"), absl::UnavailableError("gone"),
        absl::DeadlineExceededError("no heartbeat")}) {
    EXPECT_EQ(JudgeAttempt(retriable, false, false, false, 1, 2), AttemptVerdict::kRetry)
        << retriable;
    EXPECT_EQ(JudgeAttempt(retriable, false, false, false, 2, 2), AttemptVerdict::kFailed)
        << retriable;
  }
  // The spec or the data fails the same way again.
  EXPECT_EQ(JudgeAttempt(bad_data, false, false, false, 0, 5), AttemptVerdict::kFailed);
}

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(env_.dir() + "/data");
    auto root = DataRoot::Create(env_.dir() + "/data");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = std::make_unique<DataRoot>(*root);
    resolver_ = std::make_unique<CheckpointResolver>(root_.get(), &queue_);
    JobRunnerOptions options;
    options.jobs.heartbeat_interval = absl::Seconds(3);
    options.jobs.limits.max_steps = 5000;
    options.jobs_dir = env_.dir() + "/jobs";
    options.data_root = root_->root();
    options.heap_keep_freed_bytes = 1 << 20;
    runner_ = std::make_unique<JobRunner>(options, &queue_, &recorder_, resolver_.get(),
                                          /*registry=*/nullptr, env_.context());
  }

  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  JobRecorder recorder_{&queue_, &env_.history(), env_.context()};
  std::unique_ptr<DataRoot> root_;
  std::unique_ptr<CheckpointResolver> resolver_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(JobRunnerTest, ATrainingTaskCarriesTheJobItsDirectoryLimitsAndResolvedInitFrom) {
  pb::Job source;
  source.set_kind(pb::JOB_KIND_TRAINING);
  source.set_state(pb::JOB_STATE_SUCCEEDED);
  auto* best = source.add_checkpoints();
  best->set_kind("best");
  best->set_path("/state/jobs/job-1/best.tsckpt");
  ASSERT_TRUE(env_.jobs().CreateJob(source).ok());

  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.mutable_training()->set_threads(3);
  job.mutable_training()->set_init_from("job:job-1");
  ASSERT_TRUE(queue_.Enqueue(job).ok());
  auto active = queue_.Next();
  auto task = runner_->MakeTask(*active);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->job().id(), "job-2");
  EXPECT_EQ(task->job_dir(), env_.dir() + "/jobs/job-2");
  EXPECT_EQ(task->data_root(), root_->root());
  EXPECT_EQ(task->init_from_path(), "/state/jobs/job-1/best.tsckpt");
  EXPECT_EQ(task->threads(), 3u);
  EXPECT_EQ(task->heartbeat_ms(), 3000u);
  EXPECT_EQ(task->max_steps(), 5000u);
  EXPECT_EQ(task->heap_keep_freed_bytes(), 1u << 20);
}

TEST_F(JobRunnerTest, AnEvaluationTaskNamesTheCheckpointOfItsTarget) {
  pb::Job job;
  job.set_kind(pb::JOB_KIND_EVALUATION);
  job.mutable_evaluation()->set_job_id("job-7");
  ASSERT_TRUE(queue_.Enqueue(job).ok());
  auto active = queue_.Next();
  // The job it evaluates is gone: the task cannot be made, and the attempt fails with that.
  auto missing = runner_->MakeTask(*active);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  queue_.Update(*active, [](pb::Job& j) { j.mutable_evaluation()->set_checkpoint("m.tsckpt"); });
  auto not_a_file = runner_->MakeTask(*active);
  EXPECT_THAT(std::string(not_a_file.status().message()),
              HasSubstr("checkpoint: \"m.tsckpt\" is not a file in the data root"));
}

}  // namespace
}  // namespace ts::server

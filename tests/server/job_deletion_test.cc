// JobDeleter: refusals (unknown, unfinished, a checkpoint another job reads), files first then
// the record, and the retention sweep on the fake clock.
#include "server/jobs/job_deletion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JobDeleterTest : public ::testing::Test {
 protected:
  // A stored job in `state` with two files under jobs/<id>/.
  std::string FinishedJob(pb::JobState state = pb::JOB_STATE_SUCCEEDED) {
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_name("old");
    job.set_state(state);
    auto stored = env_.jobs().CreateJob(job);
    EXPECT_TRUE(stored.ok());
    const std::string dir = jobs_dir_ + "/" + stored->id();
    fs::create_directories(dir);
    std::ofstream(dir + "/best.tsckpt") << "0123456789";
    std::ofstream(dir + "/task.pb") << "abc";
    return stored->id();
  }

  ts::testing::JobTestContext env_;
  const std::string jobs_dir_ = env_.dir() + "/jobs";
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  JobDeleter deleter_{jobs_dir_, &queue_, &env_.jobs(), env_.context()};
};

TEST_F(JobDeleterTest, DeletesTheFilesThenTheRecordAndCountsTheReason) {
  const std::string id = FinishedJob();
  auto deleted = deleter_.Delete(id, "request");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->id(), id);
  EXPECT_EQ(deleted->state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(deleted->files_removed(), 2u);
  EXPECT_EQ(deleted->bytes_freed(), 13u);
  EXPECT_FALSE(fs::exists(jobs_dir_ + "/" + id));
  EXPECT_EQ(env_.jobs().GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_.Sample("taylorshift_jobs_deleted_total{reason=\"request\"}"), 1);
  EXPECT_EQ(deleter_.Delete(id, "request").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobDeleterTest, RefusesARunningJobAndOneWhoseCheckpointAQueuedJobReads) {
  const std::string finished = FinishedJob();
  pb::Job reader;
  reader.set_kind(pb::JOB_KIND_EVALUATION);
  reader.mutable_evaluation()->set_job_id(finished);
  auto queued = queue_.Enqueue(reader);
  ASSERT_TRUE(queued.ok());
  auto refused = deleter_.Delete(finished, "request");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("uses as its job_id; delete it after that job has finished"));
  EXPECT_TRUE(fs::exists(jobs_dir_ + "/" + finished));

  auto running = queue_.Next();
  queue_.SetState(*running, pb::JOB_STATE_RUNNING, "");
  auto busy = deleter_.Delete(queued->id(), "request");
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(busy.status().message()), HasSubstr("is running; cancel it first"));

  // Once the reader is final, both go.
  queue_.SetState(*running, pb::JOB_STATE_SUCCEEDED, "");
  queue_.Release(*running);
  EXPECT_TRUE(deleter_.Delete(finished, "request").ok());
  EXPECT_TRUE(deleter_.Delete(queued->id(), "request").ok());
}

TEST_F(JobDeleterTest, AStoredJobThatIsNotFinalIsRefused) {
  const std::string id = FinishedJob(pb::JOB_STATE_RUNNING);
  auto refused = deleter_.Delete(id, "request");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(jobs_dir_ + "/" + id));
}

// The store stamps a job's last write and the sweep takes its "now" from the same fake clock.
TEST_F(JobDeleterTest, TheSweepDeletesFinishedJobsOnceTheRetentionHasPassedOnTheClock) {
  const std::string finished = FinishedJob();
  const std::string failed = FinishedJob(pb::JOB_STATE_FAILED);
  const std::string running = FinishedJob(pb::JOB_STATE_RUNNING);
  EXPECT_EQ(deleter_.Sweep(absl::Hours(1)), 0);
  env_.clock().Advance(absl::Minutes(30));
  EXPECT_EQ(deleter_.Sweep(absl::Hours(1)), 0);
  env_.clock().Advance(absl::Minutes(31));
  EXPECT_EQ(deleter_.Sweep(absl::Hours(1)), 2);
  EXPECT_EQ(env_.jobs().GetJob(finished).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_.jobs().GetJob(failed).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(env_.jobs().GetJob(running).ok());
  EXPECT_EQ(env_.Sample("taylorshift_jobs_deleted_total{reason=\"retention\"}"), 2);
}

TEST_F(JobDeleterTest, RetentionSweepsAtStartAndThenEveryIntervalOfTheClock) {
  const absl::Time start = env_.clock().Now();
  const std::string id = FinishedJob();
  std::thread sweeper([&] { deleter_.RunRetention(absl::Hours(1), absl::Minutes(10)); });
  // The first sweep ran (nothing is old enough) and it waits for the next one.
  ASSERT_TRUE(env_.clock().BlockUntilWaiting(start + absl::Minutes(10)));
  EXPECT_TRUE(env_.jobs().GetJob(id).ok());
  env_.clock().Advance(absl::Hours(2));
  ASSERT_TRUE(env_.clock().BlockUntilWaiting(start + absl::Hours(2) + absl::Minutes(10)));
  EXPECT_EQ(env_.jobs().GetJob(id).status().code(), absl::StatusCode::kNotFound);
  deleter_.StopRetention();
  sweeper.join();
}

}  // namespace
}  // namespace ts::server

// JobRecorder: each kind of WorkerMessage turned into the job, the store's rows, the job gauges
// and the watchers' events; failed store writes counted by operation.
#include "server/jobs/job_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

pb::WorkerMessage Progress(std::uint64_t step, double loss) {
  pb::WorkerMessage message;
  auto* p = message.mutable_progress();
  p->set_step(step);
  p->set_loss(loss);
  p->set_learning_rate(0.001);
  p->set_examples_per_second(250);
  p->set_epoch(0.5);
  p->set_time_ms(1'700'000'000'000 + static_cast<std::int64_t>(step));
  return message;
}

pb::WorkerMessage Validation(std::uint64_t step, double accuracy) {
  pb::WorkerMessage message;
  message.mutable_validation()->set_step(step);
  message.mutable_validation()->set_accuracy(accuracy);
  message.mutable_validation()->set_examples(100);
  return message;
}

pb::WorkerMessage Checkpoint(const std::string& kind, std::uint64_t step, const std::string& path,
                             const std::vector<std::string>& removed = {}) {
  pb::WorkerMessage message;
  auto* info = message.mutable_checkpoint()->mutable_checkpoint();
  info->set_kind(kind);
  info->set_step(step);
  info->set_path(path);
  for (const auto& r : removed) message.mutable_checkpoint()->add_removed_paths(r);
  return message;
}

std::vector<std::string> Paths(const google::protobuf::RepeatedPtrField<pb::CheckpointInfo>& list) {
  std::vector<std::string> paths;
  for (const auto& c : list) paths.push_back(c.kind() + ":" + c.path());
  return paths;
}

class JobRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_name("curve");
    ASSERT_TRUE(queue_.Enqueue(job).ok());
    active_ = queue_.Next();
    ASSERT_NE(active_, nullptr);
    ASSERT_TRUE(
        queue_.Watch(active_->id, [this](const pb::JobEvent& e) { events_.push_back(e); }).ok());
    events_.clear();
  }
  std::vector<pb::JobEvent::Type> EventTypes() const {
    std::vector<pb::JobEvent::Type> types;
    for (const auto& e : events_) types.push_back(e.type());
    return types;
  }

  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  JobRecorder recorder_{&queue_, &env_.history(), env_.context()};
  std::shared_ptr<ActiveJob> active_;
  std::vector<pb::JobEvent> events_;
};

TEST_F(JobRecorderTest, ProgressBecomesALossRowTheJobsProgressItsGaugesAndAnEvent) {
  recorder_.Apply(*active_, Progress(10, 1.5));
  recorder_.Apply(*active_, Progress(20, 1.25));

  auto rows = env_.history().Metrics("job-1");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1].step, 20);
  EXPECT_EQ((*rows)[1].loss, 1.25);
  EXPECT_EQ((*rows)[1].learning_rate, 0.001);
  EXPECT_EQ((*rows)[1].examples_per_second, 250);
  EXPECT_EQ((*rows)[1].time_ms, 1'700'000'000'020);
  const pb::Job job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.progress().step(), 20u);
  EXPECT_EQ(job.progress().loss(), 1.25);
  EXPECT_EQ(job.progress().epoch(), 0.5);
  EXPECT_EQ(env_.Sample("taylorshift_job_step{job_id=\"job-1\"}"), 20);
  EXPECT_EQ(env_.Sample("taylorshift_job_loss{job_id=\"job-1\"}"), 1.25);
  EXPECT_THAT(EventTypes(), ElementsAre(pb::JobEvent::PROGRESS, pb::JobEvent::PROGRESS));
  EXPECT_EQ(events_[1].job().progress().step(), 20u);
  // The snapshot is persisted with each event.
  EXPECT_EQ(env_.jobs().GetJob("job-1")->progress().step(), 20u);
}

// The job's total from its workers' start, its progress ratio at each report, and an ETA from
// the rate of the reports' steps over their times (the worker's clock).
TEST_F(JobRecorderTest, StartAndProgressSetTotalRatioAndEta) {
  pb::WorkerMessage started;
  started.mutable_started()->set_total_steps(100);
  recorder_.Apply(*active_, started);
  EXPECT_EQ(env_.Sample("taylorshift_job_total_steps{job_id=\"job-1\"}"), 100);
  EXPECT_THAT(env_.metrics().Serialize(),
              HasSubstr("taylorshift_job_progress_ratio{job_id=\"job-1\"} 0\n"));
  const auto at = [](std::uint64_t step, std::int64_t ms) {
    pb::WorkerMessage message = Progress(step, 1.0);
    message.mutable_progress()->set_time_ms(1'700'000'000'000 + ms);
    return message;
  };
  recorder_.Apply(*active_, at(10, 0));
  EXPECT_EQ(env_.Sample("taylorshift_job_progress_ratio{job_id=\"job-1\"}"), 0.1);
  // One report: no rate yet.
  EXPECT_THAT(env_.metrics().Serialize(), Not(HasSubstr("taylorshift_job_eta_seconds{")));
  recorder_.Apply(*active_, at(20, 2000));
  recorder_.Apply(*active_, at(40, 4000));
  // 30 steps in 4 s: the 60 left take 8 s.
  EXPECT_EQ(env_.Sample("taylorshift_job_eta_seconds{job_id=\"job-1\"}"), 8);
  EXPECT_EQ(queue_.Snapshot(*active_).progress().eta_seconds(), 8);  // GetJob's too
  EXPECT_EQ(env_.Sample("taylorshift_job_progress_ratio{job_id=\"job-1\"}"), 0.4);
  // Restarted workers resume at step 20: ratio from there, and no ETA until two new reports.
  started.mutable_started()->set_resumed_step(20);
  recorder_.Apply(*active_, started);
  EXPECT_EQ(env_.Sample("taylorshift_job_progress_ratio{job_id=\"job-1\"}"), 0.2);
  EXPECT_FALSE(queue_.Snapshot(*active_).progress().has_eta_seconds());
  recorder_.Apply(*active_, at(30, 60000));
  EXPECT_THAT(env_.metrics().Serialize(), Not(HasSubstr("taylorshift_job_eta_seconds{")));
  recorder_.Apply(*active_, at(50, 70000));
  EXPECT_EQ(env_.Sample("taylorshift_job_eta_seconds{job_id=\"job-1\"}"), 25);
  recorder_.Apply(*active_, at(100, 80000));
  EXPECT_THAT(env_.metrics().Serialize(),
              HasSubstr("taylorshift_job_eta_seconds{job_id=\"job-1\"} 0\n"));
  EXPECT_EQ(env_.Sample("taylorshift_job_progress_ratio{job_id=\"job-1\"}"), 1);
}

// Issue 45: an evaluation's position in examples — the count of its total, and an ETA from the
// rate of the worker's reports — in the job (GetJob, the store) and a PROGRESS event each; no
// loss-curve rows. The report completes the count; the end clears the ETA.
TEST_F(JobRecorderTest, EvaluationProgressSetsTheCountOfTheTotalAndAnEta) {
  pb::WorkerMessage started;
  started.mutable_started()->set_validation_examples(512);
  recorder_.Apply(*active_, started);
  const auto at = [](std::uint64_t examples, std::int64_t ms) {
    pb::WorkerMessage message;
    message.mutable_evaluation_progress()->set_examples(examples);
    message.mutable_evaluation_progress()->set_total_examples(512);
    message.mutable_evaluation_progress()->set_time_ms(1'700'000'000'000 + ms);
    return message;
  };
  recorder_.Apply(*active_, at(64, 0));
  pb::Job job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.progress().evaluated_examples(), 64u);
  EXPECT_EQ(job.progress().validation_examples(), 512u);
  EXPECT_FALSE(job.progress().has_eta_seconds());  // one report: no rate yet
  recorder_.Apply(*active_, at(192, 1000));
  // 128 examples in 1 s: the 320 left take 2.5 s.
  job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.progress().evaluated_examples(), 192u);
  EXPECT_EQ(job.progress().eta_seconds(), 2.5);
  EXPECT_EQ(env_.jobs().GetJob("job-1")->progress().evaluated_examples(), 192u);
  EXPECT_THAT(EventTypes(),
              ElementsAre(pb::JobEvent::PROGRESS, pb::JobEvent::PROGRESS, pb::JobEvent::PROGRESS));
  EXPECT_EQ(events_[2].job().progress().evaluated_examples(), 192u);
  EXPECT_EQ(events_[2].job().progress().eta_seconds(), 2.5);
  EXPECT_TRUE(env_.history().Metrics("job-1")->empty());

  pb::WorkerMessage report;
  report.mutable_report()->set_examples(512);
  report.mutable_report()->set_accuracy(0.5);
  recorder_.Apply(*active_, report);
  job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.progress().evaluated_examples(), 512u);
  EXPECT_EQ(job.progress().eta_seconds(), 0);
  queue_.SetState(*active_, pb::JOB_STATE_SUCCEEDED, "");
  EXPECT_FALSE(queue_.Snapshot(*active_).progress().has_eta_seconds());
}

TEST_F(JobRecorderTest, ValidationKeepsTheLatestAndTheBestRun) {
  recorder_.Apply(*active_, Validation(10, 0.6));
  recorder_.Apply(*active_, Validation(20, 0.8));
  recorder_.Apply(*active_, Validation(30, 0.7));
  const pb::Job job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.validation().step(), 30u);
  EXPECT_EQ(job.best_validation().step(), 20u);
  EXPECT_EQ(job.best_validation().accuracy(), 0.8);
  auto runs = env_.history().Evaluations("job-1");
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 3u);
  EXPECT_EQ(env_.Sample("taylorshift_job_validation_accuracy{job_id=\"job-1\"}"), 0.7);
  EXPECT_THAT(EventTypes(), ElementsAre(pb::JobEvent::VALIDATION, pb::JobEvent::VALIDATION,
                                        pb::JobEvent::VALIDATION));
}

TEST_F(JobRecorderTest, AResumedStartDropsTheHistoryAfterItsStepAndTakesTheWorkersSpec) {
  for (std::uint64_t step : {10, 20, 30}) recorder_.Apply(*active_, Progress(step, 1.0));
  recorder_.Apply(*active_, Validation(30, 0.5));
  pb::WorkerMessage started;
  started.mutable_started()->set_resumed_step(20);
  started.mutable_started()->set_total_steps(100);
  started.mutable_started()->set_train_examples(640);
  started.mutable_started()->add_labels("neg");
  started.mutable_started()->add_labels("pos");
  started.mutable_started()->mutable_spec()->set_steps(100);
  events_.clear();
  recorder_.Apply(*active_, started);

  auto rows = env_.history().Metrics("job-1");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(rows->back().step, 20);
  EXPECT_TRUE(env_.history().Evaluations("job-1")->empty());
  const pb::Job job = queue_.Snapshot(*active_);
  EXPECT_EQ(job.progress().step(), 20u);
  EXPECT_EQ(job.progress().total_steps(), 100u);
  EXPECT_EQ(job.progress().train_examples(), 640u);
  EXPECT_THAT(job.labels(), ElementsAre("neg", "pos"));
  EXPECT_EQ(job.training().steps(), 100u);
  EXPECT_THAT(EventTypes(), ElementsAre(pb::JobEvent::PROGRESS));
  EXPECT_TRUE(env_.Logged("job job-1 resumes at step 20"));
}

TEST_F(JobRecorderTest, CheckpointsFollowWhatTheWorkerKeptInTheJobAndTheStore) {
  recorder_.Apply(*active_, Checkpoint("last", 10, "/j/step-10.tsckpt"));
  recorder_.Apply(*active_, Checkpoint("best", 10, "/j/best.tsckpt"));
  recorder_.Apply(*active_, Checkpoint("last", 20, "/j/step-20.tsckpt"));
  // keep_checkpoints 2: the worker deleted step 10 when it wrote step 30.
  recorder_.Apply(*active_, Checkpoint("last", 30, "/j/step-30.tsckpt", {"/j/step-10.tsckpt"}));
  recorder_.Apply(*active_, Checkpoint("best", 30, "/j/best.tsckpt"));

  const pb::Job job = queue_.Snapshot(*active_);
  EXPECT_THAT(
      Paths(job.checkpoints()),
      ElementsAre("last:/j/step-20.tsckpt", "last:/j/step-30.tsckpt", "best:/j/best.tsckpt"));
  auto stored = env_.history().Checkpoints("job-1");
  ASSERT_TRUE(stored.ok());
  std::vector<std::string> stored_paths;
  for (const auto& c : *stored) stored_paths.push_back(c.kind() + ":" + c.path());
  EXPECT_THAT(stored_paths, ElementsAre("last:/j/step-20.tsckpt", "last:/j/step-30.tsckpt",
                                        "best:/j/best.tsckpt"));
  ASSERT_EQ(events_.size(), 5u);
  EXPECT_EQ(events_.back().type(), pb::JobEvent::CHECKPOINT);
  EXPECT_EQ(events_.back().checkpoint().step(), 30u);
  // A first best checkpoint has no record to replace: that is not a store error.
  EXPECT_EQ(env_.StoreErrors("remove_checkpoint"), 0);
}

TEST_F(JobRecorderTest, AnEvaluationReportIsKeptAndStoredWithoutAnEvent) {
  pb::WorkerMessage report;
  report.mutable_report()->set_accuracy(0.9);
  report.mutable_report()->set_examples(50);
  recorder_.Apply(*active_, report);
  EXPECT_EQ(queue_.Snapshot(*active_).report().accuracy(), 0.9);
  ASSERT_EQ(env_.history().Evaluations("job-1")->size(), 1u);
  EXPECT_TRUE(events_.empty());
}

TEST_F(JobRecorderTest, FailedStoreWritesAreLoggedWithTheJobAndCountedByOperation) {
  // The job's record is gone underneath the recorder: each write of it fails.
  ASSERT_TRUE(env_.jobs().DeleteJob("job-1").ok());
  recorder_.Apply(*active_, Progress(40, 0.5));
  recorder_.Apply(*active_, Validation(40, 0.75));
  recorder_.Apply(*active_, Checkpoint("last", 40, "/j/step-40.tsckpt"));
  pb::WorkerMessage started;
  started.mutable_started()->set_resumed_step(20);
  recorder_.Apply(*active_, started);

  EXPECT_EQ(env_.StoreErrors("append_metric"), 1);
  EXPECT_EQ(env_.StoreErrors("append_evaluation"), 1);
  EXPECT_EQ(env_.StoreErrors("record_checkpoint"), 1);
  EXPECT_EQ(env_.StoreErrors("truncate_history"), 1);
  EXPECT_EQ(env_.StoreErrors("update_job"), 4);  // one snapshot per event
  EXPECT_TRUE(
      env_.Logged("job job-1: cannot write the loss of step 40 to the job store "
                  "(append_metric): "));
  EXPECT_TRUE(env_.Logged("job job-1: cannot write the last checkpoint of step 40"));
  // The job itself goes on: what the workers reported is still there for the watchers.
  EXPECT_EQ(queue_.Snapshot(*active_).progress().step(), 20u);
  EXPECT_EQ(queue_.Snapshot(*active_).validation().accuracy(), 0.75);
  EXPECT_EQ(events_.size(), 4u);
}

}  // namespace
}  // namespace ts::server

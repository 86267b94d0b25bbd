// JobRunner without processes: what follows an attempt (JudgeAttempt), the WorkerTask a job
// starts with, and the supervision of its workers (cancel, the stop grace, retries, the heartbeat
// timeout, a crash after the result) with in-process fake workers on the fake clock.
#include "server/jobs/job_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "tests/testing/fake_worker_launcher.h"
#include "tests/testing/file_writes_fail.h"
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
    options.jobs.heartbeat_timeout = kHeartbeatTimeout;
    options.jobs.stop_grace = kStopGrace;
    runner_ = std::make_unique<JobRunner>(options, &queue_, &recorder_, resolver_.get(),
                                          /*registry=*/nullptr, env_.context(), &launcher_);
  }
  void TearDown() override {
    if (!run_.joinable()) return;
    // A test that failed half-way: stop the job, and move the clock until its workers are killed.
    queue_.Stop();
    while (!finished_) env_.clock().Advance(absl::Hours(1));
    run_.join();
  }

  static constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(60);
  static constexpr absl::Duration kStopGrace = absl::Seconds(30);

  // Queues a training job and runs it on a thread of its own (as a JobManager worker does).
  void StartTraining(std::uint32_t max_retries = 0) {
    pb::Job job;
    job.set_kind(pb::JOB_KIND_TRAINING);
    job.set_name("puppet");
    job.mutable_training()->set_threads(1);
    job.mutable_training()->set_max_retries(max_retries);
    ASSERT_TRUE(queue_.Enqueue(job).ok());
    active_ = queue_.Next();
    ASSERT_NE(active_, nullptr);
    StartRun();
  }
  // Queues an evaluation job of a checkpoint in the data root and runs it (as StartTraining).
  void StartEvaluation(std::uint32_t max_retries) {
    std::ofstream(env_.dir() + "/data/m.tsckpt") << "checkpoint";
    pb::Job job;
    job.set_kind(pb::JOB_KIND_EVALUATION);
    job.set_name("puppet-eval");
    job.mutable_evaluation()->set_checkpoint("m.tsckpt");
    job.mutable_evaluation()->set_max_retries(max_retries);
    ASSERT_TRUE(queue_.Enqueue(job).ok());
    active_ = queue_.Next();
    ASSERT_NE(active_, nullptr);
    StartRun();
  }
  // `worker` reports an evaluation report while every file write fails (a full disk), and returns
  // once the recorder has seen the store refuse it; then finishes with OK.
  void ReportOnAFullDisk(ts::testing::FakeWorker* worker) {
    {
      const ts::testing::FileWritesFail full;
      pb::WorkerMessage report;
      report.mutable_report()->set_accuracy(0.75);
      report.mutable_report()->set_examples(4);
      worker->Send(report);
      for (int i = 0; i < 10000 && !env_.Logged("cannot write its evaluation report"); ++i) {
        absl::SleepFor(absl::Milliseconds(1));
      }
    }
    ASSERT_TRUE(env_.Logged("cannot write its evaluation report to the job store"));
    worker->Result(absl::OkStatus());
    worker->Exit(0);
  }
  void StartRun() {
    run_ = std::thread([this] {
      runner_->Run(*active_);
      finished_ = true;
    });
  }
  // Waits for Run to return; the job as it ended.
  pb::Job Finish() {
    run_.join();
    return queue_.Snapshot(*active_);
  }
  // Waits until the supervisor waits for `deadline` on the fake clock (nothing else to do).
  void AwaitSupervisorWaitingUntil(absl::Time deadline) {
    ASSERT_TRUE(env_.clock().BlockUntilWaiting(deadline))
        << "the supervisor does not wait for " << deadline;
  }

  ts::testing::JobTestContext env_;
  JobQueue queue_{JobQueueOptions{10, 0}, &env_.jobs(), env_.context()};
  JobRecorder recorder_{&queue_, &env_.history(), env_.context()};
  std::unique_ptr<DataRoot> root_;
  std::unique_ptr<CheckpointResolver> resolver_;
  ts::testing::FakeWorkerLauncher launcher_{&env_.clock()};
  std::unique_ptr<JobRunner> runner_;
  std::shared_ptr<ActiveJob> active_;
  std::atomic<bool> finished_{false};
  std::thread run_;
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

using ts::testing::FakeWorker;
using Signal = WorkerSignal;

TEST_F(JobRunnerTest, ACancelledJobsWorkerStopsOnSigtermAndTheJobIsCancelled) {
  StartTraining();
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  worker->Progress(10, 0.5);
  ASSERT_TRUE(queue_.Cancel(active_->id).ok());
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_CANCELLED);
  EXPECT_EQ(done.reason(), "cancelled by request");
  EXPECT_EQ(done.progress().step(), 10u);
  EXPECT_EQ(worker->terminations(), 1);
  EXPECT_EQ(worker->kills(), 0);
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_EQ(env_.jobs().GetJob(active_->id)->state(), pb::JOB_STATE_CANCELLED);
}

TEST_F(JobRunnerTest, ACancelledWorkerThatIgnoresSigtermIsKilledWhenTheGraceEnds) {
  launcher_.set_ignore_sigterm(true);
  StartTraining(/*max_retries=*/3);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  const absl::Time cancelled_at = env_.clock().Now();
  ASSERT_TRUE(queue_.Cancel(active_->id).ok());
  ASSERT_TRUE(worker->AwaitSignal(Signal::kTerminate));
  // The supervisor waits for the end of the grace, and nothing kills the worker before it.
  AwaitSupervisorWaitingUntil(cancelled_at + kStopGrace);
  env_.clock().Advance(kStopGrace - absl::Seconds(1));
  AwaitSupervisorWaitingUntil(cancelled_at + kStopGrace);
  EXPECT_EQ(worker->kills(), 0);
  EXPECT_FALSE(worker->exited());
  env_.clock().Advance(absl::Seconds(1));
  ASSERT_TRUE(worker->AwaitSignal(Signal::kKill));
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_CANCELLED);
  EXPECT_EQ(worker->terminations(), 1);
  EXPECT_EQ(worker->kills(), 1);
  // A cancelled job is not retried, whatever its max_retries.
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_EQ(done.progress().retries(), 0u);
}

TEST_F(JobRunnerTest, ACrashedWorkerIsRetriedUpToMaxRetriesAndThenTheJobFails) {
  StartTraining(/*max_retries=*/2);
  for (int attempt = 0; attempt < 3; ++attempt) {
    FakeWorker* worker = launcher_.AwaitWorker(attempt);
    ASSERT_NE(worker, nullptr) << attempt;
    worker->Progress(10 * (attempt + 1), 1.0);
    worker->Log("about to crash");
    worker->Die(SIGSEGV);
  }
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_THAT(done.reason(), HasSubstr("was killed by signal 11 (SIGSEGV)"));
  EXPECT_THAT(done.reason(), HasSubstr("last log lines: about to crash"));
  EXPECT_EQ(done.progress().retries(), 2u);
  EXPECT_EQ(launcher_.launches(), 3);
  EXPECT_TRUE(env_.Logged("retrying from its last saved state (1 of max_retries 2)"));
  EXPECT_TRUE(env_.Logged("retrying from its last saved state (2 of max_retries 2)"));
  // Every attempt starts from the same task file, rewritten with the job's retries so far.
  EXPECT_EQ(launcher_.launch_options(2).task_file, env_.dir() + "/jobs/job-1/task.pb");
}

TEST_F(JobRunnerTest, ARetriedJobThatThenFinishesSucceeds) {
  StartTraining(/*max_retries=*/1);
  FakeWorker* first = launcher_.AwaitWorker(0);
  ASSERT_NE(first, nullptr);
  first->Die(SIGKILL);
  FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  second->Progress(20, 0.25);
  second->Result(absl::OkStatus());
  second->Exit(0);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_EQ(done.progress().retries(), 1u);
  EXPECT_EQ(done.progress().step(), 20u);
  EXPECT_TRUE(env_.Logged("out of memory (the kernel's OOM killer) or killed from outside"));
}

TEST_F(JobRunnerTest, AWorkerSilentForTheHeartbeatTimeoutIsKilledRetriedAndThenFails) {
  StartTraining(/*max_retries=*/1);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  const absl::Time started = env_.clock().Now();
  AwaitSupervisorWaitingUntil(started + kHeartbeatTimeout);
  // A heartbeat before the timeout moves it on.
  env_.clock().Advance(absl::Seconds(50));
  worker->Heartbeat();
  AwaitSupervisorWaitingUntil(started + absl::Seconds(50) + kHeartbeatTimeout);
  env_.clock().Advance(absl::Seconds(59));  // 109 s after the start, 59 s after the heartbeat
  AwaitSupervisorWaitingUntil(started + absl::Seconds(50) + kHeartbeatTimeout);
  EXPECT_EQ(worker->kills(), 0);
  env_.clock().Advance(absl::Seconds(1));
  ASSERT_TRUE(worker->AwaitSignal(Signal::kKill));
  EXPECT_EQ(worker->terminations(), 0);  // a hung worker is killed at once, not asked to stop

  // Retried once; the second attempt hangs too, and the job fails.
  FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  const absl::Time restarted = env_.clock().Now();
  AwaitSupervisorWaitingUntil(restarted + kHeartbeatTimeout);
  env_.clock().Advance(kHeartbeatTimeout);
  ASSERT_TRUE(second->AwaitSignal(Signal::kKill));
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_THAT(done.reason(),
              HasSubstr("worker rank 0 (pid 90010) sent no heartbeat for 1m (hung or stopped); "
                        "killed"));
  EXPECT_EQ(done.progress().retries(), 1u);
  EXPECT_EQ(launcher_.launches(), 2);
}

TEST_F(JobRunnerTest, OneRankSilentForTheHeartbeatTimeoutEndsEveryRank) {
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.mutable_training()->set_threads(1);
  job.mutable_training()->set_workers(2);
  ASSERT_TRUE(queue_.Enqueue(job).ok());
  active_ = queue_.Next();
  StartRun();
  FakeWorker* zero = launcher_.AwaitWorker(0, 0);
  FakeWorker* one = launcher_.AwaitWorker(0, 1);
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(launcher_.launch_options(0).world_size, 2);
  const absl::Time started = env_.clock().Now();
  AwaitSupervisorWaitingUntil(started + kHeartbeatTimeout);
  env_.clock().Advance(absl::Seconds(30));
  zero->Heartbeat();  // rank 0 is alive; rank 1 is not
  AwaitSupervisorWaitingUntil(started + kHeartbeatTimeout);
  env_.clock().Advance(absl::Seconds(30));
  ASSERT_TRUE(zero->AwaitSignal(Signal::kKill));
  ASSERT_TRUE(one->AwaitSignal(Signal::kKill));
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_THAT(done.reason(), HasSubstr("worker rank 1 (pid 90001) sent no heartbeat for 1m"));
}

TEST_F(JobRunnerTest, AResultFollowedByANonZeroExitSucceedsAndTheExitIsLogged) {
  StartTraining();
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  worker->Progress(40, 0.1);
  worker->Result(absl::OkStatus());
  worker->Exit(3);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_TRUE(env_.Logged(
      "job job-1: worker rank 0 (pid 90000) reported its result, then exited with code 3"));
}

TEST_F(JobRunnerTest, AResultFollowedByACrashIsTheCrashOfTheAttempt) {
  StartTraining(/*max_retries=*/1);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  worker->Result(absl::OkStatus());
  worker->Die(SIGABRT);
  // The crash decides (the result may not be whole: the worker died writing it), so the job is
  // retried, and the log says that it had reported a result.
  FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(env_.Logged("reported its result, then was killed by signal 6 (SIGABRT)"));
  EXPECT_TRUE(env_.Logged("attempt 1 failed (worker rank 0 (pid 90000) was killed by signal 6"));
  second->Result(absl::OkStatus());
  second->Exit(0);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_EQ(done.progress().retries(), 1u);
}

TEST_F(JobRunnerTest, AFailureTheWorkerReportsIsNotRetried) {
  StartTraining(/*max_retries=*/3);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  // Issue 45: the worker logs its failure too; the reason said it twice ("...; last log lines:
  // tsworker[rank 0] failed: INVALID_ARGUMENT: ..."). A line that repeats the result is left out.
  worker->Log("tsworker[rank 0] failed: INVALID_ARGUMENT: data.train: task/bad.jsonl:2: not JSON");
  worker->Result(absl::InvalidArgumentError("data.train: task/bad.jsonl:2: not JSON"));
  worker->Exit(1);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(done.reason(), "data.train: task/bad.jsonl:2: not JSON");
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_FALSE(env_.Logged("reported its result, then"));
}

TEST_F(JobRunnerTest, AShutdownLeavesTheJobRunningInTheStoreToResume) {
  StartTraining(/*max_retries=*/3);
  FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  worker->Progress(30, 0.2);
  queue_.Stop();
  const pb::Job done = Finish();
  EXPECT_EQ(worker->terminations(), 1);
  EXPECT_EQ(done.state(), pb::JOB_STATE_RUNNING);
  EXPECT_EQ(env_.jobs().GetJob(active_->id)->state(), pb::JOB_STATE_RUNNING);
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_TRUE(
      env_.Logged("interrupted by shutdown (stopped; its state is saved); it resumes on "
                  "the next start"));
}

// Soak finding: a job killed (SIGKILL) and retried logged step 10 twice in its loss curve. Its
// retry trains again the steps after its saved state — all of them when the worker died before its
// first checkpoint — and the history keeps each step once, as the run that went on logged it.
TEST_F(JobRunnerTest, ARetriedJobLogsEachStepOnceInItsHistory) {
  StartTraining(/*max_retries=*/2);
  const auto started = [](std::uint64_t resumed_step) {
    pb::WorkerMessage message;
    message.mutable_started()->set_total_steps(40);
    message.mutable_started()->set_resumed_step(resumed_step);
    return message;
  };
  // Killed after steps 10 and 20, before any saved state.
  FakeWorker* first = launcher_.AwaitWorker(0);
  ASSERT_NE(first, nullptr);
  first->Send(started(0));
  first->Progress(10, 2.0);
  first->Progress(20, 1.9);
  first->Die(SIGKILL);
  // Starts again at 0; saves its state at step 25, logs 30, and is killed.
  FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  second->Send(started(0));
  second->Progress(10, 1.5);
  second->Progress(20, 1.4);
  second->Progress(30, 1.3);
  second->Die(SIGKILL);
  // Resumes at 25: step 30 again, then 40.
  FakeWorker* third = launcher_.AwaitWorker(2);
  ASSERT_NE(third, nullptr);
  third->Send(started(25));
  third->Progress(30, 1.2);
  third->Progress(40, 1.1);
  third->Result(absl::OkStatus());
  third->Exit(0);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_EQ(done.progress().retries(), 2u);
  auto rows = env_.history().Metrics(active_->id);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<std::int64_t> steps;
  std::vector<double> losses;
  for (const auto& row : *rows) {
    steps.push_back(row.step);
    losses.push_back(row.loss);
  }
  EXPECT_THAT(steps, ::testing::ElementsAre(10, 20, 30, 40));
  EXPECT_THAT(losses, ::testing::ElementsAre(1.5, 1.4, 1.2, 1.1));
  EXPECT_TRUE(
      env_.Logged("job job-1 starts again at step 0 (no saved state; it had reached step 20)"));
  EXPECT_TRUE(env_.Logged("job job-1 resumes at step 25"));
}

// Soak finding: an evaluation whose report the job store refused (a full disk) succeeded with an
// empty history. Now the attempt fails with the store's error, which is retried while retries are
// left (the second attempt's report is kept) and otherwise is the job's reason.
TEST_F(JobRunnerTest, AnEvaluationReportTheStoreRefusesFailsTheAttempt) {
  StartEvaluation(/*max_retries=*/1);
  ts::testing::FakeWorker* first = launcher_.AwaitWorker(0);
  ASSERT_NE(first, nullptr);
  ReportOnAFullDisk(first);
  ts::testing::FakeWorker* second = launcher_.AwaitWorker(1);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(env_.Logged(
      "attempt 1 failed (its evaluation report could not be written to the job store: "));
  pb::WorkerMessage report;
  report.mutable_report()->set_accuracy(0.5);
  report.mutable_report()->set_examples(4);
  second->Send(report);
  second->Result(absl::OkStatus());
  second->Exit(0);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_EQ(done.progress().retries(), 1u);
  auto kept = env_.history().Evaluations(active_->id);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_DOUBLE_EQ((*kept)[0].accuracy(), 0.5);
}

TEST_F(JobRunnerTest, AnEvaluationReportTheStoreRefusesWithNoRetryLeftFailsTheJob) {
  StartEvaluation(/*max_retries=*/0);
  ts::testing::FakeWorker* worker = launcher_.AwaitWorker(0);
  ASSERT_NE(worker, nullptr);
  ReportOnAFullDisk(worker);
  const pb::Job done = Finish();
  EXPECT_EQ(done.state(), pb::JOB_STATE_FAILED);
  EXPECT_THAT(done.reason(),
              HasSubstr("its evaluation report could not be written to the job store: "));
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_EQ(env_.StoreErrors("append_evaluation"), 1);
}

}  // namespace
}  // namespace ts::server

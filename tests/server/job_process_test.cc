// JobProcess over ProcessWorkerLauncher with scripted workers (a shell script in place of
// tsworker, writing prepared frames to fd 3): a worker stopped by a shutdown that saves its state
// and then dies of a signal is reported as such (exit_problem), its result still deciding the
// outcome; one that exits 0, or exits 1 after reporting a failure, is not.
#include "server/jobs/job_process.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "job_contract/event_pipe.h"
#include "server/jobs/process_worker_launcher.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class JobProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/ts_job_process_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // A worker script that writes `result`'s frame to fd 3 and then runs `then` (shell).
  std::string Worker(const pb::WorkerResult& result, const std::string& then) {
    const std::string frame_file = dir_ + "/frame.bin";
    const int fd = ::open(frame_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    pb::WorkerMessage message;
    *message.mutable_result() = result;
    EXPECT_TRUE(job::EventWriter(fd, 0).Write(message).ok());
    ::close(fd);
    std::string script = dir_ + "/worker.sh";
    // SIGTERM ignored before the shell runs (Stop() comes at once, and the shell could take a
    // pending SIGTERM before a `trap` line ran).
    std::ofstream(script) << "#!/usr/bin/env -S --ignore-signal=TERM /bin/sh\n"
                          << "echo 'worker: saving'\ncat '" << frame_file << "' >&3\n"
                          << then << "\n";
    ::chmod(script.c_str(), 0755);
    return script;
  }

  // Runs `binary` as a job's only rank; `stop`: Stop() first, as a shutdown does.
  JobProcessOutcome Run(const std::string& binary, bool stop = false) {
    JobProcessOptions options;
    options.launch.binary = binary;
    options.launch.task_file = dir_ + "/task.pb";
    ProcessWorkerLauncher launcher;
    auto process = JobProcess::Start(options, launcher, nullptr, nullptr);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return JobProcessOutcome{};
    if (stop) (*process)->Stop();
    return (*process)->Wait();
  }

  std::string dir_;
};

TEST_F(JobProcessTest, AWorkerThatCrashesAfterSavingItsStopIsReportedNotJustStopped) {
  pb::WorkerResult saved;  // what tsworker reports when it stopped with its state saved
  saved.set_code(static_cast<int>(absl::StatusCode::kAborted));
  saved.set_message("stopped at step 25");
  saved.set_stopped(true);
  const JobProcessOutcome outcome = Run(Worker(saved, "kill -ABRT $$"), /*stop=*/true);
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(std::string(outcome.status.message()), "stopped at step 25");
  // Before: nothing said the worker had crashed; the job looked cleanly interrupted.
  EXPECT_THAT(outcome.exit_problem,
              MatchesRegex("worker rank 0 \\(pid [0-9]+\\) reported its result, then was killed "
                           "by signal 6 \\(SIGABRT\\)"));
  EXPECT_THAT(outcome.last_log_lines, ::testing::Contains("worker: saving"));
}

TEST_F(JobProcessTest, AWorkerThatExitsCleanlyOrFailsAsItSaysHasNoExitProblem) {
  pb::WorkerResult finished;
  EXPECT_EQ(Run(Worker(finished, "exit 0")).exit_problem, "");
  pb::WorkerResult failed;  // the worker's own exit code 1 after a failed result
  failed.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
  failed.set_message("data.train: no examples");
  const JobProcessOutcome outcome = Run(Worker(failed, "exit 1"));
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outcome.exit_problem, "");
}

}  // namespace
}  // namespace ts::server

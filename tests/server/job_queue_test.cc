// JobQueue: admission (jobs.max_queued, shutdown), the memory budget of the running jobs, state
// transitions with the fake clock's times, watches, cancel and deletion refusals, a failed
// snapshot write counted, and a final state the store refuses kept and written later.
#include "server/jobs/job_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/file_writes_fail.h"
#include "tests/testing/job_testing.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;
using ::testing::HasSubstr;

pb::Job TrainingJob(const std::string& name, std::uint64_t memory_estimate_bytes = 0) {
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.set_name(name);
  job.mutable_progress()->set_memory_estimate_bytes(memory_estimate_bytes);
  return job;
}

class JobQueueTest : public ::testing::Test {
 protected:
  ts::testing::JobTestContext env_;
};

TEST_F(JobQueueTest, EnqueueStoresTheJobQueuedAtTheClocksTimeAndRefusesPastMaxQueued) {
  JobQueue queue(JobQueueOptions{2, 0}, &env_.jobs(), env_.context());
  auto first = queue.Enqueue(TrainingJob("a"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->id(), "job-1");
  EXPECT_EQ(first->state(), pb::JOB_STATE_QUEUED);
  EXPECT_EQ(first->create_time().seconds(), absl::ToUnixSeconds(env_.clock().Now()));
  auto stored = env_.jobs().GetJob("job-1");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->state(), pb::JOB_STATE_QUEUED);
  EXPECT_EQ(
      env_.Sample("taylorshift_job_state{job_id=\"job-1\",kind=\"training\",state=\"queued\"}"), 1);

  ASSERT_TRUE(queue.Enqueue(TrainingJob("b")).ok());
  auto third = queue.Enqueue(TrainingJob("c"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("2 jobs are queued, the limit (jobs.max_queued) is 2"));

  // A job its runner has started no longer counts as waiting.
  auto running = queue.Next();
  ASSERT_NE(running, nullptr);
  queue.SetState(*running, pb::JOB_STATE_RUNNING, "");
  EXPECT_TRUE(queue.Enqueue(TrainingJob("c")).ok());
}

TEST_F(JobQueueTest, AfterStopEnqueueIsUnavailableAndNextReturnsNull) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  queue.Stop();
  EXPECT_TRUE(queue.stopping());
  EXPECT_EQ(queue.Enqueue(TrainingJob("b")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue.Next(), nullptr);
  // The queued job stays queued in the store for the next start.
  EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_QUEUED);
}

TEST_F(JobQueueTest, TheHeadStartsOnlyWhenItFitsBesideTheRunningJobsOrNothingRuns) {
  JobQueue queue(JobQueueOptions{10, 100}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("big", 150)).ok());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a", 60)).ok());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("b", 40)).ok());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("c", 10)).ok());

  // Over the budget on its own, but nothing runs: it starts.
  auto big = queue.Next();
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->id, "job-1");

  // "a" waits for "big"; when "big" is released, "a" and then "b" (60 + 40 = 100) start.
  std::shared_ptr<ActiveJob> a;
  std::thread runner([&] { a = queue.Next(); });
  // The runner waits on the clock (no deadline) rather than taking "a" beside "big".
  EXPECT_TRUE(env_.clock().BlockUntilWaiting(absl::InfiniteFuture()));
  queue.Release(*big);
  runner.join();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->id, "job-2");
  auto b = queue.Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->id, "job-3");
  // "c" (10) does not fit beside 100 until one of them is released.
  queue.Release(*b);
  auto c = queue.Next();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id, "job-4");
  // Released jobs leave the table: Get reads the store.
  EXPECT_TRUE(queue.Get("job-1").ok());
}

pb::Job OwnedJob(const std::string& name, const std::string& submitter, std::uint64_t steps) {
  pb::Job job = TrainingJob(name);
  job.set_submitted_by(submitter);
  job.mutable_training()->set_steps(steps);
  return job;
}

// Issue 45: jobs.per_identity.max_queued and max_total_steps refuse a submission naming the key,
// its value and the identity's use; other identities, and "anonymous" (no authentication), are
// not held by one identity's use.
TEST_F(JobQueueTest, PerIdentityQueuedAndStepLimitsRefuseNamingTheKeyTheLimitAndTheUse) {
  JobQueueOptions options{64, 0};
  options.per_identity_max_queued = 2;
  options.per_identity_max_total_steps = 1000;
  JobQueue queue(options, &env_.jobs(), env_.context());
  constexpr char kAlice[] = "token:aaaaaaaaaaaa";
  constexpr char kBob[] = "token:bbbbbbbbbbbb";
  ASSERT_TRUE(queue.Enqueue(OwnedJob("a1", kAlice, 300)).ok());
  ASSERT_TRUE(queue.Enqueue(OwnedJob("a2", kAlice, 300)).ok());
  const absl::Status queued = queue.Enqueue(OwnedJob("a3", kAlice, 10)).status();
  EXPECT_EQ(queued.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(queued.message()),
              HasSubstr("token:aaaaaaaaaaaa has 2 jobs queued, the limit "
                        "(jobs.per_identity.max_queued) is 2"));
  // Another identity, and anonymous jobs, are not counted against alice's.
  ASSERT_TRUE(queue.Enqueue(OwnedJob("b1", kBob, 1000)).ok());
  ASSERT_TRUE(queue.Enqueue(OwnedJob("n1", "anonymous", 5000)).ok());
  ASSERT_TRUE(queue.Enqueue(OwnedJob("n2", "anonymous", 5000)).ok());
  ASSERT_TRUE(queue.Enqueue(OwnedJob("n3", "anonymous", 5000)).ok());

  // Running jobs count toward the steps but not toward the queued jobs.
  auto a1 = queue.Next();
  ASSERT_NE(a1, nullptr);
  EXPECT_EQ(a1->id, "job-1");
  queue.SetState(*a1, pb::JOB_STATE_RUNNING, "");
  const absl::Status steps = queue.Enqueue(OwnedJob("a3", kAlice, 401)).status();
  EXPECT_EQ(steps.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(steps.message()),
              HasSubstr("token:aaaaaaaaaaaa has 600 steps in unfinished jobs; with this job's 401 "
                        "that is 1001, over the limit (jobs.per_identity.max_total_steps) of "
                        "1000"));
  ASSERT_TRUE(queue.Enqueue(OwnedJob("a3", kAlice, 400)).ok());
  EXPECT_EQ(queue.Enqueue(OwnedJob("b2", kBob, 1)).status().code(),
            absl::StatusCode::kResourceExhausted);

  // A finished job no longer counts.
  queue.SetState(*a1, pb::JOB_STATE_SUCCEEDED, "");
  queue.Release(*a1);
  EXPECT_TRUE(queue.Enqueue(OwnedJob("a4", kAlice, 300)).status().code() ==
              absl::StatusCode::kResourceExhausted);  // still 2 queued (a2, a3)
  ASSERT_TRUE(queue.Cancel("job-2").ok());
  EXPECT_TRUE(queue.Enqueue(OwnedJob("a4", kAlice, 300)).ok());
}

// Issue 45: jobs.per_identity.max_running holds an identity's next job while it runs that many,
// and the jobs of other identities queued behind it start meanwhile.
TEST_F(JobQueueTest, PerIdentityMaxRunningHoldsAnIdentitysJobsAndLetsOthersPass) {
  JobQueueOptions options{64, 0};
  options.per_identity_max_running = 1;
  JobQueue queue(options, &env_.jobs(), env_.context());
  constexpr char kAlice[] = "token:aaaaaaaaaaaa";
  ASSERT_TRUE(queue.Enqueue(OwnedJob("a1", kAlice, 10)).ok());         // job-1
  ASSERT_TRUE(queue.Enqueue(OwnedJob("a2", kAlice, 10)).ok());         // job-2
  ASSERT_TRUE(queue.Enqueue(OwnedJob("b1", "cert:CN=bob", 10)).ok());  // job-3
  ASSERT_TRUE(queue.Enqueue(OwnedJob("n1", "anonymous", 10)).ok());    // job-4
  ASSERT_TRUE(queue.Enqueue(OwnedJob("n2", "anonymous", 10)).ok());    // job-5
  auto a1 = queue.Next();
  ASSERT_NE(a1, nullptr);
  EXPECT_EQ(a1->id, "job-1");
  auto b1 = queue.Next();  // a2 waits for a1: bob's job passes it
  ASSERT_NE(b1, nullptr);
  EXPECT_EQ(b1->id, "job-3");
  auto n1 = queue.Next();  // anonymous jobs have no per-identity limit
  ASSERT_NE(n1, nullptr);
  EXPECT_EQ(n1->id, "job-4");
  auto n2 = queue.Next();
  ASSERT_NE(n2, nullptr);
  EXPECT_EQ(n2->id, "job-5");

  // Only a2 is left, and alice runs one: the runner waits until a1 is released.
  std::shared_ptr<ActiveJob> a2;
  std::thread runner([&] { a2 = queue.Next(); });
  EXPECT_TRUE(env_.clock().BlockUntilWaiting(absl::InfiniteFuture()));
  EXPECT_EQ(a2, nullptr);
  queue.Release(*a1);
  runner.join();
  ASSERT_NE(a2, nullptr);
  EXPECT_EQ(a2->id, "job-2");
}

TEST_F(JobQueueTest, RestoreQueuesAgainAndCountsTheResumeOfARunningJob) {
  auto stored = env_.jobs().CreateJob(TrainingJob("interrupted"));
  ASSERT_TRUE(stored.ok());
  stored->set_state(pb::JOB_STATE_RUNNING);
  stored->mutable_progress()->set_resumes(2);
  ASSERT_TRUE(env_.jobs().UpdateJob(*stored).ok());

  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Restore(*stored).ok());
  auto job = env_.jobs().GetJob(stored->id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), pb::JOB_STATE_QUEUED);
  EXPECT_EQ(job->progress().resumes(), 3u);
  EXPECT_TRUE(env_.Logged("queued again to resume after a restart"));
  auto next = queue.Next();
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->id, stored->id());
}

TEST_F(JobQueueTest, StatesCarryTheClocksTimesAndWatchersSeeEveryEventUntilTheFinalOne) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  std::vector<pb::JobEvent> events;
  auto handle = queue.Watch("job-1", [&](const pb::JobEvent& e) { events.push_back(e); });
  ASSERT_TRUE(handle.ok());
  EXPECT_GT(*handle, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), pb::JobEvent::SNAPSHOT);

  auto active = queue.Next();
  const absl::Time start = env_.clock().Now();
  queue.SetState(*active, pb::JOB_STATE_RUNNING, "");
  env_.clock().Advance(absl::Seconds(90));
  queue.Update(*active, [](pb::Job& job) { job.mutable_progress()->set_step(7); });
  queue.Publish(*active, pb::JobEvent::PROGRESS);
  queue.SetState(*active, pb::JOB_STATE_SUCCEEDED, "");
  queue.Publish(*active, pb::JobEvent::PROGRESS);  // after the final event: not delivered

  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].type(), pb::JobEvent::STATE);
  EXPECT_EQ(events[1].job().state(), pb::JOB_STATE_RUNNING);
  EXPECT_EQ(events[2].type(), pb::JobEvent::PROGRESS);
  EXPECT_EQ(events[2].job().progress().step(), 7u);
  EXPECT_EQ(events[3].job().state(), pb::JOB_STATE_SUCCEEDED);
  const pb::Job& done = events[3].job();
  EXPECT_EQ(done.start_time().seconds(), absl::ToUnixSeconds(start));
  EXPECT_EQ(done.end_time().seconds(), absl::ToUnixSeconds(start + absl::Seconds(90)));
  // Persisted, and counted.
  EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(env_.Sample("taylorshift_jobs_total{kind=\"training\",state=\"succeeded\"}"), 1);
  // A finished job's watch is only its snapshot.
  std::vector<pb::JobEvent> late;
  auto late_handle = queue.Watch("job-1", [&](const pb::JobEvent& e) { late.push_back(e); });
  ASSERT_TRUE(late_handle.ok());
  EXPECT_EQ(*late_handle, 0);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].job().state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(queue.Watch("job-9", [](const pb::JobEvent&) {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobQueueTest, StopEndsOpenWatchesWithAnUnspecifiedEvent) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  std::vector<pb::JobEvent> events;
  ASSERT_TRUE(queue.Watch("job-1", [&](const pb::JobEvent& e) { events.push_back(e); }).ok());
  queue.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type(), pb::JobEvent::TYPE_UNSPECIFIED);
}

TEST_F(JobQueueTest, CancelEndsAQueuedJobAtOnceAndRefusesAFinishedOne) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("b")).ok());
  auto cancelled = queue.Cancel("job-2");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), pb::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled->reason(), "cancelled by request while queued");
  EXPECT_EQ(env_.jobs().GetJob("job-2")->state(), pb::JOB_STATE_CANCELLED);
  auto again = queue.Cancel("job-2");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("is already cancelled"));
  EXPECT_EQ(queue.Cancel("job-7").status().code(), absl::StatusCode::kNotFound);

  // A running job is marked; its runner makes it CANCELLED.
  auto running = queue.Next();
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->id, "job-1");
  queue.SetState(*running, pb::JOB_STATE_RUNNING, "");
  auto marked = queue.Cancel("job-1");
  ASSERT_TRUE(marked.ok());
  EXPECT_EQ(marked->state(), pb::JOB_STATE_RUNNING);
  EXPECT_TRUE(running->cancel);
  // Cancelled while queued, it never starts.
  queue.Stop();
  EXPECT_EQ(queue.Next(), nullptr);
}

TEST_F(JobQueueTest, DeletionIsRefusedForUnfinishedJobsAndCheckpointsTheyRead) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  auto finished = env_.jobs().CreateJob(TrainingJob("done"));
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(queue.CheckDeletable(finished->id()).ok());

  pb::Job reader = TrainingJob("reader");
  reader.mutable_training()->set_init_from("job:" + finished->id());
  ASSERT_TRUE(queue.Enqueue(reader).ok());  // job-2
  const absl::Status used = queue.CheckDeletable(finished->id());
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(used.message()),
              HasSubstr("has a checkpoint that job job-2 (queued) uses as its init_from"));

  pb::Job evaluation;
  evaluation.set_kind(pb::JOB_KIND_EVALUATION);
  evaluation.mutable_evaluation()->set_job_id("job-2");
  ASSERT_TRUE(queue.Enqueue(evaluation).ok());  // job-3
  const absl::Status queued = queue.CheckDeletable("job-2");
  EXPECT_EQ(queued.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(queued.message()), HasSubstr("job job-2 is queued; cancel it first"));
}

TEST_F(JobQueueTest, AFailedSnapshotWriteIsLoggedAndCountedAndTheJobGoesOn) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  auto active = queue.Next();
  // The record is gone underneath the queue: every write of the job now fails (NOT_FOUND).
  ASSERT_TRUE(env_.jobs().DeleteJob("job-1").ok());
  EXPECT_EQ(env_.StoreErrors("update_job"), 0);
  queue.SetState(*active, pb::JOB_STATE_RUNNING, "");
  EXPECT_EQ(env_.StoreErrors("update_job"), 1);
  EXPECT_TRUE(
      env_.Logged("job job-1: cannot write its running snapshot (STATE event) to the job "
                  "store (update_job)"));
  EXPECT_EQ(queue.Snapshot(*active).state(), pb::JOB_STATE_RUNNING);
}

TEST_F(JobQueueTest, AFinalStateTheStoreRefusesIsAnsweredFromMemoryAndWrittenAtTheNextWrite) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("b")).ok());
  auto active = queue.Next();
  queue.SetState(*active, pb::JOB_STATE_RUNNING, "");
  std::vector<pb::JobEvent> events;
  ASSERT_TRUE(queue.Watch("job-1", [&](const pb::JobEvent& e) { events.push_back(e); }).ok());
  {
    const ts::testing::FileWritesFail full;
    queue.SetState(*active, pb::JOB_STATE_FAILED, "cannot write best.tsckpt: no space");
  }
  queue.Release(*active);  // the runner is done with it: it leaves the table
  EXPECT_EQ(env_.StoreErrors("update_job"), 1);
  EXPECT_TRUE(
      env_.Logged("job job-1: cannot write its failed snapshot (STATE event) to the job "
                  "store (update_job)"));
  EXPECT_TRUE(
      env_.Logged("job job-1: its final state (failed) is kept in memory and written to "
                  "the job store again later"));
  EXPECT_EQ(env_.Sample("taylorshift_job_final_states_unwritten"), 1);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job().state(), pb::JOB_STATE_FAILED);

  // The store still holds the RUNNING snapshot; nothing answers it.
  EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_RUNNING);
  auto got = queue.Get("job-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(got->reason(), "cannot write best.tsckpt: no space");
  auto listed = queue.List(pb::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 2);
  EXPECT_EQ(listed->jobs(1).id(), "job-1");
  EXPECT_EQ(listed->jobs(1).state(), pb::JOB_STATE_FAILED);
  pb::ListJobsRequest running;
  running.set_state(pb::JOB_STATE_RUNNING);
  EXPECT_EQ(queue.List(running)->jobs_size(), 0);
  std::vector<pb::JobEvent> late;
  auto late_handle = queue.Watch("job-1", [&](const pb::JobEvent& e) { late.push_back(e); });
  ASSERT_TRUE(late_handle.ok());
  EXPECT_EQ(*late_handle, 0);  // final: the snapshot is the whole watch
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].job().state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(queue.Cancel("job-1").status().code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status deletable = queue.CheckDeletable("job-1");
  EXPECT_EQ(deletable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(deletable.message()),
              HasSubstr("the job store has not taken its final state yet"));

  // The next snapshot the store takes (job-2 starting) is followed by the kept final state.
  auto next = queue.Next();
  queue.SetState(*next, pb::JOB_STATE_RUNNING, "");
  EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(env_.jobs().GetJob("job-1")->reason(), "cannot write best.tsckpt: no space");
  EXPECT_TRUE(
      env_.Logged("job job-1: its final state (failed) is written to the job store now, "
                  "after 2 attempts"));
  EXPECT_EQ(env_.Sample("taylorshift_job_final_states_unwritten"), 0);
  EXPECT_TRUE(queue.CheckDeletable("job-1").ok());
}

// The store's state column lags the job where a write failed; a state filter (and its page
// tokens) must still list each job as Get answers it.
TEST_F(JobQueueTest, AStateFilterListsJobsAsGetAnswersThemWhereTheStoreLags) {
  JobQueue queue(JobQueueOptions{10, 0}, &env_.jobs(), env_.context());
  for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(queue.Enqueue(TrainingJob(name)).ok());
  auto first = queue.Next();   // job-1: FAILED, the store refuses it (it keeps RUNNING)
  auto second = queue.Next();  // job-2: FAILED, written
  auto third = queue.Next();   // job-3: RUNNING, the store refuses it (it keeps QUEUED)
  queue.SetState(*first, pb::JOB_STATE_RUNNING, "");
  queue.SetState(*second, pb::JOB_STATE_RUNNING, "");
  queue.SetState(*second, pb::JOB_STATE_FAILED, "written");
  queue.Release(*second);
  {
    const ts::testing::FileWritesFail full;
    queue.SetState(*first, pb::JOB_STATE_FAILED, "kept in memory");
    queue.SetState(*third, pb::JOB_STATE_RUNNING, "");
  }
  queue.Release(*first);
  ASSERT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_RUNNING);
  ASSERT_EQ(env_.jobs().GetJob("job-3")->state(), pb::JOB_STATE_QUEUED);

  // Every page of one job, following the tokens: the ids listed.
  const auto list = [&](pb::JobState state) {
    std::vector<std::string> ids;
    pb::ListJobsRequest request;
    request.set_state(state);
    request.set_page_size(1);
    for (int pages = 0; pages < 10; ++pages) {
      auto page = queue.List(request);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      for (const pb::Job& job : page->jobs()) {
        EXPECT_EQ(job.state(), state) << job.id();
        EXPECT_EQ(queue.Get(job.id())->state(), job.state()) << job.id();
        ids.push_back(job.id());
      }
      if (page->next_page_token().empty()) break;
      request.set_page_token(page->next_page_token());
    }
    return ids;
  };
  EXPECT_THAT(list(pb::JOB_STATE_FAILED), ::testing::ElementsAre("job-2", "job-1"));
  EXPECT_THAT(list(pb::JOB_STATE_RUNNING), ::testing::ElementsAre("job-3"));
  EXPECT_THAT(list(pb::JOB_STATE_QUEUED), ::testing::ElementsAre("job-4"));
  auto all = queue.List(pb::ListJobsRequest());
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->jobs_size(), 4);
  EXPECT_EQ(all->jobs(1).state(), pb::JOB_STATE_RUNNING);  // job-3
  EXPECT_EQ(all->jobs(3).state(), pb::JOB_STATE_FAILED);   // job-1
  EXPECT_TRUE(all->next_page_token().empty());
}

TEST_F(JobQueueTest, AFinalStateTheStoreRefusesIsWrittenAgainOnTheRetryTimer) {
  JobQueueOptions options;
  options.final_state_retry_interval = absl::Seconds(5);
  JobQueue queue(options, &env_.jobs(), env_.context());
  ASSERT_TRUE(queue.Enqueue(TrainingJob("a")).ok());
  auto active = queue.Next();
  queue.SetState(*active, pb::JOB_STATE_RUNNING, "");
  std::thread retries([&] { queue.RunFinalStateRetries(); });
  const absl::Time first = env_.clock().Now() + absl::Seconds(5);
  ASSERT_TRUE(env_.clock().BlockUntilWaiting(first));
  {
    const ts::testing::FileWritesFail full;
    queue.SetState(*active, pb::JOB_STATE_SUCCEEDED, "");
    queue.Release(*active);
    // A retry while the disk is still full changes nothing.
    env_.clock().Advance(absl::Seconds(5));
    ASSERT_TRUE(env_.clock().BlockUntilWaiting(first + absl::Seconds(5)));
    EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_RUNNING);
    EXPECT_EQ(env_.Sample("taylorshift_job_final_states_unwritten"), 1);
  }
  EXPECT_EQ(env_.StoreErrors("update_job"), 1);  // retries are not counted again
  EXPECT_EQ(queue.Get("job-1")->state(), pb::JOB_STATE_SUCCEEDED);
  // No other write comes: the timer's next try writes it.
  env_.clock().Advance(absl::Seconds(5));
  ASSERT_TRUE(env_.clock().BlockUntilWaiting(first + absl::Seconds(10)));
  EXPECT_EQ(env_.jobs().GetJob("job-1")->state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(env_.Sample("taylorshift_job_final_states_unwritten"), 0);
  EXPECT_TRUE(env_.Logged("after 3 attempts"));
  queue.Stop();
  retries.join();
}

}  // namespace
}  // namespace ts::server

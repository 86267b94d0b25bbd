#include "server/serving/length_bucket_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/testing/fake_clock.h"

namespace ts::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Guards against a hung test only; a passing test never waits this long.
constexpr absl::Duration kGuard = absl::Seconds(10);

// What the runner writes into each task's payload.
struct Payload {
  int id = 0;
  int result = -1;
};

using Batcher = LengthBucketBatcher<Payload>;
using Task = BatchTask<Payload>;

int ResultFor(int id) { return 2 * id + 1; }

struct RanBatch {
  std::int64_t padded_tokens = 0;
  int path = 0;
  std::vector<int> ids;
  absl::Time started;
};

struct Done {
  absl::Status status;
  int result = -1;  // the payload's result when `done` ran
};

// Plays the model: records every batch the runner gets and every `done` call, computes each
// payload, and can hold the runner (the gate) to keep the batch thread busy.
class Recorder {
 public:
  Batcher::BatchRunner Runner() {
    return [this](Batch<Payload>& batch) { return Run(batch); };
  }

  Batcher::Observer Observer() {
    Batcher::Observer observer;
    observer.on_batch_start = [this](const Batch<Payload>& batch) {
      absl::MutexLock lock(&mu_);
      batch_starts_.push_back(static_cast<int>(batch.tasks.size()));
    };
    observer.on_dropped = [this](absl::StatusCode code) {
      absl::MutexLock lock(&mu_);
      dropped_.push_back(code);
    };
    observer.on_queue_depth = [this](std::int64_t depth) {
      absl::MutexLock lock(&mu_);
      depths_.push_back(depth);
    };
    return observer;
  }

  std::unique_ptr<Task> NewTask(int id, std::int64_t tokens, int path = 0) {
    auto task = std::make_unique<Task>();
    task->tokens = tokens;
    task->path = path;
    task->payload.id = id;
    task->done = [this](absl::Status status, Payload& payload) {
      absl::MutexLock lock(&mu_);
      done_[payload.id].push_back(Done{std::move(status), payload.result});
      ++done_calls_;
    };
    return task;
  }

  void set_result(absl::Status result) {
    absl::MutexLock lock(&mu_);
    result_ = std::move(result);
  }
  void CloseGate() {
    absl::MutexLock lock(&mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    absl::MutexLock lock(&mu_);
    gate_open_ = true;
  }

  bool AwaitBatches(std::size_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kGuard);
  }
  bool AwaitDoneCalls(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kGuard);
  }

  std::vector<RanBatch> batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<std::vector<int>> batch_ids() {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<int>> ids;
    for (const RanBatch& batch : batches_) ids.push_back(batch.ids);
    return ids;
  }
  int done_calls() {
    absl::MutexLock lock(&mu_);
    return done_calls_;
  }
  // How often `done` ran for `id`.
  int DoneCount(int id) {
    absl::MutexLock lock(&mu_);
    auto it = done_.find(id);
    return it == done_.end() ? 0 : static_cast<int>(it->second.size());
  }
  // The status `id` was finished with (UNKNOWN if never).
  absl::Status StatusOf(int id) {
    absl::MutexLock lock(&mu_);
    auto it = done_.find(id);
    if (it == done_.end() || it->second.empty()) return absl::UnknownError("not done");
    return it->second.front().status;
  }
  int ResultOf(int id) {
    absl::MutexLock lock(&mu_);
    auto it = done_.find(id);
    return it == done_.end() || it->second.empty() ? -1 : it->second.front().result;
  }
  std::vector<int> batch_starts() {
    absl::MutexLock lock(&mu_);
    return batch_starts_;
  }
  std::vector<absl::StatusCode> dropped() {
    absl::MutexLock lock(&mu_);
    return dropped_;
  }
  std::vector<std::int64_t> depths() {
    absl::MutexLock lock(&mu_);
    return depths_;
  }

 private:
  absl::Status Run(Batch<Payload>& batch) {
    absl::MutexLock lock(&mu_);
    RanBatch ran{batch.padded_tokens, batch.path, {}, batch.started};
    for (const auto& task : batch.tasks) {
      ran.ids.push_back(task->payload.id);
      task->payload.result = ResultFor(task->payload.id);
    }
    batches_.push_back(std::move(ran));
    mu_.AwaitWithTimeout(absl::Condition(&gate_open_), kGuard);
    return result_;
  }

  absl::Mutex mu_;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool gate_open_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<RanBatch> batches_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<Done>> done_ ABSL_GUARDED_BY(mu_);
  int done_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> batch_starts_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::StatusCode> dropped_ ABSL_GUARDED_BY(mu_);
  std::vector<std::int64_t> depths_ ABSL_GUARDED_BY(mu_);
};

class LengthBucketBatcherTest : public ::testing::Test {
 protected:
  static LengthBucketBatcherOptions SmallOptions() {
    LengthBucketBatcherOptions options;
    options.model_name = "imdb";
    options.bucket_boundaries = {64, 128};
    options.max_batch_tokens = 1024;
    options.max_batch_size = 8;
    options.max_queue_delay = absl::Milliseconds(5);
    options.max_queue_size = 64;
    options.batch_threads = 1;
    return options;
  }
  // SmallOptions() where a bucket waits for max_queue_delay or a full budget even on an idle
  // batcher, for the tests of that closing logic.
  static LengthBucketBatcherOptions WaitingOptions() {
    LengthBucketBatcherOptions options = SmallOptions();
    options.start_when_idle = false;
    return options;
  }

  std::unique_ptr<Batcher> Make(const LengthBucketBatcherOptions& options) {
    auto batcher = Batcher::Create(options, recorder_.Runner(), &clock_, recorder_.Observer());
    EXPECT_TRUE(batcher.ok()) << batcher.status();
    return batcher.ok() ? std::move(*batcher) : nullptr;
  }

  absl::Status Schedule(Batcher& batcher, int id, std::int64_t tokens, int path = 0) {
    std::unique_ptr<Task> task = recorder_.NewTask(id, tokens, path);
    return batcher.Schedule(task);
  }

  // Drain() that must return without the fake clock moving. If it does not (a bug), the test
  // fails and the clock is moved past `timeout` so that it fails instead of hanging.
  void DrainWithoutTimeout(Batcher& batcher, absl::Duration timeout) {
    absl::Notification drained;
    std::thread drainer([&] {
      batcher.Drain(timeout);
      drained.Notify();
    });
    if (!drained.WaitForNotificationWithTimeout(kGuard)) {
      ADD_FAILURE() << "Drain() waited for its timeout";
      clock_.Advance(timeout);
    }
    drainer.join();
  }

  // Every id in [0, n) was finished exactly once.
  void ExpectEachDoneOnce(int n) {
    for (int id = 0; id < n; ++id) EXPECT_EQ(recorder_.DoneCount(id), 1) << "id " << id;
  }

  // Declared before any batcher a test makes, so they outlive its threads.
  testing::FakeClock clock_;
  Recorder recorder_;
  const absl::Time t0_ = clock_.Now();
};

TEST_F(LengthBucketBatcherTest, FullTokenBudgetClosesBatchWithoutWaiting) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_tokens = 256;  // two tasks padded to 128
  options.max_queue_delay = absl::Hours(1);
  auto batcher = Make(options);
  for (int id = 0; id < 5; ++id) ASSERT_TRUE(Schedule(*batcher, id, 100).ok());

  ASSERT_TRUE(recorder_.AwaitBatches(2));
  ASSERT_TRUE(recorder_.AwaitDoneCalls(4));
  const std::vector<RanBatch> batches = recorder_.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(batches[0].ids, ElementsAre(0, 1));
  EXPECT_THAT(batches[1].ids, ElementsAre(2, 3));
  for (const RanBatch& batch : batches) {
    EXPECT_EQ(batch.padded_tokens, 128);
    EXPECT_EQ(batch.started, t0_);  // the fake clock never moved
  }
  EXPECT_EQ(batcher->queued(), 1);
  for (int id = 0; id < 4; ++id) {
    EXPECT_TRUE(recorder_.StatusOf(id).ok()) << recorder_.StatusOf(id);
    EXPECT_EQ(recorder_.ResultOf(id), ResultFor(id));
  }

  batcher.reset();  // the fifth task never filled a batch nor waited long enough
  EXPECT_EQ(recorder_.StatusOf(4).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(recorder_.batches().size(), 2u);
  ExpectEachDoneOnce(5);
}

TEST_F(LengthBucketBatcherTest, MaxBatchSizeClosesBatch) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_size = 3;
  options.max_queue_delay = absl::Hours(1);
  auto batcher = Make(options);
  for (int id = 0; id < 7; ++id) ASSERT_TRUE(Schedule(*batcher, id, 10).ok());

  ASSERT_TRUE(recorder_.AwaitBatches(2));
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4, 5)));
  EXPECT_EQ(recorder_.batches()[0].padded_tokens, 64);
  EXPECT_EQ(batcher->queued(), 1);
}

TEST_F(LengthBucketBatcherTest, DelayClosesPartialBatchOnlyOnceMaxQueueDelayPassed) {
  auto batcher = Make(WaitingOptions());  // max_queue_delay 5 ms, room for 8 tasks
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());

  // The batch thread saw the task and waits for its delay to expire instead of running it.
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Milliseconds(5)));
  EXPECT_TRUE(recorder_.batches().empty());

  clock_.Advance(absl::Milliseconds(5) - absl::Microseconds(1));
  ASSERT_TRUE(Schedule(*batcher, 1, 20).ok());  // joins the batch; does not restart the delay
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Milliseconds(5)));
  EXPECT_TRUE(recorder_.batches().empty());
  EXPECT_EQ(batcher->queued(), 2);

  clock_.Advance(absl::Microseconds(1));
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  const RanBatch batch = recorder_.batches()[0];
  EXPECT_THAT(batch.ids, ElementsAre(0, 1));
  EXPECT_EQ(batch.started, t0_ + absl::Milliseconds(5));
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  ExpectEachDoneOnce(2);
}

TEST_F(LengthBucketBatcherTest, IdleBatcherStartsALoneTaskAtOnce) {
  auto batcher = Make(SmallOptions());  // start_when_idle, max_queue_delay 5 ms, room for 8
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());

  // The fake clock never moves: the task waits neither for max_queue_delay nor for company.
  ASSERT_TRUE(recorder_.AwaitDoneCalls(1));
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0)));
  EXPECT_EQ(recorder_.batches()[0].started, t0_);
  EXPECT_TRUE(recorder_.StatusOf(0).ok()) << recorder_.StatusOf(0);
  EXPECT_EQ(recorder_.ResultOf(0), ResultFor(0));

  // The thread is free again afterwards, so the next lone task starts at once too.
  ASSERT_TRUE(Schedule(*batcher, 1, 100).ok());
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0), ElementsAre(1)));
  EXPECT_EQ(recorder_.batches()[1].started, t0_);
  EXPECT_EQ(batcher->queued(), 0);
  ExpectEachDoneOnce(2);
}

TEST_F(LengthBucketBatcherTest, TasksQueuedWhileTheOnlyThreadIsBusyRunTogetherWhenItIsFree) {
  auto batcher = Make(SmallOptions());  // one batch thread, room for 8 tasks of ≤ 64 tokens
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(recorder_.AwaitBatches(1));  // the only batch thread is now busy
  for (int id = 1; id < 6; ++id) ASSERT_TRUE(Schedule(*batcher, id, 10 + id).ok());
  EXPECT_EQ(batcher->queued(), 5);  // no thread is free to take them
  EXPECT_EQ(recorder_.batches().size(), 1u);

  recorder_.OpenGate();
  ASSERT_TRUE(recorder_.AwaitDoneCalls(6));
  // The freed thread took everything that accumulated as one batch, without the clock moving.
  const std::vector<RanBatch> batches = recorder_.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(batches[0].ids, ElementsAre(0));
  EXPECT_THAT(batches[1].ids, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(batches[1].started, t0_);
  EXPECT_THAT(recorder_.batch_starts(), ElementsAre(1, 5));
  EXPECT_EQ(batcher->queued(), 0);
  ExpectEachDoneOnce(6);
}

TEST_F(LengthBucketBatcherTest, FreedThreadTakesTheOldestBucketFirstAndAtMostItsCapacity) {
  auto batcher = Make(SmallOptions());  // room for 8 tasks per batch in both buckets
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  ASSERT_TRUE(Schedule(*batcher, 1, 100).ok());  // the oldest waiting task, alone in its bucket
  for (int id = 2; id < 12; ++id) {
    ASSERT_TRUE(Schedule(*batcher, id, 10).ok());  // a full batch of short ones and two more
  }

  recorder_.OpenGate();
  ASSERT_TRUE(recorder_.AwaitDoneCalls(12));
  // The lone long document goes before the full batch of newer short ones.
  EXPECT_THAT(recorder_.batch_ids(),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2, 3, 4, 5, 6, 7, 8, 9),
                          ElementsAre(10, 11)));
  for (const RanBatch& batch : recorder_.batches()) EXPECT_EQ(batch.started, t0_);
  ExpectEachDoneOnce(12);
}

TEST_F(LengthBucketBatcherTest, WhileABatchRunsANewTaskWaitsForMaxQueueDelayOnTheFreeThread) {
  LengthBucketBatcherOptions options = SmallOptions();  // start_when_idle
  options.batch_threads = 2;
  auto batcher = Make(options);
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(recorder_.AwaitBatches(1));  // idle model: at once
  EXPECT_EQ(recorder_.batches()[0].started, t0_);

  // The model is busy: the second thread is free but waits for company until the delay.
  ASSERT_TRUE(Schedule(*batcher, 1, 10).ok());
  ASSERT_TRUE(Schedule(*batcher, 2, 10).ok());
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Milliseconds(5)));
  EXPECT_EQ(recorder_.batches().size(), 1u);
  EXPECT_EQ(batcher->queued(), 2);
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(recorder_.AwaitBatches(2));
  EXPECT_THAT(recorder_.batches()[1].ids, ElementsAre(1, 2));
  EXPECT_EQ(recorder_.batches()[1].started, t0_ + absl::Milliseconds(5));

  // Both busy: a third batch waits for a thread; the first thread free after the model went
  // idle takes it at once, without the delay.
  ASSERT_TRUE(Schedule(*batcher, 3, 10).ok());
  EXPECT_EQ(batcher->queued(), 1);
  recorder_.OpenGate();
  ASSERT_TRUE(recorder_.AwaitDoneCalls(4));
  const std::vector<RanBatch> batches = recorder_.batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_THAT(batches[2].ids, ElementsAre(3));
  EXPECT_EQ(batches[2].started, t0_ + absl::Milliseconds(5));
  ExpectEachDoneOnce(4);
}

TEST_F(LengthBucketBatcherTest, WithoutStartWhenIdleAFreeThreadStillWaitsForMaxQueueDelay) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.batch_threads = 2;
  auto batcher = Make(options);
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 2000).ok());  // over the whole budget: runs at once, alone
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  ASSERT_TRUE(Schedule(*batcher, 1, 10).ok());

  // The second thread is free but waits for the task's delay instead of running it.
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Milliseconds(5)));
  EXPECT_EQ(recorder_.batches().size(), 1u);
  clock_.Advance(absl::Milliseconds(5) - absl::Microseconds(1));
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Milliseconds(5)));
  EXPECT_EQ(recorder_.batches().size(), 1u);
  EXPECT_EQ(batcher->queued(), 1);

  clock_.Advance(absl::Microseconds(1));
  ASSERT_TRUE(recorder_.AwaitBatches(2));
  const RanBatch batch = recorder_.batches()[1];
  EXPECT_THAT(batch.ids, ElementsAre(1));
  EXPECT_EQ(batch.started, t0_ + absl::Milliseconds(5));
  recorder_.OpenGate();
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  ExpectEachDoneOnce(2);
}

TEST_F(LengthBucketBatcherTest, OldestReadyBatchRunsFirstSoLongDocumentsAreNotStarved) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.bucket_boundaries = {16, 128, 256};
  options.max_batch_tokens = 256;  // 16 short tasks (padded 16) or 2 long ones (padded 128)
  options.max_batch_size = 16;
  auto batcher = Make(options);

  // Keep the only batch thread busy while the queue builds up.
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 200).ok());  // fills a batch alone
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  ASSERT_TRUE(Schedule(*batcher, 1, 100).ok());  // a long document: its batch is not full
  for (int id = 2; id < 34; ++id) {
    ASSERT_TRUE(Schedule(*batcher, id, 10).ok());  // two full batches of short ones
  }
  clock_.Advance(absl::Milliseconds(5));  // the long document's batch is ready by delay
  recorder_.OpenGate();

  ASSERT_TRUE(recorder_.AwaitBatches(4));
  const std::vector<RanBatch> batches = recorder_.batches();
  EXPECT_THAT(batches[0].ids, ElementsAre(0));
  EXPECT_THAT(batches[1].ids, ElementsAre(1));
  EXPECT_EQ(batches[1].padded_tokens, 128);
  ASSERT_EQ(batches[2].ids.size(), 16u);
  EXPECT_EQ(batches[2].ids.front(), 2);
  EXPECT_EQ(batches[2].ids.back(), 17);
  EXPECT_EQ(batches[3].ids.front(), 18);
  EXPECT_EQ(batches[3].ids.back(), 33);
  ASSERT_TRUE(recorder_.AwaitDoneCalls(34));
  ExpectEachDoneOnce(34);
}

TEST_F(LengthBucketBatcherTest, DifferentPathsNeverShareABatch) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_size = 2;
  auto batcher = Make(options);
  for (int id = 0; id < 4; ++id) ASSERT_TRUE(Schedule(*batcher, id, 10, /*path=*/id % 2).ok());

  ASSERT_TRUE(recorder_.AwaitBatches(2));
  const std::vector<RanBatch> batches = recorder_.batches();
  EXPECT_EQ(batches[0].path, 0);
  EXPECT_THAT(batches[0].ids, ElementsAre(0, 2));
  EXPECT_EQ(batches[1].path, 1);
  EXPECT_THAT(batches[1].ids, ElementsAre(1, 3));
}

TEST_F(LengthBucketBatcherTest, TasksLongerThanTheLastBoundaryGetTheirOwnLength) {
  auto batcher = Make(WaitingOptions());  // boundaries {64, 128}, budget 1024 tokens
  EXPECT_EQ(batcher->BucketFor(1), 64);
  EXPECT_EQ(batcher->BucketFor(64), 64);
  EXPECT_EQ(batcher->BucketFor(65), 128);
  EXPECT_EQ(batcher->BucketFor(128), 128);
  EXPECT_EQ(batcher->BucketFor(129), 129);
  EXPECT_EQ(batcher->BucketFor(5000), 5000);

  ASSERT_TRUE(Schedule(*batcher, 0, 300).ok());
  ASSERT_TRUE(Schedule(*batcher, 1, 301).ok());
  ASSERT_TRUE(Schedule(*batcher, 2, 300).ok());
  ASSERT_TRUE(Schedule(*batcher, 3, 2000).ok());  // over the whole budget: runs, alone, at once
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  EXPECT_EQ(recorder_.batches()[0].padded_tokens, 2000);
  EXPECT_THAT(recorder_.batches()[0].ids, ElementsAre(3));

  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(recorder_.AwaitBatches(3));
  const std::vector<RanBatch> batches = recorder_.batches();
  EXPECT_EQ(batches[1].padded_tokens, 300);
  EXPECT_THAT(batches[1].ids, ElementsAre(0, 2));
  EXPECT_EQ(batches[2].padded_tokens, 301);
  EXPECT_THAT(batches[2].ids, ElementsAre(1));
}

TEST_F(LengthBucketBatcherTest, ExpiredDeadlineFinishesWithDeadlineExceededWithoutRunning) {
  auto batcher = Make(WaitingOptions());
  std::unique_ptr<Task> soon = recorder_.NewTask(0, 10);
  soon->deadline = t0_ + absl::Milliseconds(2);  // passes while the batch waits
  ASSERT_TRUE(batcher->Schedule(soon).ok());
  std::unique_ptr<Task> later = recorder_.NewTask(1, 10);
  later->deadline = t0_ + absl::Seconds(1);
  ASSERT_TRUE(batcher->Schedule(later).ok());

  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  EXPECT_EQ(recorder_.StatusOf(0).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(recorder_.ResultOf(0), -1);  // not computed
  EXPECT_TRUE(recorder_.StatusOf(1).ok());
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(1)));
  EXPECT_THAT(recorder_.dropped(), ElementsAre(absl::StatusCode::kDeadlineExceeded));

  // A batch whose every task expired is not run at all.
  for (int id = 2; id < 4; ++id) {
    std::unique_ptr<Task> task = recorder_.NewTask(id, 10);
    task->deadline = clock_.Now();
    ASSERT_TRUE(batcher->Schedule(task).ok());
  }
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(recorder_.AwaitDoneCalls(4));
  EXPECT_EQ(recorder_.StatusOf(2).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(recorder_.StatusOf(3).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(recorder_.batches().size(), 1u);
  EXPECT_THAT(recorder_.batch_starts(), ElementsAre(1));
  ExpectEachDoneOnce(4);
}

TEST_F(LengthBucketBatcherTest, CancelledTaskFinishesWithCancelledWithoutRunning) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_size = 3;
  auto batcher = Make(options);
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<Task> task = recorder_.NewTask(0, 10);
  task->cancelled = [cancelled] { return cancelled->load(); };
  ASSERT_TRUE(batcher->Schedule(task).ok());
  cancelled->store(true);  // the client gives up while its task waits
  std::unique_ptr<Task> kept = recorder_.NewTask(1, 10);
  kept->cancelled = [] { return false; };
  ASSERT_TRUE(batcher->Schedule(kept).ok());
  ASSERT_TRUE(Schedule(*batcher, 2, 10).ok());  // no cancellation callback; fills the batch

  ASSERT_TRUE(recorder_.AwaitDoneCalls(3));
  EXPECT_EQ(recorder_.StatusOf(0).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(recorder_.ResultOf(0), -1);
  EXPECT_TRUE(recorder_.StatusOf(1).ok());
  EXPECT_TRUE(recorder_.StatusOf(2).ok());
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(1, 2)));
  EXPECT_THAT(recorder_.dropped(), ElementsAre(absl::StatusCode::kCancelled));
  ExpectEachDoneOnce(3);
}

TEST_F(LengthBucketBatcherTest, FullQueueIsResourceExhaustedAndTaskStaysWithCaller) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_queue_size = 2;
  auto batcher = Make(options);
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(Schedule(*batcher, 1, 100).ok());

  std::unique_ptr<Task> task = recorder_.NewTask(2, 10);
  const absl::Status status = batcher->Schedule(task);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("model 'imdb'"));
  EXPECT_THAT(status.message(), HasSubstr("max_queue_size=2"));
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(batcher->queued(), 2);
  EXPECT_THAT(recorder_.depths(), ElementsAre(1, 2));

  clock_.Advance(absl::Milliseconds(5));  // both buckets run, which frees the queue
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  EXPECT_EQ(recorder_.DoneCount(2), 0);
  EXPECT_TRUE(batcher->Schedule(task).ok());
  EXPECT_EQ(task, nullptr);
  EXPECT_EQ(recorder_.depths().back(), 1);
}

TEST_F(LengthBucketBatcherTest, RunnerErrorFailsEveryTaskOfTheBatch) {
  LengthBucketBatcherOptions options = SmallOptions();
  options.max_batch_size = 3;
  auto batcher = Make(options);
  recorder_.set_result(absl::InternalError("out of device memory"));
  for (int id = 0; id < 3; ++id) ASSERT_TRUE(Schedule(*batcher, id, 10).ok());

  ASSERT_TRUE(recorder_.AwaitDoneCalls(3));
  for (int id = 0; id < 3; ++id) {
    EXPECT_EQ(recorder_.StatusOf(id), absl::InternalError("out of device memory"));
  }
  ExpectEachDoneOnce(3);
}

TEST_F(LengthBucketBatcherTest, DrainRunsEverythingQueuedThenRejects) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_queue_delay = absl::Hours(1);
  auto batcher = Make(options);
  const std::vector<std::pair<std::int64_t, int>> tasks = {{10, 0},  {100, 0}, {10, 1},
                                                           {500, 0}, {20, 0},  {90, 1}};
  for (int id = 0; id < static_cast<int>(tasks.size()); ++id) {
    ASSERT_TRUE(Schedule(*batcher, id, tasks[id].first, tasks[id].second).ok());
  }
  EXPECT_TRUE(recorder_.batches().empty());

  DrainWithoutTimeout(*batcher, absl::Seconds(1));
  EXPECT_EQ(recorder_.done_calls(), 6);
  for (int id = 0; id < 6; ++id) {
    EXPECT_TRUE(recorder_.StatusOf(id).ok()) << id << ": " << recorder_.StatusOf(id);
    EXPECT_EQ(recorder_.ResultOf(id), ResultFor(id));
  }
  // Oldest first; arrival order within each batch.
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0, 4), ElementsAre(1), ElementsAre(2),
                                                 ElementsAre(3), ElementsAre(5)));
  EXPECT_EQ(batcher->queued(), 0);

  std::unique_ptr<Task> task = recorder_.NewTask(6, 10);
  EXPECT_EQ(batcher->Schedule(task).code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(task, nullptr);
  batcher->Drain(absl::Seconds(1));  // idempotent
  batcher.reset();
  ExpectEachDoneOnce(6);
  EXPECT_EQ(recorder_.DoneCount(6), 0);
}

TEST_F(LengthBucketBatcherTest, DrainTimeoutFinishesStillQueuedTasksWithUnavailable) {
  LengthBucketBatcherOptions options = SmallOptions();
  options.max_batch_size = 1;
  auto batcher = Make(options);
  recorder_.CloseGate();
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(recorder_.AwaitBatches(1));       // the only batch thread is now busy
  ASSERT_TRUE(Schedule(*batcher, 1, 10).ok());  // ready, but nobody can take it

  std::thread drainer([&batcher] { batcher->Drain(absl::Seconds(1)); });
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Seconds(1)));
  EXPECT_EQ(recorder_.done_calls(), 0);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(recorder_.AwaitDoneCalls(1));
  EXPECT_EQ(recorder_.StatusOf(1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(recorder_.DoneCount(0), 0);  // still running: Drain waits for it before returning

  recorder_.OpenGate();
  drainer.join();
  EXPECT_TRUE(recorder_.StatusOf(0).ok());
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0)));
  ExpectEachDoneOnce(2);
}

TEST_F(LengthBucketBatcherTest, ShutdownFinishesQueuedTasksWithUnavailable) {
  auto batcher = Make(WaitingOptions());
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());
  ASSERT_TRUE(Schedule(*batcher, 1, 100).ok());
  batcher->Shutdown();
  EXPECT_EQ(recorder_.StatusOf(0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(recorder_.StatusOf(1).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(recorder_.batches().empty());
  EXPECT_EQ(recorder_.depths().back(), 0);
  EXPECT_EQ(Schedule(*batcher, 2, 10).code(), absl::StatusCode::kUnavailable);
  batcher.reset();
  ExpectEachDoneOnce(2);
}

TEST_F(LengthBucketBatcherTest, ConcurrentProducersAndBatchThreadsFinishEachTaskOnce) {
  LengthBucketBatcherOptions options = SmallOptions();
  options.batch_threads = 3;
  options.max_queue_size = 1024;
  auto batcher = Make(options);
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 50;
  std::vector<std::thread> producers;
  producers.reserve(kProducers);
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        const int id = p * kPerProducer + i;
        EXPECT_TRUE(Schedule(*batcher, id, 1 + (id * 37) % 200, id % 2).ok());
      }
    });
  }
  for (std::thread& producer : producers) producer.join();
  DrainWithoutTimeout(*batcher, absl::Seconds(1));

  ExpectEachDoneOnce(kProducers * kPerProducer);
  std::set<int> seen;
  for (const RanBatch& batch : recorder_.batches()) {
    EXPECT_LE(static_cast<std::int64_t>(batch.ids.size()),
              std::max<std::int64_t>(1, std::min<std::int64_t>(8, 1024 / batch.padded_tokens)));
    std::map<int, int> last_of_producer;
    for (int id : batch.ids) {
      EXPECT_TRUE(seen.insert(id).second) << "id " << id << " ran twice";
      EXPECT_EQ(batcher->BucketFor(1 + (id * 37) % 200), batch.padded_tokens);
      EXPECT_EQ(id % 2, batch.path);
      // Arrival order within the batch: each producer's tasks keep their order.
      auto [it, inserted] = last_of_producer.emplace(id / kPerProducer, id);
      if (!inserted) {
        EXPECT_LT(it->second, id);
        it->second = id;
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kProducers * kPerProducer));
}

TEST_F(LengthBucketBatcherTest, RejectsTaskWithoutTokensAndKeepsIt) {
  auto batcher = Make(SmallOptions());
  for (std::int64_t tokens : {0, -3}) {
    std::unique_ptr<Task> task = recorder_.NewTask(0, tokens);
    const absl::Status status = batcher->Schedule(task);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("tokens"));
    EXPECT_NE(task, nullptr);
  }
  EXPECT_EQ(batcher->queued(), 0);
  batcher.reset();
  EXPECT_EQ(recorder_.done_calls(), 0);
}

TEST_F(LengthBucketBatcherTest, CreateRejectsInvalidOptionsNamingTheField) {
  struct Case {
    const char* field;
    void (*breaks)(LengthBucketBatcherOptions&);
  };
  const Case cases[] = {
      {"bucket_boundaries",
       [](LengthBucketBatcherOptions& o) {
         o.bucket_boundaries = {64, 32};
       }},
      {"bucket_boundaries",
       [](LengthBucketBatcherOptions& o) {
         o.bucket_boundaries = {64, 64};
       }},
      {"bucket_boundaries",
       [](LengthBucketBatcherOptions& o) {
         o.bucket_boundaries = {0, 64};
       }},
      {"max_batch_tokens", [](LengthBucketBatcherOptions& o) { o.max_batch_tokens = 0; }},
      {"max_batch_size", [](LengthBucketBatcherOptions& o) { o.max_batch_size = 0; }},
      {"max_queue_delay",
       [](LengthBucketBatcherOptions& o) { o.max_queue_delay = -absl::Milliseconds(1); }},
      {"max_queue_size", [](LengthBucketBatcherOptions& o) { o.max_queue_size = 0; }},
      {"batch_threads", [](LengthBucketBatcherOptions& o) { o.batch_threads = 0; }},
      {"max_batch_cost", [](LengthBucketBatcherOptions& o) { o.max_batch_cost = -1; }},
  };
  for (const Case& c : cases) {
    LengthBucketBatcherOptions options = SmallOptions();
    c.breaks(options);
    auto batcher = Batcher::Create(options, recorder_.Runner(), &clock_);
    EXPECT_EQ(batcher.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(batcher.status().message(), HasSubstr(c.field));
  }
  EXPECT_EQ(Batcher::Create(SmallOptions(), nullptr, &clock_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Batcher::Create(SmallOptions(), recorder_.Runner(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Plays a model of `layers` layers whose forward asks Batch::stop before each one, as the encoder
// asks its StopCheck between blocks. The test lets it through one layer at a time (Allow), so
// what the clock and the callers do between two layers is deterministic.
class LayeredRunner {
 public:
  explicit LayeredRunner(int layers) : layers_(layers) {}

  Batcher::BatchRunner Runner() {
    return [this](Batch<Payload>& batch) { return Run(batch); };
  }
  void Allow(int layers) {
    absl::MutexLock lock(&mu_);
    allowed_ += layers;
  }
  bool AwaitLayersRun(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return layers_run_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kGuard);
  }
  int layers_run() {
    absl::MutexLock lock(&mu_);
    return layers_run_;
  }

 private:
  absl::Status Run(Batch<Payload>& batch) {
    for (int layer = 0; layer < layers_; ++layer) {
      {
        absl::MutexLock lock(&mu_);
        auto allowed = [this]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return allowed_ > layers_run_; };
        if (!mu_.AwaitWithTimeout(absl::Condition(&allowed), kGuard)) {
          return absl::InternalError("the test never allowed the next layer");
        }
      }
      if (absl::Status stop = batch.stop(); !stop.ok()) return stop;
      absl::MutexLock lock(&mu_);
      ++layers_run_;
    }
    for (const auto& task : batch.tasks) task->payload.result = ResultFor(task->payload.id);
    return absl::OkStatus();
  }

  const int layers_;
  absl::Mutex mu_;
  int allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int layers_run_ ABSL_GUARDED_BY(mu_) = 0;
};

class BatchStopTest : public LengthBucketBatcherTest {
 protected:
  std::unique_ptr<Batcher> MakeLayered(const LengthBucketBatcherOptions& options) {
    Batcher::Observer observer = recorder_.Observer();
    observer.on_stopped = [this](const Batch<Payload>& batch, absl::StatusCode code) {
      absl::MutexLock lock(&mu_);
      stopped_.emplace_back(static_cast<int>(batch.tasks.size()), code);
    };
    auto batcher = Batcher::Create(options, layered_.Runner(), &clock_, std::move(observer));
    EXPECT_TRUE(batcher.ok()) << batcher.status();
    return batcher.ok() ? std::move(*batcher) : nullptr;
  }
  std::vector<std::pair<int, absl::StatusCode>> stopped() {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }

  LayeredRunner layered_{8};
  absl::Mutex mu_;
  std::vector<std::pair<int, absl::StatusCode>> stopped_ ABSL_GUARDED_BY(mu_);
};

TEST_F(BatchStopTest, ABatchWhoseOnlyCallersDeadlinePassesStopsAtTheNextLayer) {
  auto batcher = MakeLayered(SmallOptions());
  std::unique_ptr<Task> task = recorder_.NewTask(0, 50);
  task->deadline = t0_ + absl::Seconds(5);
  ASSERT_TRUE(batcher->Schedule(task).ok());

  layered_.Allow(2);
  ASSERT_TRUE(layered_.AwaitLayersRun(2));  // within its deadline: two of eight layers ran
  clock_.Advance(absl::Seconds(6));         // the deadline passes during the third layer's wait
  layered_.Allow(6);
  ASSERT_TRUE(recorder_.AwaitDoneCalls(1));

  const absl::Status status = recorder_.StatusOf(0);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("deadline passed while the batch ran"));
  EXPECT_EQ(layered_.layers_run(), 2) << "the batch computed on after its caller's deadline";
  EXPECT_THAT(stopped(), ElementsAre(std::pair<int, absl::StatusCode>(
                             1, absl::StatusCode::kDeadlineExceeded)));
  EXPECT_TRUE(recorder_.dropped().empty()) << "the task was computed, not dropped before compute";

  // The thread is free again: the next request runs all its layers.
  ASSERT_TRUE(Schedule(*batcher, 1, 50).ok());
  layered_.Allow(8);
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));
  EXPECT_TRUE(recorder_.StatusOf(1).ok()) << recorder_.StatusOf(1);
  EXPECT_EQ(layered_.layers_run(), 10);
}

TEST_F(BatchStopTest, ABatchRunsWhileOneCallerWaitsAndStopsWhenTheLastCancels) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_size = 2;  // both tasks in one batch, closed at once
  auto batcher = MakeLayered(options);
  std::atomic<bool> cancelled[2] = {false, false};
  for (int id = 0; id < 2; ++id) {
    std::unique_ptr<Task> task = recorder_.NewTask(id, 50);
    task->cancelled = [&cancelled, id] { return cancelled[id].load(); };
    ASSERT_TRUE(batcher->Schedule(task).ok());
  }

  layered_.Allow(1);
  ASSERT_TRUE(layered_.AwaitLayersRun(1));
  cancelled[0] = true;  // one caller left; the other still waits
  layered_.Allow(2);
  ASSERT_TRUE(layered_.AwaitLayersRun(3));
  EXPECT_EQ(recorder_.done_calls(), 0);
  cancelled[1] = true;  // now nobody waits
  layered_.Allow(5);
  ASSERT_TRUE(recorder_.AwaitDoneCalls(2));

  EXPECT_EQ(layered_.layers_run(), 3);
  for (int id = 0; id < 2; ++id) {
    EXPECT_EQ(recorder_.StatusOf(id).code(), absl::StatusCode::kCancelled) << id;
    EXPECT_THAT(recorder_.StatusOf(id).message(), HasSubstr("the batch was stopped"));
  }
  EXPECT_THAT(stopped(),
              ElementsAre(std::pair<int, absl::StatusCode>(2, absl::StatusCode::kCancelled)));
}

TEST_F(BatchStopTest, DrainStopsARunningBatchWhenItsTimeIsUp) {
  LengthBucketBatcherOptions options = SmallOptions();
  options.max_batch_size = 1;
  auto batcher = MakeLayered(options);
  ASSERT_TRUE(Schedule(*batcher, 0, 10).ok());  // no deadline: only the drain can stop it
  layered_.Allow(1);
  ASSERT_TRUE(layered_.AwaitLayersRun(1));
  ASSERT_TRUE(Schedule(*batcher, 1, 10).ok());  // queued behind the running batch

  absl::Notification drained;
  std::thread drainer([&] {
    batcher->Drain(absl::Seconds(30));
    drained.Notify();
  });
  ASSERT_TRUE(clock_.BlockUntilWaiting(t0_ + absl::Seconds(30)));
  clock_.Advance(absl::Seconds(30));  // the grace is over
  ASSERT_TRUE(recorder_.AwaitDoneCalls(1));
  EXPECT_EQ(recorder_.StatusOf(1).code(), absl::StatusCode::kUnavailable);
  layered_.Allow(7);
  EXPECT_TRUE(drained.WaitForNotificationWithTimeout(kGuard))
      << "Drain waited for the running batch's remaining layers";
  drainer.join();

  EXPECT_EQ(layered_.layers_run(), 1);
  EXPECT_EQ(recorder_.StatusOf(0).code(), absl::StatusCode::kUnavailable) << recorder_.StatusOf(0);
  EXPECT_THAT(stopped(),
              ElementsAre(std::pair<int, absl::StatusCode>(1, absl::StatusCode::kUnavailable)));
  ExpectEachDoneOnce(2);
}

std::unique_ptr<Task> TaskOf(Recorder& recorder, int id, std::int64_t tokens, std::int64_t rows,
                             double cost = 0) {
  std::unique_ptr<Task> task = recorder.NewTask(id, tokens);
  task->rows = rows;
  task->cost = cost;
  return task;
}

TEST_F(LengthBucketBatcherTest, EveryWindowCountsAgainstTheTokenBudget) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_tokens = 256;  // four rows of the 64 bucket
  options.max_queue_delay = absl::Hours(1);
  auto batcher = Make(options);
  for (const auto& [id, rows] : std::vector<std::pair<int, std::int64_t>>{{0, 3}, {1, 2}}) {
    auto task = TaskOf(recorder_, id, 50, rows);
    ASSERT_TRUE(batcher->Schedule(task).ok());
  }
  // 3 + 2 rows exceed the budget: the first task's batch is full and runs alone.
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  for (int id = 2; id < 4; ++id) {
    auto task = TaskOf(recorder_, id, 50, 1);
    ASSERT_TRUE(batcher->Schedule(task).ok());
  }
  // 2 + 1 + 1 rows fill it exactly.
  ASSERT_TRUE(recorder_.AwaitBatches(2));
  // A request of more windows than the budget holds still runs, alone and at once.
  auto wide = TaskOf(recorder_, 4, 50, 6);
  ASSERT_TRUE(batcher->Schedule(wide).ok());
  ASSERT_TRUE(recorder_.AwaitBatches(3));
  EXPECT_THAT(recorder_.batch_ids(),
              ElementsAre(ElementsAre(0), ElementsAre(1, 2, 3), ElementsAre(4)));
  EXPECT_EQ(batcher->queued(), 0);
  ASSERT_TRUE(recorder_.AwaitDoneCalls(5));
  ExpectEachDoneOnce(5);
}

TEST_F(LengthBucketBatcherTest, EstimatedCostsBoundABatchAndATaskOverTheLimitIsRefused) {
  LengthBucketBatcherOptions options = WaitingOptions();
  options.max_batch_cost = 10;
  options.max_queue_delay = absl::Hours(1);
  auto batcher = Make(options);
  for (int id = 0; id < 3; ++id) {
    auto task = TaskOf(recorder_, id, 50, 1, 4);
    ASSERT_TRUE(batcher->Schedule(task).ok());
  }
  // 4 + 4 fit; a third would cost 12: the batch closes with two.
  ASSERT_TRUE(recorder_.AwaitBatches(1));
  EXPECT_THAT(recorder_.batch_ids(), ElementsAre(ElementsAre(0, 1)));
  EXPECT_EQ(batcher->queued(), 1);

  auto costly = TaskOf(recorder_, 3, 50, 1, 10.5);
  const absl::Status refused = batcher->Schedule(costly);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("max_batch_cost=10"));
  EXPECT_NE(costly, nullptr) << "a refused task stays with the caller";
  batcher.reset();
  EXPECT_EQ(recorder_.DoneCount(3), 0);
}

}  // namespace
}  // namespace ts::server

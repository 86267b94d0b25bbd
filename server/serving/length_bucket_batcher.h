// LengthBucketBatcher: the dynamic batcher of one served model.
//
// Requests (tasks) wait in buckets keyed by (padded length, requested path). A batch thread
// that is not running a batch is free; a free thread takes the ready bucket whose oldest task is
// oldest, with as many of its tasks as fit (see below), so long documents are never starved.
// A bucket is ready when its token budget is full, when it holds max_batch_size tasks, or when
// its oldest task has waited max_queue_delay. With start_when_idle (the default: continuous
// batching) every non-empty bucket is also ready while no batch is running at all: a request to
// an idle model starts at once, requests wait for max_queue_delay only while the model is busy,
// and a thread that finishes the last running batch takes at once what accumulated meanwhile,
// so batches grow with load rather than with waiting.
// Before a batch runs, tasks whose deadline has passed are finished with DEADLINE_EXCEEDED and
// cancelled ones with CANCELLED, without computing them. While it runs, the runner asks
// Batch::stop between its steps: once every task of the batch is cancelled or past its deadline,
// or a drain's time is up, it answers the status to stop with and the batch frees its thread.
//
// Every row of the forward pass counts against the token budget (a windowed request is one task
// of several rows): a batch takes tasks in arrival order while their rows × padded length stay
// within max_batch_tokens, at most max_batch_size tasks, and while their estimated costs
// (BatchTask::cost) sum to at most max_batch_cost. A bucket is full when the next task would not
// fit. A batch holds at least one task: a single task of more rows than the budget still runs,
// alone (the runner may split its rows into passes); one costlier than max_batch_cost is refused
// by Schedule().
//
// The batcher is a template on the Payload each task carries (the request's input and, once its
// batch ran, its result): the runner and `done` get it typed, and the batcher never looks inside.
//
// Ownership: a task moves into the batcher only when Schedule() returns OK; otherwise the
// caller keeps it (and its `done` is not called). Every accepted task's `done` is called exactly
// once, from a batch thread, or with UNAVAILABLE from Drain()/Shutdown()/the destructor if it was
// still queued when their timeout passed (Shutdown() and the destructor give queued tasks no
// time; all three wait for batches already running).
// Callbacks (runner, `done`, `cancelled`, observer) are called without the batcher's lock held.
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "model/api/stop_check.h"

namespace ts::server {

// One request as the batcher sees it: what it needs to place and time the task, and the
// caller's Payload, which it only carries.
template <typename Payload>
struct BatchTask {
  std::int64_t tokens = 0;  // the request's token count (incl. CLS) per row; > 0
  std::int64_t rows = 1;    // rows of the forward pass (a windowed request: its windows); > 0
  double cost = 0;          // estimated compute, in the unit of max_batch_cost; ≥ 0
  int path = 0;             // requested path (ts::AttentionPath as int); part of the key
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // may be empty
  // Called exactly once, with the payload: OK after the batch ran (the runner filled the
  // payload), or the reason it did not run (DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE at
  // shutdown, or the runner's error). The queue time is Batch::started - enqueued.
  std::function<void(absl::Status status, Payload& payload)> done;
  Payload payload;      // the runner reads and writes it
  absl::Time enqueued;  // set by Schedule()
};

template <typename Payload>
struct Batch {
  std::int64_t padded_tokens = 0;  // the bucket's padded length
  int path = 0;
  std::vector<std::unique_ptr<BatchTask<Payload>>> tasks;  // in arrival order
  absl::Time started;                                      // clock time the batch was taken to run
  // Set by the batcher before the runner runs; the runner asks it between its steps
  // (model/api/stop_check.h): OK while a task still waits for the result; DEADLINE_EXCEEDED or
  // CANCELLED once every task's deadline has passed or its caller cancelled; UNAVAILABLE once a
  // drain's time is up. The runner then returns that status without finishing the batch.
  StopCheck stop;
};

struct LengthBucketBatcherOptions {
  std::string model_name = "model";  // used in error messages
  // Bucket boundaries (padded lengths, ascending). A task goes to the smallest bucket ≥ its
  // tokens; tasks longer than the last boundary get a bucket of their own length.
  std::vector<std::int64_t> bucket_boundaries = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::int64_t max_batch_tokens = 32768;  // padded tokens per batch (rows × padded length)
  std::int64_t max_batch_size = 32;       // tasks per batch
  // Estimated cost per batch, in the unit of BatchTask::cost (the server's: GFLOP); a batch takes
  // tasks while their costs sum to at most this, and Schedule() refuses a task that alone costs
  // more. 0 = no limit.
  double max_batch_cost = 0;
  absl::Duration max_queue_delay = absl::Milliseconds(5);
  std::int64_t max_queue_size = 1024;  // tasks waiting, all buckets together
  int batch_threads = 1;               // batches run concurrently
  // true: while no batch runs, any non-empty bucket starts at once (max_queue_delay applies
  // only while the model is busy); false: every bucket waits for max_queue_delay or a full
  // budget, also on an idle model.
  bool start_when_idle = true;
};

// The payload-independent parts of the batcher (length_bucket_batcher.cc).
namespace batcher_internal {
// INVALID_ARGUMENT naming the first field out of range.
absl::Status ValidateOptions(const LengthBucketBatcherOptions& options);
// The padded length of a task of `tokens`.
std::int64_t PaddedLength(const LengthBucketBatcherOptions& options, std::int64_t tokens);
// How many rows of `padded_tokens` fit the token budget: max(1, max_batch_tokens / padded_tokens).
std::int64_t RowCapacity(const LengthBucketBatcherOptions& options, std::int64_t padded_tokens);
}  // namespace batcher_internal

template <typename Payload>
class LengthBucketBatcher {
 public:
  using Task = BatchTask<Payload>;
  using TaskBatch = Batch<Payload>;
  // Runs one batch: computes every task (writing its payload) and returns OK, or an error that
  // fails every task of the batch. Called from the batch threads; must not add or remove tasks.
  using BatchRunner = std::function<absl::Status(TaskBatch& batch)>;
  // Observes what the batcher does (metrics); may be empty.
  struct Observer {
    std::function<void(const TaskBatch& batch)> on_batch_start;
    std::function<void(absl::StatusCode code)> on_dropped;  // deadline/cancel before compute
    // A running batch was stopped by Batch::stop (code: DEADLINE_EXCEEDED, CANCELLED or
    // UNAVAILABLE).
    std::function<void(const TaskBatch& batch, absl::StatusCode code)> on_stopped;
    std::function<void(std::int64_t queued)> on_queue_depth;
  };

  static absl::StatusOr<std::unique_ptr<LengthBucketBatcher>> Create(
      const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
      Observer observer = {});
  ~LengthBucketBatcher();  // Shutdown()

  // OK: the task is owned by the batcher. RESOURCE_EXHAUSTED (naming max_queue_size) when the
  // queue is full or (naming max_batch_cost) when the task alone costs more than a batch may,
  // INVALID_ARGUMENT for tokens or rows ≤ 0 or a negative cost, UNAVAILABLE after Shutdown().
  absl::Status Schedule(std::unique_ptr<Task>& task);

  // Stops accepting; runs everything queued; returns when all accepted tasks are done or
  // `timeout` (measured by the injected clock) passed: then the still-queued rest finish with
  // UNAVAILABLE, and batches still running are told to stop (Batch::stop answers UNAVAILABLE)
  // and waited for. Idempotent. Must not be called from the runner or a callback (it joins the
  // batch threads).
  void Drain(absl::Duration timeout);
  // Drain with what is left until `deadline` on the injected clock.
  void DrainUntil(absl::Time deadline) {
    Drain(std::max(absl::ZeroDuration(), deadline - clock_->Now()));
  }
  void Shutdown() { Drain(absl::ZeroDuration()); }
  // The first step of a server's shutdown: every queued task and every task scheduled from now
  // on runs at once, without waiting for max_queue_delay or company, while the batcher still
  // accepts tasks (the front ends' calls in flight still bring some). Drain() ends it.
  void Flush();

  std::int64_t queued() const;  // tasks waiting in buckets (not yet taken by a batch thread)
  // The padded length a task would get.
  std::int64_t BucketFor(std::int64_t tokens) const {
    return batcher_internal::PaddedLength(options_, tokens);
  }

 private:
  struct QueuedTask {
    std::unique_ptr<Task> task;
    std::uint64_t arrival = 0;  // global arrival order: breaks ties between equal clock times
  };
  using BucketKey = std::pair<std::int64_t, int>;  // (padded length, path)

  LengthBucketBatcher(const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
                      Observer observer);

  void BatchLoop();
  // Moves the ready bucket with the oldest task into `batch` (counting it in running_); false if
  // no bucket is ready.
  bool TakeReadyBatch(absl::Time now, TaskBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest time a bucket becomes ready by max_queue_delay (InfiniteFuture: no bucket).
  absl::Time NextDelayExpiry() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many tasks from the front of `tasks` (a bucket of `padded_tokens`) one batch takes; sets
  // *full when the batch cannot take the next task of the bucket, or another one when it comes.
  std::int64_t FittingTasks(const std::deque<QueuedTask>& tasks, std::int64_t padded_tokens,
                            bool* full) const;
  // Batch::stop of a running batch.
  absl::Status StopReason(const TaskBatch& batch) const;
  // Finishes expired/cancelled tasks, runs the rest and finishes them with the runner's status.
  void RunBatch(TaskBatch& batch);
  // `count` accepted tasks are finished: wakes Drain() when none is left.
  void Finished(std::int64_t count);
  // Reports queued_ to the observer unless a newer depth was already reported.
  void ReportQueueDepth();

  const LengthBucketBatcherOptions options_;
  const BatchRunner runner_;
  Clock* const clock_;
  const Observer observer_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // a bucket may have become ready, or stopping_
  absl::CondVar idle_cv_;  // pending_ reached zero
  // Non-empty buckets only, each in arrival order.
  std::map<BucketKey, std::deque<QueuedTask>> buckets_ ABSL_GUARDED_BY(mu_);
  std::int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // tasks in buckets_
  std::int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // accepted tasks whose `done` is not called
  int running_ ABSL_GUARDED_BY(mu_) = 0;           // batches taken and not yet finished
  std::uint64_t next_arrival_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t depth_version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped whenever queued_ changes
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;  // Flush/Drain: every non-empty bucket is ready
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // batch threads exit
  // A drain's time is up: running batches stop at their next Batch::stop.
  std::atomic<bool> aborting_{false};

  // Orders on_queue_depth calls so the last value reported is the latest depth. Never acquired
  // with mu_ held.
  absl::Mutex observer_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::uint64_t reported_depth_version_ ABSL_GUARDED_BY(observer_mu_) = 0;

  // Serialises Drain(); threads_ is joined under it.
  absl::Mutex drain_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool drained_ ABSL_GUARDED_BY(drain_mu_) = false;

  std::vector<std::thread> threads_;  // declared last: started after every member above
};

// Implementation; callers need not read on.

template <typename Payload>
absl::StatusOr<std::unique_ptr<LengthBucketBatcher<Payload>>> LengthBucketBatcher<Payload>::Create(
    const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
    Observer observer) {
  if (absl::Status status = batcher_internal::ValidateOptions(options); !status.ok()) {
    return status;
  }
  if (!runner) return absl::InvalidArgumentError("LengthBucketBatcher: runner is empty");
  if (clock == nullptr) return absl::InvalidArgumentError("LengthBucketBatcher: clock is null");
  return std::unique_ptr<LengthBucketBatcher>(
      new LengthBucketBatcher(options, std::move(runner), clock, std::move(observer)));
}

template <typename Payload>
LengthBucketBatcher<Payload>::LengthBucketBatcher(const LengthBucketBatcherOptions& options,
                                                  BatchRunner runner, Clock* clock,
                                                  Observer observer)
    : options_(options), runner_(std::move(runner)), clock_(clock), observer_(std::move(observer)) {
  threads_.reserve(options_.batch_threads);
  for (int i = 0; i < options_.batch_threads; ++i) {
    threads_.emplace_back([this] { BatchLoop(); });
  }
}

template <typename Payload>
LengthBucketBatcher<Payload>::~LengthBucketBatcher() {
  Shutdown();
}

template <typename Payload>
std::int64_t LengthBucketBatcher<Payload>::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

template <typename Payload>
absl::Status LengthBucketBatcher<Payload>::Schedule(std::unique_ptr<Task>& task) {
  if (task == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", options_.model_name, "': task is null"));
  }
  if (task->tokens <= 0 || task->rows <= 0 || !(task->cost >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", options_.model_name, "': tokens and rows must be > 0, cost >= 0 (got ",
        task->tokens, ", ", task->rows, ", ", task->cost, ")"));
  }
  if (options_.max_batch_cost > 0 && task->cost > options_.max_batch_cost) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model '", options_.model_name, "': the request's estimated cost ", task->cost,
        " exceeds what one batch may cost (max_batch_cost=", options_.max_batch_cost, ")"));
  }
  const BucketKey key(BucketFor(task->tokens), task->path);
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) {
      return absl::UnavailableError(
          absl::StrCat("model '", options_.model_name, "': batcher is shutting down"));
    }
    if (queued_ >= options_.max_queue_size) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model '", options_.model_name,
                       "': queue is full (max_queue_size=", options_.max_queue_size, ")"));
    }
    task->enqueued = clock_->Now();
    std::deque<QueuedTask>& tasks = buckets_[key];
    tasks.push_back(QueuedTask{std::move(task), next_arrival_++});
    ++queued_;
    ++pending_;
    ++depth_version_;
    // Only a new bucket (ready at once on an idle model with start_when_idle, else a new delay
    // expiry) or a full one changes what a free batch thread waits for.
    bool full = false;
    FittingTasks(tasks, key.first, &full);
    wake = tasks.size() == 1 || full;
  }
  if (wake) work_cv_.Signal();
  ReportQueueDepth();
  return absl::OkStatus();
}

template <typename Payload>
bool LengthBucketBatcher<Payload>::TakeReadyBatch(absl::Time now, TaskBatch& batch) {
  // Nothing runs: with start_when_idle a request need not wait for company.
  const bool take_any = flushing_ || (options_.start_when_idle && running_ == 0);
  auto best = buckets_.end();
  for (auto it = buckets_.begin(); it != buckets_.end(); ++it) {
    const std::deque<QueuedTask>& tasks = it->second;
    bool full = false;
    FittingTasks(tasks, it->first.first, &full);
    const bool ready =
        take_any || full || now >= tasks.front().task->enqueued + options_.max_queue_delay;
    if (ready && (best == buckets_.end() || tasks.front().arrival < best->second.front().arrival)) {
      best = it;
    }
  }
  if (best == buckets_.end()) return false;

  std::deque<QueuedTask>& tasks = best->second;
  bool full = false;
  const std::int64_t size = FittingTasks(tasks, best->first.first, &full);
  batch.padded_tokens = best->first.first;
  batch.path = best->first.second;
  batch.tasks.reserve(size);
  for (std::int64_t i = 0; i < size; ++i) {
    batch.tasks.push_back(std::move(tasks.front().task));
    tasks.pop_front();
  }
  if (tasks.empty()) buckets_.erase(best);
  queued_ -= size;
  ++depth_version_;
  ++running_;
  return true;
}

template <typename Payload>
std::int64_t LengthBucketBatcher<Payload>::FittingTasks(const std::deque<QueuedTask>& tasks,
                                                        std::int64_t padded_tokens,
                                                        bool* full) const {
  const std::int64_t row_capacity = batcher_internal::RowCapacity(options_, padded_tokens);
  std::int64_t taken = 0;
  std::int64_t rows = 0;
  double cost = 0;
  *full = false;
  for (const QueuedTask& queued : tasks) {
    if (taken == options_.max_batch_size) break;
    const bool over_cost =
        options_.max_batch_cost > 0 && cost + queued.task->cost > options_.max_batch_cost;
    if (taken > 0 && (rows + queued.task->rows > row_capacity || over_cost)) {
      *full = true;
      return taken;
    }
    rows += queued.task->rows;
    cost += queued.task->cost;
    ++taken;
  }
  // Every task of the bucket fits: full when no further task could join (each has a row).
  *full = taken == options_.max_batch_size || rows >= row_capacity;
  return taken;
}

template <typename Payload>
absl::Status LengthBucketBatcher<Payload>::StopReason(const TaskBatch& batch) const {
  if (aborting_.load(std::memory_order_relaxed)) {
    return absl::UnavailableError(absl::StrCat(
        "model '", options_.model_name, "': shut down while the batch ran (its time was up)"));
  }
  const absl::Time now = clock_->Now();
  bool deadline_passed = false;
  for (const std::unique_ptr<Task>& task : batch.tasks) {
    if (task->deadline <= now) {
      deadline_passed = true;
    } else if (!task->cancelled || !task->cancelled()) {
      return absl::OkStatus();  // someone still waits for this batch
    }
  }
  if (deadline_passed) {
    return absl::DeadlineExceededError(
        absl::StrCat("model '", options_.model_name,
                     "': deadline passed while the batch ran; the batch was stopped"));
  }
  return absl::CancelledError(absl::StrCat("model '", options_.model_name,
                                           "': every caller cancelled; the batch was stopped"));
}

template <typename Payload>
absl::Time LengthBucketBatcher<Payload>::NextDelayExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, tasks] : buckets_) {
    next = std::min(next, tasks.front().task->enqueued + options_.max_queue_delay);
  }
  return next;
}

template <typename Payload>
void LengthBucketBatcher<Payload>::BatchLoop() {
  while (true) {
    TaskBatch batch;
    bool more_queued = false;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_) return;
        if (TakeReadyBatch(clock_->Now(), batch)) break;
        clock_->WaitUntil(work_cv_, mu_, NextDelayExpiry());
      }
      more_queued = queued_ > 0;
    }
    // Another free thread must take over waiting for what is left.
    if (more_queued) work_cv_.Signal();
    ReportQueueDepth();
    RunBatch(batch);
  }
}

template <typename Payload>
void LengthBucketBatcher<Payload>::RunBatch(TaskBatch& batch) {
  const std::int64_t accepted = static_cast<std::int64_t>(batch.tasks.size());
  batch.started = clock_->Now();

  // Honour deadlines and cancellations before computing; a passed deadline wins over the
  // cancellation gRPC reports for it.
  std::vector<std::unique_ptr<Task>> live;
  live.reserve(batch.tasks.size());
  for (std::unique_ptr<Task>& task : batch.tasks) {
    absl::Status dropped;
    if (task->deadline <= batch.started) {
      dropped = absl::DeadlineExceededError(
          absl::StrCat("model '", options_.model_name, "': deadline passed before the batch ran"));
    } else if (task->cancelled && task->cancelled()) {
      dropped = absl::CancelledError(
          absl::StrCat("model '", options_.model_name, "': cancelled before the batch ran"));
    }
    if (dropped.ok()) {
      live.push_back(std::move(task));
      continue;
    }
    if (observer_.on_dropped) observer_.on_dropped(dropped.code());
    if (task->done) task->done(dropped, task->payload);
  }
  batch.tasks = std::move(live);

  if (!batch.tasks.empty()) {
    absl::Status stopped;  // what Batch::stop answered when it stopped the batch
    batch.stop = [this, &batch, &stopped] {
      absl::Status reason = StopReason(batch);
      if (!reason.ok()) stopped = reason;
      return reason;
    };
    if (observer_.on_batch_start) observer_.on_batch_start(batch);
    const absl::Status status = runner_(batch);
    batch.stop = nullptr;
    if (!stopped.ok() && status.code() == stopped.code() && observer_.on_stopped) {
      observer_.on_stopped(batch, stopped.code());
    }
    for (std::unique_ptr<Task>& task : batch.tasks) {
      if (task->done) task->done(status, task->payload);
    }
  }
  Finished(accepted);
}

template <typename Payload>
void LengthBucketBatcher<Payload>::Finished(std::int64_t count) {
  bool idle = false;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    pending_ -= count;
    --running_;
    idle = pending_ == 0;
    // The model just became idle: with start_when_idle what is queued is ready now.
    wake = running_ == 0 && queued_ > 0 && options_.start_when_idle;
  }
  if (idle) idle_cv_.SignalAll();
  if (wake) work_cv_.Signal();
}

template <typename Payload>
void LengthBucketBatcher<Payload>::ReportQueueDepth() {
  if (!observer_.on_queue_depth) return;
  absl::MutexLock report_lock(&observer_mu_);
  std::int64_t depth = 0;
  {
    absl::MutexLock lock(&mu_);
    if (depth_version_ == reported_depth_version_) return;
    reported_depth_version_ = depth_version_;
    depth = queued_;
  }
  observer_.on_queue_depth(depth);
}

template <typename Payload>
void LengthBucketBatcher<Payload>::Flush() {
  {
    absl::MutexLock lock(&mu_);
    flushing_ = true;
  }
  work_cv_.SignalAll();
}

template <typename Payload>
void LengthBucketBatcher<Payload>::Drain(absl::Duration timeout) {
  absl::MutexLock drain_lock(&drain_mu_);
  if (drained_) return;

  // With no time to wait (Shutdown), queued tasks are not started: they finish UNAVAILABLE.
  const bool flush = timeout > absl::ZeroDuration();
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    flushing_ = flush;
  }
  if (flush) work_cv_.SignalAll();

  std::vector<std::unique_ptr<Task>> abandoned;
  {
    absl::MutexLock lock(&mu_);
    if (flush) {
      const absl::Time deadline = clock_->Now() + timeout;
      while (pending_ > 0 && !clock_->WaitUntil(idle_cv_, mu_, deadline)) {
      }
    }
    stopping_ = true;
    // Batches still running stop at their next step: the drain's time is up.
    aborting_ = true;
    for (auto& [key, tasks] : buckets_) {
      for (QueuedTask& queued : tasks) abandoned.push_back(std::move(queued.task));
    }
    buckets_.clear();
    if (queued_ != 0) ++depth_version_;
    queued_ = 0;
    pending_ -= static_cast<std::int64_t>(abandoned.size());
  }
  work_cv_.SignalAll();
  ReportQueueDepth();
  for (std::unique_ptr<Task>& task : abandoned) {
    if (task->done) {
      task->done(absl::UnavailableError(absl::StrCat("model '", options_.model_name,
                                                     "': shut down before the request ran")),
                 task->payload);
    }
  }
  abandoned.clear();
  // Batches already taken finish with their own status, or stop with UNAVAILABLE at their next
  // Batch::stop.
  for (std::thread& thread : threads_) thread.join();
  drained_ = true;
}

}  // namespace ts::server

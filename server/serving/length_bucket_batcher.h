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
// cancelled ones with CANCELLED, without computing them.
//
// A bucket's token budget is full when one more task would exceed max_batch_tokens, so a batch
// holds at most max(1, min(max_batch_size, max_batch_tokens / padded length)) tasks: a single task
// longer than the budget still runs, alone.
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

namespace ts::server {

// One request as the batcher sees it: what it needs to place and time the task, and the
// caller's Payload, which it only carries.
template <typename Payload>
struct BatchTask {
  std::int64_t tokens = 0;  // the request's token count (incl. CLS); > 0
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
};

struct LengthBucketBatcherOptions {
  std::string model_name = "model";  // used in error messages
  // Bucket boundaries (padded lengths, ascending). A task goes to the smallest bucket ≥ its
  // tokens; tasks longer than the last boundary get a bucket of their own length.
  std::vector<std::int64_t> bucket_boundaries = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::int64_t max_batch_tokens = 32768;  // padded tokens per batch (size × padded length)
  std::int64_t max_batch_size = 32;
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
// How many tasks of one bucket a batch takes.
std::int64_t Capacity(const LengthBucketBatcherOptions& options, std::int64_t padded_tokens);
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
    std::function<void(std::int64_t queued)> on_queue_depth;
  };

  static absl::StatusOr<std::unique_ptr<LengthBucketBatcher>> Create(
      const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
      Observer observer = {});
  ~LengthBucketBatcher();  // Shutdown()

  // OK: the task is owned by the batcher. RESOURCE_EXHAUSTED (naming max_queue_size) when the
  // queue is full, INVALID_ARGUMENT for tokens ≤ 0, UNAVAILABLE after Shutdown().
  absl::Status Schedule(std::unique_ptr<Task>& task);

  // Stops accepting; runs everything queued; returns when all accepted tasks are done or
  // `timeout` (measured by the injected clock) passed: then the still-queued rest finish with
  // UNAVAILABLE, and batches already running are waited for. Idempotent. Must not be called from
  // the runner or a callback (it joins the batch threads).
  void Drain(absl::Duration timeout);
  void Shutdown() { Drain(absl::ZeroDuration()); }

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
  std::int64_t Capacity(std::int64_t padded_tokens) const {
    return batcher_internal::Capacity(options_, padded_tokens);
  }
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
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;  // Drain: every non-empty bucket is ready
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // batch threads exit

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
  if (task->tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", options_.model_name, "': tokens must be > 0 (got ", task->tokens, ")"));
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
    wake = tasks.size() == 1 || static_cast<std::int64_t>(tasks.size()) == Capacity(key.first);
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
    const bool ready = take_any ||
                       static_cast<std::int64_t>(tasks.size()) >= Capacity(it->first.first) ||
                       now >= tasks.front().task->enqueued + options_.max_queue_delay;
    if (ready && (best == buckets_.end() || tasks.front().arrival < best->second.front().arrival)) {
      best = it;
    }
  }
  if (best == buckets_.end()) return false;

  std::deque<QueuedTask>& tasks = best->second;
  const std::int64_t size =
      std::min<std::int64_t>(Capacity(best->first.first), static_cast<std::int64_t>(tasks.size()));
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
    if (observer_.on_batch_start) observer_.on_batch_start(batch);
    const absl::Status status = runner_(batch);
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
  // Batches already taken run to completion with their own status.
  for (std::thread& thread : threads_) thread.join();
  drained_ = true;
}

}  // namespace ts::server

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
// Ownership: a task moves into the batcher only when Schedule() returns OK; otherwise the
// caller keeps it (and its `done` is not called). Every accepted task's `done` is called exactly
// once, from a batch thread, or with UNAVAILABLE from Drain()/Shutdown()/the destructor if it was
// still queued when their timeout passed (Shutdown() and the destructor give queued tasks no
// time; all three wait for batches already running).
// Callbacks (runner, `done`, `cancelled`, observer) are called without the batcher's lock held.
// Thread safety: all public methods may be called from any thread.
#pragma once

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
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/clock.h"

namespace ts::server {

// What the batcher needs to know of one request; the payload is opaque to it.
struct BatchTask {
  std::int64_t tokens = 0;  // the request's token count (incl. CLS); > 0
  int path = 0;             // requested path (ts::AttentionPath as int); part of the key
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // may be empty
  // Called exactly once: OK after the batch ran (the runner filled the payload), or the reason
  // it did not run (DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE at shutdown, or the runner's
  // error). The queue time is Batch::started - enqueued.
  std::function<void(absl::Status status)> done;
  std::shared_ptr<void> payload;  // owned by the caller's code; the runner reads/writes it
  absl::Time enqueued;            // set by Schedule()
};

struct Batch {
  std::int64_t padded_tokens = 0;  // the bucket's padded length
  int path = 0;
  std::vector<std::unique_ptr<BatchTask>> tasks;  // in arrival order
  absl::Time started;                             // clock time the batch was taken to run
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

class LengthBucketBatcher {
 public:
  // Runs one batch: computes every task (writing its payload) and returns OK, or an error that
  // fails every task of the batch. Called from the batch threads; must not add or remove tasks.
  using BatchRunner = std::function<absl::Status(Batch& batch)>;
  // Observes what the batcher does (metrics); may be empty.
  struct Observer {
    std::function<void(const Batch& batch)> on_batch_start;
    std::function<void(absl::StatusCode code)> on_dropped;  // deadline/cancel before compute
    std::function<void(std::int64_t queued)> on_queue_depth;
  };

  static absl::StatusOr<std::unique_ptr<LengthBucketBatcher>> Create(
      const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
      Observer observer = {});
  ~LengthBucketBatcher();  // Shutdown()

  // OK: the task is owned by the batcher. RESOURCE_EXHAUSTED (naming max_queue_size) when the
  // queue is full, INVALID_ARGUMENT for tokens ≤ 0, UNAVAILABLE after Shutdown().
  absl::Status Schedule(std::unique_ptr<BatchTask>& task);

  // Stops accepting; runs everything queued; returns when all accepted tasks are done or
  // `timeout` (measured by the injected clock) passed: then the still-queued rest finish with
  // UNAVAILABLE, and batches already running are waited for. Idempotent. Must not be called from
  // the runner or a callback (it joins the batch threads).
  void Drain(absl::Duration timeout);
  void Shutdown();  // Drain(zero)

  std::int64_t queued() const;  // tasks waiting in buckets (not yet taken by a batch thread)
  std::int64_t BucketFor(std::int64_t tokens) const;  // the padded length a task would get

 private:
  struct QueuedTask {
    std::unique_ptr<BatchTask> task;
    std::uint64_t arrival = 0;  // global arrival order: breaks ties between equal clock times
  };
  using BucketKey = std::pair<std::int64_t, int>;  // (padded length, path)

  LengthBucketBatcher(const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
                      Observer observer);

  void BatchLoop();
  // Moves the ready bucket with the oldest task into `batch` (counting it in running_); false if
  // no bucket is ready.
  bool TakeReadyBatch(absl::Time now, Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest time a bucket becomes ready by max_queue_delay (InfiniteFuture: no bucket).
  absl::Time NextDelayExpiry() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::int64_t Capacity(std::int64_t padded_tokens) const;
  // Finishes expired/cancelled tasks, runs the rest and finishes them with the runner's status.
  void RunBatch(Batch& batch);
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
  int running_ ABSL_GUARDED_BY(mu_) = 0;            // batches taken and not yet finished
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

}  // namespace ts::server

#include "server/length_bucket_batcher.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ts::server {
namespace {

absl::Status InvalidOption(absl::string_view field, absl::string_view requirement,
                           absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("LengthBucketBatcherOptions.", field, " ", requirement, " (got ", got, ")"));
}

absl::Status ValidateOptions(const LengthBucketBatcherOptions& options) {
  const auto& boundaries = options.bucket_boundaries;
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] <= 0 || (i > 0 && boundaries[i] <= boundaries[i - 1])) {
      return InvalidOption("bucket_boundaries", "must be > 0 and strictly ascending",
                           absl::StrCat("[", absl::StrJoin(boundaries, ", "), "]"));
    }
  }
  if (options.max_batch_tokens <= 0) {
    return InvalidOption("max_batch_tokens", "must be > 0", absl::StrCat(options.max_batch_tokens));
  }
  if (options.max_batch_size <= 0) {
    return InvalidOption("max_batch_size", "must be > 0", absl::StrCat(options.max_batch_size));
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return InvalidOption("max_queue_delay", "must be >= 0",
                         absl::FormatDuration(options.max_queue_delay));
  }
  if (options.max_queue_size <= 0) {
    return InvalidOption("max_queue_size", "must be > 0", absl::StrCat(options.max_queue_size));
  }
  if (options.batch_threads < 1) {
    return InvalidOption("batch_threads", "must be >= 1", absl::StrCat(options.batch_threads));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LengthBucketBatcher>> LengthBucketBatcher::Create(
    const LengthBucketBatcherOptions& options, BatchRunner runner, Clock* clock,
    Observer observer) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) return status;
  if (!runner) return absl::InvalidArgumentError("LengthBucketBatcher: runner is empty");
  if (clock == nullptr) return absl::InvalidArgumentError("LengthBucketBatcher: clock is null");
  return std::unique_ptr<LengthBucketBatcher>(
      new LengthBucketBatcher(options, std::move(runner), clock, std::move(observer)));
}

LengthBucketBatcher::LengthBucketBatcher(const LengthBucketBatcherOptions& options,
                                         BatchRunner runner, Clock* clock, Observer observer)
    : options_(options), runner_(std::move(runner)), clock_(clock), observer_(std::move(observer)) {
  threads_.reserve(options_.batch_threads);
  for (int i = 0; i < options_.batch_threads; ++i) {
    threads_.emplace_back([this] { BatchLoop(); });
  }
}

LengthBucketBatcher::~LengthBucketBatcher() { Shutdown(); }

std::int64_t LengthBucketBatcher::BucketFor(std::int64_t tokens) const {
  const auto& boundaries = options_.bucket_boundaries;
  auto it = std::lower_bound(boundaries.begin(), boundaries.end(), tokens);
  return it == boundaries.end() ? tokens : *it;
}

std::int64_t LengthBucketBatcher::Capacity(std::int64_t padded_tokens) const {
  return std::max<std::int64_t>(
      1, std::min(options_.max_batch_size, options_.max_batch_tokens / padded_tokens));
}

std::int64_t LengthBucketBatcher::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

absl::Status LengthBucketBatcher::Schedule(std::unique_ptr<BatchTask>& task) {
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

bool LengthBucketBatcher::TakeReadyBatch(absl::Time now, Batch& batch) {
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

absl::Time LengthBucketBatcher::NextDelayExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, tasks] : buckets_) {
    next = std::min(next, tasks.front().task->enqueued + options_.max_queue_delay);
  }
  return next;
}

void LengthBucketBatcher::BatchLoop() {
  while (true) {
    Batch batch;
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

void LengthBucketBatcher::RunBatch(Batch& batch) {
  const std::int64_t accepted = static_cast<std::int64_t>(batch.tasks.size());
  batch.started = clock_->Now();

  // Honour deadlines and cancellations before computing; a passed deadline wins over the
  // cancellation gRPC reports for it.
  std::vector<std::unique_ptr<BatchTask>> live;
  live.reserve(batch.tasks.size());
  for (std::unique_ptr<BatchTask>& task : batch.tasks) {
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
    if (task->done) task->done(dropped);
  }
  batch.tasks = std::move(live);

  if (!batch.tasks.empty()) {
    if (observer_.on_batch_start) observer_.on_batch_start(batch);
    const absl::Status status = runner_(batch);
    for (std::unique_ptr<BatchTask>& task : batch.tasks) {
      if (task->done) task->done(status);
    }
  }
  Finished(accepted);
}

void LengthBucketBatcher::Finished(std::int64_t count) {
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

void LengthBucketBatcher::ReportQueueDepth() {
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

void LengthBucketBatcher::Drain(absl::Duration timeout) {
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

  std::vector<std::unique_ptr<BatchTask>> abandoned;
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
  for (std::unique_ptr<BatchTask>& task : abandoned) {
    if (task->done) {
      task->done(absl::UnavailableError(
          absl::StrCat("model '", options_.model_name, "': shut down before the request ran")));
    }
  }
  abandoned.clear();
  // Batches already taken run to completion with their own status.
  for (std::thread& thread : threads_) thread.join();
  drained_ = true;
}

void LengthBucketBatcher::Shutdown() { Drain(absl::ZeroDuration()); }

}  // namespace ts::server

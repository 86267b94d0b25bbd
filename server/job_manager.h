// JobManager: training and evaluation jobs in the background, and promotion of their
// checkpoints to serving.
//
// Jobs go QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED (the reason is kept). At most
// jobs.max_concurrent run at once (and only while their memory estimates fit
// jobs.memory_budget_bytes), each in its own tsworker processes (server/job_process.h; one per
// data-parallel rank) with the spec's `threads`: a job that crashes, hangs or runs out of memory
// fails alone (retried up to the spec's max_retries), never the server. Every job, its progress,
// metrics, validation reports and checkpoints are persisted in a SQLite store (JobStore) under the
// state dir; a training job also keeps its training state (weights, optimizer, schedule, data
// position) in `<state_dir>/jobs/<id>/training_state.pt`, rewritten atomically at each
// checkpoint. After a crash or a restart, jobs that were QUEUED or RUNNING are queued again and
// continue from that state: the step count, the optimizer and the data order carry on.
//
// Files under the state dir:
//   jobs.db                          the store (WAL mode)
//   jobs/<id>/step-<N>.tsckpt        the last jobs.keep_checkpoints checkpoints of a training job
//   jobs/<id>/best.tsckpt            the checkpoint with the best validation accuracy
//   jobs/<id>/training_state.pt      the resumable state (removed when the job succeeds)
//   jobs/<id>/task.pb                the WorkerTask its workers were started with
// A finished job's directory and record go with DeleteJob, or after jobs.retention.
//   models/<name>/<version>.tsckpt   promoted checkpoints (what the registry serves)
//
// The jobs themselves are worker/jobs.h, run by tsworker; this class admits, schedules,
// supervises, persists, reports and promotes. It knows nothing of gRPC. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/data_root.h"
#include "server/config.h"
#include "server/job_store.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "taylorshift/v1/jobs.pb.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::server {

struct JobManagerOptions {
  JobsConfig jobs;
  std::string state_dir;  // created when missing
  std::string data_root;  // created when missing; every data path of a spec resolves inside it
  int num_cores = 1;      // what `threads: 0` and jobs.limits.max_threads = 0 mean
  std::int64_t heap_keep_freed_bytes = 0;  // passed to the workers (model/heap_policy.h)
  // Settings of a model first served by a promotion (a name not in the configuration).
  ModelConfig promoted_model_defaults;
  // Called after a promotion serves a model (health status, logs). May be empty.
  std::function<void(const std::string& model)> on_model_served;
  // Log lines (job state changes, restores). May be empty.
  std::function<void(const std::string& line)> log;
};

// What PromoteCheckpoint did.
struct Promotion {
  std::shared_ptr<ServedModel> model;  // the version now served
  std::string previous_version;        // empty for a new name
  std::optional<double> validation_accuracy;
  std::optional<double> previous_validation_accuracy;
};

class JobManager {
 public:
  // Opens the store, queues the jobs a previous run left QUEUED or RUNNING, and starts the
  // workers. `registry` and `metrics` must outlive the manager (metrics may be null).
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(JobManagerOptions options,
                                                            ModelRegistry* registry,
                                                            Metrics* metrics, Clock* clock);
  ~JobManager();  // Shutdown()

  // Serves the latest promotion of each model name again (call once, after the configured
  // models are loaded). A promotion whose checkpoint cannot be loaded is logged and skipped.
  void RestorePromotions();

  // Validate the spec (INVALID_ARGUMENT naming the key; PERMISSION_DENIED / INVALID_ARGUMENT
  // for paths outside the data root; NOT_FOUND for missing files), store and queue the job.
  // RESOURCE_EXHAUSTED when jobs.max_queued jobs are waiting; FAILED_PRECONDITION when jobs are
  // disabled.
  absl::StatusOr<taylorshift::v1::Job> SubmitTraining(taylorshift::v1::TrainingSpec spec);
  absl::StatusOr<taylorshift::v1::Job> SubmitEvaluation(taylorshift::v1::EvaluationSpec spec);

  absl::StatusOr<taylorshift::v1::Job> GetJob(const std::string& id) const;
  absl::StatusOr<taylorshift::v1::ListJobsResponse> ListJobs(
      const taylorshift::v1::ListJobsRequest& request) const;
  // One page of the job's loss curve and validation runs (JobStore::History).
  absl::StatusOr<taylorshift::v1::GetJobHistoryResponse> GetJobHistory(
      const taylorshift::v1::GetJobHistoryRequest& request) const;
  // A queued job is cancelled at once; a running one gets SIGTERM (training stops at its next
  // step boundary, evaluation at once; SIGKILL after jobs.stop_grace); a finished one is
  // FAILED_PRECONDITION.
  absl::StatusOr<taylorshift::v1::Job> CancelJob(const std::string& id);
  // Deletes a finished job's directory and then its record (loss curve, validation runs,
  // checkpoint records); promoted copies under models/ stay served. NOT_FOUND for an unknown
  // id; FAILED_PRECONDITION for a queued or running job, and for one whose checkpoint a queued
  // or running job uses (init_from "job:<id>", an evaluation's job_id). `reason` labels the
  // metric: "request" or "retention".
  absl::StatusOr<taylorshift::v1::DeleteJobResponse> DeleteJob(
      const std::string& id, const std::string& reason = "request");

  // Calls `listener` with a SNAPSHOT of the job now and then with each of its events, from the
  // job's worker thread (so it must not block), until the job is final — the final STATE event
  // is the last call — or Unwatch. Shutdown() ends every watch with one last call whose event
  // type is TYPE_UNSPECIFIED. Returns a handle for Unwatch (0 when the job was already final).
  using Listener = std::function<void(const taylorshift::v1::JobEvent& event)>;
  absl::StatusOr<std::int64_t> Watch(const std::string& id, Listener listener);
  void Unwatch(std::int64_t handle);

  // Serves a checkpoint (a training job's best or last one, or a file in the data root) under
  // request.model(): copied to models/<name>/<version>.tsckpt, loaded, hot-swapped into the
  // registry, and recorded so that it is served again after a restart.
  absl::StatusOr<Promotion> Promote(const taylorshift::v1::PromoteCheckpointRequest& request);

  // Stops the workers: a running training job saves its state at the next step boundary and
  // stays RUNNING in the store (it resumes on the next start); queued jobs stay queued; watches
  // end; later submissions are UNAVAILABLE. Idempotent.
  void Shutdown();

 private:
  struct Active;  // a queued or running job

  JobManager(JobManagerOptions options, std::unique_ptr<JobStore> store, DataRoot data_root,
             ModelRegistry* registry, Metrics* metrics, Clock* clock);

  void WorkerLoop();
  // Every jobs.retention_sweep_interval: deletes the finished jobs older than jobs.retention.
  void RetentionLoop();
  // Runs the job in worker processes until it is final (retrying a failed worker up to the
  // spec's max_retries), or stopped by a shutdown.
  void RunJob(const std::shared_ptr<Active>& active);
  // One run of the job's workers; `stopped` = they stopped on request with the state saved.
  absl::Status RunAttempt(const std::shared_ptr<Active>& active, bool* stopped);
  absl::StatusOr<taylorshift::v1::WorkerTask> MakeTask(const Active& active) const;
  // Applies a worker's report to the job, the store, the metrics and the watchers.
  void ApplyWorkerMessage(Active& active, const taylorshift::v1::WorkerMessage& message);
  std::string WorkerBinary() const;
  // The peak memory of the spec's job, all ranks (model/cost_model.h).
  std::int64_t EstimateMemory(const taylorshift::v1::TrainingSpec& spec) const;
  absl::Status CheckSourcePaths(const taylorshift::v1::DataSource& source,
                                const std::string& field) const;
  absl::StatusOr<std::string> ResolveCheckpointReference(const std::string& reference,
                                                         const std::string& field) const;
  absl::StatusOr<std::string> JobCheckpoint(const std::string& job_id,
                                            taylorshift::v1::CheckpointChoice which) const;
  absl::StatusOr<taylorshift::v1::Job> Enqueue(taylorshift::v1::Job job);

  // Persists the job's snapshot and sends `event` (with the snapshot) to its watchers.
  void Publish(Active& active, taylorshift::v1::JobEvent::Type type,
               const taylorshift::v1::CheckpointInfo* checkpoint = nullptr);
  void SetState(Active& active, taylorshift::v1::JobState state, const std::string& reason);
  std::string JobDir(const std::string& id) const;
  void Log(const std::string& line) const;

  const JobManagerOptions options_;
  const std::unique_ptr<JobStore> store_;
  const DataRoot data_root_;
  ModelRegistry* const registry_;
  Metrics* const metrics_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Active>> active_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Active>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const std::int64_t memory_budget_;                      // MemoryBudgetBytes(options_.jobs)
  std::int64_t running_memory_ ABSL_GUARDED_BY(mu_) = 0;  // estimates of the running jobs
  absl::CondVar retention_cv_;                            // signalled by Shutdown()

  struct Watcher {
    std::string job_id;
    Listener listener;
  };
  mutable absl::Mutex watch_mu_;
  std::map<std::int64_t, Watcher> watchers_ ABSL_GUARDED_BY(watch_mu_);
  std::int64_t next_watch_ ABSL_GUARDED_BY(watch_mu_) = 1;

  absl::Mutex promote_mu_;  // one promotion or deletion at a time

  std::vector<std::thread> workers_;
};

}  // namespace ts::server

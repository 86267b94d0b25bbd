// JobManager: training and evaluation jobs in the background, and promotion of their
// checkpoints to serving.
//
// Jobs go QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED (the reason is kept). At most
// jobs.max_concurrent run at once (and only while their memory estimates fit
// jobs.memory_budget_bytes), each in its own tsworker processes (server/jobs/job_process.h; one per
// data-parallel rank) with the spec's `threads`: a job that crashes, hangs or runs out of memory
// fails alone (retried up to the spec's max_retries), never the server. Every job, its progress,
// metrics, validation reports and checkpoints are persisted in SQLite (store_database.h: JobStore,
// JobHistoryStore and PromotionStore over one connection) under the state dir; a training job also
// keeps its training state (weights, optimizer, schedule, data position) in
// `<state_dir>/jobs/<id>/training_state.pt`, rewritten atomically at each checkpoint. After a crash
// or a restart, jobs that were QUEUED or RUNNING are queued again and continue from that state: the
// step count, the optimizer and the data order carry on. A final state the store refused is kept
// in `<state_dir>/final_states` (final_state_journal.h) and written at the next start: that job
// is not run again.
//
// A store that cannot be written at start (a full disk) does not keep the server from starting:
// the manager starts read-only — GetJob, ListJobs, GetJobHistory and WatchJob answer from the
// store (and the journal's final states); submissions, cancellations, deletions and promotions
// are UNAVAILABLE saying why; the retention sweep waits; the jobs the store holds QUEUED or
// RUNNING read as stored and wait — and every kStoreRetryInterval it tries again (opening the
// store for writing, the journal's final states, re-queueing), logging when it succeeds.
//
// Files under the state dir:
//   jobs.db                          the stores' database (WAL mode)
//   jobs/<id>/step-<N>.tsckpt        the last jobs.keep_checkpoints checkpoints of a training job
//   jobs/<id>/best.tsckpt            the checkpoint with the best validation accuracy
//   jobs/<id>/training_state.pt      the resumable state (removed when the job succeeds)
//   jobs/<id>/task.pb                the WorkerTask its workers were started with
//   final_states                     final states the store refused, kept across a restart
// A finished job's directory and record go with DeleteJob, or after jobs.retention.
//   models/<name>/<version>.tsckpt   promoted checkpoints (what the registry serves)
//
// The jobs themselves are worker/jobs.h, run by tsworker; this class admits, schedules,
// supervises, persists, reports and promotes, as a facade over one part per concept:
//   job_admission.h    the checks a submitted spec passes, the memory estimate
//   job_queue.h        queued and running jobs: max_queued, the memory budget, states, watches
//   job_runner.h       the run of one job in worker processes, retries
//   job_recorder.h     worker messages → the job, the store, the metrics, the watchers
//   job_checkpoints.h  choosing, resolving and keeping checkpoints
//   job_promotion.h    serving a checkpoint, and again after a restart
//   job_deletion.h     DeleteJob and the retention sweep
//   job_context.h      what they share; failed store writes logged and counted
// Each part takes only the store it uses: the queue and the deleter the JobStore, the recorder the
// JobHistoryStore, the promoter the PromotionStore.
// It knows nothing of gRPC. Time comes only from the injected clock. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/data_root.h"
#include "common/directory_lock.h"
#include "server/config.h"
#include "server/jobs/checkpoint_download.h"
#include "server/jobs/final_state_journal.h"
#include "server/jobs/job_admission.h"
#include "server/jobs/job_checkpoints.h"
#include "server/jobs/job_context.h"
#include "server/jobs/job_deletion.h"
#include "server/jobs/job_history_store.h"
#include "server/jobs/job_promotion.h"
#include "server/jobs/job_queue.h"
#include "server/jobs/job_recorder.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/job_store.h"
#include "server/jobs/promotion_store.h"
#include "server/jobs/store_database.h"
#include "server/jobs/worker_launcher.h"
#include "server/metrics.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class ModelRegistry;

struct JobManagerOptions {
  JobsConfig jobs;
  std::string state_dir;  // created when missing
  std::string data_root;  // created when missing; every data path of a spec resolves inside it
  int num_cores = 1;      // what `threads: 0` and jobs.limits.max_threads = 0 mean
  std::int64_t heap_keep_freed_bytes = 0;  // passed to the workers (model/heap_policy.h)
  // Settings of a model first served by a promotion (a name not in the configuration).
  ModelConfig promoted_model_defaults;
  // The configured models (a rollback past a name's first promotion serves its checkpoint again).
  std::vector<ModelConfig> configured_models;
  // Called after a promotion serves a model (health status, logs). May be empty.
  std::function<void(const std::string& model)> on_model_served;
  // Log lines (job state changes, restores, failed store writes). May be empty.
  std::function<void(const std::string& line)> log;
  // Starts the jobs' workers; null = tsworker processes (ProcessWorkerLauncher). Tests pass an
  // in-process fake. Must outlive the manager.
  WorkerLauncher* worker_launcher = nullptr;
};

class JobManager {
 public:
  // How often a manager that started read-only tries the store again.
  static constexpr absl::Duration kStoreRetryInterval = absl::Seconds(5);

  // Opens the store, queues the jobs a previous run left QUEUED or RUNNING, and starts the
  // workers; read-only (see the file comment) when the store cannot be written, failing only
  // when the store's content is refused (a newer schema, not a job store) or a directory cannot be
  // made. `registry`, `metrics` and `clock` must outlive the manager (metrics may be null).
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(JobManagerOptions options,
                                                            ModelRegistry* registry,
                                                            Metrics* metrics, Clock* clock);
  ~JobManager();  // Shutdown()

  // `status` as a client may see it: paths under the data root relative to it, paths under the
  // state directory as "<state_dir>/..." (JobContext::ForClient). The Jobs service answers with it.
  absl::Status ForClient(const absl::Status& status) const { return context_.ForClient(status); }

  // Serves the latest promotion of each model name again (call once, after the configured
  // models are loaded). A promotion whose checkpoint cannot be loaded is logged and skipped.
  void RestorePromotions();

  // Validate the spec (INVALID_ARGUMENT naming the key; PERMISSION_DENIED / INVALID_ARGUMENT
  // for paths outside the data root; NOT_FOUND for missing files), store and queue the job.
  // RESOURCE_EXHAUSTED when jobs.max_queued jobs are waiting or the submitter is at a
  // jobs.per_identity limit (JobQueue); FAILED_PRECONDITION when jobs are disabled. `submitter`
  // (Authorizer::Identity) is recorded as the job's submitted_by.
  absl::StatusOr<taylorshift::v1::Job> SubmitTraining(taylorshift::v1::TrainingSpec spec,
                                                      const std::string& submitter = "anonymous");
  absl::StatusOr<taylorshift::v1::Job> SubmitEvaluation(taylorshift::v1::EvaluationSpec spec,
                                                        const std::string& submitter = "anonymous");

  absl::StatusOr<taylorshift::v1::Job> GetJob(const std::string& id) const;
  // A non-empty `owner` lists only its jobs and those with no owner (JobStore::ListJobs).
  absl::StatusOr<taylorshift::v1::ListJobsResponse> ListJobs(
      const taylorshift::v1::ListJobsRequest& request, const std::string& owner = "") const;
  // One page of the job's loss curve and validation runs (JobHistoryStore::History).
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
  using Listener = JobQueue::Listener;
  absl::StatusOr<std::int64_t> Watch(const std::string& id, Listener listener);
  void Unwatch(std::int64_t handle);

  // Serves a checkpoint (a training job's best or last one, or a file in the data root) under
  // request.model(): copied to models/<name>/<version>.tsckpt, loaded, hot-swapped into the
  // registry, and recorded so that it is served again after a restart.
  // `actor` is recorded as who promoted (Authorizer::Identity). See CheckpointPromoter.
  absl::StatusOr<Promotion> Promote(const taylorshift::v1::PromoteCheckpointRequest& request,
                                    const std::string& actor = "anonymous");
  // Serves the previous version of `model` again, down to its configured checkpoint
  // (CheckpointPromoter::Rollback).
  absl::StatusOr<Promotion> RollbackPromotion(const std::string& model,
                                              const std::string& actor = "anonymous");
  // The model's promotions and rollbacks, oldest first.
  absl::StatusOr<std::vector<PromotionRecord>> PromotionHistory(const std::string& model) const;

  // The checkpoint DownloadCheckpoint streams: a training job's best or last checkpoint, or the
  // file the version served under a model name was loaded from. INVALID_ARGUMENT for a bad
  // request (ValidateDownloadRequest); NOT_FOUND naming the job or the model; FAILED_PRECONDITION
  // for a job without such a checkpoint; DATA_LOSS when a served model's file no longer holds
  // the version served.
  absl::StatusOr<std::unique_ptr<CheckpointFileReader>> OpenCheckpoint(
      const taylorshift::v1::DownloadCheckpointRequest& request) const;

  // Stops the workers: a running training job saves its state at the next step boundary and
  // stays RUNNING in the store (it resumes on the next start); queued jobs stay queued; watches
  // end; later submissions are UNAVAILABLE. Idempotent.
  void Shutdown();

  // OK once the store took the start's writes; UNAVAILABLE (why not) while read-only.
  absl::Status CheckStarted() const;

 private:
  JobManager(JobManagerOptions options, std::unique_ptr<StoreDatabase> database,
             std::unique_ptr<FinalStateJournal> journal, DataRoot data_root,
             ModelRegistry* registry, Metrics* metrics, Clock* clock);

  // What a start writes: the store opened for writing, the journal's final states, the
  // interrupted jobs queued again. Idempotent; sets started_ once it all succeeded.
  absl::Status StartJobs();
  // StartJobs every kStoreRetryInterval until it succeeds or Shutdown().
  void RetryStart();

  // Runs the queue's jobs one after another until Shutdown().
  void WorkerLoop();

  // state_dir's lock (common/directory_lock.h): declared first, released last.
  std::unique_ptr<DirectoryLock> state_lock_;
  const JobManagerOptions options_;
  const std::unique_ptr<StoreDatabase> database_;
  const std::unique_ptr<FinalStateJournal> journal_;  // may be null (it could not be made)
  JobStore jobs_;
  JobHistoryStore history_;
  PromotionStore promotions_;
  const DataRoot data_root_;
  JobContext context_;
  JobQueue queue_;
  CheckpointResolver checkpoints_;
  JobAdmission admission_;
  JobRecorder recorder_;
  const std::unique_ptr<WorkerLauncher> own_launcher_;  // when options.worker_launcher is null
  JobRunner runner_;
  JobDeleter deleter_;
  CheckpointPromoter promoter_;

  mutable absl::Mutex start_mu_;
  absl::CondVar start_cv_;  // Shutdown() wakes RetryStart
  bool started_ ABSL_GUARDED_BY(start_mu_) = false;
  absl::Status start_error_ ABSL_GUARDED_BY(start_mu_);  // why not started yet
  bool stopping_ ABSL_GUARDED_BY(start_mu_) = false;

  // The job runners, the retention sweep, final-state retries, the start's retries.
  std::vector<std::thread> workers_;
};

}  // namespace ts::server

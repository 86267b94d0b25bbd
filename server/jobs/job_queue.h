// JobQueue: the table of queued and running jobs — admission to the queue, the order they start
// in, their state transitions and the watchers of their events.
//
// - Admission: Enqueue stores a job QUEUED (create_time from the clock) unless jobs.max_queued
//   jobs are waiting (RESOURCE_EXHAUSTED naming the limit) or Stop() was called (UNAVAILABLE).
// - Per identity (Job.submitted_by, when it names an owner: HasOwner in job_store.h): Enqueue
//   refuses (RESOURCE_EXHAUSTED naming the limit's key, its value and the identity's use) a job
//   beyond per_identity_max_queued queued jobs or beyond per_identity_max_total_steps steps of
//   its unfinished jobs together; 0 = no limit.
// - Start order: Next() hands out the first queued job whose identity runs fewer than
//   per_identity_max_running jobs (0 = no limit; jobs of other identities are not held behind
//   it) once its memory estimate fits beside the running jobs' in the memory budget (or nothing
//   runs), so the budget holds for all jobs together; the job stays in the table until
//   Release(). It waits through the context's clock
//   (with no deadline), so a test's fake clock sees a runner waiting there.
// - Transitions: SetState stamps start/end times from the clock, updates the job metrics, logs,
//   persists the snapshot and publishes a STATE event; Publish persists and sends any event.
// - Watches: a listener gets a SNAPSHOT and then every event of the job, ordered after the
//   snapshot, until the job is final (the final STATE event is the last call), Unwatch, or Stop()
//   (one last call with an event of type TYPE_UNSPECIFIED). Listeners run on the thread that
//   publishes, under the table's lock: they must not block or call back into the queue.
//
// A failed snapshot write is reported through JobContext::StoreWriteOk (logged and counted) and
// the job goes on from memory. A final state the store refuses (a full disk) is kept in memory,
// so that Get, List and Watch answer it rather than the older stored snapshot, and written again
// after every later snapshot write that succeeds and by RunFinalStateRetries on a timer; the
// gauge taylorshift_job_final_states_unwritten counts such jobs, and the log says when one is
// written at last. It is also kept in the FinalStateJournal (a preallocated file: a full disk
// does not refuse it), so that a restart before the store takes it neither loses it nor runs the
// job again: RecoverFinalStates, at start, writes it to the store or keeps it in memory again.
// Thread-safe. The context and the journal must outlive the queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/final_state_journal.h"
#include "server/jobs/job_context.h"
#include "server/jobs/job_store.h"
#include "server/jobs/step_rate.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class JobProcess;

// A queued or running job. `job` is read and written under its JobQueue's lock only (Snapshot,
// Update); `id` never changes; `cancel`, the process and `step_rate` are the runner's (its
// JobRecorder's, for `step_rate`).
struct ActiveJob {
  explicit ActiveJob(taylorshift::v1::Job stored) : id(stored.id()), job(std::move(stored)) {}

  const std::string id;
  taylorshift::v1::Job job;
  std::atomic<bool> cancel{false};
  StepRate step_rate;  // of the progress reports since its workers started
  // Why the result its workers reported could not be kept (an evaluation report the job store
  // refused, e.g. on a full disk); OK otherwise. Set by the JobRecorder and read by the JobRunner,
  // both on the runner's thread; reset at each attempt.
  absl::Status unrecorded_result;

  // The workers now running the job, or null; StopProcess asks them to stop (SIGTERM, then
  // SIGKILL after jobs.stop_grace).
  void SetProcess(JobProcess* process);
  void StopProcess();
  // The worker processes' ids by rank; empty when none runs.
  std::vector<int> WorkerPids();

 private:
  absl::Mutex process_mu_;
  JobProcess* process_ ABSL_GUARDED_BY(process_mu_) = nullptr;
};

struct JobQueueOptions {
  std::int64_t max_queued = 100;         // jobs.max_queued: waiting jobs at most
  std::int64_t memory_budget_bytes = 0;  // MemoryBudgetBytes(jobs): the running jobs together
  // jobs.per_identity.*: per submitter, 0 = no limit (see the class comment).
  std::int64_t per_identity_max_queued = 0;
  std::int64_t per_identity_max_running = 0;
  std::int64_t per_identity_max_total_steps = 0;
  // How often RunFinalStateRetries writes again the final states the store refused.
  absl::Duration final_state_retry_interval = absl::Seconds(5);
};

class JobQueue {
 public:
  using Listener = std::function<void(const taylorshift::v1::JobEvent& event)>;

  // `jobs`, `context` and `journal` must outlive the queue; `journal` may be null (then a final
  // state the store refuses is kept in memory only, and a restart runs its job again).
  JobQueue(JobQueueOptions options, JobStore* jobs, JobContext* context,
           FinalStateJournal* journal = nullptr);

  // At start, before Restore: the final states the journal kept (the store had refused them
  // before the last stop) are written into their stored records (the kept state, reason, times
  // and progress over the stored snapshot), or, when the store still refuses them, kept in
  // memory as unwritten final states (see the class comment). Returns how many the store took.
  int RecoverFinalStates();
  // Queues again a job a previous run left QUEUED or RUNNING (a RUNNING one counts one more
  // resume), storing it QUEUED; the store's error when that write fails. A job whose final state
  // RecoverFinalStates found is not queued (it is over), nor one already in the table.
  absl::Status Restore(taylorshift::v1::Job job);
  // Stores `job` QUEUED and queues it; see the class comment for the refusals. Returns the job
  // as stored (with its id).
  absl::StatusOr<taylorshift::v1::Job> Enqueue(taylorshift::v1::Job job);
  // Blocks until the head of the queue may start, removes it from the queue and counts its
  // memory estimate as running; null once Stop() was called.
  std::shared_ptr<ActiveJob> Next();
  // The job's runner is done with it: its memory estimate is free again and it leaves the table.
  void Release(const ActiveJob& active);

  // A queued or running job's snapshot, else its final state when the store has not taken it
  // yet, else the stored record (NOT_FOUND for an unknown id).
  absl::StatusOr<taylorshift::v1::Job> Get(const std::string& id) const;
  // A page of the store's jobs (JobStore::ListJobs) as Get answers each: the queued and running
  // jobs' snapshots and the final states the store has not taken yet in place of their stored
  // records, also for the state filter and the page tokens.
  // A non-empty `owner` lists that identity's jobs and those with no owner (JobStore::ListJobs).
  absl::StatusOr<taylorshift::v1::ListJobsResponse> List(
      const taylorshift::v1::ListJobsRequest& request, const std::string& owner = "") const;
  // A queued job is CANCELLED at once; a running one is marked and its workers told to stop
  // (its runner makes it CANCELLED); a finished one is FAILED_PRECONDITION.
  absl::StatusOr<taylorshift::v1::Job> Cancel(const std::string& id);
  // FAILED_PRECONDITION when job `id` is queued or running, when its final state is not written
  // to the store yet, or when a queued or running job reads its checkpoint when it starts
  // (init_from "job:<id>", an evaluation's job_id).
  absl::Status CheckDeletable(const std::string& id) const;

  // Changes the job under the table's lock (what its workers report, its retries).
  void Update(ActiveJob& active, const std::function<void(taylorshift::v1::Job& job)>& change);
  taylorshift::v1::Job Snapshot(const ActiveJob& active) const;
  // Persists the job's snapshot and sends `type` (with the snapshot and `checkpoint`) to its
  // watchers. A final state the store refuses is kept (see the class comment); one that it
  // takes is followed by another try of those kept.
  void Publish(ActiveJob& active, taylorshift::v1::JobEvent::Type type,
               const taylorshift::v1::CheckpointInfo* checkpoint = nullptr);
  void SetState(ActiveJob& active, taylorshift::v1::JobState state, const std::string& reason);

  absl::StatusOr<std::int64_t> Watch(const std::string& id, Listener listener);
  void Unwatch(std::int64_t handle);

  // Writes the kept final states to the store again; those it takes are forgotten (and logged;
  // also by the journal), a job deleted meanwhile too. Returns how many are still unwritten.
  int WriteUnwrittenFinalStates();
  // The journal's file, or empty when there is none.
  std::string journal_path() const { return journal_ != nullptr ? journal_->path() : ""; }
  // WriteUnwrittenFinalStates every options.final_state_retry_interval (on the context's
  // clock) until Stop().
  void RunFinalStateRetries();

  // (job id, its workers' pids by rank) of every job whose workers run now.
  std::vector<std::pair<std::string, std::vector<int>>> RunningWorkers() const;

  // Later Enqueue calls are UNAVAILABLE and Next() returns null; every active job's workers are
  // told to stop; watches end. Idempotent.
  void Stop();
  bool stopping() const;

 private:
  // The queued job that may start now (see the class comment), or queue_.end().
  std::deque<std::shared_ptr<ActiveJob>>::const_iterator Startable() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A queued job may start now (or Stop() was called): what Next() waits for.
  bool HeadMayStartOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when `job` would take its submitter over a per-identity limit.
  absl::Status CheckIdentityQuota(const taylorshift::v1::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the gauge of unwritten final states; returns their number.
  int UpdateUnwrittenGauge() ABSL_LOCKS_EXCLUDED(mu_);

  // The store took job `id`'s final state (or its record is gone): its journal slot is free.
  void ForgetJournaled(const std::string& id);

  const JobQueueOptions options_;
  JobStore* const jobs_;
  JobContext* const context_;
  FinalStateJournal* const journal_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ActiveJob>> active_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<ActiveJob>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::int64_t running_memory_ ABSL_GUARDED_BY(mu_) = 0;  // estimates of the running jobs
  // Jobs handed out by Next() and not yet released, by submitter (those with an owner only).
  std::map<std::string, std::int64_t> running_by_identity_ ABSL_GUARDED_BY(mu_);
  // Signalled when queue_, running_memory_ or stopping_ changed (Next() waits on it).
  absl::CondVar changed_cv_;
  // Finished jobs whose final state the store refused, as they ended, by id; with the number of
  // writes tried for each.
  struct UnwrittenFinal {
    taylorshift::v1::Job job;
    std::int64_t attempts = 1;
  };
  std::map<std::string, UnwrittenFinal> unwritten_finals_ ABSL_GUARDED_BY(mu_);
  // Signalled by Stop() (RunFinalStateRetries waits on it).
  absl::CondVar stop_cv_;
  absl::Mutex gauge_mu_;  // taken before mu_

  struct Watcher {
    std::string job_id;
    Listener listener;
  };
  mutable absl::Mutex watch_mu_;  // taken after mu_
  std::map<std::int64_t, Watcher> watchers_ ABSL_GUARDED_BY(watch_mu_);
  std::int64_t next_watch_ ABSL_GUARDED_BY(watch_mu_) = 1;
};

}  // namespace ts::server

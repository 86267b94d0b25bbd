#include "server/jobs/job_queue.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "server/jobs/job_process.h"

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

std::int64_t MemoryEstimate(const pb::Job& job) {
  return static_cast<std::int64_t>(job.progress().memory_estimate_bytes());
}

// The optimizer steps a job asks for (an evaluation's: none).
std::int64_t StepsOf(const pb::Job& job) {
  return job.has_training() ? static_cast<std::int64_t>(job.training().steps()) : 0;
}

// The field by which `job` reads job `id`'s checkpoint when it starts, or null.
const char* UsesCheckpointOf(const pb::Job& job, const std::string& id) {
  const std::string reference = absl::StrCat("job:", id);
  if (job.has_training() && job.training().init_from() == reference) return "init_from";
  if (job.has_evaluation()) {
    if (job.evaluation().job_id() == id) return "job_id";
    if (job.evaluation().checkpoint() == reference) return "checkpoint";
  }
  return nullptr;
}

}  // namespace

void ActiveJob::SetProcess(JobProcess* process) {
  absl::MutexLock lock(&process_mu_);
  process_ = process;
}

void ActiveJob::StopProcess() {
  absl::MutexLock lock(&process_mu_);
  if (process_ != nullptr) process_->Stop();
}

std::vector<int> ActiveJob::WorkerPids() {
  absl::MutexLock lock(&process_mu_);
  if (process_ == nullptr) return {};
  const std::vector<pid_t> pids = process_->pids();
  return std::vector<int>(pids.begin(), pids.end());
}

JobQueue::JobQueue(JobQueueOptions options, JobStore* jobs, JobContext* context,
                   FinalStateJournal* journal)
    : options_(options), jobs_(jobs), context_(context), journal_(journal) {}

int JobQueue::RecoverFinalStates() {
  if (journal_ == nullptr) return 0;
  int written = 0;
  for (const pb::Job& kept : journal_->Records()) {
    const std::string& id = kept.id();
    absl::StatusOr<pb::Job> stored = jobs_->GetJob(id);
    if (absl::IsNotFound(stored.status()) || (stored.ok() && IsFinalJobState(stored->state()))) {
      ForgetJournaled(id);  // deleted, or written after all before the stop
      continue;
    }
    pb::Job job = stored.ok() ? *stored : kept;
    job.set_state(kept.state());
    job.set_reason(kept.reason());
    *job.mutable_start_time() = kept.start_time();
    *job.mutable_end_time() = kept.end_time();
    if (kept.has_progress()) *job.mutable_progress() = kept.progress();
    const absl::Status s = stored.ok() ? jobs_->UpdateJob(job) : stored.status();
    if (context_->StoreWriteOk(
            s, "update_job", id,
            absl::StrCat("its ", JobStateName(job.state()), " state, kept across the restart in ",
                         journal_->path()))) {
      context_->Log(absl::StrCat("job ", id, ": its final state (", JobStateName(job.state()),
                                 "), which the job store refused before the restart, is "
                                 "written to it now from ",
                                 journal_->path()));
      {
        absl::MutexLock lock(&mu_);
        unwritten_finals_.erase(id);  // kept by an earlier try of the start
      }
      ForgetJournaled(id);
      ++written;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      unwritten_finals_[id] = UnwrittenFinal{job};
    }
    context_->Log(absl::StrCat("job ", id, ": its final state (", JobStateName(job.state()),
                               "), kept across the restart, is answered from memory and written "
                               "to the job store again later; the job is not run again"));
  }
  UpdateUnwrittenGauge();
  return written;
}

void JobQueue::ForgetJournaled(const std::string& id) {
  if (journal_ == nullptr) return;
  if (const absl::Status s = journal_->Forget(id); !s.ok()) {
    // Harmless: the next start finds the state written and frees the slot then.
    context_->Log(absl::StrCat("job ", id, ": cannot free its slot in ", journal_->path(), ": ",
                               s.message()));
  }
}

absl::Status JobQueue::Restore(pb::Job job) {
  {
    absl::MutexLock lock(&mu_);
    // Over (its end kept across the restart), or queued by an earlier try of the start.
    if (unwritten_finals_.count(job.id()) > 0 || active_.count(job.id()) > 0) {
      return absl::OkStatus();
    }
  }
  const bool was_running = job.state() == pb::JOB_STATE_RUNNING;
  auto active = std::make_shared<ActiveJob>(std::move(job));
  if (was_running) {
    active->job.mutable_progress()->set_resumes(active->job.progress().resumes() + 1);
  }
  active->job.set_state(pb::JOB_STATE_QUEUED);
  const std::string& id = active->id;
  if (absl::Status s = jobs_->UpdateJob(active->job);
      !context_->StoreWriteOk(s, "update_job", id, "its queued state after a restart")) {
    return s;
  }
  context_->Log(absl::StrCat("job ", id, " (", active->job.name(), ") queued again",
                             was_running ? " to resume after a restart" : ""));
  if (context_->metrics != nullptr) {
    context_->metrics->SetJobState(id, JobKindName(active->job.kind()), "queued");
  }
  {
    absl::MutexLock lock(&mu_);
    active_[id] = active;
    queue_.push_back(std::move(active));
  }
  changed_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<pb::Job> JobQueue::Enqueue(pb::Job job) {
  absl::ReleasableMutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  std::int64_t queued = 0;
  for (const auto& [id, active] : active_) {
    if (active->job.state() == pb::JOB_STATE_QUEUED) ++queued;
  }
  if (queued >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        queued, " jobs are queued, the limit (jobs.max_queued) is ", options_.max_queued));
  }
  TS_RETURN_IF_ERROR(CheckIdentityQuota(job));
  job.set_state(pb::JOB_STATE_QUEUED);
  SetTimestamp(context_->clock->Now(), job.mutable_create_time());
  auto stored = jobs_->CreateJob(std::move(job));
  if (!context_->StoreWriteOk(stored.status(), "create_job", "(new)", "a submitted job")) {
    return stored.status();
  }
  auto active = std::make_shared<ActiveJob>(*stored);
  active_[stored->id()] = active;
  queue_.push_back(std::move(active));
  lock.Release();
  changed_cv_.SignalAll();
  if (context_->metrics != nullptr) {
    context_->metrics->SetJobState(stored->id(), JobKindName(stored->kind()), "queued");
  }
  context_->Log(absl::StrCat("job ", stored->id(), " (", stored->name(), ", ",
                             JobKindName(stored->kind()), ") queued"));
  return *stored;
}

absl::Status JobQueue::CheckIdentityQuota(const pb::Job& job) const {
  const std::string& identity = job.submitted_by();
  if (!HasOwner(identity)) return absl::OkStatus();
  std::int64_t queued = 0;
  std::int64_t steps = 0;
  for (const auto& [id, active] : active_) {
    if (active->job.submitted_by() != identity || IsFinalJobState(active->job.state())) continue;
    if (active->job.state() == pb::JOB_STATE_QUEUED) ++queued;
    steps += StepsOf(active->job);
  }
  const std::int64_t max_queued = options_.per_identity_max_queued;
  if (max_queued > 0 && queued >= max_queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat(identity, " has ", queued, " jobs queued, the limit (jobs.per_identity.",
                     "max_queued) is ", max_queued, "; wait for one to start or cancel one"));
  }
  const std::int64_t max_steps = options_.per_identity_max_total_steps;
  if (max_steps > 0 && steps + StepsOf(job) > max_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat(identity, " has ", steps, " steps in unfinished jobs; with this job's ",
                     StepsOf(job), " that is ", steps + StepsOf(job),
                     ", over the limit (jobs.per_identity.max_total_steps) of ", max_steps));
  }
  return absl::OkStatus();
}

std::deque<std::shared_ptr<ActiveJob>>::const_iterator JobQueue::Startable() const {
  // The first job whose identity is under jobs.per_identity.max_running; it starts when its
  // memory estimate fits beside the running jobs' (or nothing runs): jobs.memory_budget_bytes
  // holds for all jobs together, and a later, smaller job does not pass it.
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const std::string& identity = (*it)->job.submitted_by();
    if (options_.per_identity_max_running > 0 && HasOwner(identity)) {
      const auto running = running_by_identity_.find(identity);
      if (running != running_by_identity_.end() &&
          running->second >= options_.per_identity_max_running) {
        continue;
      }
    }
    const std::int64_t need = MemoryEstimate((*it)->job);
    const bool fits =
        running_memory_ == 0 || running_memory_ + need <= options_.memory_budget_bytes;
    return fits ? it : queue_.end();
  }
  return queue_.end();
}

bool JobQueue::HeadMayStartOrStopping() const { return stopping_ || Startable() != queue_.end(); }

std::shared_ptr<ActiveJob> JobQueue::Next() {
  absl::MutexLock lock(&mu_);
  while (!HeadMayStartOrStopping()) {
    context_->clock->WaitUntil(changed_cv_, mu_, absl::InfiniteFuture());
  }
  if (stopping_) return nullptr;
  const auto startable = Startable();
  std::shared_ptr<ActiveJob> active = *startable;
  queue_.erase(startable);
  running_memory_ += MemoryEstimate(active->job);
  if (HasOwner(active->job.submitted_by())) ++running_by_identity_[active->job.submitted_by()];
  return active;
}

void JobQueue::Release(const ActiveJob& active) {
  {
    absl::MutexLock lock(&mu_);
    running_memory_ -= MemoryEstimate(active.job);
    const std::string& identity = active.job.submitted_by();
    if (const auto it = running_by_identity_.find(identity);
        it != running_by_identity_.end() && --it->second <= 0) {
      running_by_identity_.erase(it);
    }
    active_.erase(active.id);
  }
  changed_cv_.SignalAll();
}

absl::StatusOr<pb::Job> JobQueue::Get(const std::string& id) const {
  {
    absl::MutexLock lock(&mu_);
    if (const auto it = active_.find(id); it != active_.end()) return it->second->job;
    // The store holds an older snapshot (RUNNING) of a job that has ended: never answer that.
    if (const auto it = unwritten_finals_.find(id); it != unwritten_finals_.end()) {
      return it->second.job;
    }
  }
  return jobs_->GetJob(id);
}

absl::StatusOr<pb::ListJobsResponse> JobQueue::List(const pb::ListJobsRequest& request,
                                                    const std::string& owner) const {
  // What Get answers where it is not the store's record: the queued and running jobs' snapshots
  // and the final states the store has not taken. The store lists and filters them in their place.
  std::map<std::string, pb::Job> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, unwritten] : unwritten_finals_) pending.emplace(id, unwritten.job);
    for (const auto& [id, active] : active_) pending.insert_or_assign(id, active->job);
  }
  return jobs_->ListJobs(request, pending, owner);
}

absl::StatusOr<pb::Job> JobQueue::Cancel(const std::string& id) {
  std::shared_ptr<ActiveJob> active;
  bool was_queued = false;
  {
    absl::MutexLock lock(&mu_);
    if (const auto it = active_.find(id); it != active_.end()) {
      // A job that just finished is still here until its runner lets go of it.
      if (IsFinalJobState(it->second->job.state())) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " is already ", JobStateName(it->second->job.state())));
      }
      active = it->second;
      active->cancel = true;
      // Still waiting (not yet taken by a runner): cancelled here; otherwise the runner stops it.
      if (const auto q = std::find(queue_.begin(), queue_.end(), active); q != queue_.end()) {
        was_queued = true;
        queue_.erase(q);
        active_.erase(id);
      }
    }
  }
  if (active == nullptr) {
    TS_ASSIGN_OR_RETURN(auto job, Get(id));
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is already ", JobStateName(job.state())));
  }
  if (was_queued) {
    changed_cv_.SignalAll();  // a new head may start
    SetState(*active, pb::JOB_STATE_CANCELLED, "cancelled by request while queued");
  } else {
    active->StopProcess();  // SIGTERM now, SIGKILL after jobs.stop_grace
  }
  return Snapshot(*active);
}

absl::Status JobQueue::CheckDeletable(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  // A job that just reached its final state may still be here for a moment (its runner letting
  // go of it); its record and files are final already.
  if (const auto it = active_.find(id);
      it != active_.end() && !IsFinalJobState(it->second->job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " is ", JobStateName(it->second->job.state()), "; cancel it first"));
  }
  if (const auto it = unwritten_finals_.find(id); it != unwritten_finals_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has ", JobStateName(it->second.job.state()),
                     ", but the job store has not taken its final state yet (it is written "
                     "again every few seconds); delete it once it has"));
  }
  for (const auto& [other_id, active] : active_) {
    if (IsFinalJobState(active->job.state())) continue;
    if (const char* field = UsesCheckpointOf(active->job, id); field != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " has a checkpoint that job ", other_id, " (",
                       JobStateName(active->job.state()), ") uses as its ", field,
                       "; delete it after that job has finished"));
    }
  }
  return absl::OkStatus();
}

void JobQueue::Update(ActiveJob& active, const std::function<void(pb::Job& job)>& change) {
  absl::MutexLock lock(&mu_);
  change(active.job);
}

pb::Job JobQueue::Snapshot(const ActiveJob& active) const {
  absl::MutexLock lock(&mu_);
  return active.job;
}

void JobQueue::Publish(ActiveJob& active, pb::JobEvent::Type type,
                       const pb::CheckpointInfo* checkpoint) {
  pb::JobEvent event;
  event.set_type(type);
  *event.mutable_job() = Snapshot(active);
  if (checkpoint != nullptr) *event.mutable_checkpoint() = *checkpoint;
  const bool final = type == pb::JobEvent::STATE && IsFinalJobState(event.job().state());
  const absl::Status written = jobs_->UpdateJob(event.job());
  const bool retry_unwritten =
      context_->StoreWriteOk(written, "update_job", event.job().id(),
                             absl::StrCat("its ", JobStateName(event.job().state()), " snapshot (",
                                          pb::JobEvent::Type_Name(type), " event)"));
  const bool keep = final && !written.ok() && !absl::IsNotFound(written);
  if (keep) {
    // The journal's slot is allocated already: a full disk does not refuse it.
    const absl::Status journaled = journal_ != nullptr
                                       ? journal_->Keep(event.job())
                                       : absl::FailedPreconditionError("there is no journal");
    context_->Log(absl::StrCat(
        "job ", event.job().id(), ": its final state (", JobStateName(event.job().state()),
        ") is kept in memory and written to the job store again later",
        journaled.ok() ? absl::StrCat("; kept in ", journal_->path(), " across a restart")
                       : absl::StrCat("; a restart before then runs the job again (",
                                      journaled.message(), ")")));
  }
  {
    absl::MutexLock lock(&mu_);  // orders events after a Watch snapshot taken under mu_
    // Kept before the runner releases the job, so that no read falls through to the store's
    // older snapshot. A job whose record is gone (deleted underneath) has nothing to update.
    if (keep) unwritten_finals_[event.job().id()] = UnwrittenFinal{event.job()};
    absl::MutexLock watch_lock(&watch_mu_);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->second.job_id != event.job().id()) {
        ++it;
        continue;
      }
      it->second.listener(event);
      it = final ? watchers_.erase(it) : std::next(it);
    }
  }
  if (keep) UpdateUnwrittenGauge();
  // The store took a write: it may take the final states it refused before.
  if (retry_unwritten) WriteUnwrittenFinalStates();
}

int JobQueue::WriteUnwrittenFinalStates() {
  std::vector<pb::Job> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, unwritten] : unwritten_finals_) pending.push_back(unwritten.job);
  }
  if (pending.empty()) return 0;
  for (const pb::Job& job : pending) {
    const absl::Status written = jobs_->UpdateJob(job);
    absl::MutexLock lock(&mu_);
    const auto it = unwritten_finals_.find(job.id());
    if (it == unwritten_finals_.end()) continue;  // another thread wrote it
    if (!written.ok() && !absl::IsNotFound(written)) {
      ++it->second.attempts;
      continue;
    }
    context_->Log(
        written.ok()
            ? absl::StrCat("job ", job.id(), ": its final state (", JobStateName(job.state()),
                           ") is written to the job store now, after ", it->second.attempts + 1,
                           " attempts")
            : absl::StrCat("job ", job.id(), ": its final state (", JobStateName(job.state()),
                           ") was never written to the job store: its record is gone (",
                           written.message(), ")"));
    unwritten_finals_.erase(it);
    ForgetJournaled(job.id());
  }
  return UpdateUnwrittenGauge();
}

void JobQueue::RunFinalStateRetries() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time next = context_->clock->Now() + options_.final_state_retry_interval;
      while (!stopping_ && context_->clock->Now() < next) {
        context_->clock->WaitUntil(stop_cv_, mu_, next);
      }
      if (stopping_) return;
    }
    WriteUnwrittenFinalStates();
  }
}

int JobQueue::UpdateUnwrittenGauge() {
  // gauge_mu_ orders the gauge's updates as the counts they read; the metrics are not called
  // under mu_ (a scrape calls back into RunningWorkers).
  absl::MutexLock gauge_lock(&gauge_mu_);
  std::size_t unwritten = 0;
  {
    absl::MutexLock lock(&mu_);
    unwritten = unwritten_finals_.size();
  }
  if (context_->metrics != nullptr) {
    context_->metrics->SetJobFinalStatesUnwritten(static_cast<std::int64_t>(unwritten));
  }
  return static_cast<int>(unwritten);
}

void JobQueue::SetState(ActiveJob& active, pb::JobState state, const std::string& reason) {
  std::string id, kind;
  {
    absl::MutexLock lock(&mu_);
    active.job.set_state(state);
    active.job.set_reason(reason);
    if (state == pb::JOB_STATE_RUNNING && !active.job.has_start_time()) {
      SetTimestamp(context_->clock->Now(), active.job.mutable_start_time());
    }
    if (IsFinalJobState(state)) {
      SetTimestamp(context_->clock->Now(), active.job.mutable_end_time());
      active.job.mutable_progress()->clear_eta_seconds();  // nothing is left
    }
    id = active.job.id();
    kind = JobKindName(active.job.kind());
  }
  if (context_->metrics != nullptr) {
    context_->metrics->SetJobState(id, kind, JobStateName(state));
    if (IsFinalJobState(state)) context_->metrics->RecordJobFinished(kind, JobStateName(state));
  }
  context_->Log(
      absl::StrCat("job ", id, " ", JobStateName(state), reason.empty() ? "" : ": ", reason));
  Publish(active, pb::JobEvent::STATE);
}

absl::StatusOr<std::int64_t> JobQueue::Watch(const std::string& id, Listener listener) {
  // Registering under mu_ orders the snapshot before any later event of the job.
  absl::MutexLock lock(&mu_);
  pb::JobEvent snapshot;
  snapshot.set_type(pb::JobEvent::SNAPSHOT);
  if (const auto it = active_.find(id); it != active_.end()) {
    *snapshot.mutable_job() = it->second->job;
  } else if (const auto unwritten = unwritten_finals_.find(id);
             unwritten != unwritten_finals_.end()) {
    *snapshot.mutable_job() = unwritten->second.job;
  } else {
    TS_ASSIGN_OR_RETURN(*snapshot.mutable_job(), jobs_->GetJob(id));
  }
  listener(snapshot);
  if (IsFinalJobState(snapshot.job().state())) return 0;
  absl::MutexLock watch_lock(&watch_mu_);
  const std::int64_t handle = next_watch_++;
  watchers_[handle] = {id, std::move(listener)};
  return handle;
}

void JobQueue::Unwatch(std::int64_t handle) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(handle);
}

void JobQueue::Stop() {
  std::vector<std::shared_ptr<ActiveJob>> active;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const auto& [id, job] : active_) active.push_back(job);
  }
  changed_cv_.SignalAll();
  stop_cv_.SignalAll();
  // Running workers stop at their next step boundary and save their state (SIGTERM).
  for (const auto& job : active) job->StopProcess();
  // Open watches end now (an event of type TYPE_UNSPECIFIED says so): their jobs will not reach
  // a final state in this process.
  absl::MutexLock lock(&watch_mu_);
  const pb::JobEvent closing;
  for (auto& [handle, watcher] : watchers_) watcher.listener(closing);
  watchers_.clear();
}

bool JobQueue::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

std::vector<std::pair<std::string, std::vector<int>>> JobQueue::RunningWorkers() const {
  std::vector<std::shared_ptr<ActiveJob>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, active] : active_) jobs.push_back(active);
  }
  std::vector<std::pair<std::string, std::vector<int>>> running;
  for (const auto& active : jobs) {
    std::vector<int> pids = active->WorkerPids();
    if (!pids.empty()) running.emplace_back(active->id, std::move(pids));
  }
  return running;
}

}  // namespace ts::server

#include "server/jobs/job_manager.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "server/jobs/process_worker_launcher.h"
#include "server/serving/model_registry.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

JobQueueOptions QueueOptions(const JobsConfig& jobs) {
  JobQueueOptions options;
  options.max_queued = jobs.max_queued;
  options.memory_budget_bytes = MemoryBudgetBytes(jobs);
  options.per_identity_max_queued = jobs.per_identity.max_queued;
  options.per_identity_max_running = jobs.per_identity.max_running;
  options.per_identity_max_total_steps = jobs.per_identity.max_total_steps;
  return options;
}

}  // namespace

JobManager::JobManager(JobManagerOptions options, std::unique_ptr<StoreDatabase> database,
                       std::unique_ptr<FinalStateJournal> journal, DataRoot data_root,
                       ModelRegistry* registry, Metrics* metrics, Clock* clock)
    : options_(std::move(options)),
      database_(std::move(database)),
      journal_(std::move(journal)),
      jobs_(database_.get(), clock),
      history_(database_.get()),
      promotions_(database_.get()),
      data_root_(std::move(data_root)),
      context_(metrics, clock, options_.log),
      queue_(QueueOptions(options_.jobs), &jobs_, &context_, journal_.get()),
      checkpoints_(&data_root_, &queue_),
      admission_(options_.jobs, options_.num_cores, &data_root_, &checkpoints_, registry),
      recorder_(&queue_, &history_, &context_),
      own_launcher_(options_.worker_launcher == nullptr ? std::make_unique<ProcessWorkerLauncher>()
                                                        : nullptr),
      runner_(JobRunnerOptions{options_.jobs, (fs::path(options_.state_dir) / "jobs").string(),
                               data_root_.root(), options_.heap_keep_freed_bytes},
              &queue_, &recorder_, &checkpoints_, registry, &context_,
              own_launcher_ != nullptr ? own_launcher_.get() : options_.worker_launcher),
      deleter_((fs::path(options_.state_dir) / "jobs").string(), &queue_, &jobs_, &context_),
      promoter_(CheckpointPromoterOptions{(fs::path(options_.state_dir) / "models").string(),
                                          options_.promoted_model_defaults,
                                          options_.configured_models, options_.on_model_served},
                &checkpoints_, registry, &promotions_, &context_) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobManagerOptions options,
                                                               ModelRegistry* registry,
                                                               Metrics* metrics, Clock* clock) {
  // threads_per_job 0 (automatic) becomes this machine's number once, before any spec uses it.
  options.jobs.threads_per_job = ThreadsPerJob(options.jobs, options.num_cores);
  TS_RETURN_IF_ERROR(CreateDirectories(options.state_dir));
  // One server per state directory: before anything in it is read, so a second server started
  // on it changes nothing (issue 45: two servers ran one job into the same files).
  TS_ASSIGN_OR_RETURN(auto state_lock, DirectoryLock::Acquire(options.state_dir));
  TS_RETURN_IF_ERROR(CreateDirectories(options.data_root));
  TS_ASSIGN_OR_RETURN(auto data_root, DataRoot::Create(options.data_root));
  // A store that cannot be written is opened read-only (a full disk must not keep the server and
  // its serving from starting); one whose content is refused fails the start.
  TS_ASSIGN_OR_RETURN(auto database, StoreDatabase::OpenOrReadOnly(
                                         (fs::path(options.state_dir) / "jobs.db").string()));
  // Every job that can be queued or running at once can end with its final state refused.
  const int slots = static_cast<int>(std::clamp<std::int64_t>(
      options.jobs.max_queued + std::max(1, options.jobs.max_concurrent), 64, 4096));
  auto journal =
      FinalStateJournal::Open((fs::path(options.state_dir) / "final_states").string(), slots);
  const absl::Status journal_status = journal.status();
  // Paths in what clients see: data files relative to the data root, the rest by its key. Both
  // the configured and the canonical spelling (a symlinked or relative state_dir).
  std::vector<ServerDir> client_dirs = {{data_root.root(), "", "the data root"}};
  std::error_code error;
  for (const fs::path& state :
       {fs::absolute(options.state_dir, error), fs::weakly_canonical(options.state_dir, error)}) {
    std::string dir = state.lexically_normal().string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (!dir.empty()) client_dirs.push_back({dir, "<state_dir>/", "<state_dir>"});
  }
  std::string data_dir = fs::absolute(options.data_root, error).lexically_normal().string();
  while (data_dir.size() > 1 && data_dir.back() == '/') data_dir.pop_back();
  if (!data_dir.empty()) client_dirs.push_back({data_dir, "", "the data root"});
  std::unique_ptr<JobManager> manager(new JobManager(
      std::move(options), std::move(database), journal.ok() ? *std::move(journal) : nullptr,
      std::move(data_root), registry, metrics, clock));
  manager->state_lock_ = std::move(state_lock);
  manager->context_.client_dirs = std::move(client_dirs);
  if (!journal_status.ok()) {
    manager->context_.Log(absl::StrCat(
        "final states the job store refuses are kept in memory only (a restart before they are "
        "written runs their jobs again): ",
        journal_status.message()));
  }
  // The dashboard shows recent jobs' states from the start; a finished job's series expire
  // metrics_finished_job_series_s after its end, not after this start.
  if (metrics != nullptr) {
    pb::ListJobsRequest recent;
    recent.set_page_size(200);
    if (auto listed = manager->jobs_.ListJobs(recent); listed.ok()) {
      for (const auto& job : listed->jobs()) {
        std::optional<absl::Time> finished;
        if (IsFinalJobState(job.state()) && job.has_end_time()) {
          finished = absl::FromUnixSeconds(job.end_time().seconds()) +
                     absl::Nanoseconds(job.end_time().nanos());
        }
        metrics->SetJobState(job.id(), JobKindName(job.kind()), JobStateName(job.state()),
                             finished);
      }
    }
  }
  if (const absl::Status opened = manager->database_->WriteError(); !opened.ok()) {
    manager->context_.Log(
        absl::StrCat("the job store cannot be written (open_store): ", opened.message()));
    if (metrics != nullptr) metrics->RecordJobStoreError("open_store");
    // Read-only, the final states the journal kept are answered from memory meanwhile (their
    // writes are refused, logged and counted once here; StartJobs writes them later).
    manager->queue_.RecoverFinalStates();
  }
  if (const absl::Status started = manager->StartJobs(); !started.ok()) {
    manager->context_.Log(absl::StrCat(
        "jobs are read-only until the job store takes writes (tried every ",
        absl::FormatDuration(kStoreRetryInterval),
        "): GetJob, ListJobs, GetJobHistory and WatchJob answer; submissions, cancellations, "
        "deletions and promotions are refused; queued and interrupted jobs wait: ",
        started.message()));
  }
  if (metrics != nullptr) {
    // Scrapes read the running workers' memory and CPU (Shutdown unsets this).
    metrics->SetWorkerSource([m = manager.get()] {
      std::vector<Metrics::WorkerProcess> workers;
      for (const auto& [id, pids] : m->queue_.RunningWorkers()) {
        for (std::size_t rank = 0; rank < pids.size(); ++rank) {
          workers.push_back({id, static_cast<int>(rank), pids[rank]});
        }
      }
      return workers;
    });
  }
  const JobsConfig& jobs = manager->options_.jobs;
  if (jobs.retention > absl::ZeroDuration()) {
    manager->workers_.emplace_back([m = manager.get(), &jobs] {
      m->deleter_.RunRetention(jobs.retention, jobs.retention_sweep_interval);
    });
  }
  manager->workers_.emplace_back([m = manager.get()] { m->queue_.RunFinalStateRetries(); });
  if (!manager->CheckStarted().ok()) {
    manager->workers_.emplace_back([m = manager.get()] { m->RetryStart(); });
  }
  const int workers = std::max(1, jobs.max_concurrent);
  for (int i = 0; i < workers; ++i) {
    manager->workers_.emplace_back([m = manager.get()] { m->WorkerLoop(); });
  }
  return manager;
}

absl::Status JobManager::StartJobs() {
  {
    absl::MutexLock lock(&start_mu_);
    if (started_) return absl::OkStatus();
  }
  absl::Status status = [&]() -> absl::Status {
    TS_RETURN_IF_ERROR(database_->ReopenWritable());
    // Before the interrupted jobs: a job whose end was kept is over, not interrupted.
    queue_.RecoverFinalStates();
    TS_ASSIGN_OR_RETURN(auto unfinished, jobs_.UnfinishedJobs());
    for (auto& job : unfinished) TS_RETURN_IF_ERROR(queue_.Restore(std::move(job)));
    return absl::OkStatus();
  }();
  absl::MutexLock lock(&start_mu_);
  started_ = status.ok();
  start_error_ = status;
  return status;
}

void JobManager::RetryStart() {
  for (int attempt = 2;; ++attempt) {
    {
      absl::MutexLock lock(&start_mu_);
      const absl::Time next = context_.clock->Now() + kStoreRetryInterval;
      while (!stopping_ && context_.clock->Now() < next) {
        context_.clock->WaitUntil(start_cv_, start_mu_, next);
      }
      if (stopping_) return;
    }
    if (StartJobs().ok()) {
      context_.Log(absl::StrCat("the job store takes writes again (attempt ", attempt,
                                "): jobs are read-write, and the queued and interrupted ones "
                                "are queued again"));
      return;
    }
    // Every failed attempt counts: the counter rises as long as the store stays read-only.
    if (context_.metrics != nullptr) context_.metrics->RecordJobStoreError("open_store");
  }
}

absl::Status JobManager::CheckStarted() const {
  absl::MutexLock lock(&start_mu_);
  if (started_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "jobs are read-only: the job store could not take the writes of the server's start (",
      start_error_.message(), "); they are tried again every ",
      absl::FormatDuration(kStoreRetryInterval)));
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  if (context_.metrics != nullptr) context_.metrics->SetWorkerSource(nullptr);
  {
    absl::MutexLock lock(&start_mu_);
    stopping_ = true;
  }
  start_cv_.SignalAll();
  queue_.Stop();
  deleter_.StopRetention();
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  workers_.clear();
  // The last chance to write a final state the store refused; unwritten, the journal keeps it
  // for the next start.
  if (const int unwritten = queue_.WriteUnwrittenFinalStates(); unwritten > 0) {
    context_.Log(absl::StrCat(
        unwritten, " finished job(s) whose final state the job store refused are not ended in it: ",
        journal_ != nullptr
            ? absl::StrCat("kept in ", journal_->path(), ", written on the next start")
            : "without a journal, they are queued again and resume on the next start"));
  }
}

void JobManager::WorkerLoop() {
  while (const std::shared_ptr<ActiveJob> active = queue_.Next()) {
    runner_.Run(*active);
    queue_.Release(*active);
  }
}

void JobManager::RestorePromotions() { promoter_.RestorePromotions(); }

absl::StatusOr<pb::Job> JobManager::SubmitTraining(pb::TrainingSpec spec,
                                                   const std::string& submitter) {
  TS_RETURN_IF_ERROR(CheckStarted());
  TS_ASSIGN_OR_RETURN(auto job, admission_.Training(std::move(spec)));
  job.set_submitted_by(submitter);
  return queue_.Enqueue(std::move(job));
}

absl::StatusOr<pb::Job> JobManager::SubmitEvaluation(pb::EvaluationSpec spec,
                                                     const std::string& submitter) {
  TS_RETURN_IF_ERROR(CheckStarted());
  TS_ASSIGN_OR_RETURN(auto job, admission_.Evaluation(std::move(spec)));
  job.set_submitted_by(submitter);
  return queue_.Enqueue(std::move(job));
}

absl::StatusOr<pb::Job> JobManager::GetJob(const std::string& id) const { return queue_.Get(id); }

absl::StatusOr<pb::ListJobsResponse> JobManager::ListJobs(const pb::ListJobsRequest& request,
                                                          const std::string& owner) const {
  return queue_.List(request, owner);
}

absl::StatusOr<pb::GetJobHistoryResponse> JobManager::GetJobHistory(
    const pb::GetJobHistoryRequest& request) const {
  return history_.History(request);
}

absl::StatusOr<pb::Job> JobManager::CancelJob(const std::string& id) {
  TS_RETURN_IF_ERROR(CheckStarted());
  return queue_.Cancel(id);
}

absl::StatusOr<pb::DeleteJobResponse> JobManager::DeleteJob(const std::string& id,
                                                            const std::string& reason) {
  TS_RETURN_IF_ERROR(CheckStarted());
  return deleter_.Delete(id, reason);
}

absl::StatusOr<std::int64_t> JobManager::Watch(const std::string& id, Listener listener) {
  return queue_.Watch(id, std::move(listener));
}

void JobManager::Unwatch(std::int64_t handle) { queue_.Unwatch(handle); }

absl::StatusOr<Promotion> JobManager::Promote(const pb::PromoteCheckpointRequest& request,
                                              const std::string& actor) {
  TS_RETURN_IF_ERROR(CheckStarted());
  return promoter_.Promote(request, actor);
}

absl::StatusOr<Promotion> JobManager::RollbackPromotion(const std::string& model,
                                                        const std::string& actor) {
  TS_RETURN_IF_ERROR(CheckStarted());
  return promoter_.Rollback(model, actor);
}

absl::StatusOr<std::vector<PromotionRecord>> JobManager::PromotionHistory(
    const std::string& model) const {
  return promoter_.History(model);
}

absl::StatusOr<std::unique_ptr<CheckpointFileReader>> JobManager::OpenCheckpoint(
    const pb::DownloadCheckpointRequest& request) const {
  TS_RETURN_IF_ERROR(ValidateDownloadRequest(request));
  if (request.source_case() == pb::DownloadCheckpointRequest::kJobId) {
    const bool last = request.which() == pb::CHECKPOINT_CHOICE_LAST;
    TS_ASSIGN_OR_RETURN(
        const std::string path,
        Prefixed(checkpoints_.JobCheckpoint(request.job_id(), request.which()), "job_id: "));
    const std::string choice = last ? "last" : "best";
    return CheckpointFileReader::Open(path, absl::StrCat("checkpoint of job ", request.job_id()),
                                      absl::StrCat("job:", request.job_id(), ":", choice),
                                      absl::StrCat(request.job_id(), "-", choice));
  }
  TS_ASSIGN_OR_RETURN(const ServedCheckpoint served,
                      Prefixed(promoter_.ServedCheckpointOf(request.model()), "model: "));
  TS_ASSIGN_OR_RETURN(auto reader,
                      CheckpointFileReader::Open(
                          served.path, absl::StrCat("checkpoint of model '", request.model(), "'"),
                          absl::StrCat("model:", request.model()), request.model()));
  if (reader->header().version() != served.version) {
    return absl::DataLossError(absl::StrCat(
        "model '", request.model(), "': its checkpoint file ", served.path, " holds version ",
        reader->header().version(), ", not the served ", served.version, " (replaced on disk)"));
  }
  return reader;
}

}  // namespace ts::server

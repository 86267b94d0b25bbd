#include "server/job_manager.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "model/atomic_file.h"
#include "model/checkpoint.h"
#include "model/cost_model.h"
#include "model/quoted.h"
#include "server/job_process.h"
#include "server/job_spec.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

constexpr char kAccuracyKey[] = "validation_accuracy";

std::string KindName(pb::JobKind kind) {
  return kind == pb::JOB_KIND_EVALUATION ? "evaluation" : "training";
}

std::string StateName(pb::JobState state) {
  switch (state) {
    case pb::JOB_STATE_QUEUED:
      return "queued";
    case pb::JOB_STATE_RUNNING:
      return "running";
    case pb::JOB_STATE_SUCCEEDED:
      return "succeeded";
    case pb::JOB_STATE_FAILED:
      return "failed";
    case pb::JOB_STATE_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

bool IsFinal(pb::JobState state) {
  return state == pb::JOB_STATE_SUCCEEDED || state == pb::JOB_STATE_FAILED ||
         state == pb::JOB_STATE_CANCELLED;
}

void SetTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  const std::int64_t seconds = absl::ToUnixSeconds(time);
  out->set_seconds(seconds);
  out->set_nanos(
      static_cast<std::int32_t>((time - absl::FromUnixSeconds(seconds)) / absl::Nanoseconds(1)));
}

// The same name rule as configured models.
absl::Status CheckModelName(const std::string& name) {
  if (!IsValidName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: must match ", kNameRule, ", got ", Quoted(name)));
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const absl::Status& status, const std::string& prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

std::optional<double> RecordedAccuracy(const CheckpointMetadata& metadata) {
  const auto it = metadata.provenance.find(kAccuracyKey);
  double value = 0;
  if (it == metadata.provenance.end() || !absl::SimpleAtod(it->second, &value)) return {};
  return value;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

absl::Status MakeDirectories(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace

struct JobManager::Active {
  pb::Job job;  // guarded by JobManager::mu_ for reads from other threads
  std::atomic<bool> cancel{false};
  absl::Mutex process_mu;
  JobProcess* process ABSL_GUARDED_BY(process_mu) = nullptr;  // while its workers run
  // Stops the workers (cancel, shutdown); they are told again if they start later.
  void StopProcess() {
    absl::MutexLock lock(&process_mu);
    if (process != nullptr) process->Stop();
  }
};

// --------------------------------------------------------------------------------------------
// Construction, restore, shutdown

JobManager::JobManager(JobManagerOptions options, std::unique_ptr<JobStore> store,
                       DataRoot data_root, ModelRegistry* registry, Metrics* metrics, Clock* clock)
    : options_(std::move(options)),
      store_(std::move(store)),
      data_root_(std::move(data_root)),
      registry_(registry),
      metrics_(metrics),
      clock_(clock),
      memory_budget_(MemoryBudgetBytes(options_.jobs)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobManagerOptions options,
                                                               ModelRegistry* registry,
                                                               Metrics* metrics, Clock* clock) {
  // threads_per_job 0 (automatic) becomes this machine's number once, before any spec uses it.
  options.jobs.threads_per_job = ThreadsPerJob(options.jobs, options.num_cores);
  if (auto s = MakeDirectories(options.state_dir); !s.ok()) return s;
  if (auto s = MakeDirectories(options.data_root); !s.ok()) return s;
  auto data_root = DataRoot::Create(options.data_root);
  if (!data_root.ok()) return data_root.status();
  auto store = JobStore::Open((fs::path(options.state_dir) / "jobs.db").string());
  if (!store.ok()) return store.status();
  auto unfinished = (*store)->UnfinishedJobs();
  if (!unfinished.ok()) return unfinished.status();

  std::unique_ptr<JobManager> manager(new JobManager(
      std::move(options), std::move(*store), std::move(*data_root), registry, metrics, clock));
  // The dashboard shows recent jobs' states from the start.
  if (metrics != nullptr) {
    pb::ListJobsRequest recent;
    recent.set_page_size(200);
    if (auto listed = manager->store_->ListJobs(recent); listed.ok()) {
      for (const auto& job : listed->jobs()) {
        metrics->SetJobState(job.id(), KindName(job.kind()), StateName(job.state()));
      }
    }
  }
  for (auto& job : *unfinished) {
    auto active = std::make_shared<Active>();
    const bool was_running = job.state() == pb::JOB_STATE_RUNNING;
    active->job = std::move(job);
    if (was_running) {
      active->job.mutable_progress()->set_resumes(active->job.progress().resumes() + 1);
    }
    active->job.set_state(pb::JOB_STATE_QUEUED);
    if (auto s = manager->store_->UpdateJob(active->job); !s.ok()) return s;
    manager->Log(absl::StrCat("job ", active->job.id(), " (", active->job.name(), ") queued again",
                              was_running ? " to resume after a restart" : ""));
    if (metrics != nullptr) {
      metrics->SetJobState(active->job.id(), KindName(active->job.kind()), "queued");
    }
    absl::MutexLock lock(&manager->mu_);
    manager->active_[active->job.id()] = active;
    manager->queue_.push_back(active);
  }
  if (manager->options_.jobs.retention > absl::ZeroDuration()) {
    manager->workers_.emplace_back([m = manager.get()] { m->RetentionLoop(); });
  }
  const int workers = std::max(1, manager->options_.jobs.max_concurrent);
  for (int i = 0; i < workers; ++i) {
    manager->workers_.emplace_back([m = manager.get()] { m->WorkerLoop(); });
  }
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  std::vector<std::shared_ptr<Active>> running;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    retention_cv_.SignalAll();
    for (const auto& [id, active] : active_) running.push_back(active);
  }
  // Running workers stop at their next step boundary and save their state (SIGTERM).
  for (const auto& active : running) active->StopProcess();
  {
    // Open watches end now (an event of type TYPE_UNSPECIFIED says so): their jobs will not
    // reach a final state in this process.
    absl::MutexLock lock(&watch_mu_);
    const pb::JobEvent closing;
    for (auto& [handle, watcher] : watchers_) watcher.listener(closing);
    watchers_.clear();
  }
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  workers_.clear();
}

void JobManager::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

std::string JobManager::JobDir(const std::string& id) const {
  return (fs::path(options_.state_dir) / "jobs" / id).string();
}

void JobManager::RestorePromotions() {
  auto promotions = store_->CurrentPromotions();
  if (!promotions.ok()) {
    Log(absl::StrCat("cannot read promotions: ", promotions.status().message()));
    return;
  }
  for (const auto& record : *promotions) {
    ModelConfig config = options_.promoted_model_defaults;
    if (const auto current = registry_->Find(record.model); current != nullptr) {
      config = current->config();
    }
    config.name = record.model;
    config.checkpoint = record.checkpoint;
    auto loaded = LoadCheckpoint(record.checkpoint);
    if (loaded.ok() && config.max_length > loaded->options.max_length()) config.max_length = 0;
    auto model = ServedModel::Load(config, metrics_, clock_);
    if (!model.ok()) {
      Log(absl::StrCat("promoted model '", record.model, "' version ", record.version,
                       " not restored: ", model.status().message()));
      continue;
    }
    const auto previous = registry_->Put(*model);
    if (previous != nullptr && metrics_ != nullptr && previous->version() != (*model)->version()) {
      metrics_->RemoveModelInfo(record.model, previous->version());
    }
    Log(absl::StrCat("model '", record.model, "' version ", (*model)->version(),
                     " restored from promotion (", record.source, ")"));
    if (options_.on_model_served) options_.on_model_served(record.model);
  }
}

// --------------------------------------------------------------------------------------------
// Submission and queries

absl::Status JobManager::CheckSourcePaths(const pb::DataSource& source,
                                          const std::string& field) const {
  if (source.format() == "listops" || source.path().empty()) return absl::OkStatus();
  auto resolved = data_root_.Resolve(source.path());
  if (!resolved.ok()) return Prefixed(resolved.status(), absl::StrCat(field, ".path: "));
  std::error_code error;
  if (!fs::exists(*resolved, error)) {
    return absl::NotFoundError(
        absl::StrCat(field, ".path: ", Quoted(source.path()), " does not exist in the data root"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::JobCheckpoint(const std::string& job_id,
                                                      pb::CheckpointChoice which) const {
  auto job = GetJob(job_id);
  if (!job.ok()) return job.status();
  if (job->kind() != pb::JOB_KIND_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is an evaluation job; it has no checkpoints"));
  }
  const pb::CheckpointInfo* best = nullptr;
  const pb::CheckpointInfo* last = nullptr;
  for (const auto& checkpoint : job->checkpoints()) {
    if (checkpoint.kind() == "best") best = &checkpoint;
    if (checkpoint.kind() == "last" && (last == nullptr || checkpoint.step() > last->step())) {
      last = &checkpoint;
    }
  }
  const pb::CheckpointInfo* chosen =
      which == pb::CHECKPOINT_CHOICE_LAST ? last : (best != nullptr ? best : last);
  if (chosen == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " (", StateName(job->state()), ") has no ",
        which == pb::CHECKPOINT_CHOICE_LAST ? "last" : "best or last", " checkpoint yet"));
  }
  return chosen->path();
}

absl::StatusOr<std::string> JobManager::ResolveCheckpointReference(const std::string& reference,
                                                                   const std::string& field) const {
  if (absl::StartsWith(reference, "job:")) {
    auto path = JobCheckpoint(reference.substr(4), pb::CHECKPOINT_CHOICE_BEST);
    return path.ok() ? path : Prefixed(path.status(), absl::StrCat(field, ": "));
  }
  auto resolved = data_root_.Resolve(reference);
  if (!resolved.ok()) return Prefixed(resolved.status(), absl::StrCat(field, ": "));
  std::error_code error;
  if (!fs::is_regular_file(*resolved, error)) {
    return absl::NotFoundError(
        absl::StrCat(field, ": ", Quoted(reference), " is not a file in the data root"));
  }
  return *resolved;
}

absl::StatusOr<pb::Job> JobManager::Enqueue(pb::Job job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  std::int64_t queued = 0;
  for (const auto& [id, active] : active_) {
    if (active->job.state() == pb::JOB_STATE_QUEUED) ++queued;
  }
  if (queued >= options_.jobs.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        queued, " jobs are queued, the limit (jobs.max_queued) is ", options_.jobs.max_queued));
  }
  job.set_state(pb::JOB_STATE_QUEUED);
  SetTimestamp(clock_->Now(), job.mutable_create_time());
  auto stored = store_->CreateJob(std::move(job));
  if (!stored.ok()) return stored.status();
  auto active = std::make_shared<Active>();
  active->job = *stored;
  active_[stored->id()] = active;
  queue_.push_back(active);
  if (metrics_ != nullptr) metrics_->SetJobState(stored->id(), KindName(stored->kind()), "queued");
  Log(absl::StrCat("job ", stored->id(), " (", stored->name(), ", ", KindName(stored->kind()),
                   ") queued"));
  return *stored;
}

absl::StatusOr<pb::Job> JobManager::SubmitTraining(pb::TrainingSpec spec) {
  if (!options_.jobs.enabled) {
    return absl::FailedPreconditionError("jobs are disabled on this server (jobs.enabled: false)");
  }
  if (auto s = NormalizeTrainingSpec(&spec, options_.jobs, options_.num_cores); !s.ok()) return s;
  if (auto s = CheckSourcePaths(spec.data().train(), "data.train"); !s.ok()) return s;
  if (spec.data().has_validation()) {
    if (auto s = CheckSourcePaths(spec.data().validation(), "data.validation"); !s.ok()) return s;
  }
  if (!spec.init_from().empty()) {
    auto path = ResolveCheckpointReference(spec.init_from(), "init_from");
    if (!path.ok()) return path.status();
  }
  const std::int64_t estimate = EstimateMemory(spec);
  const std::int64_t budget = MemoryBudgetBytes(options_.jobs);
  if (options_.jobs.memory_admission && estimate > budget) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the job's estimated peak memory is %d bytes (%.2f GiB over %d rank(s): batch_size %d, "
        "max_length %d, embed_dim %d, depth %d), more than jobs.memory_budget_bytes %d (%.2f GiB)",
        estimate, estimate / 1073741824.0, std::max<std::uint32_t>(spec.workers(), 1),
        spec.batch_size(), spec.model().max_length(), spec.model().embed_dim(),
        spec.model().depth(), budget, budget / 1073741824.0));
  }
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.set_name(spec.name());
  job.mutable_progress()->set_memory_estimate_bytes(static_cast<std::uint64_t>(estimate));
  *job.mutable_training() = std::move(spec);
  return Enqueue(std::move(job));
}

std::int64_t JobManager::EstimateMemory(const pb::TrainingSpec& spec) const {
  const int ranks = static_cast<int>(std::max<std::uint32_t>(spec.workers(), 1));
  // The data every rank holds: the files' sizes (a folder's files), or the generated examples.
  std::int64_t data_bytes = 0;
  for (const pb::DataSource* source : {&spec.data().train(), &spec.data().validation()}) {
    if (source->format() == "listops") {
      data_bytes += static_cast<std::int64_t>(source->generate().count() *
                                              (source->generate().max_length() + 64));
      continue;
    }
    if (source->path().empty()) continue;
    auto resolved = data_root_.Resolve(source->path());
    if (!resolved.ok()) continue;
    std::error_code error;
    if (fs::is_directory(*resolved, error)) {
      for (fs::recursive_directory_iterator it(*resolved, error), end; !error && it != end;
           it.increment(error)) {
        if (it->is_regular_file(error))
          data_bytes += static_cast<std::int64_t>(it->file_size(error));
      }
    } else {
      const auto size = fs::file_size(*resolved, error);
      if (!error) data_bytes += static_cast<std::int64_t>(size);
    }
  }
  TrainingMemoryShape shape;
  shape.batch = std::max<std::int64_t>(spec.batch_size(), 1) / ranks;
  shape.element_bytes = spec.dtype() == "float64" ? 8 : 4;
  shape.data_bytes = 2 * data_bytes;  // examples are copied once while loading
  shape.num_classes = std::max(spec.labels_size(), 16);
  if (spec.init_from().empty()) {
    const auto& m = spec.model();
    shape.embed_dim = m.embed_dim();
    shape.depth = m.depth();
    shape.heads = m.heads();
    shape.mlp_hidden = static_cast<std::int64_t>(std::llround(m.embed_dim() * m.mlp_ratio()));
    shape.max_length = m.max_length();
    shape.efficient = spec.path() == pb::ATTENTION_PATH_EFFICIENT;
  }
  TrainingMemoryEstimate estimate = EstimateTrainingMemory(shape);
  if (!spec.init_from().empty()) {
    // The shape is in the checkpoint, which the server does not load at submission: the
    // weights count (5 copies of the file), activations are not (the workers' limit holds).
    auto path = ResolveCheckpointReference(spec.init_from(), "init_from");
    std::error_code error;
    const auto size = path.ok() ? fs::file_size(*path, error) : 0;
    if (!error) estimate.total_bytes += 5 * static_cast<std::int64_t>(size);
  }
  return estimate.total_bytes * ranks;
}

absl::StatusOr<pb::Job> JobManager::SubmitEvaluation(pb::EvaluationSpec spec) {
  if (!options_.jobs.enabled) {
    return absl::FailedPreconditionError("jobs are disabled on this server (jobs.enabled: false)");
  }
  if (auto s = NormalizeEvaluationSpec(&spec, options_.jobs, options_.num_cores); !s.ok()) {
    return s;
  }
  if (auto s = CheckSourcePaths(spec.data(), "data"); !s.ok()) return s;
  switch (spec.target_case()) {
    case pb::EvaluationSpec::kModel:
      if (registry_->Find(spec.model()) == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("model: no served model named ", Quoted(spec.model())));
      }
      break;
    case pb::EvaluationSpec::kJobId:
      if (auto path = JobCheckpoint(spec.job_id(), pb::CHECKPOINT_CHOICE_BEST); !path.ok()) {
        return Prefixed(path.status(), "job_id: ");
      }
      break;
    case pb::EvaluationSpec::kCheckpoint:
      if (auto path = ResolveCheckpointReference(spec.checkpoint(), "checkpoint"); !path.ok()) {
        return path.status();
      }
      break;
    default:
      return absl::InvalidArgumentError("target: give one of model, job_id or checkpoint");
  }
  pb::Job job;
  job.set_kind(pb::JOB_KIND_EVALUATION);
  job.set_name(spec.name());
  *job.mutable_evaluation() = std::move(spec);
  return Enqueue(std::move(job));
}

absl::StatusOr<pb::Job> JobManager::GetJob(const std::string& id) const {
  {
    absl::MutexLock lock(&mu_);
    if (const auto it = active_.find(id); it != active_.end()) return it->second->job;
  }
  return store_->GetJob(id);
}

absl::StatusOr<pb::ListJobsResponse> JobManager::ListJobs(
    const pb::ListJobsRequest& request) const {
  return store_->ListJobs(request);
}

absl::StatusOr<pb::GetJobHistoryResponse> JobManager::GetJobHistory(
    const pb::GetJobHistoryRequest& request) const {
  return store_->History(request);
}

absl::StatusOr<pb::Job> JobManager::CancelJob(const std::string& id) {
  std::shared_ptr<Active> active;
  {
    absl::MutexLock lock(&mu_);
    if (const auto it = active_.find(id); it != active_.end()) {
      // A job that just finished is still here until its worker lets go of it.
      if (IsFinal(it->second->job.state())) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " is already ", StateName(it->second->job.state())));
      }
      active = it->second;
    }
  }
  if (active == nullptr) {
    auto job = store_->GetJob(id);
    if (!job.ok()) return job.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is already ", StateName(job->state())));
  }
  active->cancel = true;
  bool was_queued = false;
  {
    absl::MutexLock lock(&mu_);
    // Still waiting (not yet taken by a worker): cancelled here; otherwise the worker stops it.
    if (const auto it = std::find(queue_.begin(), queue_.end(), active); it != queue_.end()) {
      was_queued = true;
      queue_.erase(it);
      active_.erase(id);
    }
  }
  if (was_queued) {
    SetState(*active, pb::JOB_STATE_CANCELLED, "cancelled by request while queued");
  } else {
    active->StopProcess();  // SIGTERM now, SIGKILL after jobs.stop_grace
  }
  absl::MutexLock lock(&mu_);
  return active->job;
}

namespace {

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

absl::StatusOr<pb::DeleteJobResponse> JobManager::DeleteJob(const std::string& id,
                                                            const std::string& reason) {
  // Serialised with promotions, so that none is copying a checkpoint this removes.
  absl::MutexLock promote_lock(&promote_mu_);
  pb::Job job;
  {
    absl::MutexLock lock(&mu_);
    // A job that just reached its final state may still be here for a moment (its worker
    // thread letting go of it); its record and files are final already.
    if (const auto it = active_.find(id);
        it != active_.end() && !IsFinal(it->second->job.state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", id, " is ", StateName(it->second->job.state()), "; cancel it first"));
    }
    auto stored = store_->GetJob(id);
    if (!stored.ok()) return stored.status();
    job = *std::move(stored);
    if (!IsFinal(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is ", StateName(job.state()), "; cancel it first"));
    }
    for (const auto& [other_id, active] : active_) {
      if (IsFinal(active->job.state())) continue;
      if (const char* field = UsesCheckpointOf(active->job, id); field != nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " has a checkpoint that job ", other_id, " (",
                         StateName(active->job.state()), ") uses as its ", field,
                         "; delete it after that job has finished"));
      }
    }
  }
  // Files first: a failure leaves the record, so the deletion can be asked for again.
  pb::DeleteJobResponse response;
  response.set_id(id);
  response.set_state(job.state());
  const std::string dir = JobDir(id);
  std::error_code error;
  if (fs::exists(dir, error)) {
    for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
      if (!it->is_regular_file(error)) continue;
      response.set_files_removed(response.files_removed() + 1);
      response.set_bytes_freed(response.bytes_freed() + it->file_size(error));
    }
    fs::remove_all(dir, error);
  }
  if (error) {
    return absl::InternalError(absl::StrCat("deleting job ", id, ": cannot remove ", dir, ": ",
                                            error.message(), "; the job is kept"));
  }
  if (auto status = store_->DeleteJob(id); !status.ok()) return status;
  if (metrics_ != nullptr) metrics_->RemoveJob(id, KindName(job.kind()), reason);
  Log(absl::StrCat("job ", id, " (", job.name(), ", ", StateName(job.state()), ") deleted by ",
                   reason, ": ", response.files_removed(), " files, ", response.bytes_freed(),
                   " bytes"));
  return response;
}

void JobManager::RetentionLoop() {
  // At most this many jobs per sweep, so that a shutdown is not held up for long.
  constexpr std::int64_t kMaxPerSweep = 1000;
  for (;;) {
    auto expired =
        store_->FinishedJobsBefore(clock_->Now() - options_.jobs.retention, kMaxPerSweep);
    if (!expired.ok()) {
      Log(absl::StrCat("retention: listing finished jobs failed: ", expired.status().message()));
    } else {
      for (const std::string& id : *expired) {
        {
          absl::MutexLock lock(&mu_);
          if (stopping_) return;
        }
        if (auto deleted = DeleteJob(id, "retention"); !deleted.ok()) {
          Log(absl::StrCat("retention: job ", id, " kept: ", deleted.status().message()));
        }
      }
    }
    absl::MutexLock lock(&mu_);
    const absl::Time next = clock_->Now() + options_.jobs.retention_sweep_interval;
    while (!stopping_ && clock_->Now() < next) clock_->WaitUntil(retention_cv_, mu_, next);
    if (stopping_) return;
  }
}

absl::StatusOr<std::int64_t> JobManager::Watch(const std::string& id, Listener listener) {
  // Registering under mu_ orders the snapshot before any later event of the job.
  absl::MutexLock lock(&mu_);
  pb::JobEvent snapshot;
  snapshot.set_type(pb::JobEvent::SNAPSHOT);
  if (const auto it = active_.find(id); it != active_.end()) {
    *snapshot.mutable_job() = it->second->job;
  } else {
    auto job = store_->GetJob(id);
    if (!job.ok()) return job.status();
    *snapshot.mutable_job() = std::move(*job);
  }
  listener(snapshot);
  if (IsFinal(snapshot.job().state())) return 0;
  absl::MutexLock watch_lock(&watch_mu_);
  const std::int64_t handle = next_watch_++;
  watchers_[handle] = {id, std::move(listener)};
  return handle;
}

void JobManager::Unwatch(std::int64_t handle) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(handle);
}

void JobManager::Publish(Active& active, pb::JobEvent::Type type,
                         const pb::CheckpointInfo* checkpoint) {
  pb::JobEvent event;
  event.set_type(type);
  {
    absl::MutexLock lock(&mu_);
    *event.mutable_job() = active.job;
  }
  if (checkpoint != nullptr) *event.mutable_checkpoint() = *checkpoint;
  if (auto s = store_->UpdateJob(event.job()); !s.ok()) {
    Log(absl::StrCat("job ", event.job().id(), ": cannot persist: ", s.message()));
  }
  const bool final = type == pb::JobEvent::STATE && IsFinal(event.job().state());
  absl::MutexLock lock(&mu_);  // orders events after a Watch snapshot taken under mu_
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

void JobManager::SetState(Active& active, pb::JobState state, const std::string& reason) {
  std::string id, kind;
  {
    absl::MutexLock lock(&mu_);
    active.job.set_state(state);
    active.job.set_reason(reason);
    if (state == pb::JOB_STATE_RUNNING && !active.job.has_start_time()) {
      SetTimestamp(clock_->Now(), active.job.mutable_start_time());
    }
    if (IsFinal(state)) SetTimestamp(clock_->Now(), active.job.mutable_end_time());
    id = active.job.id();
    kind = KindName(active.job.kind());
  }
  if (metrics_ != nullptr) {
    metrics_->SetJobState(id, kind, StateName(state));
    if (IsFinal(state)) metrics_->RecordJobFinished(kind, StateName(state));
  }
  Log(absl::StrCat("job ", id, " ", StateName(state), reason.empty() ? "" : ": ", reason));
  Publish(active, pb::JobEvent::STATE);
}

// --------------------------------------------------------------------------------------------
// Workers

void JobManager::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Active> active;
    {
      absl::MutexLock lock(&mu_);
      // The head of the queue starts when its memory estimate fits beside the running jobs'
      // (or nothing runs): jobs.memory_budget_bytes holds for all jobs together.
      mu_.Await(absl::Condition(
          +[](JobManager* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) {
            if (m->stopping_) return true;
            if (m->queue_.empty()) return false;
            const auto need = static_cast<std::int64_t>(
                m->queue_.front()->job.progress().memory_estimate_bytes());
            return m->running_memory_ == 0 || m->running_memory_ + need <= m->memory_budget_;
          },
          this));
      if (stopping_) return;
      active = queue_.front();
      queue_.pop_front();
      running_memory_ += static_cast<std::int64_t>(active->job.progress().memory_estimate_bytes());
    }
    RunJob(active);
  }
}

void JobManager::RunJob(const std::shared_ptr<Active>& active) {
  SetState(*active, pb::JOB_STATE_RUNNING, "");
  const bool training = active->job.kind() == pb::JOB_KIND_TRAINING;
  const std::uint32_t max_retries =
      training ? active->job.training().max_retries() : active->job.evaluation().max_retries();
  for (;;) {
    bool stopped = false;
    const absl::Status status = RunAttempt(active, &stopped);
    bool shutting_down = false;
    {
      absl::MutexLock lock(&mu_);
      shutting_down = stopping_;
    }
    if (active->cancel) {
      SetState(*active, pb::JOB_STATE_CANCELLED, "cancelled by request");
    } else if (shutting_down && (stopped || !status.ok())) {
      // Left RUNNING in the store: the next start queues it again and it resumes.
      Log(absl::StrCat("job ", active->job.id(),
                       " interrupted by shutdown; it resumes on the next start"));
    } else if (status.ok()) {
      SetState(*active, pb::JOB_STATE_SUCCEEDED, "");
    } else {
      std::uint32_t retries = 0;
      {
        absl::MutexLock lock(&mu_);
        retries = active->job.progress().retries();
      }
      // A failure of the spec or the data fails the same way again: only a worker that died or
      // hung, or ran out of memory, is retried.
      const bool retriable = absl::IsInternal(status) || absl::IsResourceExhausted(status) ||
                             absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
      if (retriable && retries < max_retries) {
        {
          absl::MutexLock lock(&mu_);
          active->job.mutable_progress()->set_retries(retries + 1);
        }
        Log(absl::StrCat("job ", active->job.id(), " attempt ", retries + 1, " failed (",
                         status.message(), "); retrying from its last saved state (", retries + 1,
                         " of max_retries ", max_retries, ")"));
        Publish(*active, pb::JobEvent::PROGRESS);
        continue;
      }
      SetState(*active, pb::JOB_STATE_FAILED, std::string(status.message()));
    }
    break;
  }
  absl::MutexLock lock(&mu_);
  running_memory_ -= static_cast<std::int64_t>(active->job.progress().memory_estimate_bytes());
  active_.erase(active->job.id());
}

absl::StatusOr<pb::WorkerTask> JobManager::MakeTask(const Active& active) const {
  pb::WorkerTask task;
  {
    absl::MutexLock lock(&mu_);
    *task.mutable_job() = active.job;
  }
  const pb::Job& job = task.job();
  task.set_job_dir(JobDir(job.id()));
  task.set_data_root(data_root_.root());
  task.set_heartbeat_ms(
      static_cast<std::uint32_t>(absl::ToInt64Milliseconds(options_.jobs.heartbeat_interval)));
  task.set_heap_keep_freed_bytes(static_cast<std::uint64_t>(options_.heap_keep_freed_bytes));
  task.set_max_steps(static_cast<std::uint64_t>(options_.jobs.limits.max_steps));
  if (job.kind() == pb::JOB_KIND_TRAINING) {
    task.set_threads(job.training().threads());
    if (!job.training().init_from().empty()) {
      auto path = ResolveCheckpointReference(job.training().init_from(), "init_from");
      if (!path.ok()) return path.status();
      task.set_init_from_path(*path);
    }
    return task;
  }
  const pb::EvaluationSpec& spec = job.evaluation();
  task.set_threads(spec.threads());
  switch (spec.target_case()) {
    case pb::EvaluationSpec::kModel: {
      const auto model = registry_->Find(spec.model());
      if (model == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("model: no served model named ", Quoted(spec.model())));
      }
      task.set_checkpoint_path(model->config().checkpoint);
      break;
    }
    case pb::EvaluationSpec::kJobId: {
      auto path = JobCheckpoint(spec.job_id(), pb::CHECKPOINT_CHOICE_BEST);
      if (!path.ok()) return path.status();
      task.set_checkpoint_path(*path);
      break;
    }
    default: {
      auto path = ResolveCheckpointReference(spec.checkpoint(), "checkpoint");
      if (!path.ok()) return path.status();
      task.set_checkpoint_path(*path);
    }
  }
  return task;
}

absl::Status JobManager::RunAttempt(const std::shared_ptr<Active>& active, bool* stopped) {
  const std::string id = active->job.id();
  auto task = MakeTask(*active);
  if (!task.ok()) return task.status();
  if (auto s = MakeDirectories(task->job_dir()); !s.ok()) return s;
  const std::string task_file = (fs::path(task->job_dir()) / "task.pb").string();
  if (auto s = WriteFileAtomically(task_file, task->SerializeAsString()); !s.ok()) return s;

  const int world =
      task->job().kind() == pb::JOB_KIND_TRAINING
          ? static_cast<int>(std::max<std::uint32_t>(task->job().training().workers(), 1))
          : 1;
  JobProcessOptions process_options;
  process_options.binary = WorkerBinary();
  process_options.task_file = task_file;
  process_options.world_size = world;
  process_options.threads = static_cast<int>(std::max<std::uint32_t>(task->threads(), 1));
  process_options.address_space_bytes = static_cast<std::uint64_t>(
      MemoryBudgetBytes(options_.jobs) / world + options_.jobs.worker_address_space_overhead_bytes);
  process_options.heartbeat_timeout = options_.jobs.heartbeat_timeout;
  process_options.stop_grace = options_.jobs.stop_grace;
  auto process = JobProcess::Start(
      process_options,
      [this, active](const pb::WorkerMessage& message) { ApplyWorkerMessage(*active, message); },
      [this, id](int rank, const std::string& line) {
        Log(absl::StrCat("job ", id, " rank ", rank, ": ", line));
      });
  if (!process.ok()) return process.status();
  std::vector<std::string> pids;
  for (const pid_t pid : (*process)->pids()) pids.push_back(absl::StrCat(pid));
  Log(absl::StrCat("job ", id, ": worker process", world > 1 ? "es " : " ",
                   absl::StrJoin(pids, ", "), " started (", world, " rank", world > 1 ? "s" : "",
                   ", address space limit ", process_options.address_space_bytes, " bytes each)"));
  {
    absl::MutexLock lock(&active->process_mu);
    active->process = process->get();
  }
  // A cancel or a shutdown that came before the process existed.
  bool stop_now = active->cancel;
  {
    absl::MutexLock lock(&mu_);
    stop_now = stop_now || stopping_;
  }
  if (stop_now) (*process)->Stop();
  const JobProcessOutcome outcome = (*process)->Wait();
  {
    absl::MutexLock lock(&active->process_mu);
    active->process = nullptr;
  }
  *stopped = outcome.stopped;
  return outcome.status;
}

void JobManager::ApplyWorkerMessage(Active& active, const pb::WorkerMessage& message) {
  const std::string& id = active.job.id();
  switch (message.kind_case()) {
    case pb::WorkerMessage::kStarted: {
      const pb::WorkerStarted& started = message.started();
      {
        absl::MutexLock lock(&mu_);
        if (started.has_spec()) *active.job.mutable_training() = started.spec();
        active.job.clear_labels();
        for (const auto& label : started.labels()) active.job.add_labels(label);
        auto* progress = active.job.mutable_progress();
        progress->set_total_steps(started.total_steps());
        progress->set_train_examples(started.train_examples());
        progress->set_validation_examples(started.validation_examples());
        progress->set_skipped_examples(started.skipped_examples());
        if (started.resumed_step() > 0) progress->set_step(started.resumed_step());
      }
      if (started.resumed_step() > 0) {
        Log(absl::StrCat("job ", id, " resumes at step ", started.resumed_step()));
        // The steps after the saved state are trained again: their first records go.
        (void)store_->TruncateHistory(id, static_cast<std::int64_t>(started.resumed_step()));
      }
      Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kProgress: {
      const pb::WorkerProgress& p = message.progress();
      {
        absl::MutexLock lock(&mu_);
        auto* progress = active.job.mutable_progress();
        progress->set_step(p.step());
        progress->set_loss(p.loss());
        progress->set_learning_rate(p.learning_rate());
        progress->set_examples_per_second(p.examples_per_second());
        progress->set_epoch(p.epoch());
      }
      JobMetricRow row;
      row.step = static_cast<std::int64_t>(p.step());
      row.loss = p.loss();
      row.learning_rate = p.learning_rate();
      row.examples_per_second = p.examples_per_second();
      row.time_ms = p.time_ms();
      (void)store_->AppendMetric(id, row);
      if (metrics_ != nullptr) {
        metrics_->SetJobProgress(id, row.step, p.loss(), p.examples_per_second());
      }
      Publish(active, pb::JobEvent::PROGRESS);
      return;
    }
    case pb::WorkerMessage::kValidation: {
      const pb::EvaluationReport& report = message.validation();
      (void)store_->AppendEvaluation(id, report);
      {
        absl::MutexLock lock(&mu_);
        *active.job.mutable_validation() = report;
        if (!active.job.has_best_validation() ||
            report.accuracy() > active.job.best_validation().accuracy()) {
          *active.job.mutable_best_validation() = report;
        }
      }
      if (metrics_ != nullptr) metrics_->SetJobValidationAccuracy(id, report.accuracy());
      Publish(active, pb::JobEvent::VALIDATION);
      return;
    }
    case pb::WorkerMessage::kCheckpoint: {
      const pb::CheckpointInfo& info = message.checkpoint().checkpoint();
      if (info.kind() == "best") (void)store_->RemoveCheckpoint(id, info.path());
      (void)store_->RecordCheckpoint(id, info);
      for (const auto& removed : message.checkpoint().removed_paths()) {
        (void)store_->RemoveCheckpoint(id, removed);
      }
      {
        absl::MutexLock lock(&mu_);
        auto* list = active.job.mutable_checkpoints();
        for (int i = 0; i < list->size();) {
          const auto& c = list->Get(i);
          const bool replaced = info.kind() == "best" && c.kind() == "best";
          const bool removed = std::find(message.checkpoint().removed_paths().begin(),
                                         message.checkpoint().removed_paths().end(),
                                         c.path()) != message.checkpoint().removed_paths().end();
          if (replaced || removed) {
            list->DeleteSubrange(i, 1);
          } else {
            ++i;
          }
        }
        *list->Add() = info;
      }
      Publish(active, pb::JobEvent::CHECKPOINT, &info);
      return;
    }
    case pb::WorkerMessage::kReport: {
      {
        absl::MutexLock lock(&mu_);
        *active.job.mutable_report() = message.report();
      }
      (void)store_->AppendEvaluation(id, message.report());
      return;
    }
    case pb::WorkerMessage::kLog:
      Log(absl::StrCat("job ", id, ": ", message.log()));
      return;
    default:
      return;
  }
}

std::string JobManager::WorkerBinary() const {
  if (!options_.jobs.worker_binary.empty()) return options_.jobs.worker_binary;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string("tsworker") : (self.parent_path() / "tsworker").string();
}

// --------------------------------------------------------------------------------------------
// Promotion

absl::StatusOr<Promotion> JobManager::Promote(const pb::PromoteCheckpointRequest& request) {
  if (auto s = CheckModelName(request.model()); !s.ok()) return s;
  std::string source_path;
  std::string source;
  switch (request.source_case()) {
    case pb::PromoteCheckpointRequest::kJobId: {
      auto path = JobCheckpoint(request.job_id(), request.which());
      if (!path.ok()) return Prefixed(path.status(), "job_id: ");
      source_path = *path;
      source = absl::StrCat("job:", request.job_id(), ":",
                            request.which() == pb::CHECKPOINT_CHOICE_LAST ? "last" : "best");
      break;
    }
    case pb::PromoteCheckpointRequest::kCheckpoint: {
      auto path = ResolveCheckpointReference(request.checkpoint(), "checkpoint");
      if (!path.ok()) return path.status();
      source_path = *path;
      source = absl::StrCat("checkpoint:", request.checkpoint());
      break;
    }
    default:
      return absl::InvalidArgumentError("source: give job_id or checkpoint");
  }
  absl::MutexLock promote_lock(&promote_mu_);
  auto bytes = ReadWholeFile(source_path);
  if (!bytes.ok()) return bytes.status();
  auto candidate = LoadCheckpoint(source_path);
  if (!candidate.ok()) return Prefixed(candidate.status(), "checkpoint: ");

  Promotion promotion;
  promotion.validation_accuracy = RecordedAccuracy(candidate->metadata);
  const auto current = registry_->Find(request.model());
  if (current != nullptr) {
    promotion.previous_version = current->version();
    promotion.previous_validation_accuracy = RecordedAccuracy(current->metadata());
  }
  if (request.require_at_least_current_accuracy() && current != nullptr) {
    if (!promotion.validation_accuracy || !promotion.previous_validation_accuracy) {
      return absl::FailedPreconditionError(
          absl::StrCat("require_at_least_current_accuracy: ",
                       !promotion.validation_accuracy ? "the candidate" : "the served version",
                       " has no recorded validation accuracy"));
    }
    if (*promotion.validation_accuracy < *promotion.previous_validation_accuracy) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "require_at_least_current_accuracy: the candidate's validation accuracy %.4f is below "
          "the served version's %.4f",
          *promotion.validation_accuracy, *promotion.previous_validation_accuracy));
    }
  }
  const std::string version = absl::StrFormat("%08x", Crc32(bytes->data(), bytes->size()));
  const std::string dir = (fs::path(options_.state_dir) / "models" / request.model()).string();
  if (auto s = MakeDirectories(dir); !s.ok()) return s;
  const std::string destination = (fs::path(dir) / absl::StrCat(version, ".tsckpt")).string();
  if (auto s = WriteFileAtomically(destination, *bytes); !s.ok()) return s;

  ModelConfig config = current != nullptr ? current->config() : options_.promoted_model_defaults;
  config.name = request.model();
  config.checkpoint = destination;
  if (config.max_length > candidate->options.max_length()) config.max_length = 0;
  auto model = ServedModel::Load(config, metrics_, clock_);
  if (!model.ok()) return model.status();

  PromotionRecord record;
  record.model = request.model();
  record.version = version;
  record.checkpoint = destination;
  record.source = source;
  record.validation_accuracy = promotion.validation_accuracy;
  record.time_ms = absl::ToUnixMillis(clock_->Now());
  if (auto s = store_->RecordPromotion(record); !s.ok()) return s;

  const auto previous = registry_->Put(*model);
  if (previous != nullptr && metrics_ != nullptr && previous->version() != version) {
    metrics_->RemoveModelInfo(request.model(), previous->version());
  }
  promotion.model = *model;
  Log(absl::StrCat("model '", request.model(), "' now serves version ", version, " (", source,
                   promotion.previous_version.empty()
                       ? ", new model)"
                       : absl::StrCat(", was ", promotion.previous_version, ")")));
  if (options_.on_model_served) options_.on_model_served(request.model());
  return promotion;
}

}  // namespace ts::server

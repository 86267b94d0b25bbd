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
#include "absl/time/clock.h"
#include "model/atomic_file.h"
#include "model/checkpoint.h"
#include "model/cost_model.h"
#include "model/torch_compat.h"
#include "model/training.h"
#include "server/classifier_service.h"
#include "server/job_spec.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

constexpr char kTrainingStateFile[] = "training_state.pt";
constexpr char kBestCheckpointFile[] = "best.tsckpt";
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
  out->set_nanos(static_cast<std::int32_t>((time - absl::FromUnixSeconds(seconds)) /
                                           absl::Nanoseconds(1)));
}

// The same name rule as configured models.
absl::Status CheckModelName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                           c == '-';
                  });
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: must match [A-Za-z0-9_.-]{1,64}, got \"", name, "\""));
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const absl::Status& status, const std::string& prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

pb::EvaluationReport ToReport(const EvaluationResult& result,
                              const std::vector<std::string>& labels, std::int64_t step) {
  pb::EvaluationReport report;
  report.set_step(static_cast<std::uint64_t>(step));
  report.set_examples(static_cast<std::uint64_t>(result.examples));
  report.set_loss(result.loss);
  report.set_accuracy(result.metrics.accuracy);
  report.set_macro_f1(result.metrics.macro_f1);
  report.set_examples_per_second(result.examples_per_second);
  for (std::size_t c = 0; c < labels.size(); ++c) {
    auto* cls = report.add_classes();
    cls->set_label(labels[c]);
    const double p = c < result.metrics.precision.size() ? result.metrics.precision[c] : 0.0;
    const double r = c < result.metrics.recall.size() ? result.metrics.recall[c] : 0.0;
    cls->set_precision(p);
    cls->set_recall(r);
    cls->set_f1(p + r > 0 ? 2 * p * r / (p + r) : 0.0);
    std::int64_t support = 0;
    if (c < result.metrics.confusion.size()) {
      for (const auto count : result.metrics.confusion[c]) support += count;
    }
    cls->set_support(static_cast<std::uint64_t>(support));
  }
  for (const auto& row : result.metrics.confusion) {
    auto* out = report.add_confusion();
    for (const auto count : row) out->add_counts(static_cast<std::uint64_t>(count));
  }
  return report;
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
};

// --------------------------------------------------------------------------------------------
// Construction, restore, shutdown

JobManager::JobManager(JobManagerOptions options, std::unique_ptr<JobStore> store,
                       DataRoot data_root, ModelRegistry* registry, Metrics* metrics,
                       Clock* clock)
    : options_(std::move(options)),
      store_(std::move(store)),
      data_root_(std::move(data_root)),
      registry_(registry),
      metrics_(metrics),
      clock_(clock) {}

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
  const int workers = std::max(1, manager->options_.jobs.max_concurrent);
  for (int i = 0; i < workers; ++i) {
    manager->workers_.emplace_back([m = manager.get()] { m->WorkerLoop(); });
  }
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
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
    if (previous != nullptr && metrics_ != nullptr &&
        previous->version() != (*model)->version()) {
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
    return absl::NotFoundError(absl::StrCat(field, ".path: \"", source.path(),
                                            "\" does not exist in the data root"));
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
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " (", StateName(job->state()), ") has no ",
                     which == pb::CHECKPOINT_CHOICE_LAST ? "last" : "best or last",
                     " checkpoint yet"));
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
        absl::StrCat(field, ": \"", reference, "\" is not a file in the data root"));
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
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.set_name(spec.name());
  *job.mutable_training() = std::move(spec);
  return Enqueue(std::move(job));
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
        return absl::NotFoundError(absl::StrCat("model: no served model named \"", spec.model(),
                                                "\""));
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
  if (was_queued) SetState(*active, pb::JOB_STATE_CANCELLED, "cancelled by request while queued");
  absl::MutexLock lock(&mu_);
  return active->job;
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
      mu_.Await(absl::Condition(
          +[](JobManager* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) {
            return m->stopping_ || !m->queue_.empty();
          },
          this));
      if (stopping_) return;
      active = queue_.front();
      queue_.pop_front();
    }
    RunJob(active);
  }
}

void JobManager::RunJob(const std::shared_ptr<Active>& active) {
  SetState(*active, pb::JOB_STATE_RUNNING, "");
  const bool training = active->job.kind() == pb::JOB_KIND_TRAINING;
  const std::uint32_t threads =
      training ? active->job.training().threads() : active->job.evaluation().threads();
  compat::SetThisThreadIntraOpThreads(static_cast<int>(std::max<std::uint32_t>(threads, 1)));
  absl::Status status = training ? RunTraining(active) : RunEvaluation(active);
  bool stopped_for_shutdown = false;
  {
    absl::MutexLock lock(&mu_);
    stopped_for_shutdown = stopping_ && absl::IsAborted(status);
  }
  if (stopped_for_shutdown) {
    // Left RUNNING in the store: the next start queues it again and it resumes.
    Log(absl::StrCat("job ", active->job.id(), " interrupted by shutdown; it resumes on the next "
                                                "start"));
  } else if (active->cancel) {
    SetState(*active, pb::JOB_STATE_CANCELLED, "cancelled by request");
  } else if (status.ok()) {
    SetState(*active, pb::JOB_STATE_SUCCEEDED, "");
  } else {
    SetState(*active, pb::JOB_STATE_FAILED, std::string(status.message()));
  }
  absl::MutexLock lock(&mu_);
  active_.erase(active->job.id());
}

absl::StatusOr<Dataset> JobManager::LoadSource(const pb::DataSource& source,
                                               const std::vector<std::string>& labels,
                                               const std::string& field) const {
  DatasetReadOptions read;
  read.skip_malformed = source.skip_malformed();
  read.labels = labels;
  read.confine_to = data_root_.root();
  absl::StatusOr<Dataset> dataset;
  if (source.format() == "listops") {
    ListOpsGeneratorOptions generate;
    generate.count = static_cast<std::int64_t>(source.generate().count());
    generate.min_length = static_cast<std::int64_t>(source.generate().min_length());
    generate.max_length = static_cast<std::int64_t>(source.generate().max_length());
    generate.seed = source.generate().seed();
    dataset = GenerateListOpsDataset(generate);
  } else {
    auto path = data_root_.Resolve(source.path());
    if (!path.ok()) return Prefixed(path.status(), absl::StrCat(field, ".path: "));
    if (source.format() == "jsonl") {
      dataset = ReadJsonLinesDataset(*path, read);
    } else if (source.format() == "folder") {
      dataset = ReadFolderDataset(*path, read);
    } else if (source.format() == "lra_tsv") {
      dataset = ReadListOpsTsvDataset(*path, read);
    } else if (source.format() == "cifar10") {
      dataset = ReadCifar10Dataset(*path, read);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".format: unknown format \"", source.format(), "\""));
    }
  }
  if (!dataset.ok()) return Prefixed(dataset.status(), absl::StrCat(field, ": "));
  return dataset;
}

absl::Status JobManager::RunTraining(const std::shared_ptr<Active>& active) {
  const std::string id = active->job.id();
  pb::TrainingSpec spec = active->job.training();
  const std::string dir = JobDir(id);
  if (auto s = MakeDirectories(dir); !s.ok()) return s;

  // Data.
  std::vector<std::string> labels(spec.labels().begin(), spec.labels().end());
  auto train = LoadSource(spec.data().train(), labels, "data.train");
  if (!train.ok()) return train.status();
  if (labels.empty()) labels = train->label_names;
  std::vector<Example> validation;
  std::int64_t skipped = train->skipped;
  if (spec.data().validation().split() > 0) {
    auto split = SplitDataset(std::move(train->examples), spec.data().validation().split(),
                              spec.seed());
    if (!split.ok()) return Prefixed(split.status(), "data.validation.split: ");
    train->examples = std::move(split->train);
    validation = std::move(split->validation);
  } else if (spec.data().has_validation() && !spec.data().validation().format().empty()) {
    auto loaded = LoadSource(spec.data().validation(), labels, "data.validation");
    if (!loaded.ok()) return loaded.status();
    skipped += loaded->skipped;
    validation = std::move(loaded->examples);
  }
  if (auto s = FinalizeTrainingSpec(&spec, static_cast<std::int64_t>(train->examples.size()),
                                    options_.jobs);
      !s.ok()) {
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    *active->job.mutable_training() = spec;
    active->job.clear_labels();
    for (const auto& label : labels) active->job.add_labels(label);
    auto* progress = active->job.mutable_progress();
    progress->set_total_steps(spec.steps());
    progress->set_train_examples(train->examples.size());
    progress->set_validation_examples(validation.size());
    progress->set_skipped_examples(static_cast<std::uint64_t>(skipped));
  }
  if (skipped > 0) {
    Log(absl::StrCat("job ", id, ": skipped ", skipped, " malformed records, first: ",
                     train->skip_reasons.empty() ? "" : train->skip_reasons.front()));
  }
  Publish(*active, pb::JobEvent::PROGRESS);

  // Options.
  TrainingOptions options;
  auto optimizer = ParseOptimizerKind(spec.optimizer().name());
  if (!optimizer.ok()) return Prefixed(optimizer.status(), "optimizer.name: ");
  options.optimizer = *optimizer;
  options.lr = spec.optimizer().lr();
  options.weight_decay = spec.optimizer().weight_decay();
  options.beta1 = spec.optimizer().beta1();
  options.beta2 = spec.optimizer().beta2();
  options.eps = spec.optimizer().eps();
  options.warmup_steps = static_cast<std::int64_t>(spec.optimizer().warmup_steps());
  options.min_lr_ratio = spec.optimizer().min_lr_ratio();
  options.steps = static_cast<std::int64_t>(spec.steps());
  options.batch_size = spec.batch_size();
  options.grad_clip_norm = spec.grad_clip();
  options.seed = spec.seed();
  auto path = FromProtoPath(spec.path());
  if (!path.ok()) return path.status();
  options.path = *path;
  options.log_interval = static_cast<std::int64_t>(spec.log_interval());
  options.eval_interval = static_cast<std::int64_t>(spec.eval_interval());
  options.checkpoint_interval = static_cast<std::int64_t>(spec.checkpoint_interval());
  if (auto s = ValidateTrainingOptions(options); !s.ok()) return s;

  const std::int64_t num_classes = static_cast<std::int64_t>(labels.size());
  const std::string state_path = (fs::path(dir) / kTrainingStateFile).string();
  std::unique_ptr<Trainer> trainer;
  CheckpointMetadata metadata;
  metadata.modality = spec.modality();
  metadata.labels = labels;
  metadata.provenance["created_by"] = "tsserver training job";
  metadata.provenance["job_id"] = id;
  metadata.provenance["job_name"] = spec.name();
  std::error_code exists_error;
  if (fs::exists(state_path, exists_error)) {
    auto resumed =
        Trainer::Resume(state_path, options, std::move(train->examples), std::move(validation));
    if (!resumed.ok()) return Prefixed(resumed.status(), "resuming from the training state: ");
    trainer = std::move(*resumed);
    Log(absl::StrCat("job ", id, " resumes at step ", trainer->step()));
    // The steps after the saved state are trained again: their first records go.
    if (auto s = store_->TruncateHistory(id, trainer->step()); !s.ok()) return s;
  } else if (!spec.init_from().empty()) {
    auto path = ResolveCheckpointReference(spec.init_from(), "init_from");
    if (!path.ok()) return path.status();
    auto loaded = LoadCheckpoint(*path);
    if (!loaded.ok()) return Prefixed(loaded.status(), "init_from: ");
    if (loaded->options.num_classes() != num_classes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "init_from: the checkpoint has ", loaded->options.num_classes(),
          " classes, the data has ", num_classes));
    }
    metadata.provenance["init_from"] = spec.init_from();
    auto created = Trainer::Create(std::move(loaded->model), loaded->options, options,
                                   std::move(train->examples), std::move(validation));
    if (!created.ok()) return created.status();
    trainer = std::move(*created);
  } else {
    const auto& m = spec.model();
    TaylorShiftEncoderOptions encoder(m.embed_dim(), m.depth(), m.heads(), m.max_length(),
                                      num_classes);
    encoder.mlp_hidden(static_cast<std::int64_t>(std::llround(m.embed_dim() * m.mlp_ratio())));
    encoder.conv_embed(m.conv_embed());
    encoder.drop_rate(m.drop_rate());
    encoder.drop_path(m.drop_path());
    encoder.attn_drop(m.attn_drop());
    if (auto s = ValidateEncoderOptions(encoder); !s.ok()) return Prefixed(s, "model: ");
    auto created =
        Trainer::Create(encoder, options, std::move(train->examples), std::move(validation));
    if (!created.ok()) return created.status();
    trainer = std::move(*created);
  }
  // `auto` switches paths at the crossover measured for training steps: backward costs the
  // paths differently than serving's forward does. Checkpoints keep the model's own setting.
  if (options.path == AttentionPath::kAuto) {
    const TaylorShiftEncoderOptions& e = trainer->encoder_options();
    trainer->model()->set_crossover_tokens(TrainingCrossoverTokens(e.embed_dim() / e.heads()));
  }
  const bool has_validation = spec.data().validation().split() > 0 ||
                              (spec.data().has_validation() &&
                               !spec.data().validation().format().empty());

  // The best accuracy so far (a resumed job keeps its record).
  std::optional<double> best_accuracy;
  {
    absl::MutexLock lock(&mu_);
    if (active->job.has_best_validation()) best_accuracy = active->job.best_validation().accuracy();
    active->job.mutable_progress()->set_step(static_cast<std::uint64_t>(trainer->step()));
  }
  std::optional<double> last_accuracy;
  const std::int64_t train_size = static_cast<std::int64_t>(
      active->job.progress().train_examples());

  const auto save_checkpoint = [&](const std::string& path, const std::string& kind,
                                   std::int64_t step) -> absl::Status {
    CheckpointMetadata m = metadata;
    m.provenance["step"] = absl::StrCat(step);
    if (last_accuracy) m.provenance[kAccuracyKey] = absl::StrFormat("%.17g", *last_accuracy);
    auto s = SaveCheckpoint(path, trainer->encoder_options(), m, trainer->model());
    if (!s.ok()) return s;
    pb::CheckpointInfo info;
    info.set_kind(kind);
    info.set_step(static_cast<std::uint64_t>(step));
    info.set_path(path);
    if (last_accuracy) {
      info.set_validation_accuracy(*last_accuracy);
      info.set_has_validation_accuracy(true);
    }
    SetTimestamp(clock_->Now(), info.mutable_time());
    if (kind == "best") {
      (void)store_->RemoveCheckpoint(id, path);
    }
    if (auto r = store_->RecordCheckpoint(id, info); !r.ok()) return r;
    std::vector<std::string> removed;
    {
      absl::MutexLock lock(&mu_);
      auto* list = active->job.mutable_checkpoints();
      if (kind == "best") {
        for (int i = 0; i < list->size(); ++i) {
          if (list->Get(i).kind() == "best") {
            list->DeleteSubrange(i, 1);
            break;
          }
        }
      }
      *list->Add() = info;
      // Keep the last K "last" checkpoints.
      int lasts = 0;
      for (const auto& c : *list) lasts += c.kind() == "last" ? 1 : 0;
      const int keep = static_cast<int>(std::max<std::uint32_t>(spec.keep_checkpoints(), 1));
      for (int i = 0; i < list->size() && lasts > keep;) {
        if (list->Get(i).kind() == "last") {
          removed.push_back(list->Get(i).path());
          list->DeleteSubrange(i, 1);
          --lasts;
        } else {
          ++i;
        }
      }
    }
    for (const auto& path_to_remove : removed) {
      std::error_code error;
      fs::remove(path_to_remove, error);
      (void)store_->RemoveCheckpoint(id, path_to_remove);
    }
    Publish(*active, pb::JobEvent::CHECKPOINT, &info);
    return absl::OkStatus();
  };

  const auto validate = [&](std::int64_t step) -> absl::Status {
    auto result = trainer->EvaluateValidation();
    if (!result.ok()) return result.status();
    const pb::EvaluationReport report = ToReport(*result, labels, step);
    (void)store_->AppendEvaluation(id, report);
    last_accuracy = report.accuracy();
    const bool improved = !best_accuracy || report.accuracy() > *best_accuracy;
    {
      absl::MutexLock lock(&mu_);
      *active->job.mutable_validation() = report;
      if (improved) *active->job.mutable_best_validation() = report;
    }
    if (metrics_ != nullptr) metrics_->SetJobValidationAccuracy(id, report.accuracy());
    Publish(*active, pb::JobEvent::VALIDATION);
    if (improved) {
      best_accuracy = report.accuracy();
      return save_checkpoint((fs::path(dir) / kBestCheckpointFile).string(), "best", step);
    }
    return absl::OkStatus();
  };

  // Training throughput counts the optimizer steps only: validation runs and checkpoints in
  // between would otherwise make a job look slower than its training is.
  std::int64_t examples_since_log = 0;
  absl::Duration step_time_since_log = absl::ZeroDuration();
  while (!trainer->done()) {
    if (active->cancel) return absl::CancelledError("cancelled by request");
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        // Keep everything trained so far: the next start resumes from here.
        if (auto s = trainer->SaveState(state_path); !s.ok()) return s;
        return absl::AbortedError("server shutting down");
      }
    }
    const absl::Time step_start = absl::Now();
    auto step = trainer->Step();
    step_time_since_log += absl::Now() - step_start;
    if (!step.ok()) return step.status();
    examples_since_log += options.batch_size;
    const std::int64_t s = step->step;
    const bool last_step = trainer->done();
    if (s % options.log_interval == 0 || last_step) {
      const double seconds = absl::ToDoubleSeconds(step_time_since_log);
      const double rate = seconds > 0 ? static_cast<double>(examples_since_log) / seconds : 0;
      examples_since_log = 0;
      step_time_since_log = absl::ZeroDuration();
      {
        absl::MutexLock lock(&mu_);
        auto* progress = active->job.mutable_progress();
        progress->set_step(static_cast<std::uint64_t>(s));
        progress->set_loss(step->loss);
        progress->set_learning_rate(step->lr);
        progress->set_examples_per_second(rate);
        progress->set_epoch(train_size > 0 ? static_cast<double>(s) *
                                                 static_cast<double>(options.batch_size) /
                                                 static_cast<double>(train_size)
                                           : 0.0);
      }
      JobMetricRow row;
      row.step = s;
      row.loss = step->loss;
      row.learning_rate = step->lr;
      row.examples_per_second = rate;
      row.time_ms = absl::ToUnixMillis(clock_->Now());
      (void)store_->AppendMetric(id, row);
      if (metrics_ != nullptr) metrics_->SetJobProgress(id, s, step->loss, rate);
      Publish(*active, pb::JobEvent::PROGRESS);
    }
    if (has_validation && (s % options.eval_interval == 0 || last_step)) {
      if (auto v = validate(s); !v.ok()) return v;
    }
    if (s % options.checkpoint_interval == 0 || last_step) {
      const std::string path = (fs::path(dir) / absl::StrCat("step-", s, ".tsckpt")).string();
      if (auto c = save_checkpoint(path, "last", s); !c.ok()) return c;
      // The training state goes after the checkpoint: a resume never starts behind it.
      if (!last_step) {
        if (auto t = trainer->SaveState(state_path); !t.ok()) return t;
      }
    }
  }
  std::error_code error;
  fs::remove(state_path, error);
  return absl::OkStatus();
}

absl::Status JobManager::RunEvaluation(const std::shared_ptr<Active>& active) {
  const pb::EvaluationSpec spec = active->job.evaluation();
  std::string path;
  switch (spec.target_case()) {
    case pb::EvaluationSpec::kModel: {
      const auto model = registry_->Find(spec.model());
      if (model == nullptr) {
        return absl::NotFoundError(absl::StrCat("model: no served model named \"", spec.model(),
                                                "\""));
      }
      path = model->config().checkpoint;
      break;
    }
    case pb::EvaluationSpec::kJobId: {
      auto p = JobCheckpoint(spec.job_id(), pb::CHECKPOINT_CHOICE_BEST);
      if (!p.ok()) return p.status();
      path = *p;
      break;
    }
    default: {
      auto p = ResolveCheckpointReference(spec.checkpoint(), "checkpoint");
      if (!p.ok()) return p.status();
      path = *p;
    }
  }
  auto loaded = LoadCheckpoint(path);
  if (!loaded.ok()) return loaded.status();
  auto data = LoadSource(spec.data(), loaded->metadata.labels, "data");
  if (!data.ok()) return data.status();
  if (active->cancel) return absl::CancelledError("cancelled by request");
  auto attention = FromProtoPath(spec.path());
  if (!attention.ok()) return attention.status();
  auto result = EvaluateClassifier(loaded->model, loaded->options, data->examples,
                                   spec.batch_size(), *attention);
  if (!result.ok()) return result.status();
  {
    absl::MutexLock lock(&mu_);
    *active->job.mutable_report() = ToReport(*result, loaded->metadata.labels, 0);
    active->job.clear_labels();
    for (const auto& label : loaded->metadata.labels) active->job.add_labels(label);
    active->job.mutable_progress()->set_validation_examples(data->examples.size());
    active->job.mutable_progress()->set_skipped_examples(static_cast<std::uint64_t>(data->skipped));
  }
  (void)store_->AppendEvaluation(active->job.id(), active->job.report());
  return absl::OkStatus();
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
      return absl::FailedPreconditionError(absl::StrCat(
          "require_at_least_current_accuracy: ",
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

#include "server/jobs/job_runner.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/quoted.h"
#include "common/sanitizers.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "server/jobs/job_process.h"
#include "server/serving/model_registry.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

// Address space of this process's shared-library mappings (/proc/self/maps: every mapping of a
// file whose name holds ".so"), 0 where it cannot be read.
std::int64_t MappedLibraryBytes() {
  std::ifstream maps("/proc/self/maps");
  std::int64_t total = 0;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos || line.find(".so", slash) == std::string::npos) continue;
    std::uint64_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2 && end > begin) {
      total += static_cast<std::int64_t>(end - begin);
    }
  }
  return total;
}

}  // namespace

AttemptVerdict JudgeAttempt(const absl::Status& status, bool stopped, bool cancelled,
                            bool shutting_down, std::uint32_t retries, std::uint32_t max_retries) {
  if (cancelled) return AttemptVerdict::kCancelled;
  if (shutting_down && (stopped || !status.ok())) return AttemptVerdict::kInterrupted;
  if (status.ok()) return AttemptVerdict::kSucceeded;
  // A failure of the spec or the data fails the same way again: only a worker that died or hung,
  // or ran out of memory, is retried.
  const bool retriable = absl::IsInternal(status) || absl::IsResourceExhausted(status) ||
                         absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
  return retriable && retries < max_retries ? AttemptVerdict::kRetry : AttemptVerdict::kFailed;
}

JobRunner::JobRunner(JobRunnerOptions options, JobQueue* queue, JobRecorder* recorder,
                     const CheckpointResolver* checkpoints, const ModelRegistry* registry,
                     const JobContext* context, WorkerLauncher* launcher)
    : options_(std::move(options)),
      launcher_(launcher),
      queue_(queue),
      recorder_(recorder),
      checkpoints_(checkpoints),
      registry_(registry),
      context_(context) {}

void JobRunner::Run(ActiveJob& active) {
  queue_->SetState(active, pb::JOB_STATE_RUNNING, "");
  const pb::Job job = queue_->Snapshot(active);
  const std::uint32_t max_retries = job.kind() == pb::JOB_KIND_TRAINING
                                        ? job.training().max_retries()
                                        : job.evaluation().max_retries();
  for (;;) {
    bool stopped = false;
    const absl::Status status = RunAttempt(active, &stopped);
    const std::uint32_t retries = queue_->Snapshot(active).progress().retries();
    switch (
        JudgeAttempt(status, stopped, active.cancel, queue_->stopping(), retries, max_retries)) {
      case AttemptVerdict::kCancelled:
        queue_->SetState(active, pb::JOB_STATE_CANCELLED, "cancelled by request");
        return;
      case AttemptVerdict::kInterrupted:
        // Left RUNNING in the store: the next start queues it again and it resumes.
        context_->Log(absl::StrCat("job ", active.id, " interrupted by shutdown (",
                                   status.message(), "); it resumes on the next start"));
        return;
      case AttemptVerdict::kSucceeded:
        queue_->SetState(active, pb::JOB_STATE_SUCCEEDED, "");
        return;
      case AttemptVerdict::kRetry:
        queue_->Update(active, [&](pb::Job& j) { j.mutable_progress()->set_retries(retries + 1); });
        context_->Log(absl::StrCat("job ", active.id, " attempt ", retries + 1, " failed (",
                                   status.message(), "); retrying from its last saved state (",
                                   retries + 1, " of max_retries ", max_retries, ")"));
        queue_->Publish(active, pb::JobEvent::PROGRESS);
        continue;
      case AttemptVerdict::kFailed:
        // The reason is what GetJob and WatchJob show: no server paths in it.
        queue_->SetState(active, pb::JOB_STATE_FAILED, context_->ForClient(status.message()));
        return;
    }
  }
}

absl::StatusOr<pb::WorkerTask> JobRunner::MakeTask(const ActiveJob& active) const {
  pb::WorkerTask task;
  *task.mutable_job() = queue_->Snapshot(active);
  const pb::Job& job = task.job();
  task.set_job_dir((fs::path(options_.jobs_dir) / job.id()).string());
  task.set_data_root(options_.data_root);
  task.set_heartbeat_ms(
      static_cast<std::uint32_t>(absl::ToInt64Milliseconds(options_.jobs.heartbeat_interval)));
  task.set_heap_keep_freed_bytes(static_cast<std::uint64_t>(options_.heap_keep_freed_bytes));
  task.set_max_steps(static_cast<std::uint64_t>(options_.jobs.limits.max_steps));
  if (job.kind() == pb::JOB_KIND_TRAINING) {
    task.set_threads(job.training().threads());
    if (!job.training().init_from().empty()) {
      TS_ASSIGN_OR_RETURN(auto path,
                          checkpoints_->Resolve(job.training().init_from(), "init_from"));
      task.set_init_from_path(path);
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
      TS_ASSIGN_OR_RETURN(auto path,
                          checkpoints_->JobCheckpoint(spec.job_id(), pb::CHECKPOINT_CHOICE_BEST));
      task.set_checkpoint_path(path);
      break;
    }
    default: {
      TS_ASSIGN_OR_RETURN(auto path, checkpoints_->Resolve(spec.checkpoint(), "checkpoint"));
      task.set_checkpoint_path(path);
    }
  }
  return task;
}

absl::Status JobRunner::RunAttempt(ActiveJob& active, bool* stopped) {
  const std::string& id = active.id;
  active.unrecorded_result = absl::OkStatus();
  TS_ASSIGN_OR_RETURN(auto task, MakeTask(active));
  TS_RETURN_IF_ERROR(CreateDirectories(task.job_dir()));
  const std::string task_file = (fs::path(task.job_dir()) / "task.pb").string();
  TS_RETURN_IF_ERROR(WriteFileAtomically(task_file, task.SerializeAsString()));

  const int world =
      task.job().kind() == pb::JOB_KIND_TRAINING
          ? static_cast<int>(std::max<std::uint32_t>(task.job().training().workers(), 1))
          : 1;
  JobProcessOptions process_options;
  WorkerLaunchOptions& launch = process_options.launch;
  launch.binary = WorkerBinary();
  launch.task_file = task_file;
  launch.world_size = world;
  launch.threads = static_cast<int>(std::max<std::uint32_t>(task.threads(), 1));
  launch.onednn_primitive_cache_capacity = options_.jobs.onednn_primitive_cache_capacity;
  // The worker maps the same LibTorch (and a subset of the other libraries) as this process: a
  // CUDA LibTorch alone maps about 2.5 GiB, before the worker allocates anything.
  static const std::int64_t libraries = MappedLibraryBytes();
  // A CUDA job gets no limit: CUDA's driver reserves address space for the GPU's unified memory
  // (many times the device's memory) when it starts, which any limit near the job's use breaks;
  // its device memory is admitted against the GPU instead (JobAdmission::Training). Nor does a
  // worker built with a sanitizer (scripts/sanitize): its shadow memory is terabytes of address
  // space, reserved before main, so any limit kills it at start.
  launch.address_space_bytes =
      job::JobDevice(task.job()) != "cpu" || kAddressSanitizer || kThreadSanitizer
          ? 0
          : static_cast<std::uint64_t>(MemoryBudgetBytes(options_.jobs) / world +
                                       options_.jobs.worker_address_space_overhead_bytes +
                                       libraries);
  process_options.heartbeat_timeout = options_.jobs.heartbeat_timeout;
  process_options.stop_grace = options_.jobs.stop_grace;
  process_options.clock = context_->clock;
  TS_ASSIGN_OR_RETURN(
      auto process,
      JobProcess::Start(
          process_options, *launcher_,
          [this, &active](const pb::WorkerMessage& message) { recorder_->Apply(active, message); },
          [this, id](int rank, const std::string& line) {
            context_->Log(absl::StrCat("job ", id, " rank ", rank, ": ", line));
          }));
  context_->Log(absl::StrCat("job ", id, ": worker process", world > 1 ? "es " : " ",
                             absl::StrJoin(process->pids(), ", "), " started (", world, " rank",
                             world > 1 ? "s" : "", ", address space limit ",
                             launch.address_space_bytes, " bytes each)"));
  active.SetProcess(process.get());
  // A cancel or a shutdown that came before the process existed.
  if (active.cancel || queue_->stopping()) process->Stop();
  const JobProcessOutcome outcome = process->Wait();
  active.SetProcess(nullptr);
  if (!outcome.exit_problem.empty()) {
    std::string tail;
    for (const auto& line : outcome.last_log_lines) absl::StrAppend(&tail, " | ", line);
    context_->Log(absl::StrCat("job ", id, ": ", outcome.exit_problem, "; last log lines:", tail));
  }
  *stopped = outcome.stopped;
  // Workers that finished, but whose result the store refused: a failed attempt with the store's
  // error (retried as any other while retries are left: a full disk may have room again).
  if (outcome.status.ok() && !active.unrecorded_result.ok()) return active.unrecorded_result;
  return outcome.status;
}

std::string JobRunner::WorkerBinary() const {
  if (!options_.jobs.worker_binary.empty()) return options_.jobs.worker_binary;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string("tsworker") : (self.parent_path() / "tsworker").string();
}

}  // namespace ts::server

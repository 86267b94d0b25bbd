// tsworker: runs one training or evaluation job in its own process.
//
//   tsworker --task=FILE --events-fd=N
//       How tsserver starts it: FILE holds a WorkerTask, and WorkerMessages (heartbeats,
//       progress, validation, checkpoints, logs, the result) go to the pipe on fd N.
//   tsworker --spec=SPEC.yaml --job-dir=DIR --data-root=DIR [--threads=N]
//            [--collective-timeout=SECONDS]
//       Standalone, for torchrun-style launchers (Kubeflow PyTorchJob): a training spec in the
//       YAML form tsctl takes; checkpoints and the training state go to DIR (rank 0), and the job
//       resumes from DIR's training state when there is one. Progress is logged to stderr.
//
// The data-parallel world comes from MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (absent: one
// rank). SIGTERM stops a training job at the next step boundary on every rank (rank 0 saves the
// training state; exit code 0, "stopped"), or before the next record while it reads or generates
// its data, and ends an evaluation job at once. Exit code 0 when
// the job finished or stopped, 1 when it failed, 2 for bad flags (common/command_line.h).
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/build_version.h"
#include "common/command_line.h"
#include "common/data_root.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "job_contract/event_pipe.h"
#include "job_contract/job_spec.h"
#include "job_contract/job_spec_yaml.h"
#include "model/heap_policy.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"
#include "model/training/data_parallel.h"
#include "model/version_fields.h"
#include "worker/jobs.h"

namespace ts::worker {
namespace {
namespace pb = taylorshift::v1;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_exit_on_term{false};

// SIGTERM is never delivered to a thread of the job: it stays blocked in every thread (this runs
// from .preinit_array, before the shared libraries' initialisers and before any thread exists,
// so every thread inherits the mask) and StopSignalThread takes it with sigtimedwait. A SIGTERM
// delivered asynchronously to the training thread while it was inside oneDNN's JIT GEMM
// (dnnl_sgemm in the attention backward) corrupted the heap: glibc then aborted the worker with
// "corrupted size vs. prev_size" or "double free or corruption" a few milliseconds later (the
// soak's restarts; reproduced with tsserver restarts of fine-tunings, core dumps in
// dnnl_sgemm's free()). tsserver starts workers with SIGTERM blocked already
// (server/jobs/job_process.cc), so one sent while the libraries load waits here instead of killing
// the worker with the signal's default action.
void BlockStopSignal(int /*argc*/, char** /*argv*/, char** /*envp*/) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, nullptr);
}
__attribute__((section(".preinit_array"),
               used)) void (*const kBlockStopSignal)(int, char**, char**) = BlockStopSignal;

// The one thread that receives SIGTERM: it sets g_stop (a training job stops at its next step
// boundary, or at the next record of the data it loads) or, for an evaluation (g_exit_on_term),
// ends the process at once. Joined by its destructor.
class StopSignalThread {
 public:
  StopSignalThread() : thread_([this] { Run(); }) {}
  ~StopSignalThread() {
    done_.store(true);
    thread_.join();
  }
  StopSignalThread(const StopSignalThread&) = delete;
  StopSignalThread& operator=(const StopSignalThread&) = delete;

 private:
  void Run() {
    // Named, so that it can be told from the job's threads (/proc/PID/task/*/comm): while it
    // waits, SIGTERM is the one signal it does not block.
    pthread_setname_np(pthread_self(), "stop-signal");
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    const timespec tick{0, 50'000'000};  // how soon the destructor's join returns
    while (!done_.load()) {
      if (sigtimedwait(&term, nullptr, &tick) != SIGTERM) continue;
      if (g_exit_on_term.load()) _exit(128 + SIGTERM);
      g_stop.store(true);
    }
  }

  std::atomic<bool> done_{false};
  std::thread thread_;
};

// The flags as given.
struct Flags {
  std::string task;
  int events_fd = -1;
  std::string spec, job_dir, data_root;
  std::optional<int> threads;
  std::optional<int> collective_timeout_s;
};

void AddFlags(CLI::App& app, Flags* flags) {
  CLI::Option* task =
      app.add_option("--task", flags->task, "supervised by tsserver: the WorkerTask file");
  CLI::Option* events_fd =
      app.add_option("--events-fd", flags->events_fd,
                     "supervised: the pipe the WorkerMessages go to (a file descriptor)")
          ->check(IntegerIn(0, INT32_MAX));
  task->needs(events_fd);
  events_fd->needs(task);
  CLI::Option* spec = app.add_option(
      "--spec", flags->spec, "standalone: a training spec in the YAML form tsctl train takes");
  CLI::Option* job_dir = app.add_option(
      "--job-dir", flags->job_dir,
      "standalone: checkpoints and the training state (rank 0); resumes from its state");
  CLI::Option* data_root = app.add_option(
      "--data-root", flags->data_root, "standalone: the folder the spec's data paths resolve in");
  spec->needs(job_dir)->needs(data_root)->excludes(task);
  job_dir->needs(spec);
  data_root->needs(spec);
  app.add_option("--threads", flags->threads, "standalone: intra-op threads of this rank")
      ->check(IntegerIn(1, INT32_MAX))
      ->needs(spec);
  app.add_option("--collective-timeout", flags->collective_timeout_s,
                 "seconds a collective operation may wait for the other ranks")
      ->check(IntegerIn(1, INT32_MAX));
}

// A supervised task: the WorkerTask tsserver wrote.
absl::StatusOr<pb::WorkerTask> SupervisedTask(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, "task file"));
  pb::WorkerTask task;
  if (!task.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": not a WorkerTask"));
  }
  return task;
}

// A standalone task: the spec normalised as tsserver would, its init_from inside the data root.
absl::StatusOr<pb::WorkerTask> StandaloneTask(const Flags& flags) {
  TS_ASSIGN_OR_RETURN(const std::string text, ReadFile(flags.spec, "spec"));
  TS_ASSIGN_OR_RETURN(pb::TrainingSpec spec, ParseTrainingSpecYaml(text));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  job::SpecRules jobs;
  jobs.threads_per_job = cores;
  jobs.cuda_devices = compat::CudaDeviceCount();
  jobs.cuda_data_parallel = HaveNccl();
  TS_RETURN_IF_ERROR(job::NormalizeTrainingSpec(&spec, jobs, cores));
  pb::WorkerTask task;
  task.mutable_job()->set_id(spec.name());
  task.mutable_job()->set_name(spec.name());
  task.mutable_job()->set_kind(pb::JOB_KIND_TRAINING);
  task.set_job_dir(flags.job_dir);
  task.set_data_root(flags.data_root);
  task.set_threads(flags.threads ? *flags.threads : spec.threads());
  if (!spec.init_from().empty()) {
    if (absl::StartsWith(spec.init_from(), "job:")) {
      return absl::InvalidArgumentError(
          "init_from: job references need tsserver; give a checkpoint path in the data root");
    }
    TS_ASSIGN_OR_RETURN(const DataRoot root, DataRoot::Create(task.data_root()));
    TS_ASSIGN_OR_RETURN(const std::string path, root.Resolve(spec.init_from()));
    task.set_init_from_path(path);
  }
  *task.mutable_job()->mutable_training() = std::move(spec);
  return task;
}

std::string Describe(const pb::WorkerMessage& message) {
  switch (message.kind_case()) {
    case pb::WorkerMessage::kStarted: {
      const auto& s = message.started();
      return absl::StrCat(
          "started: ", s.total_steps(), " steps, ", s.train_examples(), " training and ",
          s.validation_examples(), " validation examples, ", s.world_size(), " rank(s)",
          s.resumed_step() > 0 ? absl::StrCat(", resumed at step ", s.resumed_step()) : "");
    }
    case pb::WorkerMessage::kProgress: {
      const auto& p = message.progress();
      return absl::StrFormat("step %d: loss %.4f, lr %.3g, %.1f examples/s, epoch %.2f", p.step(),
                             p.loss(), p.learning_rate(), p.examples_per_second(), p.epoch());
    }
    case pb::WorkerMessage::kValidation:
      return absl::StrFormat("validation at step %d: accuracy %.4f, loss %.4f",
                             message.validation().step(), message.validation().accuracy(),
                             message.validation().loss());
    case pb::WorkerMessage::kCheckpoint:
      return absl::StrCat("checkpoint (", message.checkpoint().checkpoint().kind(),
                          "): ", message.checkpoint().checkpoint().path());
    case pb::WorkerMessage::kReport:
      return absl::StrFormat("evaluation: accuracy %.4f on %d examples",
                             message.report().accuracy(), message.report().examples());
    case pb::WorkerMessage::kEvaluationProgress:
      return absl::StrCat("evaluated ", message.evaluation_progress().examples(), "/",
                          message.evaluation_progress().total_examples(), " examples");
    case pb::WorkerMessage::kLog:
      return message.log();
    default:
      return "";
  }
}

// The task's process settings (heap policy, threads, float32 without TF32); a training rank's
// device: each CUDA rank on its own (job::RankDevice), where the ranks all-reduce over NCCL.
absl::Status PrepareProcess(pb::WorkerTask& task, int rank, bool training,
                            DataParallelOptions& dp) {
  if (task.heap_keep_freed_bytes() > 0) {
    (void)KeepFreedHeapMemory(static_cast<std::int64_t>(task.heap_keep_freed_bytes()));
  }
  compat::SetThreads(static_cast<int>(std::max<std::uint32_t>(task.threads(), 1)));
  compat::SetCudaTf32(false);  // a job's float32 is float32 (docs/GPU.md)
  if (!training) return absl::OkStatus();
  pb::TrainingSpec& spec = *task.mutable_job()->mutable_training();
  spec.set_device(job::RankDevice(job::JobDevice(task.job()), rank));
  TS_ASSIGN_OR_RETURN(dp.device,
                      CatchTorch("device", [&spec] { return torch::Device(spec.device()); }));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  const StopSignalThread stop_signals;  // first: a SIGTERM pending since exec is taken now
  CLI::App app(
      "tsworker: runs one training or evaluation job in its own process: supervised by "
      "tsserver (--task, --events-fd), or standalone for torchrun-style launchers (--spec, "
      "--job-dir, --data-root). The data-parallel world comes from MASTER_ADDR, MASTER_PORT, "
      "WORLD_SIZE and RANK (absent: one rank).",
      "tsworker");
  UseFlagConventions(app);
  AddVersionFlag(app, TorchVersionFields);
  app.footer(
      "SIGTERM stops a training job at the next step boundary on every rank (rank 0 saves the "
      "training state; exit 0, \"stopped\"), or while it loads its data, and ends an evaluation "
      "job at once. Exit 0 when the "
      "job finished or stopped, 1 when it failed, 2 on a usage error.");
  Flags flags;
  AddFlags(app, &flags);
  if (std::optional<int> exit = ParseCommandLine(app, argc, argv)) return *exit;
  const bool supervised = !flags.task.empty();
  absl::StatusOr<pb::WorkerTask> task;
  const int events_fd = flags.events_fd;
  if (supervised) {
    task = SupervisedTask(flags.task);
  } else if (!flags.spec.empty()) {
    task = StandaloneTask(flags);
  } else {
    std::cerr << "tsworker: give --task or --spec\n" << app.help();
    return kUsageExitStatus;
  }

  std::unique_ptr<job::EventWriter> writer;
  auto dp = DataParallelFromEnvironment();
  const int rank = dp.ok() ? dp->rank : 0;
  if (supervised) writer = std::make_unique<job::EventWriter>(events_fd, rank);
  const auto emit = [&](pb::WorkerMessage message) {
    if (writer != nullptr) {
      if (!writer->Write(std::move(message)).ok()) _exit(1);  // the server is gone
      return;
    }
    const std::string line = Describe(message);
    if (!line.empty()) std::cerr << "tsworker[rank " << rank << "] " << line << std::endl;
  };
  const auto finish = [&](const absl::Status& status, bool stopped) {
    pb::WorkerMessage message;
    message.mutable_result()->set_code(static_cast<int>(status.code()));
    message.mutable_result()->set_message(std::string(status.message()));
    message.mutable_result()->set_stopped(stopped);
    if (writer != nullptr) (void)writer->Write(message);
    if (!status.ok() && !stopped)
      std::cerr << "tsworker[rank " << rank << "] failed: " << status << std::endl;
    if (stopped)
      std::cerr << "tsworker[rank " << rank << "] stopped: " << status.message() << std::endl;
    return status.ok() || stopped ? 0 : 1;
  };
  if (!task.ok()) return finish(task.status(), false);
  if (!dp.ok()) return finish(dp.status(), false);

  // Signals: SIGTERM (StopSignalThread, from the start of Main) stops a training job at its next
  // step boundary and ends an evaluation at once; a write to a vanished server returns EPIPE
  // instead of killing silently.
  const bool training = task->job().kind() == pb::JOB_KIND_TRAINING;
  g_exit_on_term.store(!training);
  if (!training && g_stop.load()) {
    return finish(absl::AbortedError("stopped before it began"), true);
  }
  signal(SIGPIPE, SIG_IGN);

  // Heartbeats: the supervisor fails a worker that stays silent (a hang, a stopped process).
  std::mutex heartbeat_mu;
  std::condition_variable heartbeat_cv;
  bool done = false;
  std::thread heartbeat;
  if (writer != nullptr) {
    const pid_t parent = getppid();
    const auto interval =
        std::chrono::milliseconds(std::max<std::uint32_t>(task->heartbeat_ms(), 50));
    heartbeat = std::thread([&, parent, interval] {
      std::unique_lock<std::mutex> lock(heartbeat_mu);
      while (!heartbeat_cv.wait_for(lock, interval, [&] { return done; })) {
        if (getppid() != parent) _exit(1);  // orphaned: the server died
        pb::WorkerMessage beat;
        beat.set_heartbeat(true);
        if (!writer->Write(std::move(beat)).ok()) _exit(1);
      }
    });
  }

  if (flags.collective_timeout_s) dp->timeout = std::chrono::seconds(*flags.collective_timeout_s);
  if (const absl::Status set = PrepareProcess(*task, rank, training, *dp); !set.ok()) {
    return finish(set, false);
  }

  absl::Status status;
  auto group = DataParallelGroup::Connect(*dp);
  if (!group.ok()) {
    status = group.status();
  } else {
    JobContext context;
    context.task = &*task;
    context.emit = [&](pb::WorkerMessage message) {
      if (rank != 0 && message.kind_case() != pb::WorkerMessage::kLog) return;
      emit(std::move(message));
    };
    context.stop = &g_stop;
    context.group = group->get();
    status = training ? RunTrainingJob(context) : RunEvaluationJob(context);
  }
  if (heartbeat.joinable()) {
    {
      std::lock_guard<std::mutex> lock(heartbeat_mu);
      done = true;
    }
    heartbeat_cv.notify_all();
    heartbeat.join();
  }
  const bool stopped = absl::IsAborted(status) && g_stop.load();
  return finish(stopped ? absl::AbortedError(status.message()) : status, stopped);
}

}  // namespace
}  // namespace ts::worker

int main(int argc, char** argv) try {
  // Before any tensor operation; a value from tsserver's environment (its
  // onednn_primitive_cache_capacity) wins.
  (void)ts::LimitOneDnnPrimitiveCache(ts::kDefaultOneDnnPrimitiveCacheCapacity);
  return ts::worker::Main(argc, argv);
} catch (const std::exception& e) {  // outside the job, which reports its own failures
  std::cerr << "tsworker: " << e.what() << "\n";
  return 1;
}

// A training job as one rank of a data-parallel world (a world of one when alone). Every rank
// loads the data and builds the same model; rank 0 validates, writes checkpoints and the
// training state, and reports. The ranks agree on stopping at each step boundary.
#include <google/protobuf/util/time_util.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/proto_convert.h"
#include "common/atomic_file.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/cost_model.h"
#include "model/torch_status.h"
#include "model/training/training.h"
#include "worker/checkpoint_retention.h"
#include "worker/job_data.h"
#include "worker/jobs.h"

namespace ts::worker {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

constexpr char kTrainingStateFile[] = "training_state.pt";
constexpr char kBestCheckpointFile[] = "best.tsckpt";
constexpr char kAccuracyKey[] = "validation_accuracy";

// The spec's labels against the training data's, before the model is built: every example's
// label is one of them (the readers check names; the fixed-label formats, listops, lra_tsv and
// cifar10, do not read the spec's), and every label has an example: a class without one cannot
// be learned, and a list longer than the data's (2,000,000 labels for ListOps' ten once built
// a 2,000,000-way head) is a mistake.
absl::Status CheckLabelsAgainstData(const std::vector<std::string>& labels, const Dataset& train) {
  std::vector<bool> seen(labels.size(), false);
  for (const Example& example : train.examples) {
    if (example.label < 0 || example.label >= static_cast<std::int64_t>(labels.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels: the training data has label ",
          example.label < static_cast<std::int64_t>(train.label_names.size()) && example.label >= 0
              ? Quoted(train.label_names[static_cast<std::size_t>(example.label)])
              : absl::StrCat(example.label),
          ", which the spec's ", labels.size(), " labels do not include"));
    }
    seen[static_cast<std::size_t>(example.label)] = true;
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels[", i, "]: ", Quoted(labels[i]), " has no example in data.train (",
          train.examples.size(), " examples; the data's labels: ",
          train.label_names.size() <= 20 ? absl::StrJoin(train.label_names, ", ")
                                         : absl::StrCat(train.label_names.size(), " names"),
          ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingOptions> OptionsFromSpec(const pb::TrainingSpec& spec) {
  TrainingOptions options;
  TS_ASSIGN_OR_RETURN(options.optimizer,
                      Prefixed(ParseOptimizerKind(spec.optimizer().name()), "optimizer.name: "));
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
  TS_ASSIGN_OR_RETURN(options.path, FromProtoPath(spec.path()));
  options.log_interval = static_cast<std::int64_t>(spec.log_interval());
  options.eval_interval = static_cast<std::int64_t>(spec.eval_interval());
  options.checkpoint_interval = static_cast<std::int64_t>(spec.checkpoint_interval());
  if (spec.dtype() == "float64") {
    options.dtype = torch::kFloat64;
  } else if (!spec.dtype().empty() && spec.dtype() != "float32") {
    return absl::InvalidArgumentError(absl::StrCat("dtype: must be float32 or float64, got \"",
                                                   spec.dtype().substr(0, 64), "\""));
  }
  if (!spec.precision().empty()) {
    TS_ASSIGN_OR_RETURN(options.precision, ParsePrecision(spec.precision()));
  }
  if (!spec.device().empty()) {
    TS_ASSIGN_OR_RETURN(options.device,
                        CatchTorch("device", [&spec] { return torch::Device(spec.device()); }));
  }
  TS_RETURN_IF_ERROR(ValidateTrainingOptions(options));
  return options;
}

// A training job's examples, as its spec names them.
struct TrainingData {
  std::vector<std::string> labels;  // the spec's, else the training data's
  Dataset train;
  std::vector<Example> validation;
  std::int64_t skipped = 0;  // malformed records dropped (skip_malformed)
};

// `stop` (may be null) ends a long load early (ABORTED; LoadSource).
absl::StatusOr<TrainingData> LoadTrainingData(const DataRoot& root, const pb::TrainingSpec& spec,
                                              const std::atomic<bool>* stop) {
  TrainingData data;
  data.labels.assign(spec.labels().begin(), spec.labels().end());
  TS_ASSIGN_OR_RETURN(data.train,
                      LoadSource(root, spec.data().train(), data.labels, "data.train", stop));
  if (data.labels.empty()) data.labels = data.train.label_names;
  TS_RETURN_IF_ERROR(CheckLabelsAgainstData(data.labels, data.train));
  data.skipped = data.train.skipped;
  if (spec.data().validation().split() > 0) {
    auto split =
        SplitDataset(std::move(data.train.examples), spec.data().validation().split(), spec.seed());
    if (!split.ok()) return Prefixed(split.status(), "data.validation.split: ");
    data.train.examples = std::move(split->train);
    data.validation = std::move(split->validation);
  } else if (spec.data().has_validation() && !spec.data().validation().format().empty()) {
    TS_ASSIGN_OR_RETURN(Dataset loaded, LoadSource(root, spec.data().validation(), data.labels,
                                                   "data.validation", stop));
    data.skipped += loaded.skipped;
    data.validation = std::move(loaded.examples);
  }
  return data;
}

// The job's trainer, built one of three ways: resumed from its training state (a restart or a
// retry), from init_from's checkpoint, or new from the spec's model. Takes the examples.
absl::StatusOr<std::unique_ptr<Trainer>> MakeTrainer(
    const pb::WorkerTask& task, const pb::TrainingSpec& spec, const TrainingOptions& options,
    const std::string& state_path, TrainingData& data, CheckpointMetadata& metadata) {
  std::error_code exists_error;
  if (fs::exists(state_path, exists_error)) {
    return Prefixed(Trainer::Resume(state_path, options, std::move(data.train.examples),
                                    std::move(data.validation)),
                    "resuming from the training state: ");
  }
  const std::int64_t num_classes = static_cast<std::int64_t>(data.labels.size());
  if (!task.init_from_path().empty()) {
    TS_ASSIGN_OR_RETURN(auto loaded,
                        Prefixed(LoadCheckpoint(task.init_from_path()), "init_from: "));
    if (loaded.options.num_classes() != num_classes) {
      return absl::FailedPreconditionError(absl::StrCat("init_from: the checkpoint has ",
                                                        loaded.options.num_classes(),
                                                        " classes, the data has ", num_classes));
    }
    metadata.provenance["init_from"] = spec.init_from();
    return Trainer::Create(std::move(loaded.model), loaded.options, options,
                           std::move(data.train.examples), std::move(data.validation));
  }
  const auto& m = spec.model();
  TaylorShiftEncoderOptions encoder(m.embed_dim(), m.depth(), m.heads(), m.max_length(),
                                    num_classes);
  encoder.mlp_hidden(static_cast<std::int64_t>(std::llround(m.embed_dim() * m.mlp_ratio())));
  encoder.conv_embed(m.conv_embed());
  encoder.drop_rate(m.drop_rate());
  encoder.drop_path(m.drop_path());
  encoder.attn_drop(m.attn_drop());
  if (auto s = ValidateEncoderOptions(encoder); !s.ok()) return Prefixed(s, "model: ");
  return Trainer::Create(encoder, options, std::move(data.train.examples),
                         std::move(data.validation));
}

// A PROGRESS message: `step`'s number and learning rate, the global batch's mean loss, the
// examples per second since the last one, the epoch.
pb::WorkerMessage ProgressMessage(const TrainingStepResult& step, double loss, double rate,
                                  double epoch, absl::Time now) {
  pb::WorkerMessage message;
  auto* progress = message.mutable_progress();
  progress->set_step(static_cast<std::uint64_t>(step.step));
  progress->set_loss(loss);
  progress->set_learning_rate(step.lr);
  progress->set_examples_per_second(rate);
  progress->set_epoch(epoch);
  progress->set_time_ms(absl::ToUnixMillis(now));
  return message;
}

// The STARTED message rank 0 sends once the trainer is built.
pb::WorkerMessage StartedMessage(const pb::TrainingSpec& spec, const TrainingData& data,
                                 std::int64_t train_size, std::int64_t validation_size,
                                 std::uint64_t resumed_step, int world_size) {
  pb::WorkerMessage message;
  auto* started = message.mutable_started();
  started->set_total_steps(spec.steps());
  started->set_train_examples(static_cast<std::uint64_t>(train_size));
  started->set_validation_examples(static_cast<std::uint64_t>(validation_size));
  started->set_skipped_examples(static_cast<std::uint64_t>(data.skipped));
  for (const auto& label : data.labels) started->add_labels(label);
  started->set_resumed_step(resumed_step);
  *started->mutable_spec() = spec;
  started->set_world_size(world_size);
  return message;
}

// The loop of a training job once its trainer is built: steps until done or stopped, and on rank
// 0 the PROGRESS messages, validation runs, checkpoints (kept as CheckpointRetention says) and the
// training state, each reported through the context's `emit`.
class TrainingLoop {
 public:
  TrainingLoop(const JobContext& context, const pb::TrainingSpec& spec,
               const TrainingOptions& options, std::unique_ptr<Trainer> trainer,
               CheckpointMetadata metadata, std::vector<std::string> labels,
               std::int64_t train_size)
      : context_(context),
        task_(*context.task),
        spec_(spec),
        options_(options),
        group_(*context.group),
        reporter_(context.group->rank() == 0),
        dir_(task_.job_dir()),
        state_path_((fs::path(dir_) / kTrainingStateFile).string()),
        trainer_(std::move(trainer)),
        metadata_(std::move(metadata)),
        labels_(std::move(labels)),
        train_size_(train_size),
        has_validation_(
            spec.data().validation().split() > 0 ||
            (spec.data().has_validation() && !spec.data().validation().format().empty())),
        retention_(spec.keep_checkpoints(),
                   {task_.job().checkpoints().begin(), task_.job().checkpoints().end()}) {
    if (task_.job().has_best_validation()) {
      best_accuracy_ = task_.job().best_validation().accuracy();
    }
  }

  // OK when done (the training state is removed); ABORTED "stopped at step N" on a stop.
  absl::Status Run();

 private:
  // One step's reports and files on rank 0 after step `s`.
  absl::Status AfterStep(std::int64_t s, bool last_step);
  absl::Status SaveCheckpoint(const std::string& path, const std::string& kind, std::int64_t step);
  absl::Status Validate(std::int64_t step);

  const JobContext& context_;
  const pb::WorkerTask& task_;
  const pb::TrainingSpec& spec_;
  const TrainingOptions& options_;
  DataParallelGroup& group_;
  const bool reporter_;
  const std::string dir_;
  const std::string state_path_;
  const std::unique_ptr<Trainer> trainer_;
  const CheckpointMetadata metadata_;
  const std::vector<std::string> labels_;
  const std::int64_t train_size_;
  const bool has_validation_;
  CheckpointRetention retention_;
  std::optional<double> best_accuracy_;
  std::optional<double> last_accuracy_;
};

absl::Status TrainingLoop::SaveCheckpoint(const std::string& path, const std::string& kind,
                                          std::int64_t step) {
  CheckpointMetadata m = metadata_;
  m.provenance["step"] = absl::StrCat(step);
  if (last_accuracy_) m.provenance[kAccuracyKey] = absl::StrFormat("%.17g", *last_accuracy_);
  TS_RETURN_IF_ERROR(ts::SaveCheckpoint(path, trainer_->encoder_options(), m, trainer_->model()));
  pb::WorkerMessage message;
  auto* info = message.mutable_checkpoint()->mutable_checkpoint();
  info->set_kind(kind);
  info->set_step(static_cast<std::uint64_t>(step));
  info->set_path(path);
  if (last_accuracy_) {
    info->set_validation_accuracy(*last_accuracy_);
    info->set_has_validation_accuracy(true);
  }
  *info->mutable_time() = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      absl::ToUnixNanos(context_.clock->Now()));
  for (const pb::CheckpointInfo& removed : retention_.Add(*info)) {
    std::error_code error;
    fs::remove(removed.path(), error);
    message.mutable_checkpoint()->add_removed_paths(removed.path());
  }
  context_.emit(std::move(message));
  return absl::OkStatus();
}

absl::Status TrainingLoop::Validate(std::int64_t step) {
  TS_ASSIGN_OR_RETURN(const EvaluationResult result, trainer_->EvaluateValidation());
  pb::WorkerMessage message;
  *message.mutable_validation() = ToReport(result, labels_, step);
  last_accuracy_ = result.metrics.accuracy;
  const bool improved = !best_accuracy_ || *last_accuracy_ > *best_accuracy_;
  context_.emit(std::move(message));
  if (improved) {
    best_accuracy_ = last_accuracy_;
    return SaveCheckpoint((fs::path(dir_) / kBestCheckpointFile).string(), "best", step);
  }
  return absl::OkStatus();
}

absl::Status TrainingLoop::AfterStep(std::int64_t s, bool last_step) {
  if (has_validation_ && (s % options_.eval_interval == 0 || last_step)) {
    TS_RETURN_IF_ERROR(Validate(s));
  }
  if (s % options_.checkpoint_interval == 0 || last_step) {
    const std::string path = (fs::path(dir_) / absl::StrCat("step-", s, ".tsckpt")).string();
    TS_RETURN_IF_ERROR(SaveCheckpoint(path, "last", s));
    // The training state goes after the checkpoint: a resume never starts behind it.
    if (!last_step) TS_RETURN_IF_ERROR(trainer_->SaveState(state_path_));
  }
  return absl::OkStatus();
}

absl::Status TrainingLoop::Run() {
  // Throughput counts the optimizer steps only: validation runs and checkpoints in between
  // would otherwise make a job look slower than its training is.
  std::int64_t examples_since_log = 0;
  absl::Duration step_time_since_log = absl::ZeroDuration();
  const double world = group_.world_size();
  while (!trainer_->done()) {
    // Every rank stops at the same step boundary: a rank that went on alone would wait for
    // the others in its next all-reduce.
    TS_ASSIGN_OR_RETURN(
        const auto stop,
        group_.Sum({context_.stop != nullptr && context_.stop->load() ? 1.0 : 0.0}));
    if (stop[0] > 0) {
      if (reporter_) TS_RETURN_IF_ERROR(trainer_->SaveState(state_path_));
      return absl::AbortedError(absl::StrCat("stopped at step ", trainer_->step()));
    }
    const absl::Time step_start = context_.clock->Now();
    TS_ASSIGN_OR_RETURN(const TrainingStepResult step, trainer_->Step());
    step_time_since_log += context_.clock->Now() - step_start;
    examples_since_log += options_.batch_size;
    const std::int64_t s = step.step;
    const bool last_step = trainer_->done();
    if (s % options_.log_interval == 0 || last_step) {
      // The loss of the whole global batch: the mean of the ranks' slice means.
      TS_ASSIGN_OR_RETURN(const auto losses, group_.Sum({step.loss}));
      const double seconds = absl::ToDoubleSeconds(step_time_since_log);
      const double rate = seconds > 0 ? static_cast<double>(examples_since_log) / seconds : 0;
      examples_since_log = 0;
      step_time_since_log = absl::ZeroDuration();
      if (reporter_) {
        context_.emit(ProgressMessage(
            step, losses[0] / world, rate,
            train_size_ > 0 ? static_cast<double>(s) * static_cast<double>(options_.batch_size) /
                                  static_cast<double>(train_size_)
                            : 0.0,
            context_.clock->Now()));
      }
    }
    if (reporter_) TS_RETURN_IF_ERROR(AfterStep(s, last_step));
  }
  if (reporter_) {
    std::error_code error;
    fs::remove(state_path_, error);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTrainingJob(const JobContext& context) {
  const pb::WorkerTask& task = *context.task;
  const std::string& id = task.job().id();
  pb::TrainingSpec spec = task.job().training();
  DataParallelGroup& group = *context.group;
  const bool reporter = group.rank() == 0;
  const auto emit_log = [&](const std::string& line) {
    pb::WorkerMessage message;
    message.set_log(line);
    context.emit(std::move(message));
  };
  const std::string dir = task.job_dir();
  TS_RETURN_IF_ERROR(CreateDirectories(dir));
  TS_ASSIGN_OR_RETURN(const DataRoot root, DataRoot::Create(task.data_root()));

  // A stop while the data loads (it can take long) ends the job here, "stopped" like one at a
  // step boundary; it has no state to save yet.
  TS_ASSIGN_OR_RETURN(TrainingData data, LoadTrainingData(root, spec, context.stop));
  const std::vector<std::string>& labels = data.labels;
  const std::int64_t skipped = data.skipped;
  job::SpecRules jobs;
  if (task.max_steps() > 0) jobs.limits.max_steps = static_cast<std::int64_t>(task.max_steps());
  TS_RETURN_IF_ERROR(job::FinalizeTrainingSpec(
      &spec, static_cast<std::int64_t>(data.train.examples.size()), jobs));
  if (skipped > 0 && reporter) {
    emit_log(absl::StrCat("skipped ", skipped, " malformed records, first: ",
                          data.train.skip_reasons.empty() ? "" : data.train.skip_reasons.front()));
  }
  const std::int64_t train_size = static_cast<std::int64_t>(data.train.examples.size());
  const std::int64_t validation_size = static_cast<std::int64_t>(data.validation.size());

  TS_ASSIGN_OR_RETURN(const TrainingOptions options, OptionsFromSpec(spec));
  const std::string state_path = (fs::path(dir) / kTrainingStateFile).string();
  CheckpointMetadata metadata;
  metadata.modality = spec.modality();
  metadata.labels = labels;
  metadata.provenance["created_by"] = "tsserver training job";
  metadata.provenance["job_id"] = id;
  metadata.provenance["job_name"] = spec.name();
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      MakeTrainer(task, spec, options, state_path, data, metadata));
  // A trainer resumed from its state is past step 0; a new one is at 0.
  const auto resumed_step = static_cast<std::uint64_t>(trainer->step());
  TS_RETURN_IF_ERROR(trainer->SetDataParallel(&group));
  // `auto` switches paths at the crossover measured for training steps: backward costs the
  // paths differently than serving's forward does. Checkpoints keep the model's own setting.
  if (options.path == AttentionPath::kAuto) {
    const TaylorShiftEncoderOptions& e = trainer->encoder_options();
    trainer->model()->set_crossover_tokens(TrainingCrossoverTokens(e.embed_dim() / e.heads()));
  }
  if (reporter) {
    context.emit(
        StartedMessage(spec, data, train_size, validation_size, resumed_step, group.world_size()));
  }
  TrainingLoop loop(context, spec, options, std::move(trainer), std::move(metadata), labels,
                    train_size);
  return loop.Run();
}

}  // namespace ts::worker

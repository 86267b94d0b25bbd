#include "server/jobs/job_admission.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "model/checkpoints/checkpoint.h"
#include "model/data/dataset_readers.h"
#include "model/data/listops_generator.h"
#include "model/kernels/bf16_matmul_probe.h"
#include "model/networks/cost_model.h"
#include "server/serving/model_registry.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

// What an evaluation's target classifies, when the server knows it without reading the
// checkpoint: a served model's metadata, or a training job's labels and modality.
struct EvaluatedClassifier {
  std::string name;  // `model "filetype"`, `job job-1`
  std::vector<std::string> labels;
  std::string modality;
};

// "[a, b, c]", at most 20 labels shown: a message never grows with the label count.
std::string LabelList(const std::vector<std::string>& labels) {
  constexpr std::size_t kShown = 20;
  if (labels.size() <= kShown) return absl::StrCat("[", absl::StrJoin(labels, ", "), "]");
  const std::vector<std::string> shown(labels.begin(), labels.begin() + kShown);
  return absl::StrCat("[", absl::StrJoin(shown, ", "), ", … (", labels.size(), " labels)]");
}

// The label names a data source has that are known without reading its records: the generator's
// and LRA ListOps' "0".."9", CIFAR-10's class names, a folder's class folders (sorted, hidden ones
// left out, as ReadFolderDataset has them). nullopt for JSON Lines (its labels are in its records:
// CheckJsonLinesLabels).
std::optional<std::vector<std::string>> CheapDataLabels(const pb::DataSource& source,
                                                        const DataRoot& root) {
  const std::string& format = source.format();
  if (format == "listops" || format == "lra_tsv") return ListOpsLabelNames();
  if (format == "cifar10") return Cifar10LabelNames();
  if (format != "folder") return std::nullopt;
  auto path = root.Resolve(source.path());
  if (!path.ok()) return std::nullopt;
  std::vector<std::string> classes;
  std::error_code error;
  for (fs::directory_iterator it(*path, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name.front() != '.' && it->is_directory(error)) classes.push_back(name);
  }
  std::sort(classes.begin(), classes.end());
  return classes;
}

// How much of a JSON Lines file a submission reads for its labels (the rest is checked when the
// job runs), and the largest checkpoint file a submission loads to learn its labels and modality
// (a larger one is checked when the job runs).
constexpr std::int64_t kJsonLinesLabelScanBytes = std::int64_t{8} << 20;
constexpr std::int64_t kCheckedCheckpointBytes = std::int64_t{64} << 20;

// FAILED_PRECONDITION when a JSON Lines file's first kJsonLinesLabelScanBytes hold a label that is
// not one of `classifier`'s; OK when they do not, or the file cannot be read here (the worker
// reports that).
absl::Status CheckJsonLinesLabels(const EvaluatedClassifier& classifier,
                                  const pb::DataSource& source, const DataRoot& root) {
  auto path = root.Resolve(source.path());
  if (!path.ok()) return absl::OkStatus();
  auto scan = ScanJsonLinesLabels(*path, classifier.labels, kJsonLinesLabelScanBytes);
  if (!scan.ok() || scan->unknown_line == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "data: ", source.path(), ":", scan->unknown_line, ": label ", Quoted(scan->unknown_label),
      " is not one of the labels of ", classifier.name, ": the file has the labels ",
      LabelList(scan->labels), scan->more_labels ? " and more" : "",
      scan->complete ? "" : absl::StrCat(" in its first ", kJsonLinesLabelScanBytes, " bytes"),
      ", ", classifier.name, " has the labels ", LabelList(classifier.labels)));
}

// FAILED_PRECONDITION when the data cannot be what `classifier` classifies: its modality (pixels
// for cifar10, bytes otherwise) differs, or its labels, when known cheaply, do not match — the
// generated and fixed-label formats must have the classifier's labels in its order (the report
// counts by index); a folder needs a class folder for at least one of them (it reads only those).
absl::Status CheckEvaluationData(const EvaluatedClassifier& classifier,
                                 const pb::DataSource& source, const DataRoot& root) {
  const std::string& format = source.format();
  const std::string modality = format == "cifar10" ? "pixels" : "bytes";
  if (!classifier.modality.empty() && classifier.modality != modality) {
    return absl::FailedPreconditionError(
        absl::StrCat("data: format ", format, " is ", modality, ", but ", classifier.name,
                     " takes ", classifier.modality, " (the data and the model must agree)"));
  }
  if (classifier.labels.empty()) return absl::OkStatus();
  if (format == "jsonl") return CheckJsonLinesLabels(classifier, source, root);
  const std::optional<std::vector<std::string>> labels = CheapDataLabels(source, root);
  if (!labels.has_value()) return absl::OkStatus();
  bool compatible = false;
  if (format == "folder") {
    for (const std::string& label : classifier.labels) {
      compatible = compatible || std::binary_search(labels->begin(), labels->end(), label);
    }
  } else {
    compatible = *labels == classifier.labels;
  }
  if (compatible) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "data: ",
      format == "folder" ? absl::StrCat("folder ", Quoted(source.path()), " has the class folders ")
                         : absl::StrCat("format ", format, " has the labels "),
      LabelList(*labels), ", but ", classifier.name, " has the labels ",
      LabelList(classifier.labels), format == "folder" ? " (none of them is a class folder)" : ""));
}

// What the checkpoint file `path` (`reference` in the spec) classifies, read by loading it when
// it is at most kCheckedCheckpointBytes; nullopt for a larger file, or one that cannot be read
// here (the worker loads it and reports what is wrong). A file that is not a valid checkpoint is
// its load's error (DATA_LOSS, INVALID_ARGUMENT), naming `reference`, not the server's path.
absl::StatusOr<std::optional<EvaluatedClassifier>> CheckpointClassifier(
    const std::string& reference, const std::string& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error || size > static_cast<std::uintmax_t>(kCheckedCheckpointBytes)) return std::nullopt;
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return std::nullopt;
  auto loaded = ParseCheckpoint(*bytes, Quoted(reference));
  if (!loaded.ok()) return Prefixed(loaded.status(), "checkpoint: ");
  return EvaluatedClassifier{absl::StrCat("checkpoint ", Quoted(reference)),
                             std::move(loaded->metadata.labels),
                             std::move(loaded->metadata.modality)};
}

// A CUDA worker's host memory besides the data and LibTorch: CUDA's context and libraries.
constexpr std::int64_t kCudaHostBytes = std::int64_t{1} << 30;

// The advice of a refusal: what the dominant term depends on.
std::string WhatToChange(const pb::TrainingSpec& spec, const TrainingMemoryEstimate& e) {
  if (e.attention_bytes >= e.activation_bytes && e.attention_bytes >= e.state_bytes && e.softmax) {
    return "The softmax path's N×N scores dominate: set path: efficient, direct or auto (the "
           "Taylor paths recompute their scores in backward), or lower max_length or batch_size.";
  }
  if (e.activation_bytes + e.attention_bytes >= e.state_bytes + e.data_bytes) {
    return "Activations dominate: lower batch_size (or max_length), or run more workers to split "
           "the batch.";
  }
  if (e.data_bytes >= e.state_bytes) {
    return "The data held in memory dominates: use a smaller data set or raise the budget.";
  }
  return spec.model().embed_dim() > 0
             ? "The model's weights and optimizer state dominate: lower embed_dim or depth."
             : "The checkpoint's weights and optimizer state dominate.";
}

}  // namespace

absl::Status JobAdmission::CheckEnabled() const {
  if (jobs_.enabled) return absl::OkStatus();
  return absl::FailedPreconditionError("jobs are disabled on this server (jobs.enabled: false)");
}

absl::Status JobAdmission::CheckSourcePaths(const pb::DataSource& source,
                                            const std::string& field) const {
  if (source.format() == "listops" || source.path().empty()) return absl::OkStatus();
  auto resolved = data_root_->Resolve(source.path());
  if (!resolved.ok()) return Prefixed(resolved.status(), absl::StrCat(field, ".path: "));
  std::error_code error;
  if (!fs::exists(*resolved, error)) {
    return absl::NotFoundError(
        absl::StrCat(field, ".path: ", Quoted(source.path()), " does not exist in the data root"));
  }
  // Counted up to the limits and no further: a huge folder costs the server a bounded walk.
  const JobLimits& limits = jobs_.limits;
  std::int64_t files = 0, bytes = 0;
  if (fs::is_directory(*resolved, error)) {
    for (fs::recursive_directory_iterator it(*resolved, error), end; !error && it != end;
         it.increment(error)) {
      if (!it->is_regular_file(error)) continue;
      bytes += static_cast<std::int64_t>(it->file_size(error));
      if (++files > limits.max_data_files || bytes > limits.max_data_bytes) break;
    }
  } else {
    files = 1;
    bytes = static_cast<std::int64_t>(fs::file_size(*resolved, error));
  }
  if (files > limits.max_data_files) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".path: ", Quoted(source.path()),
                                                   " holds more than jobs.limits.max_data_files ",
                                                   limits.max_data_files, " files"));
  }
  if (bytes > limits.max_data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".path: ", Quoted(source.path()),
                                                   " holds more than ", limits.max_data_bytes,
                                                   " bytes (jobs.limits.max_data_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status JobAdmission::CheckSpecSize(const google::protobuf::Message& spec) const {
  const std::int64_t bytes = static_cast<std::int64_t>(spec.ByteSizeLong());
  if (bytes <= jobs_.limits.max_spec_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "spec: ", bytes, " bytes exceeds jobs.limits.max_spec_bytes ", jobs_.limits.max_spec_bytes));
}

absl::StatusOr<pb::Job> JobAdmission::Training(pb::TrainingSpec spec) const {
  TS_RETURN_IF_ERROR(CheckEnabled());
  TS_RETURN_IF_ERROR(CheckSpecSize(spec));
  TS_RETURN_IF_ERROR(job::NormalizeTrainingSpec(&spec, jobs_, num_cores_));
  // The worker would refuse it at start (ValidateTrainingOptions); refuse it before it queues.
  if (spec.precision() == "bf16" && spec.device() == "cpu") {
    TS_RETURN_IF_ERROR(CheckCpuBf16SumsInFloat32());
  }
  TS_RETURN_IF_ERROR(CheckSourcePaths(spec.data().train(), "data.train"));
  if (spec.data().has_validation()) {
    TS_RETURN_IF_ERROR(CheckSourcePaths(spec.data().validation(), "data.validation"));
  }
  if (!spec.init_from().empty()) {
    TS_RETURN_IF_ERROR(checkpoints_->Resolve(spec.init_from(), "init_from").status());
  }
  const TrainingMemoryEstimate estimate = EstimateRankMemory(spec);
  const int ranks = static_cast<int>(std::max<std::uint32_t>(spec.workers(), 1));
  std::int64_t total = estimate.total_bytes * ranks;
  if (spec.device() != "cpu") {
    // On a GPU the weights, optimizer state, activations and attention terms live in device
    // memory: they are admitted against what the GPU can still hand out now. The host keeps the
    // data and the process, CUDA's host side included: that is what the jobs' host budget counts.
    const std::int64_t device_need =
        estimate.total_bytes - estimate.data_bytes - estimate.runtime_bytes;
    // Each rank on its own device (job::RankDevice): the one with the least free memory decides.
    std::string device = spec.device();
    std::int64_t available = CudaAvailableBytes(device);
    for (int rank = 1; rank < ranks; ++rank) {
      const std::string rank_device = job::RankDevice(spec.device(), rank);
      const std::int64_t rank_available = CudaAvailableBytes(rank_device);
      if (rank_available < available) {
        available = rank_available;
        device = rank_device;
      }
    }
    if (jobs_.memory_admission && device_need > available) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the job's estimated peak GPU memory is %d bytes (%.2f GiB: batch_size %d, max_length "
          "%d, embed_dim %d, depth %d, path %s), more than the %d bytes (%.2f GiB) %s can hand "
          "out now. Largest first: %s. %s",
          device_need, device_need / 1073741824.0, spec.batch_size(), spec.model().max_length(),
          spec.model().embed_dim(), spec.model().depth(), pb::AttentionPath_Name(spec.path()),
          available, available / 1073741824.0, device,
          absl::StrJoin(DominantMemoryTerms(estimate), ", "), WhatToChange(spec, estimate)));
    }
    total = (estimate.data_bytes + estimate.runtime_bytes + kCudaHostBytes) * ranks;
  }
  const std::int64_t budget = MemoryBudgetBytes(jobs_);
  if (jobs_.memory_admission && total > budget) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the job's estimated peak memory is %d bytes (%.2f GiB over %d rank(s): batch_size %d, "
        "max_length %d, embed_dim %d, depth %d, path %s), more than jobs.memory_budget_bytes %d "
        "(%.2f GiB). Per rank, largest first: %s. %s",
        total, total / 1073741824.0, ranks, spec.batch_size(), spec.model().max_length(),
        spec.model().embed_dim(), spec.model().depth(), pb::AttentionPath_Name(spec.path()), budget,
        budget / 1073741824.0, absl::StrJoin(DominantMemoryTerms(estimate), ", "),
        WhatToChange(spec, estimate)));
  }
  pb::Job job;
  job.set_kind(pb::JOB_KIND_TRAINING);
  job.set_name(spec.name());
  job.mutable_progress()->set_memory_estimate_bytes(static_cast<std::uint64_t>(total));
  *job.mutable_training() = std::move(spec);
  return job;
}

absl::StatusOr<pb::Job> JobAdmission::Evaluation(pb::EvaluationSpec spec) const {
  TS_RETURN_IF_ERROR(CheckEnabled());
  TS_RETURN_IF_ERROR(CheckSpecSize(spec));
  TS_RETURN_IF_ERROR(job::NormalizeEvaluationSpec(&spec, jobs_, num_cores_));
  TS_RETURN_IF_ERROR(CheckSourcePaths(spec.data(), "data"));
  // A served model's and a job's labels are known; a checkpoint file's are in its payload with
  // its weights (model/checkpoints/checkpoint.h): it is loaded here up to kCheckedCheckpointBytes.
  std::optional<EvaluatedClassifier> classifier;
  switch (spec.target_case()) {
    case pb::EvaluationSpec::kModel: {
      const auto model = registry_->Find(spec.model());
      if (model == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("model: no served model named ", Quoted(spec.model())));
      }
      classifier = EvaluatedClassifier{absl::StrCat("model ", Quoted(spec.model())),
                                       model->metadata().labels, model->metadata().modality};
      break;
    }
    case pb::EvaluationSpec::kJobId: {
      if (auto path = checkpoints_->JobCheckpoint(spec.job_id(), pb::CHECKPOINT_CHOICE_BEST);
          !path.ok()) {
        return Prefixed(path.status(), "job_id: ");
      }
      auto job = checkpoints_->GetJob(spec.job_id());
      if (!job.ok()) return Prefixed(job.status(), "job_id: ");
      classifier = EvaluatedClassifier{absl::StrCat("job ", spec.job_id()),
                                       {job->labels().begin(), job->labels().end()},
                                       job->training().modality()};
      break;
    }
    case pb::EvaluationSpec::kCheckpoint: {
      TS_ASSIGN_OR_RETURN(const std::string path,
                          checkpoints_->Resolve(spec.checkpoint(), "checkpoint"));
      TS_ASSIGN_OR_RETURN(classifier, CheckpointClassifier(spec.checkpoint(), path));
      break;
    }
    default:
      return absl::InvalidArgumentError("target: give one of model, job_id or checkpoint");
  }
  if (classifier.has_value()) {
    TS_RETURN_IF_ERROR(CheckEvaluationData(*classifier, spec.data(), *data_root_));
  }
  pb::Job job;
  job.set_kind(pb::JOB_KIND_EVALUATION);
  job.set_name(spec.name());
  *job.mutable_evaluation() = std::move(spec);
  return job;
}

TrainingMemoryEstimate JobAdmission::EstimateRankMemory(const pb::TrainingSpec& spec) const {
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
    auto resolved = data_root_->Resolve(source->path());
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
    // The path as the trainer runs it: `auto` switches at the training crossover per batch,
    // so the longest direct batch and the max_length batch are both candidates for the peak.
    switch (spec.path()) {
      case pb::ATTENTION_PATH_EFFICIENT:
        shape.direct_up_to_tokens = 0;
        break;
      case pb::ATTENTION_PATH_AUTO:
        shape.direct_up_to_tokens =
            TrainingCrossoverTokens(m.embed_dim() / std::max(m.heads(), 1u));
        break;
      case pb::ATTENTION_PATH_SOFTMAX:
        shape.softmax = true;
        break;
      default:
        shape.direct_up_to_tokens = TrainingMemoryShape::kAlwaysDirect;
    }
  }
  TrainingMemoryEstimate estimate = EstimateTrainingMemory(shape);
  if (!spec.init_from().empty()) {
    // The shape is in the checkpoint, which the server does not load at submission: the
    // weights count (5 copies of the file), activations are not (the workers' limit holds).
    auto path = checkpoints_->Resolve(spec.init_from(), "init_from");
    std::error_code error;
    const auto size = path.ok() ? fs::file_size(*path, error) : 0;
    if (!error) {
      estimate.state_bytes += 5 * static_cast<std::int64_t>(size);
      estimate.total_bytes += 5 * static_cast<std::int64_t>(size);
    }
  }
  return estimate;
}

std::int64_t JobAdmission::EstimateMemory(const pb::TrainingSpec& spec) const {
  return EstimateRankMemory(spec).total_bytes *
         static_cast<std::int64_t>(std::max<std::uint32_t>(spec.workers(), 1));
}

}  // namespace ts::server

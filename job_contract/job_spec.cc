#include "job_contract/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/quoted.h"
#include "common/status_macros.h"

namespace ts::job {
namespace {

using taylorshift::v1::DataSource;
using taylorshift::v1::EvaluationSpec;
using taylorshift::v1::Job;
using taylorshift::v1::JOB_KIND_TRAINING;
using taylorshift::v1::ListOpsGenerate;
using taylorshift::v1::ModelSpec;
using taylorshift::v1::OptimizerSpec;
using taylorshift::v1::TrainingSpec;

constexpr char kJobPrefix[] = "job:";

// The ListOps generator's own bounds (model/data/listops_generator.h).
constexpr std::uint64_t kGenerateMinMaxLength = 10;
constexpr std::uint64_t kGenerateMaxLength = 1000000;

const std::vector<std::string>& DataFormats() {
  static const std::vector<std::string>* formats =
      new std::vector<std::string>{"jsonl", "folder", "lra_tsv", "cifar10", "listops"};
  return *formats;
}

absl::Status Invalid(absl::string_view path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

// A value given explicitly but outside the field's range `[min, max]` (an explicit 0 is never read
// as "use the default": a field left out is).
absl::Status OutOfRange(absl::string_view path, std::uint64_t value, std::uint64_t min,
                        absl::string_view max) {
  return Invalid(path, absl::StrCat(value, " is out of range [", min, ", ", max, "]"));
}

absl::Status Exceeds(absl::string_view path, std::uint64_t value, absl::string_view limit,
                     std::int64_t limit_value) {
  return Invalid(path, absl::StrCat(value, " exceeds jobs.limits.", limit, " ", limit_value));
}

// `device`: empty → cpu; cpu, cuda (→ cuda:0) or cuda:N with N below the CUDA devices the server
// sees.
absl::Status NormalizeDevice(std::string* device, const SpecRules& jobs) {
  if (device->empty()) *device = "cpu";
  if (*device == "cpu") return absl::OkStatus();
  if (*device == "cuda") *device = "cuda:0";
  int index = -1;
  const std::string digits = absl::StartsWith(*device, "cuda:") ? device->substr(5) : "";
  if (!absl::SimpleAtoi(digits, &index) || index < 0 || index > 63 ||
      digits != absl::StrCat(index)) {
    return Invalid("device", absl::StrCat("must be cpu, cuda or cuda:N, got ", Quoted(*device)));
  }
  if (index >= jobs.cuda_devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: ", *device, " asked for, but this server sees ",
        jobs.cuda_devices == 0 ? "no CUDA device (a CPU build of tsserver, or no GPU visible)"
                               : absl::StrCat(jobs.cuda_devices, " CUDA device(s)")));
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) {
  if (name.empty()) return Invalid("name", "required");
  if (!IsValidName(name)) {
    return Invalid("name", absl::StrCat("must match ", kNameRule, ", got ", Quoted(name)));
  }
  return absl::OkStatus();
}

// The syntax of a path relative to the data root (the server resolves it with ts::DataRoot).
absl::Status CheckDataPath(const std::string& key, const std::string& path) {
  if (path.empty()) return Invalid(key, "must not be empty");
  if (path.find('\0') != std::string::npos) return Invalid(key, "contains a NUL byte");
  if (path.front() == '/') {
    return Invalid(key, absl::StrCat("must be relative to the data root, got ", Quoted(path)));
  }
  for (const absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return Invalid(key, absl::StrCat("must stay inside the data root (no \"..\" component), got ",
                                       Quoted(path)));
    }
  }
  return absl::OkStatus();
}

// jobs.limits.max_threads, with 0 meaning the machine's cores.
int ThreadCap(const SpecRules& jobs, int num_cores) {
  return jobs.limits.max_threads > 0 ? jobs.limits.max_threads : std::max(num_cores, 1);
}

// `threads` of either spec: default jobs.threads_per_job (within the cap), at most the cap.
template <typename Spec>
absl::Status NormalizeThreads(Spec* spec, const SpecRules& jobs, int num_cores) {
  const int cap = ThreadCap(jobs, num_cores);
  if (spec->has_threads() && spec->threads() == 0) {
    return OutOfRange("threads", 0, 1, absl::StrCat(cap));
  }
  if (!spec->has_threads()) {
    spec->set_threads(static_cast<std::uint32_t>(std::max(1, std::min(jobs.threads_per_job, cap))));
    return absl::OkStatus();
  }
  if (spec->threads() > static_cast<std::uint32_t>(cap)) {
    if (jobs.limits.max_threads > 0) {
      return Exceeds("threads", spec->threads(), "max_threads", jobs.limits.max_threads);
    }
    return Invalid("threads", absl::StrCat(spec->threads(), " exceeds the ", cap,
                                           " cores (jobs.limits.max_threads 0 = the cores)"));
  }
  return absl::OkStatus();
}

// `batch_size` of either spec: default 16 when left out, in [1, jobs.limits.max_batch_size].
template <typename Spec>
absl::Status NormalizeBatchSize(Spec* spec, const SpecRules& jobs) {
  if (!spec->has_batch_size()) spec->set_batch_size(16);
  if (spec->batch_size() == 0) {
    return OutOfRange("batch_size", 0, 1, absl::StrCat(jobs.limits.max_batch_size));
  }
  if (spec->batch_size() > jobs.limits.max_batch_size) {
    return Exceeds("batch_size", spec->batch_size(), "max_batch_size", jobs.limits.max_batch_size);
  }
  return absl::OkStatus();
}

absl::Status CheckAttentionPath(taylorshift::v1::AttentionPath path) {
  if (taylorshift::v1::AttentionPath_IsValid(path)) return absl::OkStatus();
  return Invalid("path", absl::StrCat("unknown attention path ", static_cast<int>(path)));
}

// A data source that is read or generated (not a split). `key` is where it sits in the spec
// ("data.train", "data.validation", or "data" for evaluation).
absl::Status NormalizeSource(const std::string& key, DataSource* source, const SpecRules& jobs) {
  const std::string& format = source->format();
  const std::string formats = absl::StrJoin(DataFormats(), ", ");
  if (format.empty()) {
    return Invalid(key + ".format", absl::StrCat("required (one of ", formats, ")"));
  }
  if (std::find(DataFormats().begin(), DataFormats().end(), format) == DataFormats().end()) {
    return Invalid(key + ".format",
                   absl::StrCat("must be one of ", formats, "; got ", Quoted(format)));
  }
  if (format != "listops") {
    if (source->has_generate()) {
      return Invalid(key + ".generate", absl::StrCat("only format listops takes generate, not ",
                                                     format, " (which reads path)"));
    }
    if (source->path().empty()) {
      return Invalid(key + ".path", absl::StrCat("required for format ", format));
    }
    return CheckDataPath(key + ".path", source->path());
  }
  if (!source->path().empty()) {
    return Invalid(key + ".path",
                   absl::StrCat("format listops is generated and takes no path, got \"",
                                source->path(), "\""));
  }
  ListOpsGenerate* generate = source->mutable_generate();
  const std::string at = key + ".generate";
  if (!generate->has_count()) return Invalid(at + ".count", "required (> 0) for format listops");
  if (generate->count() == 0) {
    return OutOfRange(at + ".count", 0, 1, absl::StrCat(jobs.limits.max_generate_count));
  }
  if (generate->count() > static_cast<std::uint64_t>(jobs.limits.max_generate_count)) {
    return Exceeds(at + ".count", generate->count(), "max_generate_count",
                   jobs.limits.max_generate_count);
  }
  if (!generate->has_min_length()) generate->set_min_length(500);
  if (!generate->has_max_length()) generate->set_max_length(2000);
  if (generate->seed() == 0) generate->set_seed(1);
  if (generate->max_length() < kGenerateMinMaxLength ||
      generate->max_length() > kGenerateMaxLength) {
    return Invalid(at + ".max_length",
                   absl::StrCat("must be in ", kGenerateMinMaxLength, "..", kGenerateMaxLength,
                                ", got ", generate->max_length()));
  }
  if (generate->min_length() > generate->max_length()) {
    return Invalid(at + ".min_length", absl::StrCat(generate->min_length(), " exceeds ", at,
                                                    ".max_length ", generate->max_length()));
  }
  return absl::OkStatus();
}

absl::Status CheckNoSplit(const std::string& key, const DataSource& source, absl::string_view why) {
  if (source.split() == 0) return absl::OkStatus();
  return Invalid(key + ".split", why);
}

absl::Status NormalizeData(TrainingSpec* spec, const SpecRules& jobs) {
  if (!spec->has_data() || !spec->data().has_train()) return Invalid("data.train", "required");
  taylorshift::v1::DataSpec* data = spec->mutable_data();
  TS_RETURN_IF_ERROR(CheckNoSplit("data.train", data->train(),
                                  "only data.validation takes a split (of the training set)"));
  TS_RETURN_IF_ERROR(NormalizeSource("data.train", data->mutable_train(), jobs));
  if (!data->has_validation()) return absl::OkStatus();
  DataSource* validation = data->mutable_validation();
  const bool has_source =
      !validation->format().empty() || !validation->path().empty() || validation->has_generate();
  const double split = validation->split();
  if (split != 0 && has_source) {
    return Invalid("data.validation", "give either a source (format, path) or split, not both");
  }
  if (has_source) return NormalizeSource("data.validation", validation, jobs);
  if (split == 0) {
    if (validation->skip_malformed()) {
      return Invalid("data.validation", "needs a source (format, path) or split");
    }
    data->clear_validation();  // `validation: {}` asks for nothing
    return absl::OkStatus();
  }
  if (!(split > 0 && split < 1)) {
    return Invalid("data.validation.split", absl::StrCat("must be in (0, 1), got ", split));
  }
  return absl::OkStatus();
}

absl::Status NormalizeModel(TrainingSpec* spec, const SpecRules& jobs) {
  const bool has_model = spec->has_model() && spec->model().ByteSizeLong() > 0;
  const JobLimits& limits = jobs.limits;
  const std::string& init_from = spec->init_from();
  if (!init_from.empty()) {
    if (has_model) {
      return Invalid("model",
                     "must be empty with init_from (the architecture comes from the "
                     "checkpoint)");
    }
    spec->clear_model();
    if (const auto id = ReferencedJobId(init_from)) {
      if (id->empty() || id->find_first_of(" \t\r\n/") != std::string::npos) {
        return Invalid("init_from", absl::StrCat("must be \"job:<id>\" or a checkpoint path "
                                                 "relative to the data root, got \"",
                                                 init_from, "\""));
      }
      return absl::OkStatus();
    }
    return CheckDataPath("init_from", init_from);
  }
  if (!has_model) return Invalid("model", "required (or init_from)");
  ModelSpec* model = spec->mutable_model();
  struct Required {
    const char* key;
    bool given;
    std::uint32_t value;
    std::int64_t max;
  };
  for (const Required& field :
       {Required{"embed_dim", model->has_embed_dim(), model->embed_dim(), limits.max_embed_dim},
        Required{"depth", model->has_depth(), model->depth(), limits.max_depth},
        Required{"heads", model->has_heads(), model->heads(), limits.max_embed_dim},
        Required{"max_length", model->has_max_length(), model->max_length(), limits.max_length}}) {
    const std::string key = absl::StrCat("model.", field.key);
    if (!field.given) return Invalid(key, "required (> 0)");
    if (field.value == 0) return OutOfRange(key, 0, 1, absl::StrCat(field.max));
  }
  if (model->embed_dim() > limits.max_embed_dim) {
    return Exceeds("model.embed_dim", model->embed_dim(), "max_embed_dim", limits.max_embed_dim);
  }
  if (model->depth() > limits.max_depth) {
    return Exceeds("model.depth", model->depth(), "max_depth", limits.max_depth);
  }
  if (model->max_length() > limits.max_length) {
    return Exceeds("model.max_length", model->max_length(), "max_length", limits.max_length);
  }
  if (model->embed_dim() % 2 != 0) {
    return Invalid("model.embed_dim",
                   absl::StrCat("must be even (sin/cos positions), got ", model->embed_dim()));
  }
  if (model->embed_dim() % model->heads() != 0) {
    return Invalid("model.heads", absl::StrCat(model->heads(), " does not divide model.embed_dim ",
                                               model->embed_dim()));
  }
  if (model->conv_embed() && model->embed_dim() % 4 != 0) {
    return Invalid(
        "model.embed_dim",
        absl::StrCat("must be divisible by 4 with model.conv_embed, got ", model->embed_dim()));
  }
  if (!model->has_mlp_ratio()) model->set_mlp_ratio(4);
  if (!(model->mlp_ratio() > 0) || !std::isfinite(model->mlp_ratio()) ||
      std::round(model->embed_dim() * model->mlp_ratio()) < 1) {
    return Invalid(
        "model.mlp_ratio",
        absl::StrCat("must be > 0 (and give an MLP at least 1 wide), got ", model->mlp_ratio()));
  }
  for (const auto& [key, value] : {std::pair<const char*, double>{"drop_rate", model->drop_rate()},
                                   {"drop_path", model->drop_path()},
                                   {"attn_drop", model->attn_drop()}}) {
    if (!(value >= 0 && value < 1)) {
      return Invalid(absl::StrCat("model.", key), absl::StrCat("must be in [0, 1), got ", value));
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeOptimizer(TrainingSpec* spec) {
  OptimizerSpec* optimizer = spec->mutable_optimizer();
  std::string name = absl::AsciiStrToLower(optimizer->name());
  if (name.empty()) name = "adamw";
  if (name != "adamw" && name != "lamb") {
    return Invalid("optimizer.name",
                   absl::StrCat("must be adamw or lamb, got ", Quoted(optimizer->name())));
  }
  optimizer->set_name(name);
  if (!optimizer->has_lr()) optimizer->set_lr(0.001);
  if (!(optimizer->lr() > 0) || !std::isfinite(optimizer->lr())) {
    return Invalid("optimizer.lr", absl::StrCat("must be > 0 and finite, got ", optimizer->lr()));
  }
  if (!optimizer->has_weight_decay()) optimizer->set_weight_decay(0.01);
  if (!(optimizer->weight_decay() >= 0) || !std::isfinite(optimizer->weight_decay())) {
    return Invalid("optimizer.weight_decay",
                   absl::StrCat("must be >= 0 and finite, got ", optimizer->weight_decay()));
  }
  if (optimizer->schedule().empty()) optimizer->set_schedule("cosine");
  if (optimizer->schedule() != "cosine") {
    return Invalid("optimizer.schedule", absl::StrCat("must be cosine (the only schedule), got \"",
                                                      optimizer->schedule(), "\""));
  }
  if (!optimizer->has_min_lr_ratio()) optimizer->set_min_lr_ratio(0);
  if (!(optimizer->min_lr_ratio() >= 0 && optimizer->min_lr_ratio() <= 1)) {
    return Invalid("optimizer.min_lr_ratio",
                   absl::StrCat("must be in [0, 1], got ", optimizer->min_lr_ratio()));
  }
  if (!optimizer->has_beta1()) optimizer->set_beta1(0.9);
  if (!optimizer->has_beta2()) optimizer->set_beta2(0.999);
  for (const auto& [key, value] :
       {std::pair<const char*, double>{"optimizer.beta1", optimizer->beta1()},
        {"optimizer.beta2", optimizer->beta2()}}) {
    if (!(value >= 0 && value < 1)) {
      return Invalid(key, absl::StrCat("must be in [0, 1), got ", value));
    }
  }
  if (!optimizer->has_eps()) optimizer->set_eps(1e-8);
  if (!(optimizer->eps() > 0) || !std::isfinite(optimizer->eps())) {
    return Invalid("optimizer.eps", absl::StrCat("must be > 0 and finite, got ", optimizer->eps()));
  }
  if (spec->steps() > 0 && optimizer->warmup_steps() > spec->steps()) {
    return Invalid("optimizer.warmup_steps",
                   absl::StrCat(optimizer->warmup_steps(), " exceeds steps ", spec->steps()));
  }
  return absl::OkStatus();
}

absl::Status NormalizeDuration(TrainingSpec* spec, const SpecRules& jobs) {
  const double epochs = spec->epochs();
  if (spec->has_steps() && spec->has_epochs()) {
    return Invalid("steps", "give steps or epochs, not both");
  }
  if (!spec->has_steps() && !spec->has_epochs()) return Invalid("steps", "required (or epochs)");
  if (spec->has_steps() && spec->steps() == 0) {
    return OutOfRange("steps", 0, 1, absl::StrCat(jobs.limits.max_steps));
  }
  if (spec->steps() > static_cast<std::uint64_t>(jobs.limits.max_steps)) {
    return Exceeds("steps", spec->steps(), "max_steps", jobs.limits.max_steps);
  }
  if (spec->has_epochs()) {
    if (!(epochs > 0) || !std::isfinite(epochs)) {
      return Invalid("epochs", absl::StrCat("must be > 0 and finite, got ", epochs));
    }
    if (epochs > static_cast<double>(jobs.limits.max_epochs)) {
      return Invalid("epochs", absl::StrCat(epochs, " exceeds jobs.limits.max_epochs ",
                                            jobs.limits.max_epochs));
    }
  }
  return absl::OkStatus();
}

// Interval defaults (for those left out) for a spec whose steps are known; every interval capped
// to steps.
void FillIntervals(TrainingSpec* spec) {
  const std::uint64_t steps = spec->steps();
  if (!spec->has_checkpoint_interval())
    spec->set_checkpoint_interval(std::max<std::uint64_t>(steps / 10, 1));
  if (!spec->has_eval_interval()) spec->set_eval_interval(spec->checkpoint_interval());
  if (!spec->has_log_interval()) spec->set_log_interval(10);
  spec->set_checkpoint_interval(std::min(spec->checkpoint_interval(), steps));
  spec->set_eval_interval(std::min(spec->eval_interval(), steps));
  spec->set_log_interval(std::min(spec->log_interval(), steps));
}

absl::Status CheckIntervals(const TrainingSpec& spec) {
  struct Interval {
    const char* key;
    bool given;
    std::uint64_t value;
  };
  for (const Interval& interval :
       {Interval{"checkpoint_interval", spec.has_checkpoint_interval(), spec.checkpoint_interval()},
        Interval{"eval_interval", spec.has_eval_interval(), spec.eval_interval()},
        Interval{"log_interval", spec.has_log_interval(), spec.log_interval()}}) {
    if (interval.given && interval.value == 0) {
      return OutOfRange(interval.key, 0, 1,
                        spec.steps() > 0 ? absl::StrCat("steps ", spec.steps()) : "steps");
    }
  }
  if (spec.steps() == 0) return absl::OkStatus();
  for (const auto& [key, value] :
       {std::pair<const char*, std::uint64_t>{"checkpoint_interval", spec.checkpoint_interval()},
        {"eval_interval", spec.eval_interval()},
        {"log_interval", spec.log_interval()}}) {
    if (value > spec.steps()) {
      return Invalid(key, absl::StrCat(value, " exceeds steps ", spec.steps()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const google::protobuf::RepeatedPtrField<std::string>& labels,
                         const JobLimits& limits) {
  if (labels.size() > limits.max_labels) {
    return Exceeds("labels", static_cast<std::uint64_t>(labels.size()), "max_labels",
                   limits.max_labels);
  }
  std::set<std::string> seen;
  for (int i = 0; i < labels.size(); ++i) {
    const std::string key = absl::StrCat("labels[", i, "]");
    if (labels[i].empty()) return Invalid(key, "must not be empty");
    if (labels[i].size() > static_cast<std::size_t>(limits.max_label_bytes)) {
      return Invalid(key,
                     absl::StrCat(labels[i].size(), " bytes exceeds jobs.limits.max_label_bytes ",
                                  limits.max_label_bytes));
    }
    if (!seen.insert(labels[i]).second) {
      return Invalid(key, absl::StrCat("duplicate label ", Quoted(labels[i])));
    }
  }
  return absl::OkStatus();
}

// dtype (float32 default, or float64) and precision (fp32 default, or bf16 on float32).
absl::Status NormalizeNumerics(TrainingSpec* spec) {
  if (spec->dtype().empty()) spec->set_dtype("float32");
  if (spec->dtype() != "float32" && spec->dtype() != "float64") {
    return Invalid("dtype",
                   absl::StrCat("must be float32 or float64, got ", Quoted(spec->dtype())));
  }
  if (spec->precision().empty()) spec->set_precision("fp32");
  if (spec->precision() != "fp32" && spec->precision() != "bf16") {
    return Invalid("precision",
                   absl::StrCat("must be fp32 or bf16, got ", Quoted(spec->precision())));
  }
  if (spec->precision() == "bf16" && spec->dtype() != "float32") {
    return Invalid("precision",
                   absl::StrCat("bf16 (mixed precision) needs dtype float32, got ", spec->dtype()));
  }
  return absl::OkStatus();
}

// workers (ranks) and device: each rank an equal slice of every batch; CUDA ranks one device
// each, where this build has NCCL.
absl::Status NormalizeWorkers(TrainingSpec* spec, const SpecRules& jobs) {
  if (!spec->has_workers()) spec->set_workers(1);
  if (spec->workers() == 0) {
    return OutOfRange("workers", 0, 1, absl::StrCat(jobs.limits.max_workers));
  }
  if (spec->workers() > static_cast<std::uint32_t>(jobs.limits.max_workers)) {
    return Exceeds("workers", spec->workers(), "max_workers", jobs.limits.max_workers);
  }
  if (spec->batch_size() % spec->workers() != 0) {
    return Invalid("batch_size", absl::StrCat(spec->batch_size(), " is not divisible by workers ",
                                              spec->workers(),
                                              " (each rank takes an equal slice of every batch)"));
  }
  TS_RETURN_IF_ERROR(NormalizeDevice(spec->mutable_device(), jobs));
  if (spec->device() != "cpu" && spec->workers() > 1) {
    const std::string ranks =
        absl::StrCat("workers: ", spec->workers(), " ranks from ", spec->device());
    if (!jobs.cuda_data_parallel) {
      return absl::FailedPreconditionError(
          absl::StrCat(ranks,
                       ": this server's build has no NCCL backend for CUDA ranks (the "
                       "CUDA build has it), so a CUDA job runs one rank here"));
    }
    const std::string last = RankDevice(spec->device(), static_cast<int>(spec->workers()) - 1);
    int last_index = 0;
    if (!absl::SimpleAtoi(last.substr(5), &last_index) || last_index >= jobs.cuda_devices) {
      return absl::FailedPreconditionError(absl::StrCat(ranks, " take one device each, up to ",
                                                        last, ", but this server sees ",
                                                        jobs.cuda_devices, " CUDA device(s)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NormalizeTrainingSpec(TrainingSpec* spec, const SpecRules& jobs, int num_cores) {
  TS_RETURN_IF_ERROR(CheckName(spec->name()));
  TS_RETURN_IF_ERROR(NormalizeModel(spec, jobs));
  TS_RETURN_IF_ERROR(NormalizeData(spec, jobs));
  TS_RETURN_IF_ERROR(NormalizeDuration(spec, jobs));
  TS_RETURN_IF_ERROR(NormalizeOptimizer(spec));
  TS_RETURN_IF_ERROR(NormalizeBatchSize(spec, jobs));
  if (!spec->has_seed()) spec->set_seed(1);
  if (!spec->has_grad_clip()) spec->set_grad_clip(1.0);
  if (!(spec->grad_clip() >= 0) || !std::isfinite(spec->grad_clip())) {
    return Invalid("grad_clip",
                   absl::StrCat("must be >= 0 and finite (0 disables), got ", spec->grad_clip()));
  }
  TS_RETURN_IF_ERROR(CheckIntervals(*spec));
  TS_RETURN_IF_ERROR(CheckAttentionPath(spec->path()));
  TS_RETURN_IF_ERROR(NormalizeThreads(spec, jobs, num_cores));
  TS_RETURN_IF_ERROR(CheckLabels(spec->labels(), jobs.limits));
  if (!spec->has_keep_checkpoints()) {
    spec->set_keep_checkpoints(static_cast<std::uint32_t>(jobs.keep_checkpoints));
  }
  if (spec->keep_checkpoints() == 0) {
    return Invalid("keep_checkpoints", "0 is out of range [1, 4294967295] (the best is kept too)");
  }
  if (spec->modality().empty()) {
    spec->set_modality(spec->data().train().format() == "cifar10" ? "pixels" : "bytes");
  }
  if (spec->modality() != "bytes" && spec->modality() != "pixels") {
    return Invalid("modality",
                   absl::StrCat("must be bytes or pixels, got ", Quoted(spec->modality())));
  }
  if (spec->max_retries() > static_cast<std::uint32_t>(jobs.limits.max_retries)) {
    return Exceeds("max_retries", spec->max_retries(), "max_retries", jobs.limits.max_retries);
  }
  TS_RETURN_IF_ERROR(NormalizeWorkers(spec, jobs));
  TS_RETURN_IF_ERROR(NormalizeNumerics(spec));
  if (spec->has_steps()) {
    FillIntervals(spec);
  } else if (!spec->has_log_interval()) {
    spec->set_log_interval(10);  // capped to steps once FinalizeTrainingSpec knows them
  }
  return absl::OkStatus();
}

absl::Status FinalizeTrainingSpec(TrainingSpec* spec, std::int64_t train_examples,
                                  const SpecRules& jobs) {
  if (train_examples <= 0) {
    return Invalid("data.train", absl::StrCat("has no training examples, got ", train_examples));
  }
  if (!spec->has_steps()) {
    const double epochs = spec->epochs();
    if (!(epochs > 0) || !std::isfinite(epochs)) return Invalid("steps", "required (or epochs)");
    if (spec->batch_size() == 0)
      return Invalid("batch_size", "required (normalise the spec first)");
    double exact = epochs * static_cast<double>(train_examples) / spec->batch_size();
    // 0.3 epochs of 10 examples is 3 steps, not the 4 that 3.0000000000000004 rounds up to.
    const double nearest = std::round(exact);
    if (std::fabs(exact - nearest) <= 1e-9 * std::max(1.0, exact)) exact = nearest;
    const double steps = std::max(1.0, std::ceil(exact));
    if (steps > static_cast<double>(jobs.limits.max_steps)) {
      return Invalid("epochs", absl::StrCat(epochs, " epochs of ", train_examples,
                                            " examples at batch_size ", spec->batch_size(), " are ",
                                            steps, " steps, more than jobs.limits.max_steps ",
                                            jobs.limits.max_steps));
    }
    spec->set_steps(static_cast<std::uint64_t>(steps));
    if (spec->optimizer().warmup_steps() > spec->steps()) {
      return Invalid("optimizer.warmup_steps",
                     absl::StrCat(spec->optimizer().warmup_steps(), " exceeds the ", spec->steps(),
                                  " steps that epochs ", epochs, " work out to"));
    }
  }
  FillIntervals(spec);
  return absl::OkStatus();
}

absl::Status NormalizeEvaluationSpec(EvaluationSpec* spec, const SpecRules& jobs, int num_cores) {
  TS_RETURN_IF_ERROR(CheckName(spec->name()));
  switch (spec->target_case()) {
    case EvaluationSpec::TARGET_NOT_SET:
      return Invalid("model", "required: give one of model, job_id, checkpoint");
    case EvaluationSpec::kModel:
      if (!IsValidName(spec->model())) {
        return Invalid("model", absl::StrCat("must be a served model's name (", kNameRule,
                                             "), got \"", spec->model(), "\""));
      }
      break;
    case EvaluationSpec::kJobId:
      if (spec->job_id().empty()) return Invalid("job_id", "must not be empty");
      break;
    case EvaluationSpec::kCheckpoint:
      TS_RETURN_IF_ERROR(CheckDataPath("checkpoint", spec->checkpoint()));
      break;
  }
  if (!spec->has_data()) return Invalid("data", "required");
  TS_RETURN_IF_ERROR(CheckNoSplit("data", spec->data(),
                                  "evaluation data must be a source (format, path), not a split"));
  TS_RETURN_IF_ERROR(NormalizeSource("data", spec->mutable_data(), jobs));
  TS_RETURN_IF_ERROR(NormalizeBatchSize(spec, jobs));
  TS_RETURN_IF_ERROR(CheckAttentionPath(spec->path()));
  TS_RETURN_IF_ERROR(NormalizeThreads(spec, jobs, num_cores));
  if (spec->max_retries() > static_cast<std::uint32_t>(jobs.limits.max_retries)) {
    return Exceeds("max_retries", spec->max_retries(), "max_retries", jobs.limits.max_retries);
  }
  return NormalizeDevice(spec->mutable_device(), jobs);
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         absl::ascii_isalnum(static_cast<unsigned char>(name.front())) &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
         });
}

std::optional<std::string> ReferencedJobId(const std::string& reference) {
  if (!absl::StartsWith(reference, kJobPrefix)) return std::nullopt;
  return reference.substr(sizeof(kJobPrefix) - 1);
}

std::string JobDevice(const Job& job) {
  const std::string& device =
      job.kind() == JOB_KIND_TRAINING ? job.training().device() : job.evaluation().device();
  return device.empty() ? "cpu" : device;
}

std::string RankDevice(const std::string& device, int rank) {
  int index = 0;
  if (!absl::StartsWith(device, "cuda:") || !absl::SimpleAtoi(device.substr(5), &index)) {
    return device;
  }
  return absl::StrCat("cuda:", index + rank);
}

}  // namespace ts::job

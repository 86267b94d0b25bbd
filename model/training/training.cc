#include "model/training/training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "model/kernels/mixed_linear.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"
#include "model/training/lamb.h"

namespace ts {
namespace {

constexpr char kStateFormat[] = "taylorshift-training-state-v1";
constexpr double kPi = 3.14159265358979323846;

// SplitMix64 finaliser: decorrelates (seed, counter) pairs for the data order and dropout.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool HasStochasticLayers(const TaylorShiftEncoderOptions& encoder) {
  return encoder.drop_rate() > 0 || encoder.attn_drop() > 0 || encoder.drop_path() > 0;
}

absl::Status ValidateExamples(const std::vector<LabeledSequence>& examples,
                              std::int64_t num_classes, std::string_view what) {
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].label < 0 || examples[i].label >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(what), " example ", i,
                                                     " has label ", examples[i].label,
                                                     ", outside [0, ", num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

struct Batch {
  torch::Tensor tokens;   // [B, N] int64, right-padded with 0
  torch::Tensor lengths;  // [B] int64
  torch::Tensor labels;   // [B] int64
};

Batch MakeBatch(const std::vector<const LabeledSequence*>& examples, std::int64_t max_length,
                const torch::Device& device) {
  const auto batch = static_cast<std::int64_t>(examples.size());
  std::int64_t longest = 1;
  for (const LabeledSequence* e : examples) {
    longest = std::max(longest, std::min(static_cast<std::int64_t>(e->tokens.size()), max_length));
  }
  torch::Tensor tokens = torch::zeros({batch, longest}, torch::kInt64);
  torch::Tensor lengths = torch::empty({batch}, torch::kInt64);
  torch::Tensor labels = torch::empty({batch}, torch::kInt64);
  auto tokens_a = tokens.accessor<std::int64_t, 2>();
  auto lengths_a = lengths.accessor<std::int64_t, 1>();
  auto labels_a = labels.accessor<std::int64_t, 1>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::string& text = examples[b]->tokens;
    const std::int64_t n = std::min(static_cast<std::int64_t>(text.size()), max_length);
    for (std::int64_t i = 0; i < n; ++i) {
      tokens_a[b][i] = static_cast<unsigned char>(text[static_cast<std::size_t>(i)]);
    }
    lengths_a[b] = n;
    labels_a[b] = examples[b]->label;
  }
  return {tokens.to(device), lengths.to(device), labels.to(device)};
}

torch::Device ModelDevice(TaylorShiftEncoder& model) {
  for (const auto& p : model->parameters()) return p.device();
  return torch::kCPU;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string_view OptimizerKindName(OptimizerKind kind) {
  return kind == OptimizerKind::kLamb ? "lamb" : "adamw";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "lamb") return OptimizerKind::kLamb;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer \"", std::string(name), "\" (expected adamw or lamb)"));
}

absl::Status ValidateTrainingOptions(const TrainingOptions& o) {
  const auto bad = [](const char* field, const std::string& reason) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
  };
  if (!(o.lr > 0) || !std::isfinite(o.lr))
    return bad("lr", absl::StrCat("must be > 0, got ", o.lr));
  if (o.device.is_cuda() && std::max<int>(o.device.index(), 0) >= compat::CudaDeviceCount()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device: ", o.device.str(), " asked for, but this process sees ",
                     compat::CudaDeviceCount(), " CUDA device(s)"));
  }
  if (o.precision == Precision::kBf16 && o.dtype != torch::kFloat32) {
    return bad("precision", "bf16 (mixed precision) needs dtype float32");
  }
  TS_RETURN_IF_ERROR(CheckBf16SumsInFloat32(o.precision, o.device));
  if (!o.device.is_cpu() && !o.device.is_cuda()) {
    return bad("device", absl::StrCat("must be the CPU or a CUDA device, got ", o.device.str()));
  }
  if (!(o.weight_decay >= 0)) {
    return bad("weight_decay", absl::StrCat("must be >= 0, got ", o.weight_decay));
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    return bad("beta1", absl::StrCat("must be in [0, 1), got ", o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    return bad("beta2", absl::StrCat("must be in [0, 1), got ", o.beta2));
  if (!(o.eps >= 0)) return bad("eps", absl::StrCat("must be >= 0, got ", o.eps));
  if (o.warmup_steps < 0)
    return bad("warmup_steps", absl::StrCat("must be >= 0, got ", o.warmup_steps));
  if (o.steps <= 0) return bad("steps", absl::StrCat("must be > 0, got ", o.steps));
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) {
    return bad("min_lr_ratio", absl::StrCat("must be in [0, 1], got ", o.min_lr_ratio));
  }
  if (o.batch_size <= 0) return bad("batch_size", absl::StrCat("must be > 0, got ", o.batch_size));
  if (!(o.grad_clip_norm >= 0)) {
    return bad("grad_clip_norm", absl::StrCat("must be >= 0, got ", o.grad_clip_norm));
  }
  if (o.log_interval < 0) return bad("log_interval", "must be >= 0");
  if (o.eval_interval < 0) return bad("eval_interval", "must be >= 0");
  if (o.checkpoint_interval < 0) return bad("checkpoint_interval", "must be >= 0");
  if (o.dtype != torch::kFloat32 && o.dtype != torch::kFloat64) {
    return bad("dtype", "must be float32 or float64");
  }
  return absl::OkStatus();
}

double CosineWarmupLearningRate(const TrainingOptions& options, std::int64_t step) {
  if (options.warmup_steps > 0 && step <= options.warmup_steps) {
    return options.lr * static_cast<double>(std::max<std::int64_t>(step, 0)) /
           static_cast<double>(options.warmup_steps);
  }
  const double min_lr = options.min_lr_ratio * options.lr;
  const std::int64_t decay_steps = options.steps - options.warmup_steps;
  double progress = decay_steps > 0 ? static_cast<double>(step - options.warmup_steps) /
                                          static_cast<double>(decay_steps)
                                    : 1.0;
  progress = std::clamp(progress, 0.0, 1.0);
  return min_lr + (options.lr - min_lr) * 0.5 * (1.0 + std::cos(kPi * progress));
}

ClassificationMetrics ComputeClassificationMetrics(const std::vector<std::int64_t>& labels,
                                                   const std::vector<std::int64_t>& predictions,
                                                   std::int64_t num_classes) {
  ClassificationMetrics m;
  const auto k = static_cast<std::size_t>(num_classes);
  m.confusion.assign(k, std::vector<std::int64_t>(k, 0));
  m.precision.assign(k, 0.0);
  m.recall.assign(k, 0.0);
  std::int64_t correct = 0;
  const std::size_t n = std::min(labels.size(), predictions.size());
  for (std::size_t i = 0; i < n; ++i) {
    ++m.confusion[static_cast<std::size_t>(labels[i])][static_cast<std::size_t>(predictions[i])];
    if (labels[i] == predictions[i]) ++correct;
  }
  m.accuracy = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  double f1_sum = 0.0;
  int observed = 0;
  for (std::size_t c = 0; c < k; ++c) {
    std::int64_t labelled = 0;
    std::int64_t predicted = 0;
    for (std::size_t j = 0; j < k; ++j) {
      labelled += m.confusion[c][j];
      predicted += m.confusion[j][c];
    }
    const auto tp = static_cast<double>(m.confusion[c][c]);
    m.precision[c] = predicted > 0 ? tp / static_cast<double>(predicted) : 0.0;
    m.recall[c] = labelled > 0 ? tp / static_cast<double>(labelled) : 0.0;
    if (labelled == 0 && predicted == 0) continue;
    ++observed;
    const double pr = m.precision[c] + m.recall[c];
    f1_sum += pr > 0 ? 2.0 * m.precision[c] * m.recall[c] / pr : 0.0;
  }
  m.macro_f1 = observed > 0 ? f1_sum / observed : 0.0;
  return m;
}

Trainer::Trainer(TaylorShiftEncoder model, const TaylorShiftEncoderOptions& encoder,
                 const TrainingOptions& options, std::vector<LabeledSequence> train,
                 std::vector<LabeledSequence> validation)
    : model_(std::move(model)),
      encoder_options_(encoder),
      options_(options),
      train_(std::move(train)),
      validation_(std::move(validation)) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TaylorShiftEncoderOptions& encoder,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation) {
  TS_RETURN_IF_ERROR(ValidateEncoderOptions(encoder));
  TS_RETURN_IF_ERROR(ValidateTrainingOptions(options));
  const auto build = [&] {
    torch::manual_seed(options.seed);
    TaylorShiftEncoder fresh(encoder);
    fresh->to(options.device, options.dtype);
    return fresh;
  };
  TS_ASSIGN_OR_RETURN(auto model, CatchTorch("building the model", build));
  return Create(std::move(model), encoder, options, std::move(train), std::move(validation));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TaylorShiftEncoder model,
                                                         const TaylorShiftEncoderOptions& encoder,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation) {
  TS_RETURN_IF_ERROR(ValidateEncoderOptions(encoder));
  TS_RETURN_IF_ERROR(ValidateTrainingOptions(options));
  if (model.is_empty()) return absl::InvalidArgumentError("model is null");
  const TaylorShiftEncoderOptions& actual = model->options();
  if (actual.embed_dim() != encoder.embed_dim() || actual.depth() != encoder.depth() ||
      actual.heads() != encoder.heads() || actual.num_classes() != encoder.num_classes() ||
      actual.vocab_size() != encoder.vocab_size() || actual.max_length() != encoder.max_length()) {
    return absl::InvalidArgumentError(absl::StrCat("model (", DescribeEncoderOptions(actual),
                                                   ") does not match the encoder options (",
                                                   DescribeEncoderOptions(encoder), ")"));
  }
  TS_RETURN_IF_ERROR(
      CatchTorch("converting the model", [&] { model->to(options.device, options.dtype); }));
  if (train.empty()) return absl::InvalidArgumentError("the training set is empty");
  TS_RETURN_IF_ERROR(ValidateExamples(train, encoder.num_classes(), "training"));
  TS_RETURN_IF_ERROR(ValidateExamples(validation, encoder.num_classes(), "validation"));
  std::unique_ptr<Trainer> trainer(
      new Trainer(std::move(model), encoder, options, std::move(train), std::move(validation)));
  TS_RETURN_IF_ERROR(CatchTorch("building the optimizer", [&] {
    trainer->model_->train();
    trainer->BuildOptimizer();
  }));
  return trainer;
}

absl::Status Trainer::SetDataParallel(DataParallelGroup* group) {
  if (group != nullptr && options_.batch_size % group->world_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", options_.batch_size,
                                                   " is not divisible by the ", group->world_size(),
                                                   " data-parallel ranks"));
  }
  data_parallel_ = group;
  if (group == nullptr) return absl::OkStatus();
  std::vector<torch::Tensor> tensors = model_->parameters();
  for (const auto& buffer : model_->buffers()) tensors.push_back(buffer);
  return group->Broadcast(tensors);
}

void Trainer::BuildOptimizer() {
  std::vector<torch::Tensor> decay;
  std::vector<torch::Tensor> no_decay;
  for (const auto& item : model_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    // Matrices are decayed; biases, norms, cls_token and temperatures are not.
    if (item.value().dim() >= 2 && absl::EndsWith(item.key(), ".weight")) {
      decay.push_back(item.value());
    } else {
      no_decay.push_back(item.value());
    }
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const double lr = CosineWarmupLearningRate(options_, 1);
  if (options_.optimizer == OptimizerKind::kAdamW) {
    torch::optim::AdamWOptions defaults(lr);
    defaults.betas({options_.beta1, options_.beta2}).eps(options_.eps).weight_decay(0.0);
    auto decayed = defaults;
    decayed.weight_decay(options_.weight_decay);
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(decayed));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(defaults));
    optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(groups), defaults);
  } else {
    LambOptions defaults(lr);
    defaults.betas({options_.beta1, options_.beta2}).eps(options_.eps).weight_decay(0.0);
    auto decayed = defaults;
    decayed.weight_decay(options_.weight_decay);
    groups.emplace_back(decay, std::make_unique<LambOptions>(decayed));
    groups.emplace_back(no_decay, std::make_unique<LambOptions>(defaults));
    optimizer_ = std::make_unique<Lamb>(std::move(groups), defaults);
  }
}

const std::vector<std::int64_t>& Trainer::EpochOrder() {
  if (order_epoch_ != epoch_) {
    const auto n = static_cast<std::int64_t>(train_.size());
    order_.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) order_[static_cast<std::size_t>(i)] = i;
    // Fisher-Yates with our own index draws: std::shuffle's sequence is library-specific.
    std::mt19937_64 rng(Mix(options_.seed ^ Mix(static_cast<std::uint64_t>(epoch_))));
    for (std::int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
      std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
    }
    order_epoch_ = epoch_;
  }
  return order_;
}

std::vector<const LabeledSequence*> Trainer::NextBatch() {
  std::vector<const LabeledSequence*> batch;
  batch.reserve(static_cast<std::size_t>(options_.batch_size));
  while (static_cast<std::int64_t>(batch.size()) < options_.batch_size) {
    const std::vector<std::int64_t>& order = EpochOrder();
    batch.push_back(
        &train_[static_cast<std::size_t>(order[static_cast<std::size_t>(epoch_index_)])]);
    if (++epoch_index_ >= static_cast<std::int64_t>(order.size())) {
      ++epoch_;
      epoch_index_ = 0;
    }
  }
  return batch;
}

absl::StatusOr<TrainingStepResult> Trainer::Step() {
  if (done()) {
    return absl::FailedPreconditionError(
        absl::StrCat("training already finished its ", options_.steps, " steps"));
  }
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t saved_step = step_;
  const std::int64_t saved_epoch = epoch_;
  const std::int64_t saved_index = epoch_index_;
  absl::StatusOr<TrainingStepResult> result = CatchTorch("training step", [&] {
    const std::int64_t step = step_ + 1;
    const double lr = CosineWarmupLearningRate(options_, step);
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    if (HasStochasticLayers(encoder_options_)) {
      // Ranks draw different masks (rank 0 draws what a single trainer draws).
      const std::uint64_t rank =
          data_parallel_ != nullptr ? static_cast<std::uint64_t>(data_parallel_->rank()) : 0;
      torch::manual_seed(Mix(options_.seed ^ Mix(static_cast<std::uint64_t>(step) << 1)) ^
                         (rank == 0 ? 0 : Mix(rank * 0x9E3779B97F4A7C15ull)));
    }
    std::vector<const LabeledSequence*> examples = NextBatch();
    if (data_parallel_ != nullptr && data_parallel_->world_size() > 1) {
      const std::size_t slice =
          examples.size() / static_cast<std::size_t>(data_parallel_->world_size());
      const std::size_t first = slice * static_cast<std::size_t>(data_parallel_->rank());
      examples = std::vector<const LabeledSequence*>(examples.begin() + first,
                                                     examples.begin() + first + slice);
    }
    const Batch batch = MakeBatch(examples, encoder_options_.max_length(), ModelDevice(model_));
    model_->train();
    optimizer_->zero_grad();
    torch::Tensor logits;
    {
      const compat::Bf16Autocast autocast(options_.precision == Precision::kBf16,
                                          batch.tokens.device().type());
      logits = model_->forward(batch.tokens, batch.lengths, options_.path);
    }
    // float32 at least (bf16/fp16 logits are promoted); float64 models keep float64.
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.scalar_type() == torch::kFloat64 ? logits : logits.to(torch::kFloat32),
        batch.labels);
    loss.backward();
    if (data_parallel_ != nullptr) {
      if (absl::Status s = data_parallel_->AverageGradients(model_->parameters()); !s.ok()) {
        throw std::runtime_error(std::string(s.message()));
      }
    }
    if (options_.grad_clip_norm > 0) {
      torch::nn::utils::clip_grad_norm_(model_->parameters(), options_.grad_clip_norm);
    }
    optimizer_->step();
    step_ = step;
    TrainingStepResult r;
    r.step = step;
    r.loss = loss.item<double>();
    r.lr = lr;
    const double seconds = SecondsSince(start);
    r.examples_per_second = seconds > 0 ? static_cast<double>(options_.batch_size) / seconds : 0.0;
    return r;
  });
  if (!result.ok()) {
    // The data position must not run ahead of the steps actually taken.
    step_ = saved_step;
    epoch_ = saved_epoch;
    epoch_index_ = saved_index;
  }
  return result;
}

absl::StatusOr<EvaluationResult> EvaluateClassifier(
    TaylorShiftEncoder& model, const TaylorShiftEncoderOptions& encoder,
    const std::vector<LabeledSequence>& examples, std::int64_t batch_size, AttentionPath path,
    const std::function<void(std::int64_t evaluated)>& on_batch) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size must be > 0, got ", batch_size));
  }
  TS_RETURN_IF_ERROR(ValidateExamples(examples, encoder.num_classes(), "evaluation"));
  const auto start = std::chrono::steady_clock::now();
  return CatchTorch("evaluation", [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    const torch::Device device = ModelDevice(model);
    double loss_sum = 0.0;
    std::vector<std::int64_t> labels;
    std::vector<std::int64_t> predictions;
    labels.reserve(examples.size());
    for (const LabeledSequence& e : examples) labels.push_back(e.label);
    predictions.reserve(examples.size());
    const auto chunk_size = static_cast<std::size_t>(batch_size);
    for (std::size_t begin = 0; begin < examples.size(); begin += chunk_size) {
      std::vector<const LabeledSequence*> chunk;
      for (std::size_t i = begin; i < std::min(examples.size(), begin + chunk_size); ++i) {
        chunk.push_back(&examples[i]);
      }
      const Batch batch = MakeBatch(chunk, encoder.max_length(), device);
      const torch::Tensor logits =
          model->forward(batch.tokens, batch.lengths, path).to(torch::kFloat32);
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, batch.labels,
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      const torch::Tensor predicted = logits.argmax(1).to(torch::kCPU).contiguous();
      predictions.insert(predictions.end(), predicted.data_ptr<std::int64_t>(),
                         predicted.data_ptr<std::int64_t>() + predicted.numel());
      if (on_batch) on_batch(static_cast<std::int64_t>(predictions.size()));
    }
    EvaluationResult r;
    r.examples = static_cast<std::int64_t>(examples.size());
    r.loss = examples.empty() ? 0.0 : loss_sum / static_cast<double>(examples.size());
    r.metrics = ComputeClassificationMetrics(labels, predictions, encoder.num_classes());
    const double seconds = SecondsSince(start);
    r.examples_per_second = seconds > 0 ? static_cast<double>(r.examples) / seconds : 0.0;
    return r;
  });
}

absl::StatusOr<EvaluationResult> Trainer::Evaluate(const std::vector<LabeledSequence>& examples) {
  absl::StatusOr<EvaluationResult> result =
      EvaluateClassifier(model_, encoder_options_, examples, options_.batch_size, options_.path);
  model_->train();
  return result;
}

absl::StatusOr<EvaluationResult> Trainer::EvaluateValidation() { return Evaluate(validation_); }

absl::Status Trainer::SaveState(const std::string& path) {
  const auto serialize = [&] {
    torch::serialize::OutputArchive archive;
    archive.write("format", torch::IValue(std::string(kStateFormat)));
    archive.write("encoder", torch::IValue(DescribeEncoderOptions(encoder_options_)));
    archive.write("optimizer_kind",
                  torch::IValue(std::string(OptimizerKindName(options_.optimizer))));
    archive.write("step", torch::IValue(step_));
    archive.write("epoch", torch::IValue(epoch_));
    archive.write("epoch_index", torch::IValue(epoch_index_));
    archive.write("seed", torch::IValue(static_cast<std::int64_t>(options_.seed)));
    archive.write("train_size", torch::IValue(static_cast<std::int64_t>(train_.size())));
    torch::serialize::OutputArchive model_archive(archive.compilation_unit());
    model_->save(model_archive);
    archive.write("model", model_archive);
    torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
    optimizer_->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  };
  TS_ASSIGN_OR_RETURN(const std::string bytes, CatchTorch("saving the training state", serialize));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Resume(const std::string& path,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation) {
  TS_RETURN_IF_ERROR(ValidateTrainingOptions(options));
  TS_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, "training state"));

  struct Saved {
    std::string encoder;
    std::string optimizer_kind;
    std::int64_t step = 0, epoch = 0, epoch_index = 0, seed = 0, train_size = 0;
  };
  auto archive = std::make_shared<torch::serialize::InputArchive>();
  absl::StatusOr<Saved> saved = CatchTorch("reading the training state", [&] {
    std::istringstream stream(bytes);
    archive->load_from(stream, options.device);
    const auto read = [&archive](const char* key) {
      torch::IValue value;
      archive->read(key, value);
      return value;
    };
    const std::string format = read("format").toStringRef();
    TORCH_CHECK(format == kStateFormat, "unknown format ", format);
    return Saved{read("encoder").toStringRef(), read("optimizer_kind").toStringRef(),
                 read("step").toInt(),          read("epoch").toInt(),
                 read("epoch_index").toInt(),   read("seed").toInt(),
                 read("train_size").toInt()};
  });
  if (!saved.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", saved.status().message()));
  }
  absl::StatusOr<TaylorShiftEncoderOptions> encoder = ParseEncoderOptions(saved->encoder);
  if (!encoder.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", encoder.status().message()));
  }
  if (static_cast<std::uint64_t>(saved->seed) != options.seed) {
    return absl::FailedPreconditionError(absl::StrCat(path, " was trained with seed ",
                                                      static_cast<std::uint64_t>(saved->seed),
                                                      ", not ", options.seed));
  }
  if (saved->optimizer_kind != OptimizerKindName(options.optimizer)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " was trained with optimizer ", saved->optimizer_kind, ", not ",
                     std::string(OptimizerKindName(options.optimizer))));
  }
  if (saved->train_size != static_cast<std::int64_t>(train.size())) {
    return absl::FailedPreconditionError(absl::StrCat(path, " was trained on ", saved->train_size,
                                                      " examples, the training set now has ",
                                                      train.size()));
  }
  if (saved->epoch_index < 0 || saved->epoch_index >= saved->train_size || saved->step < 0 ||
      saved->epoch < 0) {
    return absl::DataLossError(absl::StrCat(path, ": invalid data position"));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      Create(*encoder, options, std::move(train), std::move(validation)));
  const absl::Status loaded = CatchTorch("restoring the training state", [&] {
    torch::serialize::InputArchive model_archive;
    archive->read("model", model_archive);
    trainer->model_->load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive->read("optimizer", optimizer_archive);
    trainer->optimizer_->load(optimizer_archive);
  });
  if (!loaded.ok()) return absl::DataLossError(absl::StrCat(path, ": ", loaded.message()));
  trainer->step_ = saved->step;
  trainer->epoch_ = saved->epoch;
  trainer->epoch_index_ = saved->epoch_index;
  return trainer;
}

}  // namespace ts

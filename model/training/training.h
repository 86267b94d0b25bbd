// The training loop of a TaylorShiftEncoder classifier: optimizer (AdamW or LAMB), cosine LR
// schedule with linear warmup, deterministic resumable data order, gradient clipping,
// evaluation metrics and an atomic training-state file from which training continues exactly.
// No gRPC here; the job manager in server/ drives a Trainer one Step() at a time.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "model/api/precision.h"
#include "model/data/dataset.h"
#include "model/networks/encoder.h"
#include "model/training/data_parallel.h"

namespace ts {

// One training or evaluation example: byte tokens and a class index in [0, num_classes).
using LabeledSequence = Example;

enum class OptimizerKind {
  kAdamW,  // torch::optim::AdamW (decoupled weight decay)
  kLamb,   // ts::Lamb (model/training/lamb.h)
};

std::string_view OptimizerKindName(OptimizerKind kind);
// Accepts "adamw" and "lamb".
absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);

struct TrainingOptions {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  // Peak learning rate (reached at the end of warmup); > 0.
  double lr = 1e-3;
  // Decoupled weight decay on matrices (dim ≥ 2); biases, norms, cls_token and temperatures
  // are never decayed. ≥ 0.
  double weight_decay = 0.01;
  // Adam/LAMB moment decay rates and epsilon.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Linear warmup from lr/warmup_steps to lr over the first warmup_steps steps; ≥ 0.
  std::int64_t warmup_steps = 0;
  // Total optimizer steps; the cosine decay reaches min_lr_ratio·lr at this step. > 0.
  std::int64_t steps = 1000;
  // Floor of the cosine decay as a fraction of lr, in [0, 1].
  double min_lr_ratio = 0.0;
  // Examples per optimizer step; > 0.
  std::int64_t batch_size = 16;
  // Global L2 norm the gradients are clipped to; 0 disables clipping. ≥ 0.
  double grad_clip_norm = 1.0;
  // Seeds the weight initialisation, the per-epoch data order and the stochastic layers.
  std::uint64_t seed = 1;
  // Attention path for the training forward passes (and Evaluate).
  AttentionPath path = AttentionPath::kAuto;
  // Intervals in steps for the driver of the trainer (the job runner): progress reports,
  // validation runs and checkpoints. 0 = never. The Trainer itself only stores them.
  std::int64_t log_interval = 10;
  std::int64_t eval_interval = 0;
  std::int64_t checkpoint_interval = 0;
  // Parameters and activations of a fresh or init_from model: kFloat32 or kFloat64 (a resumed
  // trainer keeps the dtype it saved).
  torch::Dtype dtype = torch::kFloat32;
  // Where the model, its optimizer state and the batches live: the CPU or a CUDA device (a
  // resumed trainer is mapped to it too). CUDA needs a CUDA build and a visible device.
  torch::Device device = torch::kCPU;
  // kBf16: mixed precision (autocast to bfloat16 in the forward pass: the linear layers and
  // convolutions in bfloat16 with float32 accumulation; the attention, norms and the loss in
  // float32; weights, gradients and optimizer state float32). Needs dtype kFloat32. On a CPU
  // without AVX512-BF16 or AMX the bfloat16 products are emulated (slow); where LibTorch would
  // sum them in bfloat16 (LibTorch 1.13 on a CPU without AVX-512, measured by
  // model/kernels/bf16_matmul_probe.h) bf16 is refused (FAILED_PRECONDITION).
  Precision precision = Precision::kFp32;
};

// OK when every field is in the range its comment states.
absl::Status ValidateTrainingOptions(const TrainingOptions& options);

// Learning rate of the `step`-th optimizer step (1-based): lr·step/warmup_steps during warmup
// (step ≤ warmup_steps), then min + (lr - min)·½(1 + cos(π·p)) with min = min_lr_ratio·lr and
// p = (step - warmup_steps)/(steps - warmup_steps) clamped to [0, 1].
double CosineWarmupLearningRate(const TrainingOptions& options, std::int64_t step);

struct TrainingStepResult {
  std::int64_t step = 0;  // the step just taken (1-based)
  double loss = 0.0;      // mean cross-entropy of its batch (before the update)
  double lr = 0.0;        // learning rate it used
  double examples_per_second = 0.0;
};

struct ClassificationMetrics {
  double accuracy = 0.0;
  // Mean F1 over the classes that occur in the labels or the predictions (as scikit-learn's
  // f1_score(average="macro") with the labels observed); a class never predicted has precision
  // 0, one never labelled has recall 0.
  double macro_f1 = 0.0;
  std::vector<double> precision;  // per class
  std::vector<double> recall;     // per class
  // confusion[label][prediction] = count.
  std::vector<std::vector<std::int64_t>> confusion;
};

// Metrics of `predictions` against `labels` (same length, values in [0, num_classes)).
ClassificationMetrics ComputeClassificationMetrics(const std::vector<std::int64_t>& labels,
                                                   const std::vector<std::int64_t>& predictions,
                                                   std::int64_t num_classes);

struct EvaluationResult {
  double loss = 0.0;  // mean cross-entropy
  ClassificationMetrics metrics;
  std::int64_t examples = 0;
  double examples_per_second = 0.0;
};

// Loss and metrics of `model` (described by `encoder`) on `examples`: eval mode, no gradients,
// batches of `batch_size`, sequences cut to the model's max_length. The model is left in eval
// mode. INVALID_ARGUMENT for a label outside [0, num_classes); LibTorch errors as Status.
// `on_batch`, when given, is called after each batch with the examples evaluated so far (on the
// calling thread; the last call has examples.size()).
absl::StatusOr<EvaluationResult> EvaluateClassifier(
    TaylorShiftEncoder& model, const TaylorShiftEncoderOptions& encoder,
    const std::vector<LabeledSequence>& examples, std::int64_t batch_size, AttentionPath path,
    const std::function<void(std::int64_t evaluated)>& on_batch = nullptr);

// Trains one encoder on one training set. Owns the model, the optimizer and both data sets.
// Data order: epoch e visits the training set in a permutation drawn from (seed, e); a batch
// takes the next batch_size examples and runs on into the next epoch when one ends, so the
// position (epoch, index) determines all future batches. Stochastic layers (dropout,
// drop-path) draw from LibTorch's global CPU generator, reseeded from (seed, step, rank) before
// each step: a single trainer is reproducible and resumable, but trainers running concurrently
// with dropout in one process perturb each other's draws (the server runs each job in its own
// worker process for this and other reasons). Sequences longer than the model's
// max_length keep their first max_length bytes. Not thread-safe; all methods on one thread.
// LibTorch exceptions come back as absl::Status.
class Trainer {
 public:
  // A fresh model built from `encoder` with weights initialised from options.seed.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TaylorShiftEncoderOptions& encoder,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation);
  // Continues from `model` (e.g. a loaded checkpoint), which must match `encoder`: it is moved to
  // options.device and options.dtype and put in train mode.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(TaylorShiftEncoder model,
                                                         const TaylorShiftEncoderOptions& encoder,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation);

  // Restores a trainer saved by SaveState: model (options and weights), optimizer state, step,
  // data position and seed come from the file. `options` supplies everything else (its seed
  // and optimizer kind must equal the saved ones); `train` must be the same set (same size) for
  // the data order to continue. NOT_FOUND for a missing file, DATA_LOSS for an unreadable one,
  // FAILED_PRECONDITION for a mismatch.
  static absl::StatusOr<std::unique_ptr<Trainer>> Resume(const std::string& path,
                                                         const TrainingOptions& options,
                                                         std::vector<LabeledSequence> train,
                                                         std::vector<LabeledSequence> validation);

  // One optimizer step on the next batch. FAILED_PRECONDITION once `steps` steps are done.
  // With a data-parallel group, every rank draws the same global batch and trains on its slice
  // (ranks × slice = batch_size), and gradients are averaged over the ranks before clipping, so
  // every rank takes the step one rank would take on the whole batch; the loss is this rank's.
  absl::StatusOr<TrainingStepResult> Step();

  // Trains as one rank of `group` (not owned; null = alone). batch_size must be divisible by
  // the world size (INVALID_ARGUMENT otherwise). Copies rank 0's weights to every rank.
  absl::Status SetDataParallel(DataParallelGroup* group);

  // Loss and metrics of the model on `examples` (eval mode, no gradients, batches of
  // batch_size); the model returns to train mode afterwards.
  absl::StatusOr<EvaluationResult> Evaluate(const std::vector<LabeledSequence>& examples);
  // Evaluate(validation set).
  absl::StatusOr<EvaluationResult> EvaluateValidation();

  // Writes the training state to `path` atomically (temporary file, fsync, rename).
  absl::Status SaveState(const std::string& path);

  std::int64_t step() const { return step_; }
  std::int64_t epoch() const { return epoch_; }
  // Index into the current epoch's permutation of the next example.
  std::int64_t epoch_index() const { return epoch_index_; }
  bool done() const { return step_ >= options_.steps; }
  const TrainingOptions& options() const { return options_; }
  const TaylorShiftEncoderOptions& encoder_options() const { return encoder_options_; }
  TaylorShiftEncoder& model() { return model_; }

 private:
  Trainer(TaylorShiftEncoder model, const TaylorShiftEncoderOptions& encoder,
          const TrainingOptions& options, std::vector<LabeledSequence> train,
          std::vector<LabeledSequence> validation);

  void BuildOptimizer();
  const std::vector<std::int64_t>& EpochOrder();
  std::vector<const LabeledSequence*> NextBatch();

  TaylorShiftEncoder model_;
  TaylorShiftEncoderOptions encoder_options_;
  TrainingOptions options_;
  std::vector<LabeledSequence> train_;
  std::vector<LabeledSequence> validation_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::int64_t step_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t epoch_index_ = 0;
  std::int64_t order_epoch_ = -1;  // epoch that order_ belongs to
  std::vector<std::int64_t> order_;
  DataParallelGroup* data_parallel_ = nullptr;
};

}  // namespace ts

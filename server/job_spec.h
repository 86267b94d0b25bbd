// Job specs (taylorshift/v1/jobs.proto): the YAML form users write (tsctl train/eval --spec),
// and the server's normalisation — the defaults jobs.proto documents, filled in, and every check
// that needs no data — so a bad spec is refused at submission with the key that is wrong.
//
// YAML keys are the proto field names, nested as in the proto (`model: {embed_dim: 64}`,
// `data: {train: {format: jsonl, path: train.jsonl}}`); `path` takes auto, direct, efficient or
// softmax; `labels` is a list of strings. An evaluation spec's `data` is a single data source.
//
// Errors are INVALID_ARGUMENT whose message starts with the key path, e.g.
// `model.heads: 6 does not divide model.embed_dim 64` or `optimizer.foo: unknown key (...)`.
// Torch-free; stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/attention_path.h"
#include "server/config.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

// The YAML spec form → the proto, as written (no defaults filled, no semantic checks). Unknown
// and duplicate keys, wrong types (a string where a number goes, a negative or fractional number
// where an unsigned integer goes, a non-finite number) and malformed YAML are errors. An empty
// value (`key:`) is the same as leaving the key out.
absl::StatusOr<taylorshift::v1::TrainingSpec> ParseTrainingSpecYaml(const std::string& yaml_text);
absl::StatusOr<taylorshift::v1::EvaluationSpec> ParseEvaluationSpecYaml(
    const std::string& yaml_text);

// Fills the defaults of jobs.proto into `spec` (mlp_ratio 4 unless init_from; optimizer adamw,
// lr 0.001, weight_decay 0.01, cosine, min_lr_ratio 0, betas 0.9/0.999, eps 1e-8; batch_size 16;
// seed 1; grad_clip 1.0; log_interval 10; threads = jobs.threads_per_job (at most the threads
// cap); keep_checkpoints = jobs.keep_checkpoints; modality pixels for cifar10 training data, else
// bytes; listops generate min_length 500, max_length 2000, seed 1; with `steps` given also
// checkpoint_interval max(steps/10, 1) and eval_interval = checkpoint_interval) and checks every
// rule that needs no data: the name, model xor init_from and the model's shape, rates and
// ranges, jobs.limits (the message names the limit), the data sources and the syntax of their
// paths (relative, no ".."; resolving them against the data root is the caller's job),
// steps xor epochs, intervals ≤ steps, labels, modality. `num_cores` stands in for
// jobs.limits.max_threads 0. Returns the first problem. A normalised spec normalises to itself
// (until FinalizeTrainingSpec has turned epochs into steps).
absl::Status NormalizeTrainingSpec(taylorshift::v1::TrainingSpec* spec, const JobsConfig& jobs,
                                   int num_cores);

// Once the training data is loaded (`train_examples` after any validation split): a spec given
// in epochs gets steps = ceil(epochs · train_examples / batch_size) (epochs stays, to show what
// was asked for), checked against jobs.limits.max_steps and optimizer.warmup_steps;
// checkpoint_interval defaults to max(steps/10, 1), eval_interval to checkpoint_interval, and
// every interval is capped to steps. Expects a normalised spec; idempotent.
absl::Status FinalizeTrainingSpec(taylorshift::v1::TrainingSpec* spec, std::int64_t train_examples,
                                  const JobsConfig& jobs);

// Like NormalizeTrainingSpec for evaluation: name, exactly one target (a served model's name, a
// job id, or a checkpoint path with the data-path syntax), a data source (not a split),
// batch_size (default 16, ≤ jobs.limits.max_batch_size), path, threads.
absl::Status NormalizeEvaluationSpec(taylorshift::v1::EvaluationSpec* spec, const JobsConfig& jobs,
                                     int num_cores);

// The API's attention path → the model's (INVALID_ARGUMENT "path: ..." for an unknown value).
absl::StatusOr<AttentionPath> FromProtoPath(taylorshift::v1::AttentionPath path);

}  // namespace ts::server

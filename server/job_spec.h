// Job specs (taylorshift/v1/jobs.proto) on the server's side: their normalisation — the
// defaults jobs.proto documents, filled in, and every check that needs no data, against the
// server's jobs.limits — so a bad spec is refused at submission with the key that is wrong. The
// YAML form users write is parsed by common/job_spec_yaml.h, which needs no server.
//
// Errors are INVALID_ARGUMENT whose message starts with the key path, e.g.
// `model.heads: 6 does not divide model.embed_dim 64`.
// Torch-free; stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/config.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

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

// The device a job's worker runs on: its spec's `device` ("cpu" when empty; specs are
// normalised to cpu or cuda:N at submission).
std::string JobDevice(const taylorshift::v1::Job& job);

}  // namespace ts::server

// Job specs (taylorshift/v1/jobs.proto), as tsserver and tsworker both check them: their
// normalisation — the defaults jobs.proto documents, filled in, and every check that needs no data,
// against the server's jobs.limits — so a bad spec is refused at submission with the key that is
// wrong. The YAML form users write is parsed by job_contract/job_spec_yaml.h, which needs no
// server.
//
// Errors are INVALID_ARGUMENT whose message starts with the key path, e.g.
// `model.heads: 6 does not divide model.embed_dim 64`.
// Torch-free; stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::job {

// The one name rule for served models, promotions and jobs: a letter or digit, then letters,
// digits, '_' and '-', 64 characters at most. A name is used as a file name (state/models/NAME),
// a URL path segment (/v1/models/NAME) and a grpc.health.v1 service name, so it can be none of
// "", ".", "..", a path, or a gRPC service's name (those all hold a '.': taylorshift.v1.Jobs).
inline constexpr char kNameRule[] = "[A-Za-z0-9][A-Za-z0-9_-]{0,63}";
bool IsValidName(std::string_view name);

// The job id in a checkpoint reference "job:<id>" (init_from, an evaluation's checkpoint; the
// id may be empty, which the spec checks refuse), or nullopt for any other reference (a file).
std::optional<std::string> ReferencedJobId(const std::string& reference);

// Caps on what one job spec may ask for (checked by NormalizeTrainingSpec and friends); each exists
// so that one remote caller cannot tie up the server.
struct JobLimits {
  std::int64_t max_steps = 1000000;                      // optimizer steps of a training job
  std::int64_t max_batch_size = 1024;                    // examples per step / per evaluation batch
  std::int64_t max_length = 65536;                       // model.max_length (input tokens)
  std::int64_t max_embed_dim = 1024;                     // model.embed_dim
  std::int64_t max_depth = 48;                           // model.depth (blocks)
  int max_threads = 0;                                   // a spec's threads; 0 = number of cores
  std::int64_t max_generate_count = 10000000;            // examples a listops generator may make
  std::int64_t max_epochs = 10000;                       // a training spec's epochs
  int max_workers = 8;                                   // a training spec's workers (ranks)
  int max_retries = 10;                                  // a spec's max_retries
  std::int64_t max_spec_bytes = 1 << 20;                 // a submitted spec, serialised (protobuf)
  int max_labels = 10000;                                // a training spec's labels
  int max_label_bytes = 256;                             // one label
  std::int64_t max_data_files = 1000000;                 // files of one data source (a folder's)
  std::int64_t max_data_bytes = std::int64_t{64} << 30;  // bytes of one data source's files
};

// What the specs are checked against: the server's `jobs:` settings that concern a spec (tsserver
// fills it from its configuration; tsworker from the task it is given).
struct SpecRules {
  // Intra-op threads of a job whose spec leaves `threads` at 0; 0 = automatic: the cores that
  // serving does not reserve, shared by the jobs that run at once (tsserver's ThreadsPerJob).
  int threads_per_job = 0;
  int keep_checkpoints = 2;  // last K checkpoints kept per job besides the best
  JobLimits limits;
  // CUDA devices the server sees (torch::cuda::device_count()): set by the server at start, not
  // read from the config file. A job's `device: cuda:N` needs N < cuda_devices.
  int cuda_devices = 0;
  // Whether CUDA ranks can all-reduce: the build has c10d's NCCL backend (HaveNccl(), set by the
  // server at start). Without it a CUDA job runs one rank.
  bool cuda_data_parallel = false;
};

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
absl::Status NormalizeTrainingSpec(taylorshift::v1::TrainingSpec* spec, const SpecRules& jobs,
                                   int num_cores);

// Once the training data is loaded (`train_examples` after any validation split): a spec given
// in epochs gets steps = ceil(epochs · train_examples / batch_size) (epochs stays, to show what
// was asked for), checked against jobs.limits.max_steps and optimizer.warmup_steps;
// checkpoint_interval defaults to max(steps/10, 1), eval_interval to checkpoint_interval, and
// every interval is capped to steps. Expects a normalised spec; idempotent.
absl::Status FinalizeTrainingSpec(taylorshift::v1::TrainingSpec* spec, std::int64_t train_examples,
                                  const SpecRules& jobs);

// Like NormalizeTrainingSpec for evaluation: name, exactly one target (a served model's name, a
// job id, or a checkpoint path with the data-path syntax), a data source (not a split),
// batch_size (default 16, ≤ jobs.limits.max_batch_size), path, threads.
absl::Status NormalizeEvaluationSpec(taylorshift::v1::EvaluationSpec* spec, const SpecRules& jobs,
                                     int num_cores);

// The device a job's worker runs on: its spec's `device` ("cpu" when empty; specs are
// normalised to cpu or cuda:N at submission).
std::string JobDevice(const taylorshift::v1::Job& job);

// The device of rank `rank` of a job on the normalised `device`: a CUDA job's ranks take one device
// each, from its own on (cuda:I for rank 0, cuda:I+1 for rank 1, ...); CPU ranks share the CPU.
std::string RankDevice(const std::string& device, int rank);

}  // namespace ts::job

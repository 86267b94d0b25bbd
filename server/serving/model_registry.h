// ModelRegistry: the served models, each a loaded checkpoint on its device with its own
// LengthBucketBatcher. Loading happens in Create (errors name the model and the file).
// Thread safety: Find/List/Put may be called from any thread; the ServedModel they return stays
// valid while the caller holds it (shared ownership), so a hot swap (Put) cannot pull a model
// out from under a request: requests that found the old version finish on it, later ones get
// the new one, and the old version's batcher keeps running until no request holds it.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "model/api/attention_path.h"
#include "model/api/inputs.h"
#include "model/checkpoints/checkpoint.h"
#include "model/networks/calibration.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/serving/length_bucket_batcher.h"

namespace ts::server {

// The payload of one request inside the batcher: its windows in, its result out.
struct ClassifyWork {
  std::vector<std::string> windows;
  AttentionPath requested = AttentionPath::kAuto;
  // Filled by the batch runner.
  std::vector<float> probabilities;  // averaged over windows, class order
  AttentionPath path = AttentionPath::kDirect;
  std::int64_t batch_size = 0;
  std::int64_t batch_tokens = 0;
  double queue_seconds = 0;
  double compute_seconds = 0;
};
using ClassifyBatcher = LengthBucketBatcher<ClassifyWork>;

class ServedModel {
 public:
  const std::string& name() const { return config_.name; }
  const std::string& version() const { return version_; }
  const ModelConfig& config() const { return config_; }
  const TaylorShiftEncoderOptions& options() const { return checkpoint_.options; }
  const CheckpointMetadata& metadata() const { return checkpoint_.metadata; }
  const torch::Device& device() const { return device_; }
  std::int64_t max_length() const { return max_length_; }
  // The crossover at batch 1, and by batch size where calibrated (empty for the formula).
  std::int64_t crossover_tokens() const { return crossover_tokens_; }
  const CrossoverTable& crossover_table() const { return crossover_table_; }
  const std::string& crossover_source() const { return crossover_source_; }
  // What the start-up calibration found noisy (model/networks/calibration.h), for the start-up log.
  const std::vector<std::string>& calibration_warnings() const { return calibration_warnings_; }
  LengthPolicyOptions length_policy() const { return length_policy(config_.over_length); }
  // The model's limits with another over-length policy (a request's own).
  LengthPolicyOptions length_policy(LengthPolicy over_length) const;
  ClassifyBatcher& batcher() { return *batcher_; }

  // Admission by cost (ModelConfig::max_request_mflop): the estimated compute of a request of
  // `windows` rows of `tokens` tokens (incl. CLS; a batch pads to its longest row) on
  // `requested` (kAuto: the path a batch of one resolves it to), in MFLOP.
  double EstimateMflop(AttentionPath requested, std::int64_t tokens, std::int64_t windows) const;
  // The concrete path EstimateMflop charges `requested` with.
  AttentionPath ResolvedPath(AttentionPath requested, std::int64_t tokens) const {
    return checkpoint_.model->ResolvePath(requested, tokens, 1);
  }
  // The limits in force, MFLOP: as configured, or their automatic values.
  double max_request_mflop() const { return max_request_mflop_; }
  double max_batch_mflop() const { return max_batch_mflop_; }

  static absl::StatusOr<std::shared_ptr<ServedModel>> Load(const ModelConfig& config,
                                                           Metrics* metrics, Clock* clock);

 private:
  ServedModel(ModelConfig config, LoadedCheckpoint checkpoint)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}
  absl::Status RunBatch(Batch<ClassifyWork>& batch);
  static absl::StatusOr<CrossoverTable> CalibrateAtStart(ServedModel& model, std::int64_t head_dim);

  ModelConfig config_;
  LoadedCheckpoint checkpoint_;
  torch::Device device_ = torch::kCPU;
  std::string version_;
  std::int64_t max_length_ = 0;
  std::int64_t crossover_tokens_ = 0;
  CrossoverTable crossover_table_;
  std::string crossover_source_;
  std::vector<std::string> calibration_warnings_;
  double max_request_mflop_ = 0;
  double max_batch_mflop_ = 0;
  Metrics* metrics_ = nullptr;
  Clock* clock_ = nullptr;
  std::unique_ptr<ClassifyBatcher> batcher_;  // last: its threads use the fields above
};

class ModelRegistry {
 public:
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Create(
      const std::vector<ModelConfig>& configs, Metrics* metrics, Clock* clock);

  ModelRegistry() = default;
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  std::shared_ptr<ServedModel> Find(const std::string& name) const;
  std::vector<std::shared_ptr<ServedModel>> List() const;  // by name
  // Serves `model` under its name: adds a new name or replaces the served version (hot swap).
  // Returns the replaced version (null for a new name); it is retired — still running for the
  // requests that hold it — and released by a background thread once none does.
  std::shared_ptr<ServedModel> Put(std::shared_ptr<ServedModel> model);
  // Stops every batcher (retired ones too) from accepting and finishes what is queued by
  // `deadline` on the batchers' clock; then what is still queued is UNAVAILABLE and running
  // batches stop at their next step (LengthBucketBatcher::DrainUntil). All models share the one
  // deadline, so that shutdown_grace bounds the whole drain.
  void DrainAll(absl::Time deadline);
  // Makes every batcher (retired ones too) run what is queued, and what is scheduled from now on,
  // at once while it still accepts tasks (LengthBucketBatcher::Flush): the start of a shutdown,
  // while the front ends finish the calls they have received.
  void FlushAll();

 private:
  void ReleaseRetired();  // the janitor thread's loop
  // The served models and the retired ones still held by requests.
  std::vector<std::shared_ptr<ServedModel>> AllBatched() const;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ServedModel>> models_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ServedModel>> retired_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread janitor_;  // started by the first Put that retires a model
};

// "auto" → cuda:0 when CUDA is available, else cpu; otherwise as written.
absl::StatusOr<torch::Device> ResolveDevice(const std::string& device);

// Bytes the caching allocator can still hand out on `device` ("cuda:N"): the driver's free memory
// plus what the allocator holds unused. 0 for the CPU or an unknown device.
std::int64_t CudaAvailableBytes(const std::string& device);

}  // namespace ts::server

#include "server/serving/model_registry.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "model/networks/batch_classifier.h"
#include "model/networks/calibration.h"
#include "model/networks/cost_model.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"

namespace ts::server {
namespace {

// A content hash of the checkpoint file: the same file is the same version everywhere.
absl::StatusOr<std::string> FileVersion(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, "checkpoint"));
  return CheckpointVersion(bytes);
}

}  // namespace

absl::StatusOr<torch::Device> ResolveDevice(const std::string& device) {
  if (device == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                       : torch::Device(torch::kCPU);
  }
  try {
    torch::Device parsed(device);
    if (parsed.is_cuda() && !torch::cuda::is_available()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", device, "' requested but CUDA is not available"));
    }
    return parsed;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid device '", device, "'"));
  }
}

std::int64_t CudaAvailableBytes(const std::string& device) {
  try {
    const torch::Device parsed(device);
    if (!parsed.is_cuda() || parsed.index() >= compat::CudaDeviceCount()) return 0;
    return compat::CudaAvailableBytes(parsed);
  } catch (const std::exception&) {
    return 0;
  }
}

LengthPolicyOptions ServedModel::length_policy(LengthPolicy over_length) const {
  LengthPolicyOptions policy;
  policy.max_length = max_length_;
  policy.policy = over_length;
  policy.window_stride = config_.window_stride;
  policy.max_windows = config_.max_windows;
  return policy;
}

// A short calibration at the model's precision, at batch 1 and at its largest batch up to
// kMaxStartupCalibrationBatch (larger batches take that one's crossover; a sweep at batch 1024
// would hold the start for minutes).
absl::StatusOr<CrossoverTable> ServedModel::CalibrateAtStart(ServedModel& model,
                                                             std::int64_t head_dim) {
  CalibrationOptions calibrate;
  calibrate.head_dim = head_dim;
  calibrate.heads = model.options().heads();
  calibrate.device = model.device_.str();
  calibrate.precision = model.config_.precision;
  calibrate.max_tokens = model.max_length_ + 1;
  calibrate.min_tokens = std::min<std::int64_t>(32, calibrate.max_tokens);
  calibrate.repeats = 1;
  constexpr std::int64_t kMaxStartupCalibrationBatch = 8;
  const std::int64_t largest =
      std::min(model.config_.batching.max_batch_size, kMaxStartupCalibrationBatch);
  std::vector<std::int64_t> batches = {1};
  if (largest > 1) batches.push_back(largest);
  CrossoverTable table;
  for (const std::int64_t batch : batches) {
    calibrate.batch = batch;
    TS_ASSIGN_OR_RETURN(const auto result, CalibrateCrossover(calibrate));
    table.Add(batch, result.crossover_tokens);
    for (const auto& warning : result.warnings) {
      model.calibration_warnings_.push_back(absl::StrCat("calibrate_at_start: ", warning));
    }
  }
  return table;
}

absl::StatusOr<std::shared_ptr<ServedModel>> ServedModel::Load(const ModelConfig& given,
                                                               Metrics* metrics, Clock* clock) {
  const std::string where = absl::StrCat("model '", given.name, "': ");
  TS_ASSIGN_OR_RETURN(const torch::Device device, Prefixed(ResolveDevice(given.device), where));
  ModelConfig config = given;
  if (config.precision_auto) {
    // bf16 where tensor cores compute it (CUDA 8.0+); fp32 elsewhere, the CPU included.
    config.precision =
        compat::CudaComputeCapabilityMajor(device) >= 8 ? Precision::kBf16 : Precision::kFp32;
    config.precision_auto = false;
  }
  TS_RETURN_IF_ERROR(Prefixed(CheckPrecisionSupported(config.precision, device), where));
  TS_ASSIGN_OR_RETURN(auto loaded, Prefixed(LoadCheckpoint(config.checkpoint, device), where));
  TS_ASSIGN_OR_RETURN(auto version, FileVersion(config.checkpoint));
  std::shared_ptr<ServedModel> model(new ServedModel(config, std::move(loaded)));
  model->device_ = device;
  model->version_ = version;
  model->metrics_ = metrics;
  model->clock_ = clock;
  const auto& options = model->options();
  model->max_length_ = config.max_length > 0 ? config.max_length : options.max_length();
  if (model->max_length_ > options.max_length()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "max_length ", config.max_length,
                                                   " exceeds the checkpoint's ",
                                                   options.max_length()));
  }
  const std::int64_t head_dim = options.embed_dim() / options.heads();
  if (!config.calibration.empty()) {
    TS_ASSIGN_OR_RETURN(
        model->crossover_table_,
        Prefixed(LoadCrossovers(config.calibration, head_dim, options.heads(), config.precision),
                 where));
    model->crossover_source_ = "calibration";
  } else if (config.calibrate_at_start) {
    TS_ASSIGN_OR_RETURN(model->crossover_table_, CalibrateAtStart(*model, head_dim));
    model->crossover_source_ = "startup-calibration";
  } else {
    model->crossover_source_ = "formula";
  }
  model->checkpoint_.model->set_crossover_tokens(SpeedCrossoverN0(head_dim));
  model->checkpoint_.model->set_crossover_table(model->crossover_table_);
  model->crossover_tokens_ = model->checkpoint_.model->crossover_tokens(1);
  model->checkpoint_.model->eval();
  model->checkpoint_.model->set_precision(config.precision);

  // The cost limits unless configured: a request of max_windows windows of max_length tokens on
  // `auto` (any request may choose the window policy), and a full token budget of such rows.
  const std::int64_t longest = model->max_length_ + 1;
  const double automatic_request =
      model->EstimateMflop(AttentionPath::kAuto, longest, config.max_windows);
  model->max_request_mflop_ = config.max_request_mflop > 0
                                  ? static_cast<double>(config.max_request_mflop)
                                  : automatic_request;
  const double full_budget = model->EstimateMflop(
      AttentionPath::kAuto, longest,
      batcher_internal::RowCapacity(config.batching,
                                    batcher_internal::PaddedLength(config.batching, longest)));
  model->max_batch_mflop_ = config.max_batch_mflop > 0
                                ? static_cast<double>(config.max_batch_mflop)
                                : std::max(model->max_request_mflop_, full_budget);
  LengthBucketBatcherOptions batching = config.batching;
  batching.max_batch_cost = model->max_batch_mflop_;

  ClassifyBatcher::Observer observer;
  if (metrics != nullptr) {
    const std::string name = config.name;
    // Requests dropped before compute (deadline, cancel) are counted once, by the RPC handler
    // that answers them (taylorshift_rejected_total), not here as well.
    observer.on_queue_depth = [metrics, name](std::int64_t depth) {
      metrics->SetQueueDepth(name, depth);
    };
    observer.on_stopped = [metrics, name](const Batch<ClassifyWork>&, absl::StatusCode code) {
      metrics->RecordBatchStopped(name, code == absl::StatusCode::kDeadlineExceeded ? "deadline"
                                        : code == absl::StatusCode::kCancelled      ? "cancelled"
                                                                                    : "shutdown");
    };
    metrics->SetModelInfo(name, model->version_, model->metadata().modality, model->device_.str(),
                          PrecisionName(config.precision), options.heads(), head_dim,
                          model->crossover_tokens_);
  }
  ServedModel* raw = model.get();
  TS_ASSIGN_OR_RETURN(
      model->batcher_,
      Prefixed(ClassifyBatcher::Create(
                   batching, [raw](Batch<ClassifyWork>& batch) { return raw->RunBatch(batch); },
                   clock, observer),
               where));
  return model;
}

double ServedModel::EstimateMflop(AttentionPath requested, std::int64_t tokens,
                                  std::int64_t windows) const {
  const auto& options = checkpoint_.options;
  EncoderCostShape shape;
  shape.embed_dim = options.embed_dim();
  shape.depth = options.depth();
  shape.heads = options.heads();
  shape.mlp_hidden = options.mlp_hidden();
  const AttentionPath path = ResolvedPath(requested, tokens);
  return static_cast<double>(windows) *
         EncoderForwardOps(shape, static_cast<double>(tokens), path) / 1e6;
}

absl::Status ServedModel::RunBatch(Batch<ClassifyWork>& batch) {
  // Training jobs set their own thread counts; a batch thread takes the serving one.
  compat::UseDefaultThreadsOnThisThread();
  std::vector<ClassifyWork*> works;
  std::vector<std::string_view> sequences;
  for (auto& task : batch.tasks) {
    ClassifyWork* work = &task->payload;
    works.push_back(work);
    for (const auto& window : work->windows) sequences.push_back(window);
    work->queue_seconds = absl::ToDoubleSeconds(batch.started - task->enqueued);
  }
  const auto requested = static_cast<AttentionPath>(batch.path);
  const auto tokens = batch.padded_tokens * static_cast<std::int64_t>(sequences.size());
  compat::SetThisThreadParallelism(
      tokens <= config_.single_thread_tokens ? 1 : compat::DefaultIntraOpThreads());
  const absl::Time start = clock_->Now();
  if (metrics_ != nullptr) metrics_->AddBatchesInFlight(config_.name, 1);
  // Rows beyond the token budget (a single request of more windows than fit) run in passes of at
  // most max_batch_tokens, with a stop check between them (and between blocks within each).
  const std::int64_t pass_rows =
      batcher_internal::RowCapacity(config_.batching, batch.padded_tokens);
  absl::StatusOr<BatchClassification> classified;
  BatchClassification result;
  for (std::size_t first = 0; first < sequences.size();
       first += static_cast<std::size_t>(pass_rows)) {
    const std::size_t last =
        std::min(sequences.size(), first + static_cast<std::size_t>(pass_rows));
    const std::vector<std::string_view> pass(sequences.begin() + first, sequences.begin() + last);
    classified = ClassifyBatch(checkpoint_.model, pass, requested, device_, /*pad_to=*/0,
                               BatchLayout::kAuto, batch.stop);
    if (!classified.ok()) break;
    result.path = classified->path;
    result.padded_tokens = classified->padded_tokens;
    result.real_tokens += classified->real_tokens;
    for (auto& p : classified->probabilities) result.probabilities.push_back(std::move(p));
  }
  if (metrics_ != nullptr) metrics_->AddBatchesInFlight(config_.name, -1);
  TS_RETURN_IF_ERROR(classified.status());
  const double compute = absl::ToDoubleSeconds(clock_->Now() - start);
  std::size_t row = 0;
  const auto batch_tokens = result.padded_tokens * static_cast<std::int64_t>(sequences.size());
  for (auto* work : works) {
    const std::size_t classes = result.probabilities[row].size();
    work->probabilities.assign(classes, 0.0f);
    for (std::size_t w = 0; w < work->windows.size(); ++w, ++row) {
      for (std::size_t c = 0; c < classes; ++c) {
        work->probabilities[c] +=
            result.probabilities[row][c] / static_cast<float>(work->windows.size());
      }
    }
    work->path = result.path;
    work->batch_size = static_cast<std::int64_t>(works.size());
    work->batch_tokens = batch_tokens;
    work->compute_seconds = compute;
  }
  if (metrics_ != nullptr) {
    metrics_->RecordBatch(config_.name, std::string(AttentionPathName(result.path)),
                          std::to_string(batch.padded_tokens),
                          static_cast<std::int64_t>(works.size()), batch_tokens, result.real_tokens,
                          compute);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Create(
    const std::vector<ModelConfig>& configs, Metrics* metrics, Clock* clock) {
  auto registry = std::make_unique<ModelRegistry>();
  for (const auto& config : configs) {
    TS_ASSIGN_OR_RETURN(auto model, ServedModel::Load(config, metrics, clock));
    absl::MutexLock lock(&registry->mu_);
    registry->models_[config.name] = std::move(model);
  }
  return registry;
}

std::shared_ptr<ServedModel> ModelRegistry::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  const auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ServedModel>> out;
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

ModelRegistry::~ModelRegistry() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (janitor_.joinable()) janitor_.join();
}

std::shared_ptr<ServedModel> ModelRegistry::Put(std::shared_ptr<ServedModel> model) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<ServedModel>& slot = models_[model->name()];
  std::shared_ptr<ServedModel> previous = std::move(slot);
  slot = std::move(model);
  if (previous != nullptr) {
    retired_.push_back(previous);
    if (!janitor_.joinable()) janitor_ = std::thread([this] { ReleaseRetired(); });
  }
  return previous;
}

void ModelRegistry::ReleaseRetired() {
  // A retired model is destroyed here, never on a batch thread: the last request holding it
  // may finish on that model's own batcher thread, which cannot join itself.
  for (;;) {
    std::vector<std::shared_ptr<ServedModel>> released;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
      stopping = stopping_;
      // Only the registry can hand out a reference, and it never hands out a retired one, so
      // use_count() == 1 stays 1.
      auto unused = std::stable_partition(retired_.begin(), retired_.end(),
                                          [](const auto& m) { return m.use_count() > 1; });
      released.assign(std::make_move_iterator(unused), std::make_move_iterator(retired_.end()));
      retired_.erase(unused, retired_.end());
    }
    released.clear();  // joins the batchers' threads, outside the lock
    if (stopping) return;
  }
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::AllBatched() const {
  std::vector<std::shared_ptr<ServedModel>> models = List();
  absl::MutexLock lock(&mu_);
  models.insert(models.end(), retired_.begin(), retired_.end());
  return models;
}

void ModelRegistry::DrainAll(absl::Time deadline) {
  for (const auto& model : AllBatched()) model->batcher().DrainUntil(deadline);
}

void ModelRegistry::FlushAll() {
  for (const auto& model : AllBatched()) model->batcher().Flush();
}

}  // namespace ts::server

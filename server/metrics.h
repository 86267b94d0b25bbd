// Prometheus metrics of the server (prometheus-cpp): the one place that defines metric names,
// labels and buckets. Every name is prefixed `taylorshift_`; latencies are histograms.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/gpu_telemetry.h"

namespace ts::server {

struct MetricsOptions {
  // "host:port" of the /metrics endpoint (port 0: any free port); empty = registry only (tests).
  std::string listen;
  // Set: HTTPS with this certificate chain (PEM) and key_file; client_ca_file set: scrapers must
  // present a certificate signed by it. Empty = plain HTTP.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // Set: every request's `Authorization` header value ("" when absent) is passed to it first; a
  // non-OK status is answered 401 (UNAUTHENTICATED, with WWW-Authenticate: Bearer) or 403 (any
  // other code) with the status's message and no metric. Unset: no token needed. Called from the
  // endpoint's threads; must be thread-safe.
  std::function<absl::Status(std::string_view authorization)> authorize;
  // A finished job's series (every taylorshift_job_* series with its job_id) leave the registry
  // this long after it finished (metrics_finished_job_series_s); zero = kept while the job
  // exists (RemoveJob). Checked at each scrape and Serialize().
  absl::Duration finished_job_series = absl::Hours(1);
  // Time source of that expiry; null = RealClock(). Must outlive the Metrics.
  Clock* clock = nullptr;
};

// What a training job's progress report says, for SetJobProgress.
struct JobProgressSample {
  std::int64_t step = 0;
  std::int64_t total_steps = 0;  // the steps the job runs in all; 0 = unknown (no ratio)
  double loss = 0;
  double examples_per_second = 0;
  // Seconds until its last step at the recent step rate; negative = not known yet (fewer than
  // two reports since the job's workers started).
  double eta_seconds = -1;
};

class Metrics {
 public:
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const MetricsOptions& options);
  // Create({.listen = listen}): plain HTTP, no token.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const std::string& listen);
  ~Metrics();

  // A finished RPC: code is the gRPC status code name ("OK", "NOT_FOUND", ...).
  // `protocol`: the front end (CallContext::protocol). Counted and timed by model, protocol and
  // code.
  void RecordRequest(const std::string& model, const std::string& protocol, const std::string& code,
                     double seconds);
  void RecordQueue(const std::string& model, double seconds);
  void RecordBatch(const std::string& model, const std::string& path,
                   const std::string& length_bucket, std::int64_t batch_size,
                   std::int64_t batch_tokens, std::int64_t real_tokens, double compute_seconds);
  void RecordSequenceLength(const std::string& model, std::int64_t tokens);
  void SetQueueDepth(const std::string& model, std::int64_t depth);
  // reason: queue_full, deadline_exceeded, cancelled, invalid_argument, over_length, ...
  void RecordRejected(const std::string& model, const std::string& reason);
  void SetModelInfo(const std::string& model, const std::string& version,
                    const std::string& modality, const std::string& device,
                    const std::string& precision, std::int64_t heads, std::int64_t head_dim,
                    std::int64_t crossover_tokens);
  void RemoveModelInfo(const std::string& model, const std::string& version);
  // Training and evaluation jobs, labelled by `job_id` (not `job`, which Prometheus reserves
  // for the scrape job). SetJobState sets the job's current `state` sample to 1 and its other
  // states to 0 (kind: training, evaluation; state: queued, running, succeeded, failed,
  // cancelled). A final state (succeeded, failed, cancelled) starts the job's expiry
  // (MetricsOptions::finished_job_series) at `finished`, when it ended (unset = now); a job whose
  // expiry has already passed gets no series. Another state stops the expiry. The ETA goes with
  // every state but running, except that a job that succeeded keeps it at 0.
  // RecordJobFinished counts a job reaching a final state.
  void SetJobState(const std::string& job_id, const std::string& kind, const std::string& state,
                   std::optional<absl::Time> finished = std::nullopt);
  void RecordJobFinished(const std::string& kind, const std::string& state);
  // A training job's workers started: the steps it runs in all and the step it starts from (its
  // resume step, else 0) set its total and progress ratio; its ETA goes until a progress report
  // brings a new one. total_steps 0 (an evaluation job) sets nothing.
  void SetJobTotalSteps(const std::string& job_id, std::int64_t total_steps, std::int64_t step);
  // A progress report: step, loss, examples/s and, when known, total, ratio and ETA.
  void SetJobProgress(const std::string& job_id, const JobProgressSample& progress);
  void SetJobValidationAccuracy(const std::string& job_id, double accuracy);
  // Drops every series of a deleted job and counts the deletion (reason: request, retention).
  void RemoveJob(const std::string& job_id, const std::string& kind, const std::string& reason);
  // Counts a job-store write that failed (operation: create_job, update_job, delete_job,
  // append_metric, append_evaluation, truncate_history, record_checkpoint, remove_checkpoint,
  // record_promotion; open_store: the store could not be opened for writing at start).
  void RecordJobStoreError(const std::string& operation);
  // Finished jobs whose final state the job store has not taken yet (server/jobs/job_queue.h keeps
  // them in memory and in its journal, and writes them again; a restart writes them from there).
  void SetJobFinalStatesUnwritten(std::int64_t jobs);
  // An HTTP answer of the HTTP/JSON front end by status code (404, 405 and 413 included: the
  // ones the listener and the router answer before any model is involved).
  void RecordHttpResponse(int status);
  // Batches being computed now, per model (+1 when a forward pass starts, -1 when it ends).
  void AddBatchesInFlight(const std::string& model, int delta);
  // A running batch stopped early (LengthBucketBatcher's Batch::stop): reason deadline,
  // cancelled or shutdown.
  void RecordBatchStopped(const std::string& model, const std::string& reason);
  // A serving replica that follows a jobs server's promotions (promotions.follow): a poll of
  // `model` that failed (reason: unavailable — the jobs server could not be reached —, rpc,
  // download, invalid, incompatible, load) and the Unix time of its last poll that found the
  // jobs server's version served here.
  void RecordPromotionFollowError(const std::string& model, const std::string& reason);
  void SetPromotionFollowLastSync(const std::string& model, double unix_seconds);
  // The worker processes of running jobs, read at each scrape (/proc/PID/stat and statm): their
  // resident memory and CPU time per job_id and rank, and their resident memory together
  // (taylorshift_workers_resident_memory_bytes, 0 when none runs). `source` is called from
  // scrapes and must be thread-safe; it returns what runs now.
  struct WorkerProcess {
    std::string job_id;
    int rank = 0;
    int pid = 0;
  };
  void SetWorkerSource(std::function<std::vector<WorkerProcess>()> source);
  // The GPUs' utilisation and memory (common/gpu_telemetry.h, NVML), read at each scrape;
  // `source` must be thread-safe. Without one (no NVML), the GPU gauges have no series.
  void SetGpuSource(std::function<std::vector<GpuTelemetry::Sample>()> source);
  // The text exposition of every metric (what /metrics serves), with the memory, CPU, worker and
  // GPU gauges read now (/proc/self/statm and stat, SetWorkerSource, SetGpuSource and, on CUDA,
  // the device allocator), as before each scrape.
  std::string Serialize() const;
  // "host:port" the exposer actually bound (port 0 in `listen` picks a free one).
  std::string bound_address() const;

 private:
  Metrics();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts::server

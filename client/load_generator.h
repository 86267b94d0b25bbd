// The load generator behind `tsctl bench`, kept free of any channel so it is unit-testable:
//  - LengthDistribution: document lengths ("fixed:N", "uniform:MIN:MAX",
//    "lognormal:MEDIAN:SIGMA:MAX");
//  - RequestGenerator: request i of a run, a pure function of (seed, i) or a round-robin pick
//    from given inputs, so a run is reproducible whatever the thread interleaving;
//  - NearestRankPercentile and BenchAggregator: exact latency percentiles and the path,
//    batch-size, error and server-timing mix of the responses;
//  - RunLoad: K closed-loop workers (or an open loop at a fixed rate) over any ClassifyCall.
// Random numbers come only from std::mt19937_64 (fully specified by the standard) with
// hand-written uniform/normal transforms, so a seed yields the same documents everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::client {

// Document lengths in bytes; every sample is >= 1 and within the spec's bounds.
class LengthDistribution {
 public:
  // "fixed:N" (N >= 1), "uniform:MIN:MAX" (1 <= MIN <= MAX, inclusive), or
  // "lognormal:MEDIAN:SIGMA:MAX": round(MEDIAN * exp(SIGMA * z)) for standard normal z,
  // clipped to [1, MAX] (MEDIAN > 0, SIGMA >= 0, MAX >= 1). INVALID_ARGUMENT otherwise.
  static absl::StatusOr<LengthDistribution> Parse(absl::string_view spec);

  std::size_t Sample(std::mt19937_64& rng) const;

 private:
  enum class Kind { kFixed, kUniform, kLogNormal };
  LengthDistribution() = default;

  Kind kind_ = Kind::kFixed;
  std::size_t min_ = 1;  // fixed: the length; uniform: the lower bound; lognormal: 1
  std::size_t max_ = 1;
  double median_ = 1.0;
  double sigma_ = 0.0;
};

// Request i of a bench run. Immutable after construction; Request() is thread-safe.
class RequestGenerator {
 public:
  // Documents of random printable bytes with lengths from `lengths`; request i draws from an
  // RNG seeded by (seed, i) only. `prototype` supplies model, path and top_k.
  static RequestGenerator Synthetic(taylorshift::v1::ClassifyRequest prototype,
                                    LengthDistribution lengths, std::uint64_t seed);
  // Inputs taken round-robin: request i carries inputs[i % size]'s document or image, with
  // model, path and top_k from `prototype`. INVALID_ARGUMENT when `inputs` is empty.
  static absl::StatusOr<RequestGenerator> RoundRobin(
      taylorshift::v1::ClassifyRequest prototype,
      std::vector<taylorshift::v1::ClassifyRequest> inputs);

  // The request with index `index`; its request_id is "bench-<index>".
  taylorshift::v1::ClassifyRequest Request(std::uint64_t index) const;
  const std::string& model() const { return prototype_.model(); }

 private:
  RequestGenerator() = default;

  taylorshift::v1::ClassifyRequest prototype_;
  std::vector<taylorshift::v1::ClassifyRequest> inputs_;  // empty = synthetic
  std::unique_ptr<LengthDistribution> lengths_;
  std::uint64_t seed_ = 0;
};

// The nearest-rank percentile of ascending `sorted`: the smallest sample with at least
// `percent`% of the samples at or below it (sorted[ceil(percent/100 * n) - 1]), so every
// reported value is a latency that was actually observed. percent in (0, 100]; 0 gives the
// minimum. NaN when `sorted` is empty.
double NearestRankPercentile(const std::vector<double>& sorted, double percent);

// What a bench run measured. Latency and server timing cover successful requests only.
struct BenchReport {
  std::string model;
  int concurrency = 0;
  double rate_rps = 0;        // 0 = closed loop
  std::int64_t requests = 0;  // completed, ok or not
  std::int64_t ok = 0;
  std::int64_t failed = 0;
  double elapsed_s = 0;
  double requests_per_s = 0;  // ok / elapsed_s
  std::int64_t tokens = 0;    // Σ tokens × max(windows, 1) over ok responses
  double tokens_per_s = 0;
  // Latency in ms, exact nearest-rank percentiles over the recorded samples; NaN when no
  // request succeeded.
  double latency_p50_ms = 0;
  double latency_p90_ms = 0;
  double latency_p99_ms = 0;
  double latency_max_ms = 0;
  double latency_min_ms = 0;
  double latency_mean_ms = 0;
  std::map<std::string, std::int64_t> errors;         // gRPC code name → count
  std::map<std::string, std::int64_t> paths;          // "direct"/"efficient"/"softmax" → count
  std::map<std::uint32_t, std::int64_t> batch_sizes;  // timing.batch_size → count
  double mean_batch_size = 0;
  double mean_queue_ms = 0;
  double mean_compute_ms = 0;
};

// Collects outcomes from concurrent workers. Thread-safe.
class BenchAggregator {
 public:
  void RecordOk(double latency_ms, const taylorshift::v1::ClassifyResponse& response);
  void RecordError(grpc::StatusCode code);
  // The report over everything recorded so far, with throughput over `elapsed_s`. Leaves
  // model, concurrency and rate_rps for the caller.
  BenchReport Summarize(double elapsed_s) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<double> latencies_ms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::int64_t> errors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::int64_t> paths_ ABSL_GUARDED_BY(mu_);
  std::map<std::uint32_t, std::int64_t> batch_sizes_ ABSL_GUARDED_BY(mu_);
  std::int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  double queue_ms_sum_ ABSL_GUARDED_BY(mu_) = 0;
  double compute_ms_sum_ ABSL_GUARDED_BY(mu_) = 0;
  double batch_size_sum_ ABSL_GUARDED_BY(mu_) = 0;
};

struct LoadOptions {
  // Workers, i.e. requests in flight at most. >= 1.
  int concurrency = 1;
  // Stop issuing after this many requests; 0 = no count limit.
  std::int64_t max_requests = 200;
  // Stop issuing after this many seconds (in-flight requests still finish); 0 = no limit.
  double duration_s = 0;
  // 0 = closed loop (each worker sends its next request when the last one answers).
  // Otherwise open loop: request i is due at start + i / rate_rps and its latency counts from
  // then, so a client that falls behind shows up as latency (no coordinated omission).
  double rate_rps = 0;
};

// One Classify RPC; called from `concurrency` threads at once.
using ClassifyCall = std::function<grpc::Status(const taylorshift::v1::ClassifyRequest&,
                                                taylorshift::v1::ClassifyResponse*)>;

// Checks LoadOptions: INVALID_ARGUMENT when concurrency < 1, a limit is negative, or neither
// max_requests nor duration_s bounds the run.
absl::Status ValidateLoadOptions(const LoadOptions& options);

// Called after each request with whether it succeeded, from the worker that sent it (so from
// `concurrency` threads at once): tsctl bench's progress display counts with it.
using RequestDone = std::function<void(bool ok)>;

// Runs the load and returns the report (model from the generator, concurrency and rate from
// `options`). Blocks until every worker is done. `options` must pass ValidateLoadOptions.
// `done`, when set, hears of every request as it completes.
BenchReport RunLoad(const LoadOptions& options, const RequestGenerator& generator,
                    const ClassifyCall& call, const RequestDone& done = nullptr);

// One JSON object (no newline); see FormatBenchJson in load_generator.cc for the shape.
std::string FormatBenchJson(const BenchReport& report);
// Human-readable multi-line summary ending in a newline.
std::string FormatBenchText(const BenchReport& report);

}  // namespace ts::client

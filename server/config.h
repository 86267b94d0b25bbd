// Server configuration: the Options structs that config/default.yaml fills, and the one place
// that parses YAML (yaml-cpp). Unknown keys and invalid values are rejected with the key's
// path (e.g. "models[1].batching.max_batch_size") and the reason.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "job_contract/job_spec.h"
#include "model/api/inputs.h"
#include "model/api/precision.h"
#include "server/serving/length_bucket_batcher.h"

namespace ts::server {

// The one name rule for served models, promotions and jobs (job_contract/job_spec.h).
using job::IsValidName;
using job::kNameRule;

struct ModelConfig {
  std::string name;             // required; kNameRule
  std::string checkpoint;       // required; path to a .tsckpt
  std::string device = "auto";  // auto (cuda:0 if present, else cpu), cpu, cuda, cuda:N
  std::int64_t max_length = 0;  // 0 = the checkpoint's max_length; else ≤ it
  LengthPolicy over_length = LengthPolicy::kTruncate;  // model/api/inputs.h
  std::int64_t window_stride = 0;                      // window policy: 0 = max_length / 2
  std::int64_t max_windows = 16;    // window policy: more windows → INVALID_ARGUMENT
  std::string calibration;          // calibration file; empty = none
  bool calibrate_at_start = false;  // short calibration at start when no file is given
  // fp32, or bf16: the linear layers in bfloat16 (model/api/precision.h); refused at load on
  // hardware without bf16 arithmetic. `auto` (precision_auto): bf16 on a CUDA device of compute
  // capability 8.0 or newer (tensor cores), fp32 elsewhere; resolved when the model loads.
  Precision precision = Precision::kFp32;
  bool precision_auto = true;
  // A batch of at most this many tokens (batch size × padded length) runs on one intra-op
  // thread: its ops are too small to split, and each fork/join of the thread pool costs more
  // than it saves (docs/PERFORMANCE.md). 0 = every batch uses intra_op_threads.
  std::int64_t single_thread_tokens = 1024;
  // Admission by cost (docs/SERVING.md, "Admission by cost"): a request's estimated compute
  // is its windows × the encoder's floating-point operations at its longest window on the path it
  // takes (model/networks/cost_model.h, EncoderForwardOps), in millions (MFLOP). A request that
  // costs more than max_request_mflop is refused with RESOURCE_EXHAUSTED before it is queued.
  // 0 = automatic: what a request of max_windows windows of max_length tokens costs on the path
  // `auto` takes for it, so that every request the model's own policy allows on `auto` fits.
  std::int64_t max_request_mflop = 0;
  // The requests of one batch together cost at most this (MFLOP); a request that alone costs
  // more is refused like one over max_request_mflop. 0 = automatic: the larger of the request
  // limit and a full token budget (max_batch_tokens) of max_length-token rows on `auto`.
  std::int64_t max_batch_mflop = 0;
  LengthBucketBatcherOptions batching;
};

using job::JobLimits;

struct TlsConfig {
  std::string cert_file;       // server certificate chain (PEM); empty = plaintext
  std::string key_file;        // private key (PEM)
  std::string client_ca_file;  // set = mTLS: clients must present a cert signed by this CA
};

struct AuthConfig {
  // Bearer tokens and their roles ("classify", "admin", "metrics"). Empty = no authentication.
  std::map<std::string, std::vector<std::string>> tokens;
  // Read tokens from this file too: one "TOKEN ROLE[,ROLE...]" per line (# comments).
  std::string tokens_file;
  // The diagnosis-only request options — an attention path other than auto (direct, efficient,
  // softmax: the softmax baseline is quadratic and slow) — are for admin tokens; true lets
  // classify tokens use them too. Without tokens (no authentication) everyone may.
  bool classify_diagnostic_options = false;
  // With tokens: what tells a caller which models and services exist — gRPC reflection and
  // grpc.health.v1 Check/Watch of a model name — needs a valid token (any role). Health of the
  // whole server ("") and of the gRPC services stays open for probes. false = open to all.
  bool protect_discovery = true;
};

// The /metrics endpoint (server/metrics.h).
struct MetricsConfig {
  // HTTPS for /metrics (cert_file + key_file; client_ca_file: scrapers need a certificate signed
  // by it). Empty = plain HTTP.
  TlsConfig tls;
  // true: a scrape needs `Authorization: Bearer TOKEN` with a token that has the "metrics" role
  // (401 without one, 403 for a token without the role). Requires such a token in auth.
  bool require_token = false;
  // A finished job's taylorshift_job_* series leave /metrics this long after it finished
  // (metrics_finished_job_series_s), so that finished jobs do not keep series forever when
  // jobs.retention_s keeps their records; zero = kept while the job exists.
  absl::Duration finished_job_series = absl::Hours(1);
};

// Training and evaluation jobs (the Jobs service).
// The spec rules (limits, threads_per_job, keep_checkpoints, cuda_devices) are job::SpecRules,
// which tsworker applies too.
struct JobsConfig : job::SpecRules {
  // false = the server runs no jobs: every Jobs RPC answers FAILED_PRECONDITION saying so (and
  // `elsewhere`), its health is NOT_SERVING, and nothing under state_dir is read or written.
  bool enabled = true;
  // Free text for that answer: where jobs run instead (e.g. "taylorshift-jobs:50051"); empty =
  // no hint.
  std::string elsewhere;
  // oneDNN's primitive cache in each worker (ONEDNN_PRIMITIVE_CACHE_CAPACITY): training batches
  // take a new shape nearly every step, so cached primitives only hold memory (1.22 → 0.77 GiB
  // peak for the demo recipe at 0 against 64, the same speed; bench/memory_grid.py).
  int onednn_primitive_cache_capacity = 0;
  int max_concurrent = 1;  // jobs running at once
  int max_queued = 64;     // QUEUED jobs at most; more → RESOURCE_EXHAUSTED
  // Limits per submitting identity (Authorizer::Identity; not for "anonymous", the one identity
  // without authentication), so that one token cannot fill the shared queue. 0 = no limit.
  struct PerIdentity {
    std::int64_t max_queued = 16;  // its QUEUED jobs; more → RESOURCE_EXHAUSTED
    std::int64_t max_running = 0;  // its jobs running at once; more wait (others pass them)
    // Steps of its unfinished (queued and running) jobs together, the new one's included.
    std::int64_t max_total_steps = 4000000;
  } per_identity;
  // Cores kept for serving when threads_per_job is automatic. 1 by default: a job's OpenMP
  // threads stall whenever one of their cores is busy (docs/PERFORMANCE.md, "Threads"), so a
  // job that also took the core serving runs on would slow both; on a 2-core machine the
  // automatic default is thus 1 thread, on 16 cores 15.
  int serving_reserved_cores = 1;
  // Finished jobs (succeeded, failed, cancelled) older than this are deleted with their files,
  // as DeleteJob does; zero = kept until deleted by request.
  absl::Duration retention = absl::ZeroDuration();
  absl::Duration retention_sweep_interval = absl::Minutes(5);  // how often retention runs
  // Worker processes (server/jobs/job_process.h). Empty = `tsworker` in tsserver's own directory.
  std::string worker_binary;
  absl::Duration heartbeat_interval = absl::Seconds(1);  // worker → server
  absl::Duration heartbeat_timeout = absl::Seconds(60);  // silence that fails a job as hung
  absl::Duration stop_grace = absl::Seconds(30);         // SIGTERM (cancel, shutdown) → SIGKILL
  // Memory the jobs may use together; 0 = automatic: half of the machine's memory or of the
  // container's limit (cgroup memory.max), whichever is lower. A job whose estimated peak
  // (all ranks) exceeds it is refused at submission; queued jobs start only while the running
  // jobs' estimates and theirs fit.
  std::int64_t memory_budget_bytes = 0;
  // false = no refusal at submission (the workers' address-space limit still applies).
  bool memory_admission = true;
  // Each rank runs under RLIMIT_AS = memory_budget_bytes / ranks + this + the shared libraries
  // the server maps (measured at start; the worker maps the same LibTorch): the address space a
  // worker maps without using it besides its libraries (thread stacks, allocator reservations).
  std::int64_t worker_address_space_overhead_bytes = std::int64_t{1} << 30;
};

// The HTTP/JSON front end (server/serving/http_frontend.h): KServe v2 REST routes and the plain
// classify route. TLS and bearer tokens as for gRPC (tls:, auth:).
struct HttpConfig {
  std::string listen;  // host:port; empty = no HTTP front end
  // Handler threads: requests answered at once (a handler waits for its batch); more wait in
  // order. Connections are read and written by io_threads, asynchronously: an idle or slow
  // connection holds no thread.
  int threads = 8;
  int io_threads = 2;
  // Connections open at once, in total and per client IP address. A new connection at a cap
  // closes the connection idle the longest (in its TLS handshake, waiting for or reading a
  // request's headers) instead of being refused; only with none idle is it closed.
  int max_connections = 1024;
  int max_connections_per_peer = 256;
  // A read that waits this long for a byte closes the connection.
  absl::Duration read_timeout = absl::Seconds(5);
  // Total deadlines, not per read: a request's headers must arrive within header_timeout of the
  // accept (TLS handshake included) or of the previous answer, its body within body_timeout of
  // its headers, and an answer be written within write_timeout; past one, the connection closes.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(10);
  // JSON bodies nested deeper than this (arrays and objects) → 400 before anything recurses.
  int max_json_depth = 32;
  // Larger bodies get 413 however they are framed (Content-Length, chunked) and, compressed
  // (Content-Encoding gzip or deflate), once inflated; 0 = max_message_bytes.
  std::int64_t max_body_bytes = 0;
  // A compressed body that inflates to more than this many times its size → 413.
  std::int64_t max_inflate_ratio = 100;
  // Request bodies held at once by all connections together; a body that would pass it → 503
  // with Retry-After. 0 = four times the body limit; else at least the body limit.
  std::int64_t max_buffered_body_bytes = 0;
  // A request line and headers larger than this → 431.
  std::int64_t max_header_bytes = 16 << 10;
  // Deadline of a request without an X-Timeout-Ms header; 0 = none.
  absl::Duration default_timeout = absl::ZeroDuration();
  // How long a connection may stay idle between requests (keep-alive).
  absl::Duration keep_alive = absl::Seconds(5);
  // Requests one connection may carry before the server closes it.
  int keep_alive_max_requests = 1000;
};

// A serving replica following the promotions of a jobs server (server/serving/
// promotion_follower.h; docs/SERVING.md, "Serving replicas follow promotions"): every `interval`
// it asks `server` (DownloadCheckpoint) for the version served there under each of its models'
// names, downloads a new one into cache_dir, checks it and swaps it in.
struct PromotionFollowConfig {
  std::string server;  // host:port of the jobs server; empty = no following
  // A file holding the bearer token sent (the admin role, when the jobs server has tokens); read
  // at every poll, so a rotated secret is picked up. Empty = no token.
  std::string token_file;
  // TLS to the jobs server (as tsctl's --tls, --ca-file, --cert-file, --key-file,
  // --tls-server-name): enabled is implied by any of the files.
  bool tls = false;
  std::string ca_file;    // PEM roots to verify the jobs server with; empty = the system's
  std::string cert_file;  // client certificate chain (mutual TLS), with key_file
  std::string key_file;
  std::string tls_server_name;  // the name checked against its certificate; empty = the host
  absl::Duration interval = absl::Seconds(30);  // between polls
  absl::Duration timeout = absl::Seconds(60);   // one model's poll (and download) at most
  // Where followed checkpoints are kept (<cache_dir>/<model>/<version>.tsckpt and `current`), so
  // a restart serves the last followed version before it polls. Required with `server`.
  std::string cache_dir;
  // A checkpoint larger than this is not downloaded (counted, logged).
  std::int64_t max_checkpoint_bytes = std::int64_t{4} << 30;
};

struct PromotionsConfig {
  PromotionFollowConfig follow;
};

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  // Loopback by default: metrics name models, versions and jobs (README, "Deployment").
  std::string metrics_listen = "127.0.0.1:9464";  // empty = no metrics endpoint
  MetricsConfig metrics;                          // metrics_tls, metrics_require_token
  // NVIDIA's management library, read for the GPU gauges (common/gpu_telemetry.h); empty = none.
  // A machine without it (no NVIDIA driver) serves the other metrics and logs why.
  std::string nvml_library = "libnvidia-ml.so.1";
  int intra_op_threads = 0;  // 0 = number of cores
  int grpc_threads = 0;      // callback executor threads hint; 0 = gRPC default
  // Freed memory kept in the heap for the next batch or training step (model/heap_policy.h);
  // 0 = the C library's defaults.
  std::int64_t heap_keep_freed_bytes = std::int64_t{1} << 30;
  // Let float32 products and convolutions on CUDA use TF32 tensor cores (10-bit mantissa): faster
  // fp32 models, at about 1e-3 relative error. Off, fp32 means float32 (docs/GPU.md).
  bool cuda_allow_tf32 = false;
  // oneDNN primitives the server caches by shape for serving (model/heap_policy.h): a batch's
  // shape repeats within its length bucket. Workers take jobs.onednn_primitive_cache_capacity.
  int onednn_primitive_cache_capacity = 64;
  std::int64_t max_message_bytes = 64 << 20;
  int max_concurrent_streams = 256;
  // Elements of one KServe v2 ModelInfer request (its batch dimension), gRPC and REST.
  std::int64_t max_infer_batch = 256;
  absl::Duration shutdown_grace = absl::Seconds(30);
  std::string state_dir = "state";
  std::string data_root = "data";
  TlsConfig tls;
  AuthConfig auth;
  HttpConfig http;
  std::vector<ModelConfig> models;
  JobsConfig jobs;
  PromotionsConfig promotions;
};

// Parses YAML text; `base_dir` resolves relative file paths (checkpoint, calibration, TLS files,
// tokens_file, state_dir, data_root) — normally the config file's directory.
absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml_text,
                                               const std::string& base_dir);
absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path);

// "--model NAME=CHECKPOINT": a model with default settings.
absl::StatusOr<ModelConfig> ParseModelFlag(const std::string& flag);

// Semantic checks shared by the parser and flag overrides (unique names, limits > 0, ...).
absl::Status ValidateServerConfig(const ServerConfig& config);

// The threads of a job whose spec leaves `threads` at 0 on a machine with `num_cores` cores:
// jobs.threads_per_job when set, else max(1, (num_cores − jobs.serving_reserved_cores) /
// jobs.max_concurrent). Job specs then cap it at jobs.limits.max_threads.
int ThreadsPerJob(const JobsConfig& jobs, int num_cores);

// jobs.memory_budget_bytes, or when 0 half of MemoryLimitBytes() (common/memory_limit.h): the
// machine's memory or the container's limit, whichever is lower.
std::int64_t MemoryBudgetBytes(const JobsConfig& jobs);

}  // namespace ts::server

#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/memory_limit.h"
#include "common/status_macros.h"
#include "model/torch_compat.h"
#include "server/serving/http_listener.h"

namespace ts::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// /proc/PID/stat's fields after the command name (which may hold spaces and parentheses).
std::vector<std::string> StatFields(int pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(file, line);
  const std::size_t close = line.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 1));
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;  // fields[0] is stat's field 3 (state)
}

// User plus system CPU time of a process, in seconds (stat fields 14 and 15); 0 if unreadable.
double CpuSeconds(int pid) {
  const std::vector<std::string> fields = StatFields(pid);
  if (fields.size() < 13) return 0;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

// Virtual and resident size of a process in bytes (/proc/PID/statm: total program size and
// resident set size, in pages); 0 if unreadable.
std::pair<double, double> VirtualAndResidentBytes(const std::string& pid) {
  std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
  long long size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return {0, 0};
  const double page_bytes = static_cast<double>(sysconf(_SC_PAGESIZE));
  return {static_cast<double>(size_pages) * page_bytes,
          static_cast<double>(resident_pages) * page_bytes};
}

// Remove() takes the series itself; Has() first, so that a series never set is not created.
void RemoveSeries(Family<Gauge>& family, const prometheus::Labels& labels) {
  if (family.Has(labels)) family.Remove(&family.Add(labels));
}

// Removes from `families` the series in `series` that are not in `now`, and keeps `now`.
void KeepOnly(std::set<prometheus::Labels> now, std::set<prometheus::Labels>& series,
              std::initializer_list<Family<Gauge>*> families) {
  for (const prometheus::Labels& labels : series) {
    if (now.count(labels) != 0) continue;
    for (Family<Gauge>* family : families) RemoveSeries(*family, labels);
  }
  series = std::move(now);
}

// This process's start time since the Unix epoch: boot time (/proc/stat btime) plus stat field
// 22 (clock ticks after boot).
double ProcessStartSeconds() {
  std::ifstream stat("/proc/stat");
  double boot = 0;
  for (std::string key; stat >> key;) {
    if (key == "btime") {
      stat >> boot;
      break;
    }
  }
  const std::vector<std::string> fields = StatFields(getpid());
  if (fields.size() < 20 || boot == 0) return 0;
  return boot + std::stod(fields[19]) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Latencies: log-spaced 1-2.5-5 steps from 0.5 ms to 60 s.
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60};
}

// Powers of two from `first` to `last` inclusive.
Histogram::BucketBoundaries PowersOfTwo(double first, double last) {
  Histogram::BucketBoundaries buckets;
  for (double bound = first; bound <= last; bound *= 2) buckets.push_back(bound);
  return buckets;
}

// Padding ratio: 0.05 … 1 in steps of 0.05.
Histogram::BucketBoundaries RatioBuckets() {
  Histogram::BucketBoundaries buckets;
  for (int i = 1; i <= 20; ++i) buckets.push_back(i / 20.0);
  return buckets;
}

Family<Counter>& AddCounter(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}
Family<Gauge>& AddGauge(prometheus::Registry& registry, const std::string& name,
                        const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}
Family<Histogram>& AddHistogram(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

// GET or HEAD /metrics → 200 with the text exposition format; other paths → 404; other
// methods → 405. Served by an HttpListener (Boost.Beast).
//
// Why not prometheus::Exposer: Debian's civetweb starts its threads with a fixed 100 KiB
// stack, and a process that links LibTorch (OpenBLAS, glog, torch: ~105 KiB of static TLS)
// cannot create threads that small — pthread_create fails with EINVAL and the exposer throws
// "null context when constructing CivetServer".
//
// With `authorize` set, the token comes first: a request without an accepted one gets 401/403
// whatever its method or path, so nothing (not even which paths exist) is told before it.
HttpAnswer AnswerScrape(const HttpExchange& request,
                        const std::function<absl::Status(std::string_view)>& authorize,
                        const std::function<std::string()>& body) {
  HttpAnswer answer;
  answer.content_type = "text/plain; charset=utf-8";
  if (authorize != nullptr) {
    const auto header = request.headers.find("authorization");
    const absl::Status allowed =
        authorize(header == request.headers.end() ? std::string_view() : header->second);
    if (!allowed.ok()) {
      const bool unauthenticated = allowed.code() == absl::StatusCode::kUnauthenticated;
      answer.status = unauthenticated ? 401 : 403;
      if (unauthenticated) answer.headers["WWW-Authenticate"] = "Bearer realm=\"metrics\"";
      answer.body = absl::StrCat(allowed.message(), "\n");
      return answer;
    }
  }
  if (request.method != "GET" && request.method != "HEAD") {
    answer.status = 405;
    answer.headers["Allow"] = "GET, HEAD";
    answer.body = "only GET and HEAD\n";
  } else if (request.path != "/metrics") {
    answer.status = 404;
    answer.body = "metrics are at /metrics\n";
  } else {
    answer.content_type = "text/plain; version=0.0.4; charset=utf-8";
    answer.body = body();
  }
  return answer;
}

#if defined(TS_WITH_CUDA)
constexpr char kCudaBuild[] = "true";
#else
constexpr char kCudaBuild[] = "false";
#endif

constexpr const char* kJobStates[] = {"queued", "running", "succeeded", "failed", "cancelled"};

bool IsFinalState(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

}  // namespace

struct Metrics::Impl {
  Impl() {
    // Every operation has a series from the start: a panel shows 0, not "no data".
    for (const char* operation : {"create_job", "update_job", "delete_job", "append_metric",
                                  "append_evaluation", "truncate_history", "record_checkpoint",
                                  "remove_checkpoint", "record_promotion", "open_store"}) {
      job_store_errors.Add({{"operation", operation}});
    }
    process_start.Set(ProcessStartSeconds());
    build_info.Add({{"version", TS_VERSION}, {"torch", TORCH_VERSION}, {"cuda", kCudaBuild}})
        .Set(1);
  }

  // Adds the CPU time /proc/self/stat reports since the last read to the counter.
  void UpdateCpu() {
    const double seconds = CpuSeconds(getpid());
    absl::MutexLock lock(&cpu_mu);
    if (seconds > last_cpu_seconds) {
      process_cpu.Increment(seconds - last_cpu_seconds);
      last_cpu_seconds = seconds;
    }
  }

  // Worker gauges for what runs now; series of workers that ended are removed.
  void UpdateWorkers() {
    std::function<std::vector<Metrics::WorkerProcess>()> source_copy;
    {
      absl::MutexLock lock(&workers_mu);
      source_copy = worker_source;
    }
    std::vector<Metrics::WorkerProcess> running;
    if (source_copy) running = source_copy();
    absl::MutexLock lock(&workers_mu);
    std::set<prometheus::Labels> now;
    double total_resident = 0;
    for (const Metrics::WorkerProcess& worker : running) {
      const prometheus::Labels labels = {{"job_id", worker.job_id},
                                         {"rank", absl::StrCat(worker.rank)}};
      const double resident = VirtualAndResidentBytes(absl::StrCat(worker.pid)).second;
      if (resident <= 0) continue;  // gone between the listing and the read
      worker_memory.Add(labels).Set(resident);
      worker_cpu.Add(labels).Set(CpuSeconds(worker.pid));
      total_resident += resident;
      now.insert(labels);
    }
    KeepOnly(std::move(now), worker_series, {&worker_memory, &worker_cpu});
    workers_memory.Set(total_resident);
  }

  // Every series of job `id` (`kind`: the kind its state series carry) leaves the registry.
  void RemoveJobSeries(const std::string& id, const std::string& kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu) {
    for (const char* state : kJobStates) {
      RemoveSeries(job_state, {{"job_id", id}, {"kind", kind}, {"state", state}});
    }
    const prometheus::Labels labels = {{"job_id", id}};
    for (Family<Gauge>* family :
         {&job_step, &job_loss, &job_examples_per_second, &job_validation_accuracy,
          &job_total_steps, &job_progress, &job_eta}) {
      RemoveSeries(*family, labels);
    }
  }

  // The series of the jobs that finished more than finished_job_series ago go.
  void ExpireFinishedJobs() {
    absl::MutexLock lock(&jobs_mu);
    const absl::Time now = clock->Now();
    for (auto it = jobs.begin(); it != jobs.end();) {
      if (it->second.expires <= now) {
        RemoveJobSeries(it->first, it->second.kind);
        it = jobs.erase(it);
      } else {
        ++it;
      }
    }
  }

  // What a scrape reads: the gauges read from the system now, without the expired job series.
  void BeforeCollect() {
    UpdateMemory();
    ExpireFinishedJobs();
  }

  // GPU gauges for the GPUs NVML answers for now; series of GPUs that stopped answering are
  // removed.
  void UpdateGpus() {
    absl::MutexLock lock(&gpus_mu);
    if (!gpu_source) return;
    std::set<prometheus::Labels> now;
    for (const GpuTelemetry::Sample& gpu : gpu_source()) {
      const prometheus::Labels labels = {{"gpu", absl::StrCat(gpu.index)}, {"uuid", gpu.uuid}};
      gpu_utilization.Add(labels).Set(gpu.utilization);
      gpu_memory_utilization.Add(labels).Set(gpu.memory_utilization);
      gpu_memory_used.Add(labels).Set(static_cast<double>(gpu.memory_used_bytes));
      gpu_memory_total.Add(labels).Set(static_cast<double>(gpu.memory_total_bytes));
      now.insert(labels);
    }
    KeepOnly(std::move(now), gpu_series,
             {&gpu_utilization, &gpu_memory_utilization, &gpu_memory_used, &gpu_memory_total});
  }

  void UpdateMemory() {
    if (const std::int64_t limit = MemoryLimitBytes(); limit > 0) {
      memory_limit.Set(static_cast<double>(limit));
    }
    if (const auto [size, resident] = VirtualAndResidentBytes("self"); resident > 0) {
      virtual_memory.Set(size);
      resident_memory.Set(resident);
    }
    UpdateCpu();
    UpdateWorkers();
    UpdateGpus();
    if (!torch::cuda::is_available()) return;
    const int devices = static_cast<int>(torch::cuda::device_count());
    for (int i = 0; i < devices; ++i) {
      const ts::compat::DeviceMemory memory = ts::compat::GetDeviceMemory(
          torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(i)));
      const prometheus::Labels labels = {{"device", absl::StrCat("cuda:", i)}};
      device_allocated.Add(labels).Set(static_cast<double>(memory.allocated_bytes));
      device_reserved.Add(labels).Set(static_cast<double>(memory.reserved_bytes));
    }
  }

  prometheus::Registry registry;
  Family<Counter>& requests = AddCounter(
      registry, "taylorshift_requests_total",
      "Finished classification requests by model, front end (protocol: grpc for Classify and "
      "ClassifyStream, v2_grpc and v2_rest for KServe v2, rest for the plain HTTP route) and "
      "status code (gRPC code names); a v2 request of several inputs counts one per input.");
  Family<Histogram>& request_duration =
      AddHistogram(registry, "taylorshift_request_duration_seconds",
                   "Time from receiving a request to sending its response, in seconds.");
  Family<Histogram>& queue_duration = AddHistogram(
      registry, "taylorshift_queue_duration_seconds",
      "Time a request waited in its model's batcher before its batch started, in seconds.");
  Family<Histogram>& compute_duration = AddHistogram(
      registry, "taylorshift_compute_duration_seconds",
      "Forward-pass time of one batch by attention path (direct or efficient), in seconds.");
  Family<Histogram>& batch_size = AddHistogram(registry, "taylorshift_batch_size",
                                               "Requests per computed batch by attention path.");
  Family<Histogram>& batch_tokens =
      AddHistogram(registry, "taylorshift_batch_tokens",
                   "Padded tokens per computed batch (batch size times bucket length) by attention "
                   "path and length bucket.");
  Family<Histogram>& padding_ratio =
      AddHistogram(registry, "taylorshift_padding_ratio",
                   "Share of a batch's padded tokens that are padding (1 - real / padded tokens).");
  Family<Histogram>& sequence_length =
      AddHistogram(registry, "taylorshift_sequence_length",
                   "Tokens per request, including CLS, before any truncation or windowing.");
  Family<Counter>& attention_path =
      AddCounter(registry, "taylorshift_attention_path_total",
                 "Batches computed by attention path (direct, efficient, or softmax when "
                 "requested), chosen per batch from the crossover.");
  Family<Gauge>& queue_depth =
      AddGauge(registry, "taylorshift_queue_depth",
               "Requests waiting in a model's batcher, all length buckets together.");
  Family<Counter>& rejected =
      AddCounter(registry, "taylorshift_rejected_total",
                 "Requests finished without computing them, by reason (queue_full, over_cost, "
                 "deadline_exceeded, cancelled, unknown_model, invalid_argument, unauthorized, "
                 "shutting_down).");
  Family<Gauge>& model_info = AddGauge(registry, "taylorshift_model_info",
                                       "Served model versions (always 1); labels describe the "
                                       "model and the direct/efficient crossover in tokens.");
  Gauge& resident_memory = AddGauge(registry, "taylorshift_process_resident_memory_bytes",
                                    "Resident set size of the server process, in bytes.")
                               .Add({});
  Gauge& memory_limit =
      AddGauge(registry, "taylorshift_memory_limit_bytes",
               "Memory the server and its job workers may use together: the container's limit "
               "(cgroup memory.max or memory.limit_in_bytes), or the machine's memory when lower "
               "or when there is none. The memory alerts compare with it.")
          .Add({});
  Gauge& virtual_memory = AddGauge(registry, "taylorshift_process_virtual_memory_bytes",
                                   "Virtual memory size of the server process, in bytes.")
                              .Add({});
  Family<Gauge>& device_allocated =
      AddGauge(registry, "taylorshift_device_memory_allocated_bytes",
               "Bytes held by live tensors on a CUDA device (LibTorch caching allocator).");
  Family<Gauge>& device_reserved = AddGauge(registry, "taylorshift_device_memory_reserved_bytes",
                                            "Bytes reserved from a CUDA device by LibTorch's "
                                            "caching allocator, including cached free blocks.");
  Family<Gauge>& job_state =
      AddGauge(registry, "taylorshift_job_state",
               "1 for a job's current state (queued, running, succeeded, failed, cancelled), 0 for "
               "its other states; by job_id and kind.");
  Family<Counter>& jobs_total = AddCounter(registry, "taylorshift_jobs_total",
                                           "Jobs that reached a final state (succeeded, failed, "
                                           "cancelled), by kind (training, evaluation).");
  Family<Gauge>& job_loss =
      AddGauge(registry, "taylorshift_job_loss",
               "Training loss (mean cross-entropy of the last logged batch) per job_id.");
  Family<Gauge>& job_step = AddGauge(registry, "taylorshift_job_step",
                                     "Optimizer steps a training job has taken, per job_id.");
  Family<Gauge>& job_examples_per_second =
      AddGauge(registry, "taylorshift_job_examples_per_second",
               "Training examples per second since the last progress report, per job_id.");
  Family<Gauge>& job_validation_accuracy =
      AddGauge(registry, "taylorshift_job_validation_accuracy",
               "Accuracy of the latest validation run, per job_id.");
  Family<Gauge>& job_total_steps =
      AddGauge(registry, "taylorshift_job_total_steps",
               "Optimizer steps a training job runs in all (its epochs as steps), per job_id.");
  Family<Gauge>& job_progress =
      AddGauge(registry, "taylorshift_job_progress_ratio",
               "Share of its total steps a training job has taken (0..1), per job_id.");
  Family<Gauge>& job_eta = AddGauge(
      registry, "taylorshift_job_eta_seconds",
      "Seconds until a running training job's last step at its step rate over its recent progress "
      "reports (validation and checkpoints included); 0 once it succeeded; per job_id.");
  Family<Counter>& jobs_deleted =
      AddCounter(registry, "taylorshift_jobs_deleted_total",
                 "Finished jobs deleted with their files, by reason (request: DeleteJob; "
                 "retention: older than jobs.retention_s).");
  Family<Counter>& job_store_errors = AddCounter(
      registry, "taylorshift_job_store_errors_total",
      "Writes to the job store (state_dir/jobs.db) that failed, by operation (update_job, "
      "append_metric, record_checkpoint, ...); each is also logged with its job id.");
  Gauge& job_final_states_unwritten =
      AddGauge(
          registry, "taylorshift_job_final_states_unwritten",
          "Finished jobs whose final state the job store refused (a full disk) and that the server "
          "keeps in memory and writes again; a restart before they are written queues them again.")
          .Add({});
  Family<Counter>& http_responses =
      AddCounter(registry, "taylorshift_http_responses_total",
                 "Answers of the HTTP/JSON front end by status code (404, 405 and 413 included).");
  Family<Gauge>& batches_in_flight =
      AddGauge(registry, "taylorshift_batches_in_flight",
               "Batches whose forward pass is running now, per model.");
  Family<Counter>& batches_stopped =
      AddCounter(registry, "taylorshift_batches_stopped_total",
                 "Batches stopped while they ran, because every caller's deadline had passed "
                 "(deadline), every caller had cancelled (cancelled) or the shutdown grace was up "
                 "(shutdown).");
  Family<Counter>& promotion_follow_errors =
      AddCounter(registry, "taylorshift_promotion_follow_errors_total",
                 "Polls of the jobs server for a model's promoted version that failed, on a "
                 "serving replica that follows promotions, by model and reason (unavailable, rpc, "
                 "download, invalid, incompatible, load).");
  Family<Gauge>& promotion_follow_last_sync = AddGauge(
      registry, "taylorshift_promotion_follow_last_sync_timestamp_seconds",
      "Unix time of the last poll of the jobs server that found a model's version served here "
      "(unchanged, or the new one swapped in), on a serving replica that follows promotions.");
  Counter& process_cpu = AddCounter(registry, "taylorshift_process_cpu_seconds_total",
                                    "User and system CPU time of the server process, in seconds.")
                             .Add({});
  Gauge& process_start =
      AddGauge(registry, "taylorshift_process_start_time_seconds",
               "Start time of the server process since the Unix epoch, in seconds.")
          .Add({});
  Family<Gauge>& build_info =
      AddGauge(registry, "taylorshift_build_info",
               "Always 1; labels: the server's version, the LibTorch version it was built against, "
               "and whether it is the CUDA build.");
  Family<Gauge>& worker_memory = AddGauge(registry, "taylorshift_job_worker_resident_memory_bytes",
                                          "Resident set size of a running job's worker process "
                                          "(tsworker), per job_id and rank, in bytes.");
  Family<Gauge>& worker_cpu =
      AddGauge(registry, "taylorshift_job_worker_cpu_seconds",
               "User and system CPU time a running job's worker process (tsworker) has used since "
               "it started, per job_id and rank, in seconds.");
  Gauge& workers_memory =
      AddGauge(registry, "taylorshift_workers_resident_memory_bytes",
               "Resident set size of all running job worker processes (tsworker) together, in "
               "bytes; they share the server's memory limit in a container. 0 when none runs.")
          .Add({});
  Family<Gauge>& gpu_utilization =
      AddGauge(registry, "taylorshift_gpu_utilization_ratio",
               "Share of NVML's last sample period in which a kernel ran on the GPU (0..1), per "
               "gpu (NVML's index) and uuid; all processes.");
  Family<Gauge>& gpu_memory_utilization =
      AddGauge(registry, "taylorshift_gpu_memory_utilization_ratio",
               "Share of NVML's last sample period in which the GPU's memory was read or written "
               "(0..1), per gpu and uuid.");
  Family<Gauge>& gpu_memory_used =
      AddGauge(registry, "taylorshift_gpu_memory_used_bytes",
               "GPU memory in use by every process on the GPU (NVML), per gpu and uuid, in bytes.");
  Family<Gauge>& gpu_memory_total =
      AddGauge(registry, "taylorshift_gpu_memory_total_bytes",
               "GPU memory in all (NVML), per gpu and uuid, in bytes.");

  absl::Mutex cpu_mu;
  double last_cpu_seconds ABSL_GUARDED_BY(cpu_mu) = 0;
  absl::Mutex workers_mu;
  std::function<std::vector<Metrics::WorkerProcess>()> worker_source ABSL_GUARDED_BY(workers_mu);
  std::set<prometheus::Labels> worker_series ABSL_GUARDED_BY(workers_mu);
  absl::Mutex gpus_mu;
  std::function<std::vector<GpuTelemetry::Sample>()> gpu_source ABSL_GUARDED_BY(gpus_mu);
  std::set<prometheus::Labels> gpu_series ABSL_GUARDED_BY(gpus_mu);

  // A job that has series, and when they expire (InfiniteFuture: not finished, or kept).
  struct JobSeries {
    std::string kind;
    absl::Time expires = absl::InfiniteFuture();
  };
  Clock* clock = RealClock();
  absl::Duration finished_job_series = absl::Hours(1);
  absl::Mutex jobs_mu;
  std::map<std::string, JobSeries> jobs ABSL_GUARDED_BY(jobs_mu);

  absl::Mutex model_info_mu;
  // (model, version) → its taylorshift_model_info sample, so RemoveModelInfo can find it.
  std::map<std::pair<std::string, std::string>, Gauge*> model_info_gauges
      ABSL_GUARDED_BY(model_info_mu);

  std::string bound_address;
  // Last, so it is destroyed (its threads joined) first: no scrape runs during teardown.
  std::unique_ptr<HttpListener> endpoint;
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}

Metrics::~Metrics() { impl_->endpoint.reset(); }

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const std::string& listen) {
  MetricsOptions options;
  options.listen = listen;
  return Create(options);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const MetricsOptions& metrics_options) {
  std::unique_ptr<Metrics> metrics(new Metrics());
  if (metrics_options.clock != nullptr) metrics->impl_->clock = metrics_options.clock;
  metrics->impl_->finished_job_series = metrics_options.finished_job_series;
  metrics->impl_->UpdateMemory();
  if (metrics_options.listen.empty()) return metrics;

  // Memory gauges are read when scraped (no background thread): each scrape sees current
  // values, and an idle server does no work for metrics.
  Impl* impl = metrics->impl_.get();
  HttpListenerOptions options;
  options.name = "metrics endpoint";
  options.listen = metrics_options.listen;
  options.cert_file = metrics_options.cert_file;
  options.key_file = metrics_options.key_file;
  options.client_ca_file = metrics_options.client_ca_file;
  // Prometheus scrapes a target serially; every answer closes its connection, so a scraper's
  // idle keep-alive connection never holds a thread another client waits for.
  options.threads = 2;
  options.keep_alive_max_requests = 1;
  options.max_body_bytes = 16 << 10;
  TS_ASSIGN_OR_RETURN(impl->endpoint,
                      HttpListener::Start(options, [impl, authorize = metrics_options.authorize](
                                                       const HttpExchange& request) {
                        return AnswerScrape(request, authorize, [impl] {
                          impl->BeforeCollect();
                          return prometheus::TextSerializer().Serialize(impl->registry.Collect());
                        });
                      }));
  impl->bound_address = impl->endpoint->address();
  return metrics;
}

void Metrics::RecordRequest(const std::string& model, const std::string& protocol,
                            const std::string& code, double seconds) {
  impl_->requests.Add({{"model", model}, {"protocol", protocol}, {"code", code}}).Increment();
  impl_->request_duration
      .Add({{"model", model}, {"protocol", protocol}, {"code", code}}, LatencyBuckets())
      .Observe(seconds);
}

void Metrics::RecordQueue(const std::string& model, double seconds) {
  impl_->queue_duration.Add({{"model", model}}, LatencyBuckets()).Observe(seconds);
}

void Metrics::RecordBatch(const std::string& model, const std::string& path,
                          const std::string& length_bucket, std::int64_t batch_size,
                          std::int64_t batch_tokens, std::int64_t real_tokens,
                          double compute_seconds) {
  const prometheus::Labels labels = {{"model", model}, {"path", path}};
  impl_->compute_duration.Add(labels, LatencyBuckets()).Observe(compute_seconds);
  impl_->batch_size.Add(labels, PowersOfTwo(1, 1024)).Observe(static_cast<double>(batch_size));
  impl_->batch_tokens
      .Add({{"model", model}, {"path", path}, {"length_bucket", length_bucket}},
           PowersOfTwo(16, 1 << 20))
      .Observe(static_cast<double>(batch_tokens));
  const double padding =
      batch_tokens > 0
          ? std::clamp(1.0 - static_cast<double>(real_tokens) / static_cast<double>(batch_tokens),
                       0.0, 1.0)
          : 0.0;
  impl_->padding_ratio.Add(labels, RatioBuckets()).Observe(padding);
  impl_->attention_path.Add(labels).Increment();
}

void Metrics::RecordSequenceLength(const std::string& model, std::int64_t tokens) {
  impl_->sequence_length.Add({{"model", model}}, PowersOfTwo(16, 1 << 20))
      .Observe(static_cast<double>(tokens));
}

void Metrics::SetQueueDepth(const std::string& model, std::int64_t depth) {
  impl_->queue_depth.Add({{"model", model}}).Set(static_cast<double>(depth));
}

void Metrics::RecordRejected(const std::string& model, const std::string& reason) {
  impl_->rejected.Add({{"model", model}, {"reason", reason}}).Increment();
}

void Metrics::SetModelInfo(const std::string& model, const std::string& version,
                           const std::string& modality, const std::string& device,
                           const std::string& precision, std::int64_t heads, std::int64_t head_dim,
                           std::int64_t crossover_tokens) {
  absl::MutexLock lock(&impl_->model_info_mu);
  Gauge*& gauge = impl_->model_info_gauges[{model, version}];
  // Replaces an earlier sample of the same version whose other labels differed.
  if (gauge != nullptr) impl_->model_info.Remove(gauge);
  gauge = &impl_->model_info.Add({{"model", model},
                                  {"version", version},
                                  {"modality", modality},
                                  {"device", device},
                                  {"precision", precision},
                                  {"heads", absl::StrCat(heads)},
                                  {"head_dim", absl::StrCat(head_dim)},
                                  {"crossover_tokens", absl::StrCat(crossover_tokens)}});
  gauge->Set(1);
}

void Metrics::SetJobState(const std::string& job_id, const std::string& kind,
                          const std::string& state, std::optional<absl::Time> finished) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.jobs_mu);
  Impl::JobSeries& job = m.jobs[job_id];
  job.kind = kind;
  job.expires = absl::InfiniteFuture();
  if (IsFinalState(state) && m.finished_job_series > absl::ZeroDuration()) {
    const absl::Time now = m.clock->Now();
    job.expires = finished.value_or(now) + m.finished_job_series;
    if (job.expires <= now) {
      m.RemoveJobSeries(job_id, kind);
      m.jobs.erase(job_id);
      return;
    }
  }
  for (const char* s : kJobStates) {
    m.job_state.Add({{"job_id", job_id}, {"kind", kind}, {"state", s}}).Set(state == s ? 1.0 : 0.0);
  }
  // Only a running job has time left; one that succeeded has none.
  const prometheus::Labels labels = {{"job_id", job_id}};
  if (state == "succeeded" && m.job_eta.Has(labels)) {
    m.job_eta.Add(labels).Set(0);
  } else if (state != "running" && state != "succeeded") {
    RemoveSeries(m.job_eta, labels);
  }
}

void Metrics::RecordJobFinished(const std::string& kind, const std::string& state) {
  impl_->jobs_total.Add({{"kind", kind}, {"state", state}}).Increment();
}

void Metrics::SetJobTotalSteps(const std::string& job_id, std::int64_t total_steps,
                               std::int64_t step) {
  if (total_steps <= 0) return;
  Impl& m = *impl_;
  const prometheus::Labels labels = {{"job_id", job_id}};
  absl::MutexLock lock(&m.jobs_mu);
  // The workers (re)started: the ETA is unknown until their first two reports.
  RemoveSeries(m.job_eta, labels);
  m.job_total_steps.Add(labels).Set(static_cast<double>(total_steps));
  m.job_progress.Add(labels).Set(
      std::clamp(static_cast<double>(step) / static_cast<double>(total_steps), 0.0, 1.0));
}

void Metrics::SetJobProgress(const std::string& job_id, const JobProgressSample& progress) {
  Impl& m = *impl_;
  const prometheus::Labels labels = {{"job_id", job_id}};
  absl::MutexLock lock(&m.jobs_mu);
  m.job_step.Add(labels).Set(static_cast<double>(progress.step));
  m.job_loss.Add(labels).Set(progress.loss);
  m.job_examples_per_second.Add(labels).Set(progress.examples_per_second);
  if (progress.total_steps > 0) {
    const auto total = static_cast<double>(progress.total_steps);
    m.job_total_steps.Add(labels).Set(total);
    m.job_progress.Add(labels).Set(
        std::clamp(static_cast<double>(progress.step) / total, 0.0, 1.0));
  }
  if (progress.eta_seconds >= 0) m.job_eta.Add(labels).Set(progress.eta_seconds);
}

void Metrics::SetJobValidationAccuracy(const std::string& job_id, double accuracy) {
  absl::MutexLock lock(&impl_->jobs_mu);
  impl_->job_validation_accuracy.Add({{"job_id", job_id}}).Set(accuracy);
}

void Metrics::RemoveJob(const std::string& job_id, const std::string& kind,
                        const std::string& reason) {
  Impl& m = *impl_;
  {
    absl::MutexLock lock(&m.jobs_mu);
    m.RemoveJobSeries(job_id, kind);
    if (const auto it = m.jobs.find(job_id); it != m.jobs.end()) {
      if (it->second.kind != kind) m.RemoveJobSeries(job_id, it->second.kind);
      m.jobs.erase(it);
    }
  }
  m.jobs_deleted.Add({{"reason", reason}}).Increment();
}

void Metrics::RecordJobStoreError(const std::string& operation) {
  impl_->job_store_errors.Add({{"operation", operation}}).Increment();
}

void Metrics::SetJobFinalStatesUnwritten(std::int64_t jobs) {
  impl_->job_final_states_unwritten.Set(static_cast<double>(jobs));
}

void Metrics::RecordHttpResponse(int status) {
  impl_->http_responses.Add({{"code", absl::StrCat(status)}}).Increment();
}

void Metrics::AddBatchesInFlight(const std::string& model, int delta) {
  impl_->batches_in_flight.Add({{"model", model}}).Increment(delta);
}

void Metrics::RecordBatchStopped(const std::string& model, const std::string& reason) {
  impl_->batches_stopped.Add({{"model", model}, {"reason", reason}}).Increment();
}

void Metrics::RecordPromotionFollowError(const std::string& model, const std::string& reason) {
  impl_->promotion_follow_errors.Add({{"model", model}, {"reason", reason}}).Increment();
}

void Metrics::SetPromotionFollowLastSync(const std::string& model, double unix_seconds) {
  impl_->promotion_follow_last_sync.Add({{"model", model}}).Set(unix_seconds);
}

void Metrics::SetWorkerSource(std::function<std::vector<WorkerProcess>()> source) {
  absl::MutexLock lock(&impl_->workers_mu);
  impl_->worker_source = std::move(source);
}

void Metrics::SetGpuSource(std::function<std::vector<GpuTelemetry::Sample>()> source) {
  absl::MutexLock lock(&impl_->gpus_mu);
  impl_->gpu_source = std::move(source);
}

void Metrics::RemoveModelInfo(const std::string& model, const std::string& version) {
  absl::MutexLock lock(&impl_->model_info_mu);
  const auto it = impl_->model_info_gauges.find({model, version});
  if (it == impl_->model_info_gauges.end()) return;
  impl_->model_info.Remove(it->second);
  impl_->model_info_gauges.erase(it);
}

std::string Metrics::Serialize() const {
  // Like a scrape: memory gauges are current, expired job series gone.
  impl_->BeforeCollect();
  return prometheus::TextSerializer().Serialize(impl_->registry.Collect());
}

std::string Metrics::bound_address() const { return impl_->bound_address; }

}  // namespace ts::server

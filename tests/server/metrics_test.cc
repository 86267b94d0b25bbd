#include "server/metrics.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "tests/testing/fake_clock.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::StartsWith;
using Labels = std::map<std::string, std::string>;

// One sample line of the text exposition format.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

std::vector<Sample> ParseSamples(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    std::size_t pos = line.find_first_of("{ ");
    sample.name = line.substr(0, pos);
    if (pos != std::string::npos && line[pos] == '{') {
      ++pos;
      while (pos < line.size() && line[pos] != '}') {
        const std::size_t equals = line.find('=', pos);
        const std::string key = line.substr(pos, equals - pos);
        std::string value;
        pos = equals + 2;  // skip ="
        while (pos < line.size() && line[pos] != '"') {
          if (line[pos] == '\\') ++pos;
          value += line[pos++];
        }
        sample.labels[key] = value;
        pos += 1;  // closing quote
        if (pos < line.size() && line[pos] == ',') ++pos;
      }
      ++pos;  // '}'
    }
    const std::string value = line.substr(line.find_first_not_of(' ', pos));
    const std::string number = value.substr(0, value.find(' '));  // drop a timestamp
    sample.value = number == "+Inf" ? INFINITY : std::strtod(number.c_str(), nullptr);
    samples.push_back(std::move(sample));
  }
  return samples;
}

// The value of the sample `name{labels}`, if present.
std::optional<double> Value(const std::string& text, const std::string& name,
                            const Labels& labels) {
  for (const Sample& sample : ParseSamples(text)) {
    if (sample.name == name && sample.labels == labels) return sample.value;
  }
  return std::nullopt;
}

// The cumulative count of histogram `name{labels}` in the bucket whose upper bound is `le`.
std::optional<double> BucketCount(const std::string& text, const std::string& name,
                                  const Labels& labels, double le) {
  for (const Sample& sample : ParseSamples(text)) {
    if (sample.name != name + "_bucket") continue;
    Labels without_le = sample.labels;
    const auto bound = without_le.find("le");
    if (bound == without_le.end()) continue;
    const double sample_le = bound->second == "+Inf" ? INFINITY : std::stod(bound->second);
    without_le.erase(bound);
    const bool same_bound =
        std::isinf(le) ? std::isinf(sample_le) : std::fabs(sample_le - le) <= 1e-9 * le;
    if (without_le == labels && same_bound) {
      return sample.value;
    }
  }
  return std::nullopt;
}

std::vector<double> BucketBounds(const std::string& text, const std::string& name,
                                 const Labels& labels) {
  std::vector<double> bounds;
  for (const Sample& sample : ParseSamples(text)) {
    if (sample.name != name + "_bucket") continue;
    Labels without_le = sample.labels;
    const std::string le = without_le["le"];
    without_le.erase("le");
    if (without_le == labels) bounds.push_back(le == "+Inf" ? INFINITY : std::stod(le));
  }
  return bounds;
}

// Names from the "# TYPE name kind" lines.
std::set<std::string> FamilyNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() >= 3) names.insert(words[2]);
  }
  return names;
}

std::unique_ptr<Metrics> RegistryOnly() {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create("");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? std::move(*metrics) : nullptr;
}

// Records one of everything, so every family has a sample.
void RecordEverything(Metrics& metrics) {
  metrics.RecordRequest("listops", "grpc", "OK", 0.004);
  metrics.RecordQueue("listops", 0.001);
  metrics.RecordBatch("listops", "direct", "128", 4, 512, 400, 0.002);
  metrics.RecordSequenceLength("listops", 100);
  metrics.SetQueueDepth("listops", 3);
  metrics.RecordRejected("listops", "queue_full");
  metrics.SetModelInfo("listops", "1", "tokens", "cpu", "fp32", 4, 16, 900);
}

const std::vector<std::string>& AllFamilies() {
  static const std::vector<std::string> names = {
      "taylorshift_requests_total",
      "taylorshift_request_duration_seconds",
      "taylorshift_queue_duration_seconds",
      "taylorshift_compute_duration_seconds",
      "taylorshift_batch_size",
      "taylorshift_batch_tokens",
      "taylorshift_padding_ratio",
      "taylorshift_sequence_length",
      "taylorshift_attention_path_total",
      "taylorshift_queue_depth",
      "taylorshift_rejected_total",
      "taylorshift_model_info",
      "taylorshift_process_resident_memory_bytes",
      "taylorshift_process_virtual_memory_bytes",
  };
  return names;
}

TEST(MetricsTest, RequestsCountByModelProtocolAndCodeWithLatencyHistogram) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->RecordRequest("listops", "grpc", "OK", 0.003);
  metrics->RecordRequest("listops", "grpc", "OK", 0.004);
  metrics->RecordRequest("listops", "grpc", "NOT_FOUND", 0.2);
  metrics->RecordRequest("listops", "v2_rest", "OK", 1.5);
  metrics->RecordRequest("imdb", "grpc", "OK", 70);
  const std::string text = metrics->Serialize();

  EXPECT_EQ(Value(text, "taylorshift_requests_total",
                  {{"model", "listops"}, {"protocol", "grpc"}, {"code", "OK"}}),
            2);
  EXPECT_EQ(Value(text, "taylorshift_requests_total",
                  {{"model", "listops"}, {"protocol", "grpc"}, {"code", "NOT_FOUND"}}),
            1);
  EXPECT_EQ(Value(text, "taylorshift_requests_total",
                  {{"model", "imdb"}, {"protocol", "grpc"}, {"code", "OK"}}),
            1);

  // Latency has the same labels as the count: by protocol and code as well as model.
  const std::string duration = "taylorshift_request_duration_seconds";
  const Labels listops = {{"model", "listops"}, {"protocol", "grpc"}, {"code", "OK"}};
  EXPECT_EQ(Value(text, duration + "_count", listops), 2);
  EXPECT_NEAR(*Value(text, duration + "_sum", listops), 0.007, 1e-9);
  EXPECT_EQ(BucketCount(text, duration, listops, 0.0025), 0);
  EXPECT_EQ(BucketCount(text, duration, listops, 0.005), 2);
  EXPECT_EQ(BucketCount(text, duration, listops, INFINITY), 2);
  const Labels not_found = {{"model", "listops"}, {"protocol", "grpc"}, {"code", "NOT_FOUND"}};
  EXPECT_EQ(BucketCount(text, duration, not_found, 0.1), 0);
  EXPECT_EQ(BucketCount(text, duration, not_found, 0.25), 1);
  const Labels rest = {{"model", "listops"}, {"protocol", "v2_rest"}, {"code", "OK"}};
  EXPECT_EQ(BucketCount(text, duration, rest, 1), 0);
  EXPECT_EQ(BucketCount(text, duration, rest, 2.5), 1);
  EXPECT_FALSE(Value(text, duration + "_count", {{"model", "listops"}}).has_value());
  // 70 s is past the last finite bucket (60 s): only +Inf counts it.
  const Labels imdb = {{"model", "imdb"}, {"protocol", "grpc"}, {"code", "OK"}};
  EXPECT_EQ(BucketCount(text, duration, imdb, 60), 0);
  EXPECT_EQ(BucketCount(text, duration, imdb, INFINITY), 1);

  const std::vector<double> bounds = BucketBounds(text, duration, listops);
  ASSERT_FALSE(bounds.empty());
  EXPECT_DOUBLE_EQ(bounds.front(), 0.0005);
  ASSERT_GE(bounds.size(), 2u);
  EXPECT_DOUBLE_EQ(bounds[bounds.size() - 2], 60);
}

TEST(MetricsTest, QueueDurationHistogram) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->RecordQueue("listops", 0.0004);
  metrics->RecordQueue("listops", 0.02);
  const std::string text = metrics->Serialize();
  const std::string name = "taylorshift_queue_duration_seconds";
  EXPECT_EQ(Value(text, name + "_count", {{"model", "listops"}}), 2);
  EXPECT_EQ(BucketCount(text, name, {{"model", "listops"}}, 0.0005), 1);
  EXPECT_EQ(BucketCount(text, name, {{"model", "listops"}}, 0.01), 1);
  EXPECT_EQ(BucketCount(text, name, {{"model", "listops"}}, 0.025), 2);
}

TEST(MetricsTest, BatchFeedsSizeTokensPaddingComputeAndPath) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  // 8 requests padded to 1024 tokens, 6144 of the 8192 real: 25% padding.
  metrics->RecordBatch("imdb", "efficient", "1024", 8, 8192, 6144, 0.05);
  metrics->RecordBatch("imdb", "efficient", "1024", 2, 2048, 2048, 0.01);
  metrics->RecordBatch("imdb", "direct", "64", 1, 64, 16, 0.001);
  const std::string text = metrics->Serialize();
  const Labels efficient = {{"model", "imdb"}, {"path", "efficient"}};
  const Labels direct = {{"model", "imdb"}, {"path", "direct"}};

  EXPECT_EQ(Value(text, "taylorshift_attention_path_total", efficient), 2);
  EXPECT_EQ(Value(text, "taylorshift_attention_path_total", direct), 1);

  EXPECT_EQ(Value(text, "taylorshift_compute_duration_seconds_count", efficient), 2);
  EXPECT_NEAR(*Value(text, "taylorshift_compute_duration_seconds_sum", efficient), 0.06, 1e-12);

  EXPECT_EQ(BucketCount(text, "taylorshift_batch_size", efficient, 1), 0);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_size", efficient, 2), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_size", efficient, 4), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_size", efficient, 8), 2);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_size", direct, 1), 1);
  const std::vector<double> size_bounds = BucketBounds(text, "taylorshift_batch_size", direct);
  ASSERT_EQ(size_bounds.size(), 12u);  // 1, 2, …, 1024, +Inf
  EXPECT_EQ(size_bounds[10], 1024);

  const Labels bucket_1024 = {{"model", "imdb"}, {"path", "efficient"}, {"length_bucket", "1024"}};
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_tokens", bucket_1024, 1024), 0);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_tokens", bucket_1024, 2048), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_batch_tokens", bucket_1024, 8192), 2);
  EXPECT_EQ(Value(text, "taylorshift_batch_tokens_sum", bucket_1024), 10240);
  const Labels bucket_64 = {{"model", "imdb"}, {"path", "direct"}, {"length_bucket", "64"}};
  EXPECT_EQ(Value(text, "taylorshift_batch_tokens_count", bucket_64), 1);
  const std::vector<double> token_bounds =
      BucketBounds(text, "taylorshift_batch_tokens", bucket_64);
  ASSERT_GE(token_bounds.size(), 2u);
  EXPECT_EQ(token_bounds.front(), 16);
  EXPECT_EQ(token_bounds[token_bounds.size() - 2], 1 << 20);

  EXPECT_NEAR(*Value(text, "taylorshift_padding_ratio_sum", efficient), 0.25, 1e-12);
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", efficient, 0.05), 1);  // the 0
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", efficient, 0.2), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", efficient, 0.25), 2);
  EXPECT_NEAR(*Value(text, "taylorshift_padding_ratio_sum", direct), 0.75, 1e-12);
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", direct, 0.7), 0);
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", direct, 0.75), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_padding_ratio", direct, 1), 1);
}

TEST(MetricsTest, SequenceLengthHistogram) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->RecordSequenceLength("listops", 10);
  metrics->RecordSequenceLength("listops", 2000);
  metrics->RecordSequenceLength("listops", 2 << 20);
  const std::string text = metrics->Serialize();
  const Labels labels = {{"model", "listops"}};
  EXPECT_EQ(Value(text, "taylorshift_sequence_length_count", labels), 3);
  EXPECT_EQ(BucketCount(text, "taylorshift_sequence_length", labels, 16), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_sequence_length", labels, 1024), 1);
  EXPECT_EQ(BucketCount(text, "taylorshift_sequence_length", labels, 2048), 2);
  EXPECT_EQ(BucketCount(text, "taylorshift_sequence_length", labels, 1 << 20), 2);
  EXPECT_EQ(BucketCount(text, "taylorshift_sequence_length", labels, INFINITY), 3);
}

TEST(MetricsTest, QueueDepthIsTheLatestValue) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->SetQueueDepth("listops", 7);
  metrics->SetQueueDepth("listops", 2);
  metrics->SetQueueDepth("imdb", 0);
  const std::string text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_queue_depth", {{"model", "listops"}}), 2);
  EXPECT_EQ(Value(text, "taylorshift_queue_depth", {{"model", "imdb"}}), 0);
}

TEST(MetricsTest, RejectedCountsByReason) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->RecordRejected("listops", "queue_full");
  metrics->RecordRejected("listops", "queue_full");
  metrics->RecordRejected("listops", "deadline_exceeded");
  const std::string text = metrics->Serialize();
  EXPECT_EQ(
      Value(text, "taylorshift_rejected_total", {{"model", "listops"}, {"reason", "queue_full"}}),
      2);
  EXPECT_EQ(Value(text, "taylorshift_rejected_total",
                  {{"model", "listops"}, {"reason", "deadline_exceeded"}}),
            1);
}

TEST(MetricsTest, ModelInfoIsSetReplacedAndRemoved) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  metrics->SetModelInfo("listops", "3", "tokens", "cuda:0", "bf16", 8, 32, 1500);
  metrics->SetModelInfo("cifar", "1", "pixels", "cpu", "fp32", 4, 16, 700);
  const Labels listops_v3 = {{"model", "listops"},   {"version", "3"},
                             {"modality", "tokens"}, {"device", "cuda:0"},
                             {"precision", "bf16"},  {"heads", "8"},
                             {"head_dim", "32"},     {"crossover_tokens", "1500"}};
  std::string text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_model_info", listops_v3), 1);

  // Re-calibrated: the same version with a new crossover replaces the old sample.
  metrics->SetModelInfo("listops", "3", "tokens", "cuda:0", "bf16", 8, 32, 1200);
  text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_model_info", listops_v3), std::nullopt);
  Labels recalibrated = listops_v3;
  recalibrated["crossover_tokens"] = "1200";
  EXPECT_EQ(Value(text, "taylorshift_model_info", recalibrated), 1);

  metrics->RemoveModelInfo("listops", "3");
  metrics->RemoveModelInfo("listops", "never-served");  // no-op
  text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_model_info", recalibrated), std::nullopt);
  EXPECT_EQ(Value(text, "taylorshift_model_info",
                  {{"model", "cifar"},
                   {"version", "1"},
                   {"modality", "pixels"},
                   {"device", "cpu"},
                   {"precision", "fp32"},
                   {"heads", "4"},
                   {"head_dim", "16"},
                   {"crossover_tokens", "700"}}),
            1);
}

TEST(MetricsTest, ProcessMemoryIsReported) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  const std::string text = metrics->Serialize();
  const std::optional<double> resident =
      Value(text, "taylorshift_process_resident_memory_bytes", {});
  const std::optional<double> virtual_bytes =
      Value(text, "taylorshift_process_virtual_memory_bytes", {});
  ASSERT_TRUE(resident.has_value());
  ASSERT_TRUE(virtual_bytes.has_value());
  EXPECT_GT(*resident, 1 << 20);  // a process linked against LibTorch is well over 1 MiB
  EXPECT_GE(*virtual_bytes, *resident);

  // Reflects allocations made after Create (Serialize refreshes, as a scrape does).
  std::vector<char> block(64 << 20, 1);
  const std::optional<double> grown =
      Value(metrics->Serialize(), "taylorshift_process_resident_memory_bytes", {});
  EXPECT_GE(*grown, *resident + (32 << 20)) << static_cast<int>(block[block.size() / 2]);
}

// What a Grafana user looks for besides the requests: zero series for job-store errors from
// the start, the process's CPU time and start time, the build, HTTP answers by code, batches in
// flight, and the job workers' memory and CPU (here this process stands in for a worker).
TEST(MetricsTest, ProcessBuildHttpBatchAndWorkerSeries) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  std::string text = metrics->Serialize();
  for (const char* operation : {"create_job", "update_job", "append_metric", "record_promotion"}) {
    EXPECT_EQ(Value(text, "taylorshift_job_store_errors_total", {{"operation", operation}}), 0)
        << operation;
  }
  const double now = static_cast<double>(std::time(nullptr));
  const auto start = Value(text, "taylorshift_process_start_time_seconds", {});
  ASSERT_TRUE(start.has_value());
  EXPECT_GT(*start, now - 86400);
  EXPECT_LE(*start, now + 1);
  volatile double sink = 0;
  for (int i = 0; i < 50000000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  text = metrics->Serialize();
  EXPECT_GT(Value(text, "taylorshift_process_cpu_seconds_total", {}).value_or(0), 0.01);
  EXPECT_THAT(text, HasSubstr("taylorshift_build_info{"));
  EXPECT_THAT(text, HasSubstr("version=\""));

  metrics->RecordHttpResponse(404);
  metrics->RecordHttpResponse(404);
  metrics->RecordHttpResponse(413);
  metrics->AddBatchesInFlight("m", 1);
  metrics->AddBatchesInFlight("m", 1);
  metrics->AddBatchesInFlight("m", -1);
  text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_http_responses_total", {{"code", "404"}}), 2);
  EXPECT_EQ(Value(text, "taylorshift_http_responses_total", {{"code", "413"}}), 1);
  EXPECT_EQ(Value(text, "taylorshift_batches_in_flight", {{"model", "m"}}), 1);

  metrics->RecordBatchStopped("m", "deadline");
  metrics->RecordBatchStopped("m", "deadline");
  metrics->RecordBatchStopped("m", "shutdown");
  text = metrics->Serialize();
  EXPECT_EQ(
      Value(text, "taylorshift_batches_stopped_total", {{"model", "m"}, {"reason", "deadline"}}),
      2);
  EXPECT_EQ(
      Value(text, "taylorshift_batches_stopped_total", {{"model", "m"}, {"reason", "shutdown"}}),
      1);

  // No worker yet: the workers' total is 0, not absent (the memory alert adds it).
  EXPECT_EQ(Value(text, "taylorshift_workers_resident_memory_bytes", {}), 0);
  // Two ranks (this process stands in for both) and a pid that is gone.
  std::vector<Metrics::WorkerProcess> workers = {{"job-7", 0, static_cast<int>(getpid())},
                                                 {"job-7", 1, static_cast<int>(getpid())},
                                                 {"job-8", 0, 0x7ffffff0}};
  metrics->SetWorkerSource([&workers] { return workers; });
  text = metrics->Serialize();
  const Labels worker = {{"job_id", "job-7"}, {"rank", "0"}};
  const double rank0 =
      Value(text, "taylorshift_job_worker_resident_memory_bytes", worker).value_or(0);
  const double rank1 = Value(text, "taylorshift_job_worker_resident_memory_bytes",
                             {{"job_id", "job-7"}, {"rank", "1"}})
                           .value_or(0);
  EXPECT_GT(rank0, 1 << 20);
  EXPECT_GT(Value(text, "taylorshift_job_worker_cpu_seconds", worker).value_or(0), 0.01);
  EXPECT_EQ(Value(text, "taylorshift_workers_resident_memory_bytes", {}), rank0 + rank1);
  workers.clear();  // the job ended: its series go, and the total is 0 again
  text = metrics->Serialize();
  EXPECT_FALSE(Value(text, "taylorshift_job_worker_resident_memory_bytes", worker).has_value());
  EXPECT_EQ(Value(text, "taylorshift_workers_resident_memory_bytes", {}), 0);
  metrics->SetWorkerSource(nullptr);
}

// Every family that carries a job_id, for the expiry and deletion tests.
const std::vector<std::string>& JobFamilies() {
  static const std::vector<std::string> names = {
      "taylorshift_job_state",       "taylorshift_job_step",
      "taylorshift_job_loss",        "taylorshift_job_examples_per_second",
      "taylorshift_job_total_steps", "taylorshift_job_progress_ratio",
      "taylorshift_job_eta_seconds", "taylorshift_job_validation_accuracy",
  };
  return names;
}

// The job-family names that have a sample of job `id`.
std::set<std::string> FamiliesOfJob(const std::string& text, const std::string& id) {
  std::set<std::string> names;
  for (const Sample& sample : ParseSamples(text)) {
    const auto it = sample.labels.find("job_id");
    if (it != sample.labels.end() && it->second == id) names.insert(sample.name);
  }
  return names;
}

// A training job with a value in every job family, left in `state`.
void RecordTrainingJob(Metrics& metrics, const std::string& id, const std::string& state) {
  metrics.SetJobState(id, "training", "queued");
  metrics.SetJobState(id, "training", "running");
  metrics.SetJobTotalSteps(id, 100, 0);
  JobProgressSample progress;
  progress.step = 40;
  progress.total_steps = 100;
  progress.loss = 0.5;
  progress.examples_per_second = 300;
  progress.eta_seconds = 12;
  metrics.SetJobProgress(id, progress);
  metrics.SetJobValidationAccuracy(id, 0.75);
  if (state != "running") metrics.SetJobState(id, "training", state);
}

TEST(MetricsTest, JobProgressTotalRatioAndEta) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  const Labels job = {{"job_id", "job-1"}};
  metrics->SetJobState("job-1", "training", "running");
  // A resumed job starts at its resume step.
  metrics->SetJobTotalSteps("job-1", 200, 50);
  std::string text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_job_total_steps", job), 200);
  EXPECT_EQ(Value(text, "taylorshift_job_progress_ratio", job), 0.25);
  EXPECT_FALSE(Value(text, "taylorshift_job_eta_seconds", job).has_value());
  JobProgressSample progress;
  progress.step = 150;
  progress.total_steps = 200;
  progress.loss = 1.25;
  progress.examples_per_second = 64;
  metrics->SetJobProgress("job-1", progress);  // ETA not known yet: none
  text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_job_step", job), 150);
  EXPECT_EQ(Value(text, "taylorshift_job_progress_ratio", job), 0.75);
  EXPECT_FALSE(Value(text, "taylorshift_job_eta_seconds", job).has_value());
  progress.eta_seconds = 30;
  metrics->SetJobProgress("job-1", progress);
  EXPECT_EQ(Value(metrics->Serialize(), "taylorshift_job_eta_seconds", job), 30);
  // Succeeded: nothing is left to wait for.
  metrics->SetJobState("job-1", "training", "succeeded");
  EXPECT_EQ(Value(metrics->Serialize(), "taylorshift_job_eta_seconds", job), 0);
  // Failed or cancelled: no ETA (the job will not get there), the rest stays.
  RecordTrainingJob(*metrics, "job-2", "cancelled");
  text = metrics->Serialize();
  EXPECT_FALSE(Value(text, "taylorshift_job_eta_seconds", {{"job_id", "job-2"}}).has_value());
  EXPECT_EQ(Value(text, "taylorshift_job_progress_ratio", {{"job_id", "job-2"}}), 0.4);
  // An evaluation job has no steps: nothing.
  metrics->SetJobTotalSteps("job-3", 0, 0);
  EXPECT_TRUE(FamiliesOfJob(metrics->Serialize(), "job-3").empty());
}

TEST(MetricsTest, DeletedJobLeavesNoSeries) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  RecordTrainingJob(*metrics, "job-1", "succeeded");
  RecordTrainingJob(*metrics, "job-2", "running");
  std::string text = metrics->Serialize();
  ASSERT_EQ(FamiliesOfJob(text, "job-1"),
            std::set<std::string>(JobFamilies().begin(), JobFamilies().end()));
  metrics->RemoveJob("job-1", "training", "request");
  text = metrics->Serialize();
  EXPECT_EQ(FamiliesOfJob(text, "job-1"), std::set<std::string>());
  EXPECT_EQ(FamiliesOfJob(text, "job-2").size(), JobFamilies().size());
  EXPECT_EQ(Value(text, "taylorshift_jobs_deleted_total", {{"reason", "request"}}), 1);
}

TEST(MetricsTest, FinishedJobSeriesExpire) {
  ts::testing::FakeClock clock;
  MetricsOptions options;
  options.finished_job_series = absl::Seconds(60);
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<Metrics>> created = Metrics::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  Metrics& metrics = **created;
  RecordTrainingJob(metrics, "done", "succeeded");
  RecordTrainingJob(metrics, "failed", "failed");
  RecordTrainingJob(metrics, "running", "running");
  clock.Advance(absl::Seconds(30));
  RecordTrainingJob(metrics, "later", "cancelled");
  metrics.RecordJobFinished("training", "succeeded");
  clock.Advance(absl::Seconds(29));
  std::string text = metrics.Serialize();
  for (const char* id : {"done", "failed", "running", "later"}) {
    EXPECT_FALSE(FamiliesOfJob(text, id).empty()) << id;
  }
  // 60 s after they finished, the first two jobs' series are gone, every family of them.
  clock.Advance(absl::Seconds(1));
  text = metrics.Serialize();
  EXPECT_EQ(FamiliesOfJob(text, "done"), std::set<std::string>());
  EXPECT_EQ(FamiliesOfJob(text, "failed"), std::set<std::string>());
  EXPECT_EQ(FamiliesOfJob(text, "running").size(), JobFamilies().size());
  EXPECT_EQ(Value(text, "taylorshift_job_state",
                  {{"job_id", "later"}, {"kind", "training"}, {"state", "cancelled"}}),
            1);
  // Counters without a job_id stay.
  EXPECT_EQ(Value(text, "taylorshift_jobs_total", {{"kind", "training"}, {"state", "succeeded"}}),
            1);
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(FamiliesOfJob(metrics.Serialize(), "later"), std::set<std::string>());
  // A job that runs again (a retry queues it) is not expired by its earlier end; its new end
  // starts the time again.
  RecordTrainingJob(metrics, "retried", "failed");
  clock.Advance(absl::Seconds(50));
  metrics.SetJobState("retried", "training", "queued");
  clock.Advance(absl::Seconds(50));
  EXPECT_FALSE(FamiliesOfJob(metrics.Serialize(), "retried").empty());
  // At a start, a job that ended longer ago gets no series; one that ended since, the rest.
  metrics.SetJobState("old", "training", "succeeded", clock.Now() - absl::Seconds(61));
  metrics.SetJobState("recent", "evaluation", "succeeded", clock.Now() - absl::Seconds(50));
  text = metrics.Serialize();
  EXPECT_EQ(FamiliesOfJob(text, "old"), std::set<std::string>());
  EXPECT_EQ(Value(text, "taylorshift_job_state",
                  {{"job_id", "recent"}, {"kind", "evaluation"}, {"state", "succeeded"}}),
            1);
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(FamiliesOfJob(metrics.Serialize(), "recent"), std::set<std::string>());
}

TEST(MetricsTest, FinishedJobSeriesStayWithoutExpiry) {
  ts::testing::FakeClock clock;
  MetricsOptions options;
  options.finished_job_series = absl::ZeroDuration();
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<Metrics>> created = Metrics::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  RecordTrainingJob(**created, "done", "succeeded");
  clock.Advance(absl::Hours(24 * 365));
  EXPECT_EQ(FamiliesOfJob((*created)->Serialize(), "done").size(), JobFamilies().size());
}

TEST(MetricsTest, GpuGaugesFollowTheGpusTheSourceReports) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  EXPECT_THAT(metrics->Serialize(),
              ::testing::Not(HasSubstr("taylorshift_gpu_utilization_ratio{")));
  GpuTelemetry::Sample first;
  first.index = 0;
  first.uuid = "GPU-a";
  first.utilization = 0.25;
  first.memory_utilization = 0.5;
  first.memory_used_bytes = 3 << 20;
  first.memory_total_bytes = 80ULL << 30;
  GpuTelemetry::Sample second = first;
  second.index = 1;
  second.uuid = "GPU-b";
  second.utilization = 1;
  std::vector<GpuTelemetry::Sample> gpus = {first, second};
  metrics->SetGpuSource([&gpus] { return gpus; });
  std::string text = metrics->Serialize();
  const Labels a = {{"gpu", "0"}, {"uuid", "GPU-a"}};
  const Labels b = {{"gpu", "1"}, {"uuid", "GPU-b"}};
  EXPECT_EQ(Value(text, "taylorshift_gpu_utilization_ratio", a), 0.25);
  EXPECT_EQ(Value(text, "taylorshift_gpu_memory_utilization_ratio", a), 0.5);
  EXPECT_EQ(Value(text, "taylorshift_gpu_memory_used_bytes", a), 3 << 20);
  EXPECT_EQ(Value(text, "taylorshift_gpu_memory_total_bytes", a), static_cast<double>(80ULL << 30));
  EXPECT_EQ(Value(text, "taylorshift_gpu_utilization_ratio", b), 1);
  gpus.pop_back();  // the second GPU stopped answering: its series go, none is left stale
  text = metrics->Serialize();
  EXPECT_TRUE(Value(text, "taylorshift_gpu_utilization_ratio", a).has_value());
  EXPECT_FALSE(Value(text, "taylorshift_gpu_utilization_ratio", b).has_value());
  EXPECT_FALSE(Value(text, "taylorshift_gpu_memory_total_bytes", b).has_value());
  metrics->SetGpuSource(nullptr);
}

TEST(MetricsTest, DeviceMemoryGaugesCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  const std::string text = metrics->Serialize();
  const auto devices = static_cast<std::size_t>(torch::cuda::device_count());
  for (std::size_t i = 0; i < devices; ++i) {
    const Labels labels = {{"device", absl::StrCat("cuda:", i)}};
    EXPECT_TRUE(Value(text, "taylorshift_device_memory_allocated_bytes", labels).has_value());
    EXPECT_TRUE(Value(text, "taylorshift_device_memory_reserved_bytes", labels).has_value());
  }
}

TEST(MetricsTest, ConcurrentRecordingIsCounted) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < 500; ++i) {
        metrics->RecordRequest(absl::StrCat("m", t % 2), "grpc", "OK", 0.001);
        if (i % 100 == 0) metrics->Serialize();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = metrics->Serialize();
  EXPECT_EQ(Value(text, "taylorshift_requests_total",
                  {{"model", "m0"}, {"protocol", "grpc"}, {"code", "OK"}}),
            1000);
  EXPECT_EQ(Value(text, "taylorshift_requests_total",
                  {{"model", "m1"}, {"protocol", "grpc"}, {"code", "OK"}}),
            1000);
}

TEST(MetricsTest, RegistryOnlyHasNoAddress) {
  std::unique_ptr<Metrics> metrics = RegistryOnly();
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(metrics->bound_address(), "");
}

// ---------------------------------------------------------------------------------------------
// The HTTP endpoint.

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://127.0.0.1:port/path over HTTP/1.0 (the server closes after the response).
// Every socket operation is bounded by a 5 s timeout.
std::optional<HttpResponse> HttpGet(int port, const std::string& path, std::string* error,
                                    const std::string& authorization = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    *error = "socket() failed";
    return std::nullopt;
  }
  timeval timeout{};
  timeout.tv_sec = 5;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    *error = absl::StrCat("connect to 127.0.0.1:", port, " failed");
    close(fd);
    return std::nullopt;
  }
  const std::string request = absl::StrCat(
      "GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n",
      authorization.empty() ? "" : absl::StrCat("Authorization: ", authorization, "\r\n"), "\r\n");
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    *error = "send failed";
    close(fd);
    return std::nullopt;
  }
  std::string raw;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0) {
      *error = "recv failed or timed out";
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  const std::size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) {
    *error = absl::StrCat("not an HTTP response: ", raw.substr(0, 200));
    return std::nullopt;
  }
  HttpResponse response;
  response.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  response.body = raw.substr(header_end + 4);
  return response;
}

int PortOf(const std::string& address) {
  int port = 0;
  const bool parsed = absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  return parsed ? port : 0;
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create("127.0.0.1:0");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    RecordEverything(*metrics_);
  }

  std::string Scrape() {
    std::string error;
    std::optional<HttpResponse> response =
        HttpGet(PortOf(metrics_->bound_address()), "/metrics", &error);
    EXPECT_TRUE(response.has_value()) << error;
    if (!response.has_value()) return "";
    EXPECT_EQ(response->status, 200);
    return response->body;
  }

  std::unique_ptr<Metrics> metrics_;
};

TEST_F(MetricsEndpointTest, BindsAFreeLoopbackPort) {
  EXPECT_THAT(metrics_->bound_address(), StartsWith("127.0.0.1:"));
  EXPECT_GT(PortOf(metrics_->bound_address()), 0);
}

TEST_F(MetricsEndpointTest, ServesTheSameFamiliesAsSerialize) {
  const std::string served = Scrape();
  ASSERT_FALSE(served.empty());
  const std::set<std::string> served_names = FamilyNames(served);
  EXPECT_THAT(served_names, IsSupersetOf(AllFamilies()));
  EXPECT_THAT(served_names, IsSupersetOf(FamilyNames(metrics_->Serialize())));
  EXPECT_EQ(Value(served, "taylorshift_requests_total",
                  {{"model", "listops"}, {"protocol", "grpc"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(Value(served, "taylorshift_queue_depth", {{"model", "listops"}}), 3);
  EXPECT_GT(*Value(served, "taylorshift_process_resident_memory_bytes", {}), 0);

  // Later records show up in the next scrape.
  metrics_->RecordRequest("listops", "grpc", "OK", 0.004);
  EXPECT_EQ(Value(Scrape(), "taylorshift_requests_total",
                  {{"model", "listops"}, {"protocol", "grpc"}, {"code", "OK"}}),
            2);
}

TEST_F(MetricsEndpointTest, OtherPathsAreNotFound) {
  std::string error;
  std::optional<HttpResponse> response =
      HttpGet(PortOf(metrics_->bound_address()), "/secrets", &error);
  ASSERT_TRUE(response.has_value()) << error;
  EXPECT_EQ(response->status, 404);
  EXPECT_THAT(response->body, ::testing::Not(HasSubstr("taylorshift_")));
}

TEST_F(MetricsEndpointTest, SecondEndpointOnTheSamePortFails) {
  absl::StatusOr<std::unique_ptr<Metrics>> second = Metrics::Create(metrics_->bound_address());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(metrics_->bound_address()));
}

TEST_F(MetricsEndpointTest, PromtoolAcceptsTheServedText) {
  constexpr char kPromtool[] = "/usr/bin/promtool";
  ASSERT_TRUE(std::filesystem::exists(kPromtool))
      << kPromtool << " is missing; scripts/setup installs it (package prometheus)";
  const std::string served = Scrape();
  ASSERT_FALSE(served.empty());

  const std::string report =
      (std::filesystem::temp_directory_path() / absl::StrCat("promtool.", getpid(), ".txt"))
          .string();
  FILE* promtool =
      popen(absl::StrCat(kPromtool, " check metrics > ", report, " 2>&1").c_str(), "w");
  ASSERT_NE(promtool, nullptr);
  fwrite(served.data(), 1, served.size(), promtool);
  const int status = pclose(promtool);
  std::ifstream report_file(report);
  const std::string output((std::istreambuf_iterator<char>(report_file)),
                           std::istreambuf_iterator<char>());
  std::filesystem::remove(report);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool check metrics:\n" << output << "\n" << served;
}

// With `authorize` set, a scrape without an accepted token gets 401 (403 for a token without the
// role) and no metric; with one, the exposition. Issue 41: /metrics was open to anyone.
TEST(MetricsAuthTest, ScrapesNeedAnAcceptedTokenFirst) {
  MetricsOptions options;
  options.listen = "127.0.0.1:0";
  std::vector<std::string> seen;
  absl::Mutex mu;
  options.authorize = [&](std::string_view authorization) {
    absl::MutexLock lock(&mu);
    seen.emplace_back(authorization);
    if (authorization == "Bearer scrape") return absl::OkStatus();
    if (authorization == "Bearer classify-only") {
      return absl::PermissionDeniedError("this token lacks the 'metrics' role");
    }
    return absl::UnauthenticatedError("unknown bearer token");
  };
  auto metrics = Metrics::Create(options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  RecordEverything(**metrics);
  const int port = PortOf((*metrics)->bound_address());
  std::string error;
  for (const auto& [authorization, status] :
       std::vector<std::pair<std::string, int>>{{"", 401},
                                                {"Bearer wrong", 401},
                                                {"Bearer classify-only", 403},
                                                {"Basic c2NyYXBl", 401}}) {
    std::optional<HttpResponse> refused = HttpGet(port, "/metrics", &error, authorization);
    ASSERT_TRUE(refused.has_value()) << error;
    EXPECT_EQ(refused->status, status) << authorization;
    EXPECT_THAT(refused->body, ::testing::Not(HasSubstr("taylorshift_"))) << authorization;
  }
  // Other paths too: without a token nothing says which paths exist.
  std::optional<HttpResponse> other = HttpGet(port, "/secrets", &error);
  ASSERT_TRUE(other.has_value()) << error;
  EXPECT_EQ(other->status, 401);
  std::optional<HttpResponse> scraped = HttpGet(port, "/metrics", &error, "Bearer scrape");
  ASSERT_TRUE(scraped.has_value()) << error;
  EXPECT_EQ(scraped->status, 200);
  EXPECT_EQ(Value(scraped->body, "taylorshift_queue_depth", {{"model", "listops"}}), 3);
  absl::MutexLock lock(&mu);
  EXPECT_THAT(seen, ::testing::Contains("Bearer scrape"));
  EXPECT_THAT(seen, ::testing::Contains(""));
}

// metrics_tls: the endpoint speaks HTTPS with its certificate; plain HTTP gets no metrics.
TEST(MetricsAuthTest, ServesHttpsWithItsCertificate) {
  const std::string dir = ::testing::TempDir() + "/metrics_tls";
  const std::string make_cert = "mkdir -p " + dir +
                                " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir +
                                "/key.pem -out " + dir +
                                "/cert.pem -days 1 -subj /CN=localhost -addext "
                                "subjectAltName=IP:127.0.0.1 2>/dev/null";
  ASSERT_EQ(std::system(make_cert.c_str()), 0) << make_cert;
  MetricsOptions options;
  options.listen = "127.0.0.1:0";
  options.cert_file = dir + "/cert.pem";
  options.key_file = dir + "/key.pem";
  options.authorize = [](std::string_view authorization) {
    return authorization == "Bearer scrape" ? absl::OkStatus()
                                            : absl::UnauthenticatedError("unknown bearer token");
  };
  auto metrics = Metrics::Create(options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  RecordEverything(**metrics);
  const int port = PortOf((*metrics)->bound_address());
  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path((dir + "/cert.pem").c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto refused = client.Get("/metrics");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 401);
  auto scraped = client.Get("/metrics", {{"Authorization", "Bearer scrape"}});
  ASSERT_TRUE(scraped) << httplib::to_string(scraped.error());
  EXPECT_EQ(scraped->status, 200);
  EXPECT_EQ(Value(scraped->body, "taylorshift_queue_depth", {{"model", "listops"}}), 3);
  // Plain HTTP to the TLS port gets no metrics.
  std::string error;
  std::optional<HttpResponse> plain = HttpGet(port, "/metrics", &error, "Bearer scrape");
  EXPECT_TRUE(!plain.has_value() || plain->status != 200);
  // A certificate that does not load is refused at start, naming the file.
  options.cert_file = dir + "/missing.pem";
  auto broken = Metrics::Create(options);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("missing.pem"));
}

}  // namespace
}  // namespace ts::server

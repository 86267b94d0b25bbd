#include "client/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "api/proto_names.h"
#include "common/json_output.h"
#include "common/status_macros.h"

namespace ts::client {
namespace {

using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;

// Documents longer than this are surely a typo (the API caps messages at 64 MiB anyway).
constexpr std::uint64_t kMaxDocumentBytes = std::uint64_t{1} << 30;

absl::StatusOr<std::size_t> ParseLength(absl::string_view text, absl::string_view spec) {
  std::uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 1 || value > kMaxDocumentBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad length '", text, "' in '", spec, "': expected an integer in 1..", kMaxDocumentBytes));
  }
  return static_cast<std::size_t>(value);
}

// SplitMix64's finaliser: spreads (seed, index) over the whole 64-bit seed space.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, n) without modulo bias (rejection of the short last block).
std::uint64_t UniformBelow(std::uint64_t n, std::mt19937_64& rng) {
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t draw = rng();
  while (draw >= limit) draw = rng();
  return draw % n;
}

// Uniform in [0, 1) from the top 53 bits of one draw.
double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Standard normal (Box-Muller on two UniformUnit draws).
double StandardNormal(std::mt19937_64& rng) {
  // 1 - u lies in (0, 1], so the log is finite.
  const double u1 = 1.0 - UniformUnit(rng);
  const double u2 = UniformUnit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// `length` bytes drawn uniformly from printable ASCII (0x20..0x7e).
std::string RandomPrintableDocument(std::size_t length, std::mt19937_64& rng) {
  constexpr int kFirst = 0x20, kCount = 0x7f - 0x20;
  std::string document(length, ' ');
  for (char& c : document) c = static_cast<char>(kFirst + UniformBelow(kCount, rng));
  return document;
}

}  // namespace

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(absl::string_view spec) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  LengthDistribution dist;
  if (parts[0] == "fixed" && parts.size() == 2) {
    TS_ASSIGN_OR_RETURN(dist.min_, ParseLength(parts[1], spec));
    dist.max_ = dist.min_;
    return dist;
  }
  if (parts[0] == "uniform" && parts.size() == 3) {
    dist.kind_ = Kind::kUniform;
    TS_ASSIGN_OR_RETURN(dist.min_, ParseLength(parts[1], spec));
    TS_ASSIGN_OR_RETURN(dist.max_, ParseLength(parts[2], spec));
    if (dist.min_ > dist.max_) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad length distribution '", spec, "': MIN is above MAX"));
    }
    return dist;
  }
  if (parts[0] == "lognormal" && parts.size() == 4) {
    dist.kind_ = Kind::kLogNormal;
    if (!absl::SimpleAtod(parts[1], &dist.median_) || !std::isfinite(dist.median_) ||
        dist.median_ <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad MEDIAN '", parts[1], "' in '", spec, "': expected a number > 0"));
    }
    if (!absl::SimpleAtod(parts[2], &dist.sigma_) || !std::isfinite(dist.sigma_) ||
        dist.sigma_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad SIGMA '", parts[2], "' in '", spec, "': expected a number >= 0"));
    }
    TS_ASSIGN_OR_RETURN(dist.max_, ParseLength(parts[3], spec));
    return dist;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad length distribution '", spec,
                   "': expected fixed:N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA:MAX"));
}

std::size_t LengthDistribution::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return min_;
    case Kind::kUniform:
      return min_ + static_cast<std::size_t>(UniformBelow(max_ - min_ + 1, rng));
    case Kind::kLogNormal: {
      const double length = std::round(median_ * std::exp(sigma_ * StandardNormal(rng)));
      // Compare in double first: a huge draw must clip, not overflow the cast.
      if (!(length < static_cast<double>(max_))) return max_;
      return std::max<std::size_t>(1, static_cast<std::size_t>(length));
    }
  }
  return min_;
}

RequestGenerator RequestGenerator::Synthetic(ClassifyRequest prototype, LengthDistribution lengths,
                                             std::uint64_t seed) {
  RequestGenerator generator;
  generator.prototype_ = std::move(prototype);
  generator.prototype_.clear_input();
  generator.lengths_ = std::make_unique<LengthDistribution>(lengths);
  generator.seed_ = seed;
  return generator;
}

absl::StatusOr<RequestGenerator> RequestGenerator::RoundRobin(ClassifyRequest prototype,
                                                              std::vector<ClassifyRequest> inputs) {
  if (inputs.empty()) return absl::InvalidArgumentError("no inputs to send");
  RequestGenerator generator;
  generator.prototype_ = std::move(prototype);
  generator.prototype_.clear_input();
  generator.inputs_ = std::move(inputs);
  return generator;
}

ClassifyRequest RequestGenerator::Request(std::uint64_t index) const {
  ClassifyRequest request = prototype_;
  if (lengths_ != nullptr) {
    std::mt19937_64 rng(Mix(Mix(seed_) ^ index));
    const std::size_t length = lengths_->Sample(rng);
    request.set_document(RandomPrintableDocument(length, rng));
  } else {
    const ClassifyRequest& input = inputs_[index % inputs_.size()];
    if (input.has_image()) {
      *request.mutable_image() = input.image();
    } else {
      request.set_document(input.document());
    }
  }
  request.set_request_id(absl::StrCat("bench-", index));
  return request;
}

double NearestRankPercentile(const std::vector<double>& sorted, double percent) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(sorted.size());
  // The small slack keeps e.g. 0.9 * 10 = 9.000000000000002 from rounding up to rank 10.
  const double rank = std::ceil(percent / 100.0 * n - 1e-9);
  const std::size_t index = static_cast<std::size_t>(std::clamp(rank, 1.0, n)) - 1;
  return sorted[index];
}

void BenchAggregator::RecordOk(double latency_ms, const ClassifyResponse& response) {
  absl::MutexLock lock(&mu_);
  latencies_ms_.push_back(latency_ms);
  ++paths_[PathName(response.path())];
  ++batch_sizes_[response.timing().batch_size()];
  batch_size_sum_ += response.timing().batch_size();
  queue_ms_sum_ += response.timing().queue_seconds() * 1e3;
  compute_ms_sum_ += response.timing().compute_seconds() * 1e3;
  tokens_ +=
      static_cast<std::int64_t>(response.tokens()) * std::max<std::int64_t>(1, response.windows());
}

void BenchAggregator::RecordError(grpc::StatusCode code) {
  absl::MutexLock lock(&mu_);
  ++errors_[GrpcCodeName(code)];
}

BenchReport BenchAggregator::Summarize(double elapsed_s) const {
  absl::MutexLock lock(&mu_);
  BenchReport report;
  std::vector<double> sorted = latencies_ms_;
  std::sort(sorted.begin(), sorted.end());
  report.ok = static_cast<std::int64_t>(sorted.size());
  for (const auto& [code, count] : errors_) report.failed += count;
  report.requests = report.ok + report.failed;
  report.elapsed_s = elapsed_s;
  report.tokens = tokens_;
  if (elapsed_s > 0) {
    report.requests_per_s = static_cast<double>(report.ok) / elapsed_s;
    report.tokens_per_s = static_cast<double>(tokens_) / elapsed_s;
  }
  report.latency_p50_ms = NearestRankPercentile(sorted, 50);
  report.latency_p90_ms = NearestRankPercentile(sorted, 90);
  report.latency_p99_ms = NearestRankPercentile(sorted, 99);
  report.latency_max_ms = NearestRankPercentile(sorted, 100);
  report.latency_min_ms = NearestRankPercentile(sorted, 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double sum = std::accumulate(sorted.begin(), sorted.end(), 0.0);
  const double ok = static_cast<double>(report.ok);
  report.latency_mean_ms = report.ok > 0 ? sum / ok : nan;
  report.errors = errors_;
  report.paths = paths_;
  report.batch_sizes = batch_sizes_;
  report.mean_batch_size = report.ok > 0 ? batch_size_sum_ / ok : nan;
  report.mean_queue_ms = report.ok > 0 ? queue_ms_sum_ / ok : nan;
  report.mean_compute_ms = report.ok > 0 ? compute_ms_sum_ / ok : nan;
  return report;
}

absl::Status ValidateLoadOptions(const LoadOptions& options) {
  if (options.concurrency < 1) return absl::InvalidArgumentError("concurrency must be >= 1");
  if (options.max_requests < 0) return absl::InvalidArgumentError("requests must be >= 0");
  if (!(options.duration_s >= 0) || !std::isfinite(options.duration_s)) {
    return absl::InvalidArgumentError("duration must be a finite number of seconds >= 0");
  }
  if (!(options.rate_rps >= 0) || !std::isfinite(options.rate_rps)) {
    return absl::InvalidArgumentError("rate must be a finite number of requests/s >= 0");
  }
  if (options.max_requests == 0 && options.duration_s == 0) {
    return absl::InvalidArgumentError("the run needs a request count or a duration");
  }
  return absl::OkStatus();
}

BenchReport RunLoad(const LoadOptions& options, const RequestGenerator& generator,
                    const ClassifyCall& call, const RequestDone& done) {
  using Clock = std::chrono::steady_clock;
  BenchAggregator aggregator;
  std::atomic<std::uint64_t> next_index{0};
  const Clock::time_point start = Clock::now();
  const bool timed = options.duration_s > 0;
  const Clock::time_point stop_issuing =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(timed ? options.duration_s : 0));

  const auto worker = [&] {
    while (true) {
      const std::uint64_t index = next_index.fetch_add(1);
      if (options.max_requests > 0 && index >= static_cast<std::uint64_t>(options.max_requests)) {
        return;
      }
      Clock::time_point due = Clock::now();
      if (options.rate_rps > 0) {
        due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                          static_cast<double>(index) / options.rate_rps));
      }
      if (timed && due >= stop_issuing) return;
      if (options.rate_rps > 0) std::this_thread::sleep_until(due);
      const ClassifyRequest request = generator.Request(index);
      ClassifyResponse response;
      const Clock::time_point sent = options.rate_rps > 0 ? due : Clock::now();
      const grpc::Status status = call(request, &response);
      const double latency_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
      if (status.ok()) {
        aggregator.RecordOk(latency_ms, response);
      } else {
        aggregator.RecordError(status.error_code());
      }
      if (done) done(status.ok());
    }
  };

  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(options.concurrency));
  for (int i = 0; i < options.concurrency; ++i) workers.emplace_back(worker);
  for (std::thread& thread : workers) thread.join();

  BenchReport report =
      aggregator.Summarize(std::chrono::duration<double>(Clock::now() - start).count());
  report.model = generator.model();
  report.concurrency = options.concurrency;
  report.rate_rps = options.rate_rps;
  return report;
}

// {"model":"imdb","mode":"closed"|"open","concurrency":8,"rate_rps":0,
//  "requests":200,"ok":198,"failed":2,"elapsed_s":4.2,
//  "requests_per_s":47.1,"tokens":101376,"tokens_per_s":24137.1,
//  "latency_ms":{"p50":..,"p90":..,"p99":..,"max":..,"min":..,"mean":..},
//  "errors":{"RESOURCE_EXHAUSTED":2},"paths":{"direct":120,"efficient":78},
//  "batch_size":{"mean":3.9,"histogram":{"1":10,"4":188}},
//  "server_ms":{"queue_mean":3.2,"compute_mean":8.1}}
// Values that do not exist (latency with no successful request) are null.
std::string FormatBenchJson(const BenchReport& report) {
  Json histogram = Json::object();
  for (const auto& [size, count] : report.batch_sizes) histogram[absl::StrCat(size)] = count;
  return DumpJson(
      Json{{"model", report.model},
           {"mode", report.rate_rps > 0 ? "open" : "closed"},
           {"concurrency", report.concurrency},
           {"rate_rps", JsonNumber(report.rate_rps)},
           {"requests", report.requests},
           {"ok", report.ok},
           {"failed", report.failed},
           {"elapsed_s", JsonNumber(report.elapsed_s)},
           {"requests_per_s", JsonNumber(report.requests_per_s)},
           {"tokens", report.tokens},
           {"tokens_per_s", JsonNumber(report.tokens_per_s)},
           {"latency_ms",
            {{"p50", JsonMilliseconds(report.latency_p50_ms)},
             {"p90", JsonMilliseconds(report.latency_p90_ms)},
             {"p99", JsonMilliseconds(report.latency_p99_ms)},
             {"max", JsonMilliseconds(report.latency_max_ms)},
             {"min", JsonMilliseconds(report.latency_min_ms)},
             {"mean", JsonMilliseconds(report.latency_mean_ms)}}},
           {"errors", Json(report.errors)},
           {"paths", Json(report.paths)},
           {"batch_size", {{"mean", JsonNumber(report.mean_batch_size)}, {"histogram", histogram}}},
           {"server_ms",
            {{"queue_mean", JsonMilliseconds(report.mean_queue_ms)},
             {"compute_mean", JsonMilliseconds(report.mean_compute_ms)}}}});
}

std::string FormatBenchText(const BenchReport& report) {
  const auto ms = [](double value) {
    return std::isnan(value) ? std::string("-") : absl::StrFormat("%.2f", value);
  };
  std::string out = absl::StrFormat(
      "model %s, %s, concurrency %d\n", report.model,
      report.rate_rps > 0 ? absl::StrFormat("open loop at %g requests/s", report.rate_rps)
                          : std::string("closed loop"),
      report.concurrency);
  absl::StrAppendFormat(&out, "requests:   %d ok, %d failed in %.3f s\n", report.ok, report.failed,
                        report.elapsed_s);
  absl::StrAppendFormat(&out, "throughput: %.2f requests/s, %.0f tokens/s\n", report.requests_per_s,
                        report.tokens_per_s);
  absl::StrAppendFormat(&out, "latency ms: p50 %s  p90 %s  p99 %s  max %s  (min %s, mean %s)\n",
                        ms(report.latency_p50_ms), ms(report.latency_p90_ms),
                        ms(report.latency_p99_ms), ms(report.latency_max_ms),
                        ms(report.latency_min_ms), ms(report.latency_mean_ms));
  out += "errors:    ";
  if (report.errors.empty()) out += " none";
  for (const auto& [code, count] : report.errors) absl::StrAppend(&out, " ", code, "=", count);
  out += "\npaths:     ";
  if (report.paths.empty()) out += " -";
  for (const auto& [path, count] : report.paths) absl::StrAppend(&out, " ", path, "=", count);
  absl::StrAppend(&out, "\nbatch size: mean ", ms(report.mean_batch_size), ";");
  for (const auto& [size, count] : report.batch_sizes) {
    absl::StrAppend(&out, " ", size, ":", count);
  }
  absl::StrAppend(&out, "\nserver ms:  queue mean ", ms(report.mean_queue_ms), ", compute mean ",
                  ms(report.mean_compute_ms), "\n");
  return out;
}

}  // namespace ts::client

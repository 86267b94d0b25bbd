#include "client/load_generator.h"

#include <atomic>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using taylorshift::v1::ClassifyRequest;
using taylorshift::v1::ClassifyResponse;
using ::testing::HasSubstr;

LengthDistribution ParseOrDie(const std::string& spec) {
  absl::StatusOr<LengthDistribution> dist = LengthDistribution::Parse(spec);
  EXPECT_TRUE(dist.ok()) << dist.status();
  return *dist;
}

ClassifyResponse Response(taylorshift::v1::AttentionPath path, std::uint32_t batch_size,
                          std::uint32_t tokens, std::uint32_t windows, double queue_s,
                          double compute_s) {
  ClassifyResponse response;
  response.set_path(path);
  response.set_tokens(tokens);
  response.set_windows(windows);
  response.mutable_timing()->set_batch_size(batch_size);
  response.mutable_timing()->set_queue_seconds(queue_s);
  response.mutable_timing()->set_compute_seconds(compute_s);
  return response;
}

TEST(LoadGeneratorTest, FixedLengthIsExact) {
  const LengthDistribution dist = ParseOrDie("fixed:4000");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(dist.Sample(rng), 4000u);
}

TEST(LoadGeneratorTest, UniformStaysInBoundsAndCoversThem) {
  const LengthDistribution dist = ParseOrDie("uniform:500:509");
  std::mt19937_64 rng(42);
  std::set<std::size_t> seen;
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const std::size_t length = dist.Sample(rng);
    ASSERT_GE(length, 500u);
    ASSERT_LE(length, 509u);
    seen.insert(length);
    sum += static_cast<double>(length);
  }
  EXPECT_EQ(seen.size(), 10u);  // both ends inclusive
  EXPECT_NEAR(sum / n, 504.5, 0.1);
}

TEST(LoadGeneratorTest, LogNormalHasTheMedianAndClipsToMax) {
  const LengthDistribution dist = ParseOrDie("lognormal:1000:0.5:3000");
  std::mt19937_64 rng(1);
  std::vector<std::size_t> lengths;
  for (int i = 0; i < 20001; ++i) {
    const std::size_t length = dist.Sample(rng);
    ASSERT_GE(length, 1u);
    ASSERT_LE(length, 3000u);
    lengths.push_back(length);
  }
  std::sort(lengths.begin(), lengths.end());
  EXPECT_NEAR(static_cast<double>(lengths[lengths.size() / 2]), 1000.0, 30.0);
  // P(X > 3000) = P(z > ln 3 / 0.5) ≈ 1.4%: the clip is hit, and only by that tail.
  const auto clipped = std::count(lengths.begin(), lengths.end(), 3000u);
  EXPECT_GT(clipped, 150);
  EXPECT_LT(clipped, 450);

  // A huge sigma must clip at both ends, never overflow or return 0.
  const LengthDistribution wild = ParseOrDie("lognormal:10:50:64");
  for (int i = 0; i < 1000; ++i) {
    const std::size_t length = wild.Sample(rng);
    ASSERT_GE(length, 1u);
    ASSERT_LE(length, 64u);
  }
}

TEST(LoadGeneratorTest, SameSeedSameSamples) {
  const LengthDistribution dist = ParseOrDie("lognormal:800:1:4000");
  std::mt19937_64 a(99), b(99), c(100);
  std::vector<std::size_t> from_a, from_b, from_c;
  for (int i = 0; i < 50; ++i) {
    from_a.push_back(dist.Sample(a));
    from_b.push_back(dist.Sample(b));
    from_c.push_back(dist.Sample(c));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
}

TEST(LoadGeneratorTest, RejectsBadSpecs) {
  for (const char* spec :
       {"", "fixed", "fixed:0", "fixed:-3", "fixed:abc", "uniform:10", "uniform:20:10",
        "lognormal:0:1:100", "lognormal:100:-1:100", "lognormal:100:1", "gauss:1:2", "fixed:1:2"}) {
    absl::StatusOr<LengthDistribution> dist = LengthDistribution::Parse(spec);
    EXPECT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
  EXPECT_THAT(LengthDistribution::Parse("uniform:20:10").status().message(),
              HasSubstr("MIN is above MAX"));
}

TEST(LoadGeneratorTest, SyntheticRequestsArePrintableSeededAndIndependentOfOrder) {
  ClassifyRequest prototype;
  prototype.set_model("imdb");
  prototype.set_top_k(2);
  prototype.set_path(taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  const RequestGenerator generator =
      RequestGenerator::Synthetic(prototype, ParseOrDie("uniform:1:300"), 5);
  const ClassifyRequest later = generator.Request(17);
  const ClassifyRequest first = generator.Request(0);
  EXPECT_EQ(generator.Request(17).document(), later.document());  // pure in the index
  EXPECT_NE(first.document(), later.document());
  EXPECT_EQ(later.model(), "imdb");
  EXPECT_EQ(later.top_k(), 2u);
  EXPECT_EQ(later.path(), taylorshift::v1::ATTENTION_PATH_EFFICIENT);
  EXPECT_EQ(later.request_id(), "bench-17");
  for (std::uint64_t i = 0; i < 200; ++i) {
    const std::string document = generator.Request(i).document();
    ASSERT_GE(document.size(), 1u);
    ASSERT_LE(document.size(), 300u);
    for (char c : document) ASSERT_TRUE(c >= 0x20 && c <= 0x7e) << static_cast<int>(c);
  }
  const RequestGenerator other_seed =
      RequestGenerator::Synthetic(prototype, ParseOrDie("uniform:1:300"), 6);
  EXPECT_NE(other_seed.Request(17).document(), later.document());
}

TEST(LoadGeneratorTest, RoundRobinCyclesThroughInputs) {
  ClassifyRequest prototype;
  prototype.set_model("cifar");
  std::vector<ClassifyRequest> inputs(2);
  inputs[0].set_document("first");
  inputs[1].mutable_image()->set_width(2);
  inputs[1].mutable_image()->set_height(1);
  inputs[1].mutable_image()->set_channels(1);
  inputs[1].mutable_image()->set_pixels("ab");
  absl::StatusOr<RequestGenerator> generator =
      RequestGenerator::RoundRobin(prototype, std::move(inputs));
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_EQ(generator->Request(0).document(), "first");
  EXPECT_EQ(generator->Request(1).image().pixels(), "ab");
  EXPECT_EQ(generator->Request(4).document(), "first");
  EXPECT_EQ(generator->Request(5).model(), "cifar");
  EXPECT_TRUE(generator->Request(5).has_image());

  EXPECT_EQ(RequestGenerator::RoundRobin(prototype, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadGeneratorTest, NearestRankPercentilesOnKnownSamples) {
  std::vector<double> one_to_hundred;
  for (int i = 1; i <= 100; ++i) one_to_hundred.push_back(i);
  EXPECT_EQ(NearestRankPercentile(one_to_hundred, 50), 50);
  EXPECT_EQ(NearestRankPercentile(one_to_hundred, 90), 90);
  EXPECT_EQ(NearestRankPercentile(one_to_hundred, 99), 99);
  EXPECT_EQ(NearestRankPercentile(one_to_hundred, 100), 100);
  EXPECT_EQ(NearestRankPercentile(one_to_hundred, 0), 1);

  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(NearestRankPercentile(ten, 90), 9);  // 0.9 * 10 is 9.000000000000002 in doubles
  EXPECT_EQ(NearestRankPercentile(ten, 99), 10);
  EXPECT_EQ(NearestRankPercentile(ten, 50), 5);
  EXPECT_EQ(NearestRankPercentile(ten, 51), 6);

  const std::vector<double> single = {7.5};
  EXPECT_EQ(NearestRankPercentile(single, 50), 7.5);
  EXPECT_EQ(NearestRankPercentile(single, 99), 7.5);
  EXPECT_TRUE(std::isnan(NearestRankPercentile({}, 50)));
}

TEST(LoadGeneratorTest, AggregatesLatencyPathsBatchesAndErrors) {
  BenchAggregator aggregator;
  // Latencies 10, 20, ..., 100 recorded out of order.
  const int order[] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
  for (int k : order) {
    const auto path =
        k <= 6 ? taylorshift::v1::ATTENTION_PATH_DIRECT : taylorshift::v1::ATTENTION_PATH_EFFICIENT;
    const std::uint32_t batch = k % 2 == 0 ? 4 : 1;
    aggregator.RecordOk(10.0 * k, Response(path, batch, 100, k == 10 ? 3 : 0, 0.002, 0.008));
  }
  aggregator.RecordError(grpc::StatusCode::RESOURCE_EXHAUSTED);
  aggregator.RecordError(grpc::StatusCode::RESOURCE_EXHAUSTED);
  aggregator.RecordError(grpc::StatusCode::DEADLINE_EXCEEDED);

  const BenchReport report = aggregator.Summarize(2.0);
  EXPECT_EQ(report.requests, 13);
  EXPECT_EQ(report.ok, 10);
  EXPECT_EQ(report.failed, 3);
  EXPECT_DOUBLE_EQ(report.requests_per_s, 5.0);
  EXPECT_EQ(report.tokens, 9 * 100 + 3 * 100);  // the windowed response counts 3 windows
  EXPECT_DOUBLE_EQ(report.tokens_per_s, 600.0);
  EXPECT_EQ(report.latency_p50_ms, 50);
  EXPECT_EQ(report.latency_p90_ms, 90);
  EXPECT_EQ(report.latency_p99_ms, 100);
  EXPECT_EQ(report.latency_max_ms, 100);
  EXPECT_EQ(report.latency_min_ms, 10);
  EXPECT_DOUBLE_EQ(report.latency_mean_ms, 55);
  EXPECT_EQ(report.errors, (std::map<std::string, std::int64_t>{{"DEADLINE_EXCEEDED", 1},
                                                                {"RESOURCE_EXHAUSTED", 2}}));
  EXPECT_EQ(report.paths, (std::map<std::string, std::int64_t>{{"direct", 6}, {"efficient", 4}}));
  EXPECT_EQ(report.batch_sizes, (std::map<std::uint32_t, std::int64_t>{{1, 5}, {4, 5}}));
  EXPECT_DOUBLE_EQ(report.mean_batch_size, 2.5);
  EXPECT_NEAR(report.mean_queue_ms, 2.0, 1e-9);
  EXPECT_NEAR(report.mean_compute_ms, 8.0, 1e-9);

  const std::string json = FormatBenchJson(report);
  EXPECT_THAT(json, HasSubstr(R"("latency_ms":{"p50":50,"p90":90,"p99":100,"max":100)"));
  EXPECT_THAT(json, HasSubstr(R"("errors":{"DEADLINE_EXCEEDED":1,"RESOURCE_EXHAUSTED":2})"));
  EXPECT_THAT(json, HasSubstr(R"("paths":{"direct":6,"efficient":4})"));
  EXPECT_THAT(json, HasSubstr(R"("histogram":{"1":5,"4":5})"));
  const std::string text = FormatBenchText(report);
  EXPECT_THAT(text, HasSubstr("p50 50.00  p90 90.00  p99 100.00  max 100.00"));
  EXPECT_THAT(text, HasSubstr("RESOURCE_EXHAUSTED=2"));
}

TEST(LoadGeneratorTest, EmptyReportHasNoLatencies) {
  BenchAggregator aggregator;
  aggregator.RecordError(grpc::StatusCode::UNAVAILABLE);
  const BenchReport report = aggregator.Summarize(1.0);
  EXPECT_EQ(report.ok, 0);
  EXPECT_TRUE(std::isnan(report.latency_p50_ms));
  EXPECT_THAT(FormatBenchJson(report), HasSubstr(R"("p50":null)"));
  EXPECT_THAT(FormatBenchText(report), HasSubstr("p50 -"));
}

TEST(LoadGeneratorTest, ClosedLoopSendsExactlyTheRequestedCount) {
  ClassifyRequest prototype;
  prototype.set_model("imdb");
  const RequestGenerator generator =
      RequestGenerator::Synthetic(prototype, ParseOrDie("fixed:10"), 3);
  std::atomic<int> calls{0};
  std::atomic<int> wrong_length{0};
  const ClassifyCall call = [&](const ClassifyRequest& request, ClassifyResponse* response) {
    const int n = calls.fetch_add(1);
    if (request.document().size() != 10) wrong_length.fetch_add(1);
    if (n % 5 == 4) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    *response = Response(taylorshift::v1::ATTENTION_PATH_DIRECT, 2, 11, 1, 0, 0);
    return grpc::Status::OK;
  };
  LoadOptions options;
  options.concurrency = 4;
  options.max_requests = 50;
  ASSERT_TRUE(ValidateLoadOptions(options).ok());
  std::atomic<int> heard_ok{0}, heard_failed{0};
  const BenchReport report = RunLoad(options, generator, call,
                                     [&](bool ok) { (ok ? heard_ok : heard_failed).fetch_add(1); });
  // The progress callback hears of every request, as the report counts them.
  EXPECT_EQ(heard_ok.load(), 40);
  EXPECT_EQ(heard_failed.load(), 10);
  EXPECT_EQ(calls.load(), 50);
  EXPECT_EQ(wrong_length.load(), 0);
  EXPECT_EQ(report.requests, 50);
  EXPECT_EQ(report.ok, 40);
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), 10);
  EXPECT_EQ(report.tokens, 40 * 11);
  EXPECT_EQ(report.model, "imdb");
  EXPECT_EQ(report.concurrency, 4);
}

TEST(LoadGeneratorTest, ValidatesOptions) {
  LoadOptions options;
  options.concurrency = 0;
  EXPECT_FALSE(ValidateLoadOptions(options).ok());
  options.concurrency = 1;
  options.max_requests = 0;
  options.duration_s = 0;
  EXPECT_THAT(ValidateLoadOptions(options).message(), HasSubstr("count or a duration"));
  options.duration_s = 1.5;
  EXPECT_TRUE(ValidateLoadOptions(options).ok());
  options.rate_rps = -1;
  EXPECT_FALSE(ValidateLoadOptions(options).ok());
}

}  // namespace
}  // namespace ts::client

#include "server/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace ts::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kFullExample[] = R"yaml(
listen: 0.0.0.0:6000
metrics_listen: ""
intra_op_threads: 4
grpc_threads: 8
max_message_bytes: 1048576
max_concurrent_streams: 16
shutdown_grace_ms: 1500
state_dir: /var/lib/ts/state
data_root: datasets
tls: {cert_file: tls/server.crt, key_file: tls/server.key, client_ca_file: /etc/ca.crt}
auth: {tokens: {alpha: [classify, admin], beta: [classify]}, classify_diagnostic_options: true}
models:
  - name: listops
    checkpoint: ../models/listops-demo.tsckpt
    device: cuda:1
    max_length: 1024
    over_length: window
    window_stride: 512
    max_windows: 4
    single_thread_tokens: 0
    max_request_mflop: 2500
    max_batch_mflop: 9000
    calibration: listops.calibration
    calibrate_at_start: true
    precision: bf16
    batching:
      bucket_boundaries: [32, 96]
      max_batch_tokens: 4096
      max_batch_size: 8
      max_queue_delay_us: 250
      max_queue_size: 10
      batch_threads: 3
      start_when_idle: false
  - name: imdb-v2-b_1
    checkpoint: /abs/imdb.tsckpt
    over_length: keep_tail
)yaml";

// Parses `yaml` with base_dir "/cfg" and expects INVALID_ARGUMENT containing every fragment.
void ExpectRejected(const std::string& yaml, const std::vector<std::string>& fragments) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig(yaml, "/cfg");
  ASSERT_FALSE(config.ok()) << "accepted:\n" << yaml;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(fragment)) << yaml;
  }
}

std::string OneModel(const std::string& extra) {
  return absl::StrCat("models:\n  - name: m\n    checkpoint: m.tsckpt\n", extra);
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "config_test.XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name, const std::string& text) const {
    std::string path = (std::filesystem::path(path_) / name).string();
    std::ofstream(path) << text;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ConfigTest, EmptyDocumentGivesDefaults) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig("", "");
  ASSERT_TRUE(config.ok()) << config.status();
  const ServerConfig defaults;
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_EQ(config->metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(config->intra_op_threads, 0);
  EXPECT_EQ(config->heap_keep_freed_bytes, std::int64_t{1} << 30);
  EXPECT_EQ(config->grpc_threads, 0);
  EXPECT_EQ(config->max_message_bytes, 64 << 20);
  EXPECT_EQ(config->max_concurrent_streams, 256);
  EXPECT_EQ(config->shutdown_grace, absl::Seconds(30));
  EXPECT_EQ(config->state_dir, "state");
  EXPECT_EQ(config->data_root, "data");
  EXPECT_TRUE(config->tls.cert_file.empty());
  EXPECT_TRUE(config->auth.tokens.empty());
  EXPECT_TRUE(config->models.empty());
}

TEST(ConfigTest, ModelDefaultsAndBatcherName) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig(OneModel(""), "");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->models.size(), 1u);
  const ModelConfig& model = config->models[0];
  EXPECT_EQ(model.name, "m");
  EXPECT_EQ(model.checkpoint, "m.tsckpt");
  EXPECT_EQ(model.device, "auto");
  EXPECT_EQ(model.max_length, 0);
  EXPECT_EQ(model.over_length, LengthPolicy::kTruncate);
  EXPECT_EQ(model.window_stride, 0);
  EXPECT_EQ(model.max_windows, 16);
  EXPECT_EQ(model.single_thread_tokens, 1024);
  EXPECT_EQ(model.max_request_mflop, 0);  // automatic
  EXPECT_EQ(model.max_batch_mflop, 0);    // automatic
  EXPECT_FALSE(config->auth.classify_diagnostic_options);
  EXPECT_TRUE(model.calibration.empty());
  EXPECT_FALSE(model.calibrate_at_start);
  EXPECT_TRUE(model.precision_auto);  // bf16 on CUDA 8.0+, fp32 elsewhere (resolved at load)
  const LengthBucketBatcherOptions defaults;
  EXPECT_EQ(model.batching.model_name, "m");
  EXPECT_EQ(model.batching.bucket_boundaries, defaults.bucket_boundaries);
  EXPECT_EQ(model.batching.max_batch_tokens, 32768);
  EXPECT_EQ(model.batching.max_batch_size, 32);
  EXPECT_EQ(model.batching.max_queue_delay, absl::Microseconds(5000));
  EXPECT_EQ(model.batching.max_queue_size, 1024);
  EXPECT_EQ(model.batching.batch_threads, 1);
  EXPECT_TRUE(model.batching.start_when_idle);
}

TEST(ConfigTest, EmptyValueMeansDefault) {
  absl::StatusOr<ServerConfig> config =
      ParseServerConfig("listen:\nmetrics_listen: \"\"\ntls:\n  cert_file:\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_EQ(config->metrics_listen, "");  // an explicit "" disables the endpoint
  EXPECT_TRUE(config->tls.cert_file.empty());
}

TEST(ConfigTest, FullExampleRoundTrip) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig(kFullExample, "/etc/ts");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "0.0.0.0:6000");
  EXPECT_EQ(config->metrics_listen, "");
  EXPECT_EQ(config->intra_op_threads, 4);
  EXPECT_EQ(config->grpc_threads, 8);
  EXPECT_EQ(config->max_message_bytes, 1048576);
  EXPECT_EQ(config->max_concurrent_streams, 16);
  EXPECT_EQ(config->shutdown_grace, absl::Milliseconds(1500));
  EXPECT_EQ(config->state_dir, "/var/lib/ts/state");
  EXPECT_EQ(config->data_root, "/etc/ts/datasets");
  EXPECT_EQ(config->tls.cert_file, "/etc/ts/tls/server.crt");
  EXPECT_EQ(config->tls.key_file, "/etc/ts/tls/server.key");
  EXPECT_EQ(config->tls.client_ca_file, "/etc/ca.crt");
  EXPECT_THAT(config->auth.tokens,
              UnorderedElementsAre(Pair("alpha", ElementsAre("classify", "admin")),
                                   Pair("beta", ElementsAre("classify"))));
  ASSERT_EQ(config->models.size(), 2u);

  const ModelConfig& listops = config->models[0];
  EXPECT_EQ(listops.name, "listops");
  EXPECT_EQ(listops.checkpoint, "/etc/models/listops-demo.tsckpt");
  EXPECT_EQ(listops.device, "cuda:1");
  EXPECT_EQ(listops.max_length, 1024);
  EXPECT_EQ(listops.over_length, LengthPolicy::kWindow);
  EXPECT_EQ(listops.window_stride, 512);
  EXPECT_EQ(listops.max_windows, 4);
  EXPECT_EQ(listops.single_thread_tokens, 0);
  EXPECT_EQ(listops.max_request_mflop, 2500);
  EXPECT_EQ(listops.max_batch_mflop, 9000);
  EXPECT_TRUE(config->auth.classify_diagnostic_options);
  EXPECT_EQ(listops.calibration, "/etc/ts/listops.calibration");
  EXPECT_TRUE(listops.calibrate_at_start);
  EXPECT_EQ(listops.precision, Precision::kBf16);
  EXPECT_FALSE(listops.precision_auto);
  EXPECT_EQ(listops.batching.model_name, "listops");
  EXPECT_THAT(listops.batching.bucket_boundaries, ElementsAre(32, 96));
  EXPECT_EQ(listops.batching.max_batch_tokens, 4096);
  EXPECT_EQ(listops.batching.max_batch_size, 8);
  EXPECT_EQ(listops.batching.max_queue_delay, absl::Microseconds(250));
  EXPECT_EQ(listops.batching.max_queue_size, 10);
  EXPECT_EQ(listops.batching.batch_threads, 3);
  EXPECT_FALSE(listops.batching.start_when_idle);

  const ModelConfig& imdb = config->models[1];
  EXPECT_EQ(imdb.name, "imdb-v2-b_1");
  EXPECT_EQ(imdb.checkpoint, "/abs/imdb.tsckpt");
  EXPECT_EQ(imdb.over_length, LengthPolicy::kKeepTail);
  EXPECT_EQ(imdb.batching.model_name, "imdb-v2-b_1");
  EXPECT_EQ(imdb.batching.max_batch_size, 32);
}

TEST(ConfigTest, OverLengthPolicyNamesMatchYaml) {
  for (LengthPolicy policy : {LengthPolicy::kTruncate, LengthPolicy::kKeepTail,
                              LengthPolicy::kReject, LengthPolicy::kWindow}) {
    const std::string name = std::string(LengthPolicyName(policy));
    absl::StatusOr<ServerConfig> config =
        ParseServerConfig(OneModel(absl::StrCat("    over_length: ", name, "\n")), "");
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(config->models[0].over_length, policy) << name;
  }
}

TEST(ConfigTest, RejectsUnknownKeysWithFullPath) {
  ExpectRejected("listne: 127.0.0.1:1\n", {"listne: unknown key", "expected one of", "listen"});
  ExpectRejected("tls: {cert: a}\n", {"tls.cert: unknown key", "cert_file, key_file"});
  ExpectRejected("auth: {token: {a: [admin]}}\n", {"auth.token: unknown key"});
  ExpectRejected(OneModel("    devce: cpu\n"), {"models[0].devce: unknown key"});
  ExpectRejected(OneModel("    batching: {max_batch_sise: 4}\n"),
                 {"models[0].batching.max_batch_sise: unknown key (expected one of",
                  "max_batch_size", "line 4"});
}

TEST(ConfigTest, RejectsDuplicateKeys) {
  ExpectRejected("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", {"listen: duplicate key"});
}

TEST(ConfigTest, RejectsWrongTypes) {
  ExpectRejected("grpc_threads: many\n", {"grpc_threads: expected an integer", "\"many\""});
  ExpectRejected("grpc_threads: [1]\n", {"grpc_threads: expected an integer, got a sequence"});
  ExpectRejected("listen: {host: a}\n", {"listen: expected a string, got a mapping"});
  ExpectRejected("models: {name: m}\n", {"models: expected a list of models"});
  ExpectRejected("models: [m]\n", {"models[0]: expected a mapping"});
  ExpectRejected(OneModel("    calibrate_at_start: maybe\n"),
                 {"models[0].calibrate_at_start: expected true or false"});
  ExpectRejected(OneModel("    batching: {bucket_boundaries: 64}\n"),
                 {"models[0].batching.bucket_boundaries: expected a list of integers"});
  ExpectRejected(OneModel("    batching: {bucket_boundaries: [64, x]}\n"),
                 {"models[0].batching.bucket_boundaries[1]: expected an integer"});
  ExpectRejected("- a\n- b\n", {"(top level): expected a mapping"});
  ExpectRejected("listen: [unclosed\n", {"invalid YAML"});
}

TEST(ConfigTest, RejectsBadValues) {
  ExpectRejected("listen: localhost\n", {"listen: must be host:port", "\"localhost\""});
  ExpectRejected("listen: 127.0.0.1:99999\n", {"listen: must be host:port", "0..65535"});
  ExpectRejected("listen: :50051\n", {"listen: must be host:port"});
  ExpectRejected("listen: ::1:50051\n", {"listen:", "brackets"});
  ExpectRejected("metrics_listen: 9464\n", {"metrics_listen: must be host:port"});
  ExpectRejected("max_concurrent_streams: 0\n", {"max_concurrent_streams: must be > 0, got 0"});
  ExpectRejected("intra_op_threads: -1\n", {"intra_op_threads: must be >= 0, got -1"});
  ExpectRejected("heap_keep_freed_bytes: -5\n", {"heap_keep_freed_bytes: must be >= 0, got -5"});
  ExpectRejected("max_message_bytes: 4294967296\n", {"max_message_bytes: must be <="});
  ExpectRejected("shutdown_grace_ms: -5\n", {"shutdown_grace_ms: must be >= 0, got -5"});
  ExpectRejected(
      OneModel("    over_length: chop\n"),
      {"models[0].over_length: must be one of truncate, keep_tail, reject, window", "\"chop\""});
  for (const char* device : {"gpu", "cuda:", "cuda:x", "cuda0", "CPU"}) {
    ExpectRejected(
        OneModel(absl::StrCat("    device: \"", device, "\"\n")),
        {"models[0].device: must be auto, cpu, cuda or cuda:N", absl::StrCat("\"", device, "\"")});
  }
  ExpectRejected(OneModel("    max_windows: 0\n"), {"models[0].max_windows: must be > 0, got 0"});
  ExpectRejected(OneModel("    single_thread_tokens: -1\n"),
                 {"models[0].single_thread_tokens: must be >= 0, got -1"});
  ExpectRejected(OneModel("    max_request_mflop: -1\n"),
                 {"models[0].max_request_mflop: must be >= 0, got -1"});
  ExpectRejected(OneModel("    max_batch_mflop: -2\n"),
                 {"models[0].max_batch_mflop: must be >= 0, got -2"});
  ExpectRejected("auth: {classify_diagnostic_options: sometimes}\n",
                 {"auth.classify_diagnostic_options"});
  ExpectRejected(OneModel("    max_length: -3\n"), {"models[0].max_length: must be >= 0, got -3"});
  ExpectRejected(OneModel("    max_length: 100\n    window_stride: 200\n"),
                 {"models[0].window_stride: must be <= max_length"});
  ExpectRejected(OneModel("    batching: {bucket_boundaries: [128, 64]}\n"),
                 {"models[0].batching.bucket_boundaries[1]: must be ascending"});
  ExpectRejected(OneModel("    batching: {bucket_boundaries: []}\n"),
                 {"models[0].batching.bucket_boundaries: needs at least one"});
  ExpectRejected(OneModel("    precision: fp16\n"),
                 {"models[0].precision: must be auto, fp32 or bf16; got \"fp16\""});
  ExpectRejected(OneModel("    batching: {max_queue_delay_us: -1}\n"),
                 {"models[0].batching.max_queue_delay_us: must be >= 0"});
  ExpectRejected(OneModel("    batching: {batch_threads: 0}\n"),
                 {"models[0].batching.batch_threads: must be > 0, got 0"});
  ExpectRejected(OneModel("    batching: {max_batch_tokens: 0}\n"),
                 {"models[0].batching.max_batch_tokens: must be > 0, got 0"});
  ExpectRejected(OneModel("    batching: {max_queue_size: 0}\n"),
                 {"models[0].batching.max_queue_size: must be > 0, got 0"});
  ExpectRejected(OneModel("  - name: second\n    checkpoint: s.tsckpt\n"
                          "    batching: {max_batch_size: 0}\n"),
                 {"models[1].batching.max_batch_size: must be > 0, got 0"});
}

TEST(ConfigTest, RejectsBadModelNames) {
  ExpectRejected("models:\n  - checkpoint: a.tsckpt\n", {"models[0].name: required"});
  ExpectRejected("models:\n  - name: a\n", {"models[0].checkpoint: required"});
  ExpectRejected("models:\n  - name: a b\n    checkpoint: c\n",
                 {"models[0].name: must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}", "\"a b\""});
  ExpectRejected("models:\n  - name: a/b\n    checkpoint: c\n", {"models[0].name: must match"});
  ExpectRejected(OneModel("  - name: m\n    checkpoint: other.tsckpt\n"),
                 {"models[1].name: duplicate model name \"m\""});
}

// Issue 41: ".", ".." and service names were valid model names (and so health service names and
// directories under state/models/).
TEST(ConfigTest, RejectsPathAndServiceModelNames) {
  for (const std::string name : {"'.'", "'..'", "taylorshift.v1.Jobs", "grpc.health.v1.Health",
                                 ".hidden", "-x", "_x", "a.b", "'a\\b'", "'a:b'"}) {
    ExpectRejected("models:\n  - name: " + name + "\n    checkpoint: c\n",
                   {"models[0].name: must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}"});
  }
  ExpectRejected("models:\n  - name: " + std::string(65, 'a') + "\n    checkpoint: c\n",
                 {"models[0].name: must match"});
  for (const char* flag : {"..=x.tsckpt", ".=x.tsckpt", "taylorshift.v1.Jobs=x.tsckpt"}) {
    absl::StatusOr<ModelConfig> refused = ParseModelFlag(flag);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("--model.name: must match [A-Za-z0-9][A-Za-z0-9_-]{0,63}"))
        << flag;
  }
  // The names the shipped configs, docs and tests use stay valid.
  for (const char* name :
       {"listops", "listops-small", "source-lang", "imdb", "cifar", "m", "from_file", "A1", "0"}) {
    EXPECT_TRUE(ParseModelFlag(std::string(name) + "=x.tsckpt").ok()) << name;
  }
}

TEST(ConfigTest, MetricsTlsTokenAndDiscoveryKeys) {
  {
    absl::StatusOr<ServerConfig> defaults = ParseServerConfig("", "");
    ASSERT_TRUE(defaults.ok()) << defaults.status();
    EXPECT_TRUE(defaults->metrics.tls.cert_file.empty());
    EXPECT_FALSE(defaults->metrics.require_token);
    EXPECT_TRUE(defaults->auth.protect_discovery);
  }
  absl::StatusOr<ServerConfig> config = ParseServerConfig(R"yaml(
metrics_listen: 127.0.0.1:9464
metrics_tls: {cert_file: m.crt, key_file: m.key, client_ca_file: /abs/ca.crt}
metrics_require_token: true
auth:
  tokens: {prom: [metrics], ops: [classify, metrics]}
  protect_discovery: false
)yaml",
                                                          "/srv/ts");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.tls.cert_file, "/srv/ts/m.crt");
  EXPECT_EQ(config->metrics.tls.key_file, "/srv/ts/m.key");
  EXPECT_EQ(config->metrics.tls.client_ca_file, "/abs/ca.crt");
  EXPECT_TRUE(config->metrics.require_token);
  EXPECT_FALSE(config->auth.protect_discovery);
  EXPECT_EQ(config->auth.tokens.at("prom"), std::vector<std::string>{"metrics"});

  ExpectRejected("metrics_tls: {cert_file: a.crt}\n",
                 {"metrics_tls.key_file: required when metrics_tls.cert_file"});
  ExpectRejected("metrics_tls: {client_ca_file: ca.crt}\n",
                 {"metrics_tls.client_ca_file: requires metrics_tls.cert_file"});
  ExpectRejected("metrics_tls: {cert: a}\n", {"metrics_tls.cert: unknown key"});
  // A token is required, but none could ever scrape.
  ExpectRejected("metrics_require_token: true\n",
                 {"metrics_require_token: true, but no token in auth has the \"metrics\" role"});
  ExpectRejected("metrics_require_token: true\nauth: {tokens: {t: [admin]}}\n",
                 {"no token in auth has the \"metrics\" role"});
}

TEST(ConfigTest, FinishedJobSeriesKey) {
  absl::StatusOr<ServerConfig> defaults = ParseServerConfig("", "");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->metrics.finished_job_series, absl::Hours(1));
  absl::StatusOr<ServerConfig> config =
      ParseServerConfig("metrics_finished_job_series_s: 90\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.finished_job_series, absl::Seconds(90));
  config = ParseServerConfig("metrics_finished_job_series_s: 0\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.finished_job_series, absl::ZeroDuration());
  ExpectRejected("metrics_finished_job_series_s: -1\n",
                 {"metrics_finished_job_series_s: must be >= 0, got -1"});
  ExpectRejected("metrics_finished_job_series_s: soon\n",
                 {"metrics_finished_job_series_s: expected an integer"});
}

TEST(ConfigTest, PromotionsFollowKeys) {
  {
    absl::StatusOr<ServerConfig> defaults = ParseServerConfig("", "");
    ASSERT_TRUE(defaults.ok()) << defaults.status();
    EXPECT_TRUE(defaults->promotions.follow.server.empty());
    EXPECT_EQ(defaults->promotions.follow.interval, absl::Seconds(30));
  }
  absl::StatusOr<ServerConfig> config = ParseServerConfig(R"yaml(
jobs: {enabled: false}
promotions:
  follow:
    server: taylorshift-jobs:50051
    token_file: /run/secrets/follow-token
    tls: {enabled: true, ca_file: ca.crt, server_name: jobs.example}
    interval_ms: 5000
    timeout_ms: 20000
    cache_dir: cache
    max_checkpoint_bytes: 1048576
)yaml",
                                                          "/srv/ts");
  ASSERT_TRUE(config.ok()) << config.status();
  const PromotionFollowConfig& follow = config->promotions.follow;
  EXPECT_EQ(follow.server, "taylorshift-jobs:50051");
  EXPECT_EQ(follow.token_file, "/run/secrets/follow-token");
  EXPECT_TRUE(follow.tls);
  EXPECT_EQ(follow.ca_file, "/srv/ts/ca.crt");
  EXPECT_EQ(follow.tls_server_name, "jobs.example");
  EXPECT_EQ(follow.interval, absl::Seconds(5));
  EXPECT_EQ(follow.timeout, absl::Seconds(20));
  EXPECT_EQ(follow.cache_dir, "/srv/ts/cache");
  EXPECT_EQ(follow.max_checkpoint_bytes, 1 << 20);

  // A jobs server promotes its own models; a follower needs somewhere to keep what it follows.
  ExpectRejected("promotions: {follow: {server: jobs:50051, cache_dir: c}}\n",
                 {"promotions.follow.server: needs jobs.enabled: false"});
  ExpectRejected("jobs: {enabled: false}\npromotions: {follow: {server: jobs:50051}}\n",
                 {"promotions.follow.cache_dir: required"});
  ExpectRejected("jobs: {enabled: false}\npromotions: {follow: {server: jobs, cache_dir: c}}\n",
                 {"promotions.follow.server: must be host:port"});
  ExpectRejected(
      "jobs: {enabled: false}\n"
      "promotions: {follow: {server: jobs:1, cache_dir: c, interval_ms: 10}}\n",
      {"interval_ms and timeout_ms must be >= 100"});
  ExpectRejected("promotions: {follow: {intervall_ms: 10}}\n",
                 {"promotions.follow.intervall_ms: unknown key"});
}

TEST(ConfigTest, RejectsBadTls) {
  ExpectRejected("tls: {cert_file: a.crt}\n", {"tls.key_file: required when tls.cert_file"});
  ExpectRejected("tls: {key_file: a.key}\n", {"tls.cert_file: required when tls.key_file"});
  ExpectRejected("tls: {client_ca_file: ca.crt}\n", {"tls.client_ca_file: requires tls.cert_file"});
}

TEST(ConfigTest, RejectsBadTokensWithoutEchoingThem) {
  absl::StatusOr<ServerConfig> config =
      ParseServerConfig("auth: {tokens: {s3cret: [classify], t0ken: [root]}}\n", "");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("auth.tokens[#2]: unknown role \"root\" (expected classify, admin, "
                        "metrics or all_jobs)"));
  EXPECT_THAT(std::string(config.status().message()), ::testing::Not(HasSubstr("t0ken")));
  ExpectRejected("auth: {tokens: {a: []}}\n", {"auth.tokens[#1]: needs at least one role"});
  ExpectRejected("auth: {tokens: [a]}\n", {"auth.tokens: expected a mapping"});
}

TEST(ConfigTest, ResolvesRelativePathsAgainstBaseDir) {
  const std::string yaml = R"yaml(
state_dir: ../state
data_root: /data
tls: {cert_file: c.pem, key_file: ./k.pem, client_ca_file: /abs/ca.pem}
models:
  - {name: a, checkpoint: ckpt/a.tsckpt, calibration: ../a.cal}
  - {name: b, checkpoint: /models/b.tsckpt}
)yaml";
  absl::StatusOr<ServerConfig> config = ParseServerConfig(yaml, "/srv/ts/config");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->state_dir, "/srv/ts/state");
  EXPECT_EQ(config->data_root, "/data");
  EXPECT_EQ(config->tls.cert_file, "/srv/ts/config/c.pem");
  EXPECT_EQ(config->tls.key_file, "/srv/ts/config/k.pem");
  EXPECT_EQ(config->tls.client_ca_file, "/abs/ca.pem");
  EXPECT_EQ(config->models[0].checkpoint, "/srv/ts/config/ckpt/a.tsckpt");
  EXPECT_EQ(config->models[0].calibration, "/srv/ts/a.cal");
  EXPECT_EQ(config->models[1].checkpoint, "/models/b.tsckpt");
  EXPECT_TRUE(config->models[1].calibration.empty());
}

TEST(ConfigTest, MergesTokensFileRelativeToBaseDir) {
  TempDir dir;
  dir.File("tokens.txt", "# operators\n\nalpha admin\n  beta classify,admin  \nalpha classify\n");
  absl::StatusOr<ServerConfig> config = ParseServerConfig(
      "auth:\n  tokens: {alpha: [classify], gamma: [classify]}\n  tokens_file: tokens.txt\n",
      dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->auth.tokens_file, dir.path() + "/tokens.txt");
  EXPECT_THAT(config->auth.tokens,
              UnorderedElementsAre(Pair("alpha", ElementsAre("classify", "admin")),
                                   Pair("beta", ElementsAre("classify", "admin")),
                                   Pair("gamma", ElementsAre("classify"))));
}

TEST(ConfigTest, RejectsMissingOrMalformedTokensFile) {
  TempDir dir;
  absl::StatusOr<ServerConfig> missing =
      ParseServerConfig("auth: {tokens_file: nope.txt}\n", dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir.path() + "/nope.txt"));

  dir.File("bad.txt", "alpha admin\nbeta\n");
  ExpectRejected(absl::StrCat("auth: {tokens_file: ", dir.path(), "/bad.txt}\n"),
                 {"bad.txt:2", "expected \"TOKEN ROLE[,ROLE...]\""});
  dir.File("role.txt", "alpha classify,superuser\n");
  ExpectRejected(absl::StrCat("auth: {tokens_file: ", dir.path(), "/role.txt}\n"),
                 {"role.txt:1", "unknown role \"superuser\""});
}

TEST(ConfigTest, LoadServerConfigResolvesAgainstTheFilesDirectory) {
  TempDir dir;
  const std::string path = dir.File("server.yaml", OneModel(""));
  absl::StatusOr<ServerConfig> config = LoadServerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->models[0].checkpoint, dir.path() + "/m.tsckpt");
  EXPECT_EQ(config->state_dir, dir.path() + "/state");

  absl::StatusOr<ServerConfig> missing = LoadServerConfig(dir.path() + "/absent.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("absent.yaml"));

  const std::string bad = dir.File("bad.yaml", "listen: nowhere\n");
  absl::StatusOr<ServerConfig> invalid = LoadServerConfig(bad);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr("bad.yaml: listen:"));
}

TEST(ConfigTest, JobsDefaults) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig("", "");
  ASSERT_TRUE(config.ok()) << config.status();
  const JobsConfig& jobs = config->jobs;
  EXPECT_TRUE(jobs.enabled);
  EXPECT_EQ(jobs.elsewhere, "");
  EXPECT_EQ(jobs.max_concurrent, 1);
  EXPECT_EQ(jobs.max_queued, 64);
  EXPECT_EQ(jobs.threads_per_job, 0);
  EXPECT_EQ(jobs.serving_reserved_cores, 1);
  EXPECT_EQ(jobs.keep_checkpoints, 2);
  EXPECT_EQ(jobs.retention, absl::ZeroDuration());
  EXPECT_EQ(jobs.retention_sweep_interval, absl::Minutes(5));
  EXPECT_EQ(jobs.limits.max_steps, 1000000);
  EXPECT_EQ(jobs.limits.max_batch_size, 1024);
  EXPECT_EQ(jobs.limits.max_length, 65536);
  EXPECT_EQ(jobs.limits.max_embed_dim, 1024);
  EXPECT_EQ(jobs.limits.max_depth, 48);
  EXPECT_EQ(jobs.limits.max_threads, 0);
  EXPECT_EQ(jobs.limits.max_generate_count, 10000000);
  EXPECT_EQ(jobs.limits.max_epochs, 10000);
}

TEST(ConfigTest, JobsSectionIsRead) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig(R"yaml(
jobs:
  enabled: false
  elsewhere: taylorshift-jobs:50051
  max_concurrent: 2
  max_queued: 5
  threads_per_job: 3
  serving_reserved_cores: 2
  keep_checkpoints: 4
  retention_s: 604800
  retention_sweep_interval_s: 60
  limits:
    max_steps: 500
    max_batch_size: 64
    max_length: 4096
    max_embed_dim: 256
    max_depth: 6
    max_threads: 8
    max_generate_count: 1000
    max_epochs: 20
)yaml",
                                                          "");
  ASSERT_TRUE(config.ok()) << config.status();
  const JobsConfig& jobs = config->jobs;
  EXPECT_FALSE(jobs.enabled);
  EXPECT_EQ(jobs.elsewhere, "taylorshift-jobs:50051");
  EXPECT_EQ(jobs.max_concurrent, 2);
  EXPECT_EQ(jobs.max_queued, 5);
  EXPECT_EQ(jobs.threads_per_job, 3);
  EXPECT_EQ(jobs.serving_reserved_cores, 2);
  EXPECT_EQ(jobs.keep_checkpoints, 4);
  EXPECT_EQ(jobs.retention, absl::Hours(24 * 7));
  EXPECT_EQ(jobs.retention_sweep_interval, absl::Minutes(1));
  EXPECT_EQ(jobs.limits.max_steps, 500);
  EXPECT_EQ(jobs.limits.max_batch_size, 64);
  EXPECT_EQ(jobs.limits.max_length, 4096);
  EXPECT_EQ(jobs.limits.max_embed_dim, 256);
  EXPECT_EQ(jobs.limits.max_depth, 6);
  EXPECT_EQ(jobs.limits.max_threads, 8);
  EXPECT_EQ(jobs.limits.max_generate_count, 1000);
  EXPECT_EQ(jobs.limits.max_epochs, 20);
}

// Issue 45: limits per submitting identity, on by default so that one token cannot fill the
// shared queue; 0 = no limit; a negative value is refused naming the key and the value.
TEST(ConfigTest, JobsPerIdentityLimitsHaveDefaultsAreReadAndRangeChecked) {
  absl::StatusOr<ServerConfig> defaults = ParseServerConfig("", "");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->jobs.per_identity.max_queued, 16);
  EXPECT_EQ(defaults->jobs.per_identity.max_running, 0);
  EXPECT_EQ(defaults->jobs.per_identity.max_total_steps, 4000000);
  EXPECT_LT(defaults->jobs.per_identity.max_queued, defaults->jobs.max_queued);

  absl::StatusOr<ServerConfig> config = ParseServerConfig(
      "jobs: {per_identity: {max_queued: 3, max_running: 1, max_total_steps: 0}}\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jobs.per_identity.max_queued, 3);
  EXPECT_EQ(config->jobs.per_identity.max_running, 1);
  EXPECT_EQ(config->jobs.per_identity.max_total_steps, 0);

  ExpectRejected("jobs: {per_identity: {max_queued: -1}}\n",
                 {"jobs.per_identity.max_queued: must be >= 0, got -1"});
  ExpectRejected("jobs: {per_identity: {max_running: -2}}\n",
                 {"jobs.per_identity.max_running: must be >= 0, got -2"});
  ExpectRejected("jobs: {per_identity: {max_total_steps: -5}}\n",
                 {"jobs.per_identity.max_total_steps: must be >= 0, got -5"});
  ExpectRejected("jobs: {per_identity: {max_jobs: 2}}\n",
                 {"jobs.per_identity.max_jobs: unknown key", "max_queued"});
  // The role that reaches other identities' jobs is a known one.
  EXPECT_TRUE(ParseServerConfig("auth: {tokens: {t: [admin, all_jobs]}}\n", "").ok());
}

TEST(ConfigTest, JobsRejectsUnknownKeysAndWrongTypes) {
  ExpectRejected("jobs: {max_concurent: 2}\n",
                 {"jobs.max_concurent: unknown key (expected one of", "max_concurrent"});
  ExpectRejected("jobs: {limits: {max_stepz: 2}}\n",
                 {"jobs.limits.max_stepz: unknown key", "max_steps"});
  ExpectRejected("jobs: {enabled: sometimes}\n", {"jobs.enabled: expected true or false"});
  ExpectRejected("jobs: {max_queued: lots}\n",
                 {"jobs.max_queued: expected an integer", "\"lots\""});
  ExpectRejected("jobs: {limits: {max_epochs: 1.5}}\n",
                 {"jobs.limits.max_epochs: expected an integer"});
  ExpectRejected("jobs: [1]\n", {"jobs: expected a mapping, got a sequence"});
}

TEST(ConfigTest, JobsRejectsOutOfRangeValues) {
  ExpectRejected("jobs: {max_concurrent: 0}\n", {"jobs.max_concurrent: must be > 0, got 0"});
  ExpectRejected("jobs: {max_queued: 0}\n", {"jobs.max_queued: must be > 0, got 0"});
  ExpectRejected("jobs: {threads_per_job: -1}\n", {"jobs.threads_per_job: must be >= 0, got -1"});
  ExpectRejected("jobs: {serving_reserved_cores: -1}\n",
                 {"jobs.serving_reserved_cores: must be >= 0, got -1"});
  ExpectRejected("jobs: {keep_checkpoints: -1}\n", {"jobs.keep_checkpoints: must be > 0, got -1"});
  for (const char* limit : {"max_steps", "max_batch_size", "max_length", "max_embed_dim",
                            "max_depth", "max_generate_count", "max_epochs"}) {
    ExpectRejected(absl::StrCat("jobs: {limits: {", limit, ": 0}}\n"),
                   {absl::StrCat("jobs.limits.", limit, ": must be > 0, got 0")});
  }
  ExpectRejected("jobs: {retention_s: -1}\n", {"jobs.retention_s: must be >= 0, got -1"});
  ExpectRejected("jobs: {retention_sweep_interval_s: 0}\n",
                 {"jobs.retention_sweep_interval_s: must be >= 1, got 0"});
  ExpectRejected("jobs: {limits: {max_threads: -1}}\n",
                 {"jobs.limits.max_threads: must be >= 0, got -1"});
  ExpectRejected("jobs: {limits: {max_generate_count: 10000001}}\n",
                 {"jobs.limits.max_generate_count: must be <= 10000000"});
  ExpectRejected("jobs: {threads_per_job: 4, limits: {max_threads: 2}}\n",
                 {"jobs.threads_per_job: must be <= jobs.limits.max_threads (2), got 4"});
  // max_threads 0 means the number of cores, which the config does not know: no cross-check.
  EXPECT_TRUE(ParseServerConfig("jobs: {threads_per_job: 4, limits: {max_threads: 0}}\n", "").ok());
}

TEST(ConfigTest, AutomaticJobThreadsUseTheCoresServingDoesNotReserve) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig("", "");
  ASSERT_TRUE(config.ok()) << config.status();
  // Default: automatic, one core kept for serving.
  EXPECT_EQ(ThreadsPerJob(config->jobs, 16), 15);
  EXPECT_EQ(ThreadsPerJob(config->jobs, 2), 1);
  // Never below one thread, even when serving reserves every core.
  EXPECT_EQ(ThreadsPerJob(config->jobs, 1), 1);

  config = ParseServerConfig("jobs: {serving_reserved_cores: 0}\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ThreadsPerJob(config->jobs, 2), 2);

  config = ParseServerConfig("jobs: {serving_reserved_cores: 4, max_concurrent: 3}\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  // The free cores are shared by the jobs that run at once: (16 - 4) / 3.
  EXPECT_EQ(ThreadsPerJob(config->jobs, 16), 4);
  EXPECT_EQ(ThreadsPerJob(config->jobs, 4), 1);

  // An explicit value is kept whatever the machine.
  config = ParseServerConfig("jobs: {threads_per_job: 3, serving_reserved_cores: 8}\n", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ThreadsPerJob(config->jobs, 2), 3);
  EXPECT_EQ(ThreadsPerJob(config->jobs, 64), 3);
  // Automatic threads are capped when a job starts, so a cap below the cores is no conflict.
  EXPECT_TRUE(ParseServerConfig("jobs: {threads_per_job: 0, limits: {max_threads: 2}}\n", "").ok());
}

TEST(ConfigTest, ValidateChecksJobs) {
  ServerConfig config;
  config.jobs.max_concurrent = 0;
  const absl::Status status = ValidateServerConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("jobs.max_concurrent"));
}

TEST(ConfigTest, ParseModelFlag) {
  absl::StatusOr<ModelConfig> model = ParseModelFlag("imdb=models/imdb=v1.tsckpt");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name, "imdb");
  EXPECT_EQ(model->checkpoint, "models/imdb=v1.tsckpt");
  EXPECT_EQ(model->device, "auto");
  EXPECT_EQ(model->over_length, LengthPolicy::kTruncate);
  EXPECT_EQ(model->batching.model_name, "imdb");

  for (const char* bad : {"imdb", "=x.tsckpt", "imdb=", ""}) {
    absl::StatusOr<ModelConfig> rejected = ParseModelFlag(bad);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("NAME=CHECKPOINT")) << bad;
  }
  absl::StatusOr<ModelConfig> bad_name = ParseModelFlag("my model=x.tsckpt");
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_name.status().message()), HasSubstr("must match"));
}

TEST(ConfigTest, ValidateCatchesFlagOverrides) {
  absl::StatusOr<ServerConfig> config = ParseServerConfig(OneModel(""), "");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<ModelConfig> flag = ParseModelFlag("m=other.tsckpt");
  ASSERT_TRUE(flag.ok());
  config->models.push_back(*flag);
  absl::Status status = ValidateServerConfig(*config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("duplicate model name \"m\""));
}

// The shipped files must parse: the server starts from them.
class ShippedConfigTest : public ::testing::Test {
 protected:
  std::filesystem::path ConfigDir() {
    const char* source_dir = std::getenv("TS_SOURCE_DIR");
    return std::filesystem::path(source_dir != nullptr ? source_dir : ".") / "config";
  }
};

TEST_F(ShippedConfigTest, DefaultYamlServesTheTwoDemoModels) {
  absl::StatusOr<ServerConfig> config = LoadServerConfig((ConfigDir() / "default.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_EQ(config->metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(config->nvml_library, "libnvidia-ml.so.1");
  EXPECT_TRUE(config->tls.cert_file.empty());
  EXPECT_TRUE(config->auth.tokens.empty());
  ASSERT_EQ(config->models.size(), 2u);
  EXPECT_EQ(config->models[1].name, "source-lang");
  EXPECT_EQ(config->models[1].checkpoint,
            (std::filesystem::absolute(ConfigDir()) / "../models/source-lang-demo.tsckpt")
                .lexically_normal()
                .string());
  EXPECT_EQ(config->models[1].over_length, LengthPolicy::kTruncate);
  const ModelConfig& model = config->models[0];
  EXPECT_EQ(model.name, "listops");
  const std::filesystem::path expected_checkpoint =
      (std::filesystem::absolute(ConfigDir()) / "../models/listops-demo.tsckpt").lexically_normal();
  EXPECT_EQ(model.checkpoint, expected_checkpoint.string());
  EXPECT_EQ(model.device, "auto");
  EXPECT_EQ(model.over_length, LengthPolicy::kTruncate);
  // The file spells out the built-in defaults.
  const LengthBucketBatcherOptions defaults;
  EXPECT_EQ(model.batching.bucket_boundaries, defaults.bucket_boundaries);
  EXPECT_EQ(model.batching.max_batch_tokens, defaults.max_batch_tokens);
  EXPECT_EQ(model.batching.max_queue_delay, defaults.max_queue_delay);
  EXPECT_EQ(config->max_message_bytes, ServerConfig().max_message_bytes);
  EXPECT_EQ(config->shutdown_grace, ServerConfig().shutdown_grace);
  EXPECT_TRUE(model.precision_auto);
  EXPECT_FALSE(config->cuda_allow_tf32);
  const HttpConfig http;
  EXPECT_EQ(config->http.max_connections, http.max_connections);
  EXPECT_EQ(config->http.read_timeout, http.read_timeout);
  EXPECT_EQ(config->http.max_json_depth, http.max_json_depth);
  // The jobs section spells out the built-in defaults too.
  const JobsConfig jobs;
  EXPECT_EQ(config->jobs.enabled, jobs.enabled);
  EXPECT_EQ(config->jobs.elsewhere, jobs.elsewhere);
  EXPECT_EQ(config->metrics.finished_job_series, MetricsConfig().finished_job_series);
  EXPECT_EQ(config->jobs.max_concurrent, jobs.max_concurrent);
  EXPECT_EQ(config->jobs.max_queued, jobs.max_queued);
  EXPECT_EQ(config->jobs.threads_per_job, jobs.threads_per_job);
  EXPECT_EQ(config->jobs.serving_reserved_cores, jobs.serving_reserved_cores);
  EXPECT_EQ(config->jobs.keep_checkpoints, jobs.keep_checkpoints);
  EXPECT_EQ(config->jobs.limits.max_steps, jobs.limits.max_steps);
  EXPECT_EQ(config->jobs.limits.max_batch_size, jobs.limits.max_batch_size);
  EXPECT_EQ(config->jobs.limits.max_length, jobs.limits.max_length);
  EXPECT_EQ(config->jobs.limits.max_embed_dim, jobs.limits.max_embed_dim);
  EXPECT_EQ(config->jobs.limits.max_depth, jobs.limits.max_depth);
  EXPECT_EQ(config->jobs.limits.max_threads, jobs.limits.max_threads);
  EXPECT_EQ(config->jobs.limits.max_generate_count, jobs.limits.max_generate_count);
  EXPECT_EQ(config->jobs.limits.max_epochs, jobs.limits.max_epochs);
  // promotions.follow: documented, off.
  const PromotionFollowConfig follow;
  EXPECT_TRUE(config->promotions.follow.server.empty());
  EXPECT_EQ(config->promotions.follow.interval, follow.interval);
  EXPECT_EQ(config->promotions.follow.timeout, follow.timeout);
  EXPECT_EQ(config->promotions.follow.max_checkpoint_bytes, follow.max_checkpoint_bytes);
}

TEST_F(ShippedConfigTest, ExamplesParse) {
  // tokens_file is read at parse time: give the examples one next to them (tls.yaml needs a
  // token with the metrics role for its metrics_require_token).
  TempDir dir;
  dir.File("tokens.txt", "prom-token metrics\nops-token classify,admin\n");
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ConfigDir() / "examples")) {
    if (entry.path().extension() != ".yaml") continue;
    const absl::StatusOr<std::string> text = ts::ReadFile(entry.path().string());
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<ServerConfig> config = ParseServerConfig(*text, dir.path());
    EXPECT_TRUE(config.ok()) << entry.path() << ": " << config.status();
    if (config.ok()) {
      EXPECT_FALSE(config->models.empty()) << entry.path();
      // Issue 41: tls.yaml had metrics on 0.0.0.0. Metrics stay on loopback in every example.
      EXPECT_TRUE(config->metrics_listen.empty() ||
                  config->metrics_listen.rfind("127.0.0.1:", 0) == 0)
          << entry.path() << ": metrics_listen " << config->metrics_listen;
    }
    ++parsed;
  }
  EXPECT_GE(parsed, 2);
}

}  // namespace
}  // namespace ts::server

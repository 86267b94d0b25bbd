#include "server/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/memory_limit.h"
#include "common/status_macros.h"
#include "common/yaml_fields.h"

namespace ts::server {
namespace {

namespace fs = std::filesystem;

using yaml_fields::Bool;
using yaml_fields::ChildPath;
using yaml_fields::FieldReader;
using yaml_fields::Fields;
using yaml_fields::Int;
using yaml_fields::Int64;
using yaml_fields::KindOf;
using yaml_fields::Map;
using yaml_fields::NodeError;
using yaml_fields::ReadDocument;
using yaml_fields::ReadInt64;
using yaml_fields::ReadMap;
using yaml_fields::ReadScalar;
using yaml_fields::String;

constexpr char kRoleClassify[] = "classify";
constexpr char kRoleAdmin[] = "admin";
constexpr char kRoleMetrics[] = "metrics";
constexpr char kRoleAllJobs[] = "all_jobs";

// ---------------------------------------------------------------------------------------------
// Value checks shared by the parser and ValidateServerConfig.

bool IsValidDevice(const std::string& device) {
  if (device == "auto" || device == "cpu" || device == "cuda") return true;
  std::string index;
  if (!absl::StartsWith(device, "cuda:")) return false;
  index = device.substr(5);
  if (index.empty() || index.size() > 4) return false;
  return std::all_of(index.begin(), index.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

// "host:port" or "[v6]:port" with port 0..65535 (0 = any free port).
absl::Status CheckHostPort(const std::string& path, const std::string& value) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": must be host:port (e.g. 127.0.0.1:50051), got \"", value, "\"",
                     why.empty() ? "" : absl::StrCat(" (", why, ")")));
  };
  const std::size_t colon = value.rfind(':');
  if (colon == std::string::npos) return bad("");
  const std::string host = value.substr(0, colon);
  const std::string port = value.substr(colon + 1);
  if (host.empty()) return bad("empty host");
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return bad("unterminated IPv6 address");
  } else if (host.find(':') != std::string::npos) {
    return bad("IPv6 addresses need brackets, e.g. [::1]:50051");
  }
  if (host.find_first_of(" \t/") != std::string::npos) return bad("invalid host");
  int port_number = -1;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return bad("port must be 0..65535");
  }
  return absl::OkStatus();
}

absl::Status CheckRole(const std::string& path, const std::string& role) {
  if (role == kRoleClassify || role == kRoleAdmin || role == kRoleMetrics || role == kRoleAllJobs) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": unknown role \"", role, "\" (expected ",
                                                 kRoleClassify, ", ", kRoleAdmin, ", ",
                                                 kRoleMetrics, " or ", kRoleAllJobs, ")"));
}

// A number's lower limit: the key path that names it, its value, the least value allowed.
struct AtLeast {
  std::string path;
  std::int64_t value;
  std::int64_t minimum;
};

// The first value below its limit as "<path>: must be > 0, got V" (a minimum of 1) or
// "<path>: must be >= M, got V".
absl::Status CheckAtLeast(std::initializer_list<AtLeast> limits) {
  for (const AtLeast& limit : limits) {
    if (limit.value >= limit.minimum) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        limit.path, ": must be ", limit.minimum == 1 ? "> 0" : absl::StrCat(">= ", limit.minimum),
        ", got ", limit.value));
  }
  return absl::OkStatus();
}

// Merges `roles` into the token's role list (set union, order of first appearance).
void AddRoles(const std::string& token, const std::vector<std::string>& roles, AuthConfig& auth) {
  std::vector<std::string>& merged = auth.tokens[token];
  for (const std::string& role : roles) {
    if (std::find(merged.begin(), merged.end(), role) == merged.end()) merged.push_back(role);
  }
}

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

// ---------------------------------------------------------------------------------------------
// YAML reading (common/yaml_fields.h) for the config-only value kinds.

// Durations are written as integers in the unit their key names (`_ms`, `_us`).
FieldReader Duration(absl::Duration* out, absl::Duration unit) {
  return [out, unit](const YAML::Node& node, const std::string& path) {
    std::int64_t value = 0;
    TS_RETURN_IF_ERROR(ReadInt64(node, path, &value));
    if (value < 0) return NodeError(node, path, absl::StrCat("must be >= 0, got ", value));
    *out = unit * value;
    return absl::OkStatus();
  };
}
FieldReader Int64List(std::vector<std::int64_t>* out) {
  return [out](const YAML::Node& node, const std::string& path) {
    if (!node.IsSequence()) {
      return NodeError(node, path, absl::StrCat("expected a list of integers, got ", KindOf(node)));
    }
    std::vector<std::int64_t> values;
    for (std::size_t i = 0; i < node.size(); ++i) {
      std::int64_t value = 0;
      TS_RETURN_IF_ERROR(ReadInt64(node[i], absl::StrCat(path, "[", i, "]"), &value));
      values.push_back(value);
    }
    *out = std::move(values);
    return absl::OkStatus();
  };
}
FieldReader PrecisionField(Precision* out, bool* automatic) {
  return [out, automatic](const YAML::Node& node, const std::string& path) {
    std::string name;
    TS_RETURN_IF_ERROR(ReadScalar(node, path, &name));
    *automatic = name == "auto";
    if (*automatic) return absl::OkStatus();
    absl::StatusOr<Precision> precision = ParsePrecision(name);
    if (!precision.ok()) {
      return NodeError(
          node, path, absl::StrCat("must be auto, fp32 or bf16; got \"", name.substr(0, 40), "\""));
    }
    *out = *precision;
    return absl::OkStatus();
  };
}

FieldReader OverLength(LengthPolicy* out) {
  return [out](const YAML::Node& node, const std::string& path) {
    std::string name;
    TS_RETURN_IF_ERROR(ReadScalar(node, path, &name));
    auto policy = ParseLengthPolicy(name);
    if (!policy.ok()) return NodeError(node, path, std::string(policy.status().message()));
    *out = *policy;
    return absl::OkStatus();
  };
}

absl::Status ReadModel(const YAML::Node& node, const std::string& path, ModelConfig* model) {
  if (!node.IsMap()) {
    return NodeError(
        node, path,
        absl::StrCat("expected a mapping with name and checkpoint, got ", KindOf(node)));
  }
  TS_RETURN_IF_ERROR(ReadMap(
      node, path,
      {
          {"name", String(&model->name)},
          {"checkpoint", String(&model->checkpoint)},
          {"device", String(&model->device)},
          {"max_length", Int64(&model->max_length)},
          {"over_length", OverLength(&model->over_length)},
          {"window_stride", Int64(&model->window_stride)},
          {"max_windows", Int64(&model->max_windows)},
          {"calibration", String(&model->calibration)},
          {"calibrate_at_start", Bool(&model->calibrate_at_start)},
          {"precision", PrecisionField(&model->precision, &model->precision_auto)},
          {"single_thread_tokens", Int64(&model->single_thread_tokens)},
          {"max_request_mflop", Int64(&model->max_request_mflop)},
          {"max_batch_mflop", Int64(&model->max_batch_mflop)},
          {"batching", Map({
                           {"bucket_boundaries", Int64List(&model->batching.bucket_boundaries)},
                           {"max_batch_tokens", Int64(&model->batching.max_batch_tokens)},
                           {"max_batch_size", Int64(&model->batching.max_batch_size)},
                           {"max_queue_delay_us",
                            Duration(&model->batching.max_queue_delay, absl::Microseconds(1))},
                           {"max_queue_size", Int64(&model->batching.max_queue_size)},
                           {"batch_threads", Int(&model->batching.batch_threads)},
                           {"start_when_idle", Bool(&model->batching.start_when_idle)},
                       })},
      }));
  for (const char* required : {"name", "checkpoint"}) {
    if (!node[required].IsDefined() || node[required].IsNull()) {
      return NodeError(node, ChildPath(path, required), "required");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadTokens(const YAML::Node& node, const std::string& path, AuthConfig* auth) {
  if (!node.IsMap()) {
    return NodeError(node, path,
                     absl::StrCat("expected a mapping TOKEN: [ROLE, ...], got ", KindOf(node)));
  }
  int index = 0;
  for (auto it = node.begin(); it != node.end(); ++it, ++index) {
    // Tokens are secrets: errors name the entry by position, never by its text.
    const std::string entry_path = absl::StrCat(path, "[#", index + 1, "]");
    const YAML::Node token = it->first;  // a handle; it-> yields a temporary
    if (!token.IsScalar() || token.Scalar().empty()) {
      return NodeError(token, entry_path, "a token must be a non-empty string");
    }
    std::vector<std::string> roles;
    const YAML::Node value = it->second;
    if (value.IsScalar()) {
      roles.push_back(value.Scalar());
    } else if (value.IsSequence()) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        std::string role;
        TS_RETURN_IF_ERROR(ReadScalar(value[i], absl::StrCat(entry_path, "[", i, "]"), &role));
        roles.push_back(role);
      }
    } else {
      return NodeError(value, entry_path,
                       absl::StrCat("expected a list of roles, got ", KindOf(value)));
    }
    if (roles.empty()) return NodeError(value, entry_path, "needs at least one role");
    for (const std::string& role : roles) TS_RETURN_IF_ERROR(CheckRole(entry_path, role));
    AddRoles(token.Scalar(), roles, *auth);
  }
  return absl::OkStatus();
}

// Reads "TOKEN ROLE[,ROLE...]" lines (blank lines and # comments ignored) into `auth`.
absl::Status ReadTokensFile(const std::string& file, AuthConfig* auth) {
  TS_ASSIGN_OR_RETURN(const std::string contents, ReadFile(file, "auth.tokens_file"));
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    const std::string where = absl::StrCat("auth.tokens_file (", file, ":", line_number, ")");
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    std::vector<std::string> words =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected \"TOKEN ROLE[,ROLE...]\""));
    }
    std::vector<std::string> roles = absl::StrSplit(words[1], ',', absl::SkipEmpty());
    if (roles.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": needs at least one role"));
    }
    for (const std::string& role : roles) TS_RETURN_IF_ERROR(CheckRole(where, role));
    AddRoles(words[0], roles, *auth);
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const ModelConfig& model, const std::string& path) {
  if (!IsValidName(model.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".name: must match ", kNameRule, ", got \"", model.name, "\""));
  }
  if (model.checkpoint.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".checkpoint: required"));
  }
  if (!IsValidDevice(model.device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".device: must be auto, cpu, cuda or cuda:N, got \"", model.device, "\""));
  }
  const LengthBucketBatcherOptions& batching = model.batching;
  const std::string batching_path = path + ".batching";
  TS_RETURN_IF_ERROR(CheckAtLeast({
      {path + ".max_length", model.max_length, 0},
      {path + ".window_stride", model.window_stride, 0},
      {path + ".max_windows", model.max_windows, 1},
      {path + ".single_thread_tokens", model.single_thread_tokens, 0},
      {path + ".max_request_mflop", model.max_request_mflop, 0},
      {path + ".max_batch_mflop", model.max_batch_mflop, 0},
      {batching_path + ".max_batch_tokens", batching.max_batch_tokens, 1},
      {batching_path + ".max_batch_size", batching.max_batch_size, 1},
      {batching_path + ".max_queue_size", batching.max_queue_size, 1},
      {batching_path + ".batch_threads", batching.batch_threads, 1},
  }));
  if (model.max_length > 0 && model.window_stride > model.max_length) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".window_stride: must be <= max_length (",
                                                   model.max_length, "), got ",
                                                   model.window_stride));
  }
  if (batching.max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(batching_path, ".max_queue_delay_us: must be >= 0, got ",
                     absl::ToInt64Microseconds(batching.max_queue_delay)));
  }
  if (batching.bucket_boundaries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(batching_path, ".bucket_boundaries: needs at least one boundary"));
  }
  for (std::size_t i = 0; i < batching.bucket_boundaries.size(); ++i) {
    const std::int64_t boundary = batching.bucket_boundaries[i];
    const std::string at = absl::StrCat(batching_path, ".bucket_boundaries[", i, "]");
    if (boundary <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": must be > 0, got ", boundary));
    }
    if (i > 0 && boundary <= batching.bucket_boundaries[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": must be ascending, got ", boundary,
                                                     " after ", batching.bucket_boundaries[i - 1]));
    }
  }
  return absl::OkStatus();
}

FieldReader Promotions(PromotionsConfig* promotions) {
  PromotionFollowConfig* follow = &promotions->follow;
  return Map({
      {"follow", Map({
                     {"server", String(&follow->server)},
                     {"token_file", String(&follow->token_file)},
                     {"tls", Map({
                                 {"enabled", Bool(&follow->tls)},
                                 {"ca_file", String(&follow->ca_file)},
                                 {"cert_file", String(&follow->cert_file)},
                                 {"key_file", String(&follow->key_file)},
                                 {"server_name", String(&follow->tls_server_name)},
                             })},
                     {"interval_ms", Duration(&follow->interval, absl::Milliseconds(1))},
                     {"timeout_ms", Duration(&follow->timeout, absl::Milliseconds(1))},
                     {"cache_dir", String(&follow->cache_dir)},
                     {"max_checkpoint_bytes", Int64(&follow->max_checkpoint_bytes)},
                 })},
  });
}

FieldReader Jobs(JobsConfig* jobs) {
  JobLimits& limits = jobs->limits;
  return Map({
      {"enabled", Bool(&jobs->enabled)},
      {"elsewhere", String(&jobs->elsewhere)},
      {"max_concurrent", Int(&jobs->max_concurrent)},
      {"max_queued", Int(&jobs->max_queued)},
      {"per_identity", Map({
                           {"max_queued", Int64(&jobs->per_identity.max_queued)},
                           {"max_running", Int64(&jobs->per_identity.max_running)},
                           {"max_total_steps", Int64(&jobs->per_identity.max_total_steps)},
                       })},
      {"threads_per_job", Int(&jobs->threads_per_job)},
      {"serving_reserved_cores", Int(&jobs->serving_reserved_cores)},
      {"keep_checkpoints", Int(&jobs->keep_checkpoints)},
      {"retention_s", Duration(&jobs->retention, absl::Seconds(1))},
      {"retention_sweep_interval_s", Duration(&jobs->retention_sweep_interval, absl::Seconds(1))},
      {"worker_binary", String(&jobs->worker_binary)},
      {"heartbeat_interval_ms", Duration(&jobs->heartbeat_interval, absl::Milliseconds(1))},
      {"heartbeat_timeout_ms", Duration(&jobs->heartbeat_timeout, absl::Milliseconds(1))},
      {"stop_grace_ms", Duration(&jobs->stop_grace, absl::Milliseconds(1))},
      {"memory_budget_bytes", Int64(&jobs->memory_budget_bytes)},
      {"memory_admission", Bool(&jobs->memory_admission)},
      {"onednn_primitive_cache_capacity", Int(&jobs->onednn_primitive_cache_capacity)},
      {"worker_address_space_overhead_bytes", Int64(&jobs->worker_address_space_overhead_bytes)},
      {"limits", Map({
                     {"max_steps", Int64(&limits.max_steps)},
                     {"max_batch_size", Int64(&limits.max_batch_size)},
                     {"max_length", Int64(&limits.max_length)},
                     {"max_embed_dim", Int64(&limits.max_embed_dim)},
                     {"max_depth", Int64(&limits.max_depth)},
                     {"max_threads", Int(&limits.max_threads)},
                     {"max_generate_count", Int64(&limits.max_generate_count)},
                     {"max_epochs", Int64(&limits.max_epochs)},
                     {"max_workers", Int(&limits.max_workers)},
                     {"max_retries", Int(&limits.max_retries)},
                     {"max_spec_bytes", Int64(&limits.max_spec_bytes)},
                     {"max_labels", Int(&limits.max_labels)},
                     {"max_label_bytes", Int(&limits.max_label_bytes)},
                     {"max_data_files", Int64(&limits.max_data_files)},
                     {"max_data_bytes", Int64(&limits.max_data_bytes)},
                 })},
  });
}

// The ListOps generator's own ceiling (model/data/listops_generator.h); a larger limit could never
// be used.
constexpr std::int64_t kMaxGenerateCount = 10000000;

absl::Status ValidateJobs(const JobsConfig& jobs) {
  const JobLimits& limits = jobs.limits;
  TS_RETURN_IF_ERROR(CheckAtLeast({
      {"jobs.max_concurrent", jobs.max_concurrent, 1},
      {"jobs.max_queued", jobs.max_queued, 1},
      {"jobs.per_identity.max_queued", jobs.per_identity.max_queued, 0},
      {"jobs.per_identity.max_running", jobs.per_identity.max_running, 0},
      {"jobs.per_identity.max_total_steps", jobs.per_identity.max_total_steps, 0},
      {"jobs.threads_per_job", jobs.threads_per_job, 0},
      {"jobs.serving_reserved_cores", jobs.serving_reserved_cores, 0},
      {"jobs.keep_checkpoints", jobs.keep_checkpoints, 1},
      {"jobs.limits.max_steps", limits.max_steps, 1},
      {"jobs.limits.max_batch_size", limits.max_batch_size, 1},
      {"jobs.limits.max_length", limits.max_length, 1},
      {"jobs.limits.max_embed_dim", limits.max_embed_dim, 1},
      {"jobs.limits.max_depth", limits.max_depth, 1},
      {"jobs.limits.max_threads", limits.max_threads, 0},
      {"jobs.limits.max_generate_count", limits.max_generate_count, 1},
      {"jobs.limits.max_epochs", limits.max_epochs, 1},
      {"jobs.limits.max_workers", limits.max_workers, 1},
      {"jobs.limits.max_retries", limits.max_retries, 0},
      {"jobs.limits.max_spec_bytes", limits.max_spec_bytes, 1024},
      {"jobs.limits.max_labels", limits.max_labels, 2},
      {"jobs.limits.max_label_bytes", limits.max_label_bytes, 1},
      {"jobs.limits.max_data_files", limits.max_data_files, 1},
      {"jobs.limits.max_data_bytes", limits.max_data_bytes, 1},
      {"jobs.memory_budget_bytes", jobs.memory_budget_bytes, 0},
      {"jobs.onednn_primitive_cache_capacity", jobs.onednn_primitive_cache_capacity, 0},
      {"jobs.worker_address_space_overhead_bytes", jobs.worker_address_space_overhead_bytes, 0},
  }));
  if (limits.max_generate_count > kMaxGenerateCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs.limits.max_generate_count: must be <= ", kMaxGenerateCount,
                     " (the ListOps generator's limit), got ", limits.max_generate_count));
  }
  for (const auto& [key, value] : {std::pair<const char*, absl::Duration>{
                                       "jobs.heartbeat_interval_ms", jobs.heartbeat_interval},
                                   {"jobs.heartbeat_timeout_ms", jobs.heartbeat_timeout},
                                   {"jobs.stop_grace_ms", jobs.stop_grace}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": must be > 0, got ", absl::ToInt64Milliseconds(value)));
    }
  }
  if (jobs.retention_sweep_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs.retention_sweep_interval_s: must be >= 1, got ",
                     absl::ToInt64Seconds(jobs.retention_sweep_interval)));
  }
  if (jobs.heartbeat_timeout <= jobs.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs.heartbeat_timeout_ms: must be > jobs.heartbeat_interval_ms (",
                     absl::ToInt64Milliseconds(jobs.heartbeat_interval), "), got ",
                     absl::ToInt64Milliseconds(jobs.heartbeat_timeout)));
  }
  // Automatic (0) resolves below the cap when the job starts: only explicit values are checked.
  if (limits.max_threads > 0 && jobs.threads_per_job > limits.max_threads) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs.threads_per_job: must be <= jobs.limits.max_threads (",
                     limits.max_threads, "), got ", jobs.threads_per_job));
  }
  return absl::OkStatus();
}

}  // namespace

std::int64_t MemoryBudgetBytes(const JobsConfig& jobs) {
  if (jobs.memory_budget_bytes > 0) return jobs.memory_budget_bytes;
  const std::int64_t limit = MemoryLimitBytes();
  return limit > 0 ? limit / 2 : std::int64_t{1} << 30;
}

int ThreadsPerJob(const JobsConfig& jobs, int num_cores) {
  if (jobs.threads_per_job > 0) return jobs.threads_per_job;
  const int free_cores = num_cores - jobs.serving_reserved_cores;
  return std::max(1, free_cores / std::max(1, jobs.max_concurrent));
}

namespace {

// `key`: tls or metrics_tls.
absl::Status ValidateTls(const std::string& key, const TlsConfig& tls) {
  if (!tls.cert_file.empty() && tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".key_file: required when ", key, ".cert_file is set"));
  }
  if (tls.cert_file.empty() && !tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".cert_file: required when ", key, ".key_file is set"));
  }
  if (tls.cert_file.empty() && !tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ".client_ca_file: requires ", key,
                                                   ".cert_file and ", key,
                                                   ".key_file (mTLS needs server TLS)"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePromotions(const ServerConfig& config) {
  const PromotionFollowConfig& follow = config.promotions.follow;
  if (follow.server.empty()) return absl::OkStatus();
  TS_RETURN_IF_ERROR(CheckHostPort("promotions.follow.server", follow.server));
  if (config.jobs.enabled) {
    return absl::InvalidArgumentError(
        "promotions.follow.server: needs jobs.enabled: false (a server that runs jobs serves its "
        "own promotions)");
  }
  if (follow.cache_dir.empty()) {
    return absl::InvalidArgumentError(
        "promotions.follow.cache_dir: required with promotions.follow.server");
  }
  if (follow.interval < absl::Milliseconds(100) || follow.timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        "promotions.follow: interval_ms and timeout_ms must be >= 100");
  }
  if (follow.cert_file.empty() != follow.key_file.empty()) {
    return absl::InvalidArgumentError("promotions.follow.tls: cert_file and key_file go together");
  }
  return CheckAtLeast({{"promotions.follow.max_checkpoint_bytes", follow.max_checkpoint_bytes, 1}});
}

}  // namespace

absl::Status ValidateServerConfig(const ServerConfig& config) {
  TS_RETURN_IF_ERROR(CheckHostPort("listen", config.listen));
  if (!config.metrics_listen.empty()) {
    TS_RETURN_IF_ERROR(CheckHostPort("metrics_listen", config.metrics_listen));
  }
  if (!config.http.listen.empty()) {
    TS_RETURN_IF_ERROR(CheckHostPort("http.listen", config.http.listen));
  }
  if (config.http.default_timeout < absl::ZeroDuration() ||
      config.http.keep_alive < absl::Milliseconds(1) ||
      config.http.read_timeout < absl::Seconds(1) ||
      config.http.header_timeout < absl::Milliseconds(100) ||
      config.http.body_timeout < absl::Milliseconds(100) ||
      config.http.write_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        "http: default_timeout_ms must be >= 0, keep_alive_ms >= 1, read_timeout_ms >= 1000 and "
        "header_timeout_ms, body_timeout_ms and write_timeout_ms >= 100");
  }
  if (config.http.max_connections < config.http.threads) {
    return absl::InvalidArgumentError(absl::StrCat("http.max_connections: must be >= http.threads ",
                                                   config.http.threads, ", got ",
                                                   config.http.max_connections));
  }
  TS_RETURN_IF_ERROR(CheckAtLeast({
      {"intra_op_threads", config.intra_op_threads, 0},
      {"grpc_threads", config.grpc_threads, 0},
      {"heap_keep_freed_bytes", config.heap_keep_freed_bytes, 0},
      {"onednn_primitive_cache_capacity", config.onednn_primitive_cache_capacity, 0},
      {"max_message_bytes", config.max_message_bytes, 1},
      {"max_concurrent_streams", config.max_concurrent_streams, 1},
      {"max_infer_batch", config.max_infer_batch, 1},
      {"http.threads", config.http.threads, 1},
      {"http.io_threads", config.http.io_threads, 1},
      {"http.max_connections_per_peer", config.http.max_connections_per_peer, 1},
      {"http.max_inflate_ratio", config.http.max_inflate_ratio, 1},
      {"http.max_header_bytes", config.http.max_header_bytes, 1024},
      {"http.max_json_depth", config.http.max_json_depth, 2},
      {"http.keep_alive_max_requests", config.http.keep_alive_max_requests, 1},
      {"http.max_body_bytes", config.http.max_body_bytes, 0},
      {"http.max_buffered_body_bytes", config.http.max_buffered_body_bytes, 0},
  }));
  const std::int64_t body_limit =
      config.http.max_body_bytes > 0 ? config.http.max_body_bytes : config.max_message_bytes;
  if (config.http.max_buffered_body_bytes > 0 && config.http.max_buffered_body_bytes < body_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("http.max_buffered_body_bytes: must be 0 or at least the body limit ",
                     body_limit, " (http.max_body_bytes, or max_message_bytes when it is 0), got ",
                     config.http.max_buffered_body_bytes));
  }
  // gRPC takes message limits as int.
  if (config.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("max_message_bytes: must be <= ", INT_MAX,
                                                   ", got ", config.max_message_bytes));
  }
  if (config.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shutdown_grace_ms: must be >= 0, got ", absl::ToInt64Milliseconds(config.shutdown_grace)));
  }
  if (config.state_dir.empty()) {
    return absl::InvalidArgumentError("state_dir: must not be empty");
  }
  if (config.data_root.empty()) {
    return absl::InvalidArgumentError("data_root: must not be empty");
  }

  TS_RETURN_IF_ERROR(ValidateTls("tls", config.tls));
  TS_RETURN_IF_ERROR(ValidateTls("metrics_tls", config.metrics.tls));

  int index = 0;
  for (const auto& [token, roles] : config.auth.tokens) {
    ++index;
    const std::string path = absl::StrCat("auth.tokens[#", index, "]");
    if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a token must be non-empty and contain no whitespace"));
    }
    if (roles.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": needs at least one role"));
    }
    for (const std::string& role : roles) TS_RETURN_IF_ERROR(CheckRole(path, role));
  }
  if (config.metrics.require_token && !config.metrics_listen.empty() &&
      std::none_of(config.auth.tokens.begin(), config.auth.tokens.end(), [](const auto& token) {
        return std::find(token.second.begin(), token.second.end(), kRoleMetrics) !=
               token.second.end();
      })) {
    return absl::InvalidArgumentError(
        "metrics_require_token: true, but no token in auth has the \"metrics\" role (Prometheus "
        "could never scrape)");
  }

  TS_RETURN_IF_ERROR(ValidateJobs(config.jobs));
  TS_RETURN_IF_ERROR(ValidatePromotions(config));

  std::set<std::string> names;
  for (std::size_t i = 0; i < config.models.size(); ++i) {
    const std::string path = absl::StrCat("models[", i, "]");
    TS_RETURN_IF_ERROR(ValidateModel(config.models[i], path));
    if (!names.insert(config.models[i].name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: duplicate model name \"", config.models[i].name, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml_text,
                                               const std::string& base_dir) {
  ServerConfig config;
  const auto read_root = [&config](const YAML::Node& root) {
    return ReadMap(
        root, "",
        {
            {"listen", String(&config.listen)},
            {"metrics_listen", String(&config.metrics_listen)},
            {"metrics_tls", Map({
                                {"cert_file", String(&config.metrics.tls.cert_file)},
                                {"key_file", String(&config.metrics.tls.key_file)},
                                {"client_ca_file", String(&config.metrics.tls.client_ca_file)},
                            })},
            {"metrics_require_token", Bool(&config.metrics.require_token)},
            {"metrics_finished_job_series_s",
             Duration(&config.metrics.finished_job_series, absl::Seconds(1))},
            {"nvml_library", String(&config.nvml_library)},
            {"intra_op_threads", Int(&config.intra_op_threads)},
            {"grpc_threads", Int(&config.grpc_threads)},
            {"heap_keep_freed_bytes", Int64(&config.heap_keep_freed_bytes)},
            {"cuda_allow_tf32", Bool(&config.cuda_allow_tf32)},
            {"onednn_primitive_cache_capacity", Int(&config.onednn_primitive_cache_capacity)},
            {"max_message_bytes", Int64(&config.max_message_bytes)},
            {"max_concurrent_streams", Int(&config.max_concurrent_streams)},
            {"max_infer_batch", Int64(&config.max_infer_batch)},
            {"http",
             Map({
                 {"listen", String(&config.http.listen)},
                 {"threads", Int(&config.http.threads)},
                 {"io_threads", Int(&config.http.io_threads)},
                 {"max_connections", Int(&config.http.max_connections)},
                 {"max_connections_per_peer", Int(&config.http.max_connections_per_peer)},
                 {"read_timeout_ms", Duration(&config.http.read_timeout, absl::Milliseconds(1))},
                 {"header_timeout_ms",
                  Duration(&config.http.header_timeout, absl::Milliseconds(1))},
                 {"body_timeout_ms", Duration(&config.http.body_timeout, absl::Milliseconds(1))},
                 {"write_timeout_ms", Duration(&config.http.write_timeout, absl::Milliseconds(1))},
                 {"max_json_depth", Int(&config.http.max_json_depth)},
                 {"max_body_bytes", Int64(&config.http.max_body_bytes)},
                 {"max_inflate_ratio", Int64(&config.http.max_inflate_ratio)},
                 {"max_buffered_body_bytes", Int64(&config.http.max_buffered_body_bytes)},
                 {"max_header_bytes", Int64(&config.http.max_header_bytes)},
                 {"default_timeout_ms",
                  Duration(&config.http.default_timeout, absl::Milliseconds(1))},
                 {"keep_alive_ms", Duration(&config.http.keep_alive, absl::Milliseconds(1))},
                 {"keep_alive_max_requests", Int(&config.http.keep_alive_max_requests)},
             })},
            {"shutdown_grace_ms", Duration(&config.shutdown_grace, absl::Milliseconds(1))},
            {"state_dir", String(&config.state_dir)},
            {"data_root", String(&config.data_root)},
            {"tls", Map({
                        {"cert_file", String(&config.tls.cert_file)},
                        {"key_file", String(&config.tls.key_file)},
                        {"client_ca_file", String(&config.tls.client_ca_file)},
                    })},
            {"auth",
             Map({
                 {"tokens",
                  [&config](const YAML::Node& tokens, const std::string& at) {
                    return ReadTokens(tokens, at, &config.auth);
                  }},
                 {"tokens_file", String(&config.auth.tokens_file)},
                 {"classify_diagnostic_options", Bool(&config.auth.classify_diagnostic_options)},
                 {"protect_discovery", Bool(&config.auth.protect_discovery)},
             })},
            {"models",
             [&](const YAML::Node& node, const std::string& path) {
               if (!node.IsSequence()) {
                 return NodeError(node, path,
                                  absl::StrCat("expected a list of models, got ", KindOf(node)));
               }
               for (std::size_t i = 0; i < node.size(); ++i) {
                 ModelConfig model;
                 TS_RETURN_IF_ERROR(ReadModel(node[i], absl::StrCat(path, "[", i, "]"), &model));
                 config.models.push_back(std::move(model));
               }
               return absl::OkStatus();
             }},
            {"jobs", Jobs(&config.jobs)},
            {"promotions", Promotions(&config.promotions)},
        });
  };
  TS_RETURN_IF_ERROR(ReadDocument(yaml_text, read_root));

  for (std::string* path :
       {&config.state_dir, &config.data_root, &config.tls.cert_file, &config.tls.key_file,
        &config.tls.client_ca_file, &config.metrics.tls.cert_file, &config.metrics.tls.key_file,
        &config.metrics.tls.client_ca_file, &config.auth.tokens_file,
        &config.promotions.follow.token_file, &config.promotions.follow.ca_file,
        &config.promotions.follow.cert_file, &config.promotions.follow.key_file,
        &config.promotions.follow.cache_dir}) {
    *path = ResolvePath(base_dir, *path);
  }
  for (ModelConfig& model : config.models) {
    model.checkpoint = ResolvePath(base_dir, model.checkpoint);
    model.calibration = ResolvePath(base_dir, model.calibration);
    model.batching.model_name = model.name;
  }
  if (!config.auth.tokens_file.empty()) {
    TS_RETURN_IF_ERROR(ReadTokensFile(config.auth.tokens_file, &config.auth));
  }
  TS_RETURN_IF_ERROR(ValidateServerConfig(config));
  return config;
}

absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "config file"));
  std::error_code error;
  fs::path base_dir = fs::absolute(fs::path(path), error).parent_path();
  if (error) base_dir = fs::path(path).parent_path();
  return Prefixed(ParseServerConfig(text, base_dir.string()), path + ": ");
}

absl::StatusOr<ModelConfig> ParseModelFlag(const std::string& flag) {
  const std::size_t equals = flag.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == flag.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model \"", flag, "\": expected NAME=CHECKPOINT"));
  }
  ModelConfig model;
  model.name = flag.substr(0, equals);
  model.checkpoint = flag.substr(equals + 1);
  model.batching.model_name = model.name;
  TS_RETURN_IF_ERROR(ValidateModel(model, "--model"));
  return model;
}

}  // namespace ts::server

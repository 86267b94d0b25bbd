#include "server/serving/promotion_follower.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/checkpoint_transfer.h"
#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "model/checkpoints/checkpoint.h"
#include "server/serving/model_swap.h"
#include "taylorshift/v1/jobs.grpc.pb.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;
namespace {

constexpr char kCurrentFile[] = "current";
constexpr char kIncomingFile[] = "incoming.tsckpt";
// Refused versions remembered per model (sent as if_none_match with the served one; the RPC
// takes 16).
constexpr std::size_t kMaxRefused = 8;

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const PromotionFollowConfig& follow) {
  const bool tls = follow.tls || !follow.ca_file.empty() || !follow.cert_file.empty();
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!follow.ca_file.empty()) {
    TS_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                        ReadFile(follow.ca_file, "promotions.follow.tls.ca_file"));
  }
  if (!follow.cert_file.empty()) {
    TS_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                        ReadFile(follow.cert_file, "promotions.follow.tls.cert_file"));
    TS_ASSIGN_OR_RETURN(ssl.pem_private_key,
                        ReadFile(follow.key_file, "promotions.follow.tls.key_file"));
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::string> ReadToken(const std::string& token_file) {
  if (token_file.empty()) return std::string();
  TS_ASSIGN_OR_RETURN(std::string token, ReadFile(token_file, "promotions.follow.token_file"));
  return std::string(absl::StripAsciiWhitespace(token));
}

bool Unreachable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

struct PromotionFollower::State {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Jobs::Stub> stub;
};

absl::StatusOr<std::unique_ptr<PromotionFollower>> PromotionFollower::Create(
    PromotionFollowerOptions options, ModelRegistry* registry, Metrics* metrics, Clock* clock) {
  const PromotionFollowConfig& follow = options.follow;
  TS_ASSIGN_OR_RETURN(auto credentials, Credentials(follow));
  TS_RETURN_IF_ERROR(ReadToken(follow.token_file).status());
  TS_RETURN_IF_ERROR(CreateDirectories(follow.cache_dir));
  grpc::ChannelArguments arguments;
  if (!follow.tls_server_name.empty()) arguments.SetSslTargetNameOverride(follow.tls_server_name);
  // Reconnect soon after an outage: the poll interval, not gRPC's growing backoff, sets the pace.
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto state = std::make_unique<State>();
  state->channel = grpc::CreateCustomChannel(follow.server, credentials, arguments);
  state->stub = pb::Jobs::NewStub(state->channel);
  return std::unique_ptr<PromotionFollower>(
      new PromotionFollower(std::move(options), std::move(state), registry, metrics, clock));
}

PromotionFollower::PromotionFollower(PromotionFollowerOptions options, std::unique_ptr<State> state,
                                     ModelRegistry* registry, Metrics* metrics, Clock* clock)
    : options_(std::move(options)),
      state_(std::move(state)),
      registry_(registry),
      metrics_(metrics),
      clock_(clock) {}

PromotionFollower::~PromotionFollower() { Stop(); }

void PromotionFollower::Log(const std::string& line) const {
  if (options_.log) options_.log(absl::StrCat("promotions.follow: ", line));
}

std::string PromotionFollower::ModelDir(const std::string& name) const {
  return (fs::path(options_.follow.cache_dir) / name).string();
}

absl::StatusOr<std::shared_ptr<ServedModel>> PromotionFollower::LoadCached(
    const ServedModel& served, const std::string& path) const {
  TS_ASSIGN_OR_RETURN(const LoadedCheckpoint checkpoint, LoadCheckpoint(path));
  if (const auto differences =
          TaskDifferences(served.metadata(), checkpoint.metadata, served.options().max_length(),
                          checkpoint.options.max_length());
      !differences.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it answers another task than the configured model: ", absl::StrJoin(differences, "; ")));
  }
  return LoadVersion(served.config(), path, checkpoint.options.max_length(), metrics_, clock_);
}

void PromotionFollower::RestoreFromCache() {
  for (const std::string& name : options_.models) {
    const std::string dir = ModelDir(name);
    std::error_code error;
    if (!fs::exists(fs::path(dir) / kCurrentFile, error)) continue;
    const auto served = registry_->Find(name);
    auto version = ReadFile((fs::path(dir) / kCurrentFile).string(), "followed version");
    if (served == nullptr || !version.ok()) continue;
    const std::string path =
        (fs::path(dir) / absl::StrCat(absl::StripAsciiWhitespace(*version), ".tsckpt")).string();
    auto model = LoadCached(*served, path);
    if (!model.ok()) {
      Log(absl::StrCat("model '", name, "': the cached version in ", dir,
                       " is not served: ", model.status().message()));
      continue;
    }
    SwapIn(*registry_, *model, metrics_);
    Log(absl::StrCat("model '", name, "' serves version ", (*model)->version(),
                     " from the cache (last followed from ", options_.follow.server, ")"));
  }
}

void PromotionFollower::Start() {
  thread_ = std::thread([this] {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.Unlock();
      PollOnce();
      mu_.Lock();
      // A wall-clock wait: the poll talks to another process, on real time.
      const absl::Time until = absl::Now() + options_.follow.interval;
      while (!stopping_ && !wake_.WaitWithDeadline(&mu_, until)) {
      }
    }
  });
}

void PromotionFollower::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  wake_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void PromotionFollower::PollOnce() {
  for (const std::string& name : options_.models) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    Poll(name);
  }
}

void PromotionFollower::Poll(const std::string& name) {
  const auto served = registry_->Find(name);
  if (served == nullptr) return;
  auto token = ReadToken(options_.follow.token_file);
  if (!token.ok()) {
    Failed(name, "rpc", token.status());
    return;
  }
  pb::DownloadCheckpointRequest request;
  request.set_model(name);
  request.add_if_none_match(served->version());
  for (const std::string& refused : refused_[name]) request.add_if_none_match(refused);

  const std::string dir = ModelDir(name);
  if (absl::Status made = CreateDirectories(dir); !made.ok()) {
    Failed(name, "download", made);
    return;
  }
  const std::string incoming = (fs::path(dir) / kIncomingFile).string();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.follow.timeout));
  if (!token->empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", *token));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    in_flight_ = &context;
  }
  auto reader = state_->stub->DownloadCheckpoint(&context, request);
  auto header = api::ReceiveCheckpoint(
      context, *reader, incoming, static_cast<std::uint64_t>(options_.follow.max_checkpoint_bytes));
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
  }
  if (!header.ok()) {
    const absl::StatusCode code = header.status().code();
    Failed(name,
           Unreachable(code) ? "unavailable"
           : code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kResourceExhausted
               ? "download"
               : "rpc",
           header.status());
    return;
  }
  if (header->not_modified()) {
    // A version refused before is no sync: the replica still serves something else, and the
    // last-sync gauge should age for as long as that lasts.
    if (header->version() == served->version()) Succeeded(name);
    return;
  }
  std::string reason;
  if (absl::Status adopted = Adopt(name, incoming, header->version(), header->source(), &reason);
      !adopted.ok()) {
    std::error_code error;
    fs::remove(incoming, error);
    Failed(name, reason, adopted);
    return;
  }
  Succeeded(name);
}

absl::Status PromotionFollower::Adopt(const std::string& name, const std::string& incoming,
                                      const std::string& version, const std::string& source,
                                      std::string* reason) {
  const auto served = registry_->Find(name);
  if (served == nullptr) return absl::OkStatus();
  const auto refuse = [&](const std::string& why, const absl::Status& status) {
    *reason = why;
    auto& refused = refused_[name];
    if (refused.size() >= kMaxRefused) refused.erase(refused.begin());
    refused.insert(version);
    return Prefixed(status, absl::StrCat("version ", version, " (", source, ") refused: "));
  };
  // The model layer checks the file end to end (magic, payload CRC, tensors).
  auto checkpoint = LoadCheckpoint(incoming);
  if (!checkpoint.ok()) return refuse("invalid", checkpoint.status());
  if (const auto differences =
          TaskDifferences(served->metadata(), checkpoint->metadata, served->options().max_length(),
                          checkpoint->options.max_length());
      !differences.empty()) {
    return refuse("incompatible", absl::FailedPreconditionError(absl::StrCat(
                                      "it answers another task than the version served (",
                                      served->version(), "): ", absl::StrJoin(differences, "; "))));
  }
  const std::string dir = ModelDir(name);
  const std::string path = (fs::path(dir) / absl::StrCat(version, ".tsckpt")).string();
  std::error_code error;
  fs::rename(incoming, path, error);
  if (error) {
    *reason = "download";
    return absl::InternalError(
        absl::StrCat("cannot rename ", incoming, " to ", path, ": ", error.message()));
  }
  auto model =
      LoadVersion(served->config(), path, checkpoint->options.max_length(), metrics_, clock_);
  if (!model.ok()) return refuse("load", model.status());
  SwapIn(*registry_, *model, metrics_);
  if (absl::Status recorded =
          WriteFileAtomically((fs::path(dir) / kCurrentFile).string(), absl::StrCat(version, "\n"));
      !recorded.ok()) {
    Log(absl::StrCat("model '", name,
                     "': cannot record the followed version (a restart serves "
                     "the configured one until the next poll): ",
                     recorded.message()));
  }
  // Only the version served now stays in the cache.
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".tsckpt" && entry.path() != fs::path(path)) {
      fs::remove(entry.path(), error);
    }
  }
  Log(absl::StrCat("model '", name, "' now serves version ", version, " (", source, " on ",
                   options_.follow.server, ", was ", served->version(), ")"));
  return absl::OkStatus();
}

void PromotionFollower::Failed(const std::string& name, const std::string& reason,
                               const absl::Status& status) {
  if (metrics_ != nullptr) metrics_->RecordPromotionFollowError(name, reason);
  if (reason == "unavailable") {
    // Once per outage, not once per poll.
    if (failed_polls_++ == 0) {
      Log(absl::StrCat("cannot reach the jobs server ", options_.follow.server, " (",
                       status.message(),
                       "); serving the versions this replica has, trying again "
                       "every ",
                       absl::FormatDuration(options_.follow.interval)));
    }
    return;
  }
  const std::string message = absl::StrCat(reason, ": ", status.ToString());
  std::string& last = last_error_[name];
  if (last != message) Log(absl::StrCat("model '", name, "': ", message));
  last = message;
}

void PromotionFollower::Succeeded(const std::string& name) {
  if (failed_polls_ > 0) {
    Log(absl::StrCat("the jobs server ", options_.follow.server, " answers again (after ",
                     failed_polls_, " failed calls)"));
    failed_polls_ = 0;
  }
  last_error_.erase(name);
  if (metrics_ != nullptr) {
    metrics_->SetPromotionFollowLastSync(name,
                                         absl::ToDoubleSeconds(clock_->Now() - absl::UnixEpoch()));
  }
}

}  // namespace ts::server

// PromotionFollower: makes a serving replica (jobs off) serve what a jobs server serves — the
// promotions made there — without an image rebuild or a restart.
//
// Every interval it asks the jobs server (Jobs.DownloadCheckpoint by model name, with the
// versions it has as if_none_match) for the version served there under each of its own models'
// names. A new one is downloaded into <cache_dir>/<model>/ (a temporary file renamed into place
// once its size and CRC-32 match the header), loaded with the model layer (which checks the
// checkpoint's own CRC and structure), and checked against the version served here: the same
// labels in the same order and the same modality. One that differs is refused — logged, counted
// (taylorshift_promotion_follow_errors_total{reason="incompatible"}), never downloaded again —
// and the old version keeps serving. An accepted one is swapped in through the promotions' own
// path (model_swap.h: no request fails) and recorded in <cache_dir>/<model>/current, so that a
// restart serves it (RestoreFromCache) before the first poll. While the jobs server cannot be
// reached the replica keeps serving what it has, logs once per outage and once when it is back,
// and tries again every interval.
//
// Thread safety: RestoreFromCache before Start; Start and Stop from one thread. Polls run on the
// follower's own thread. What it points to must outlive it.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/serving/model_registry.h"

namespace grpc {
class ClientContext;
}

namespace ts::server {

struct PromotionFollowerOptions {
  PromotionFollowConfig follow;
  std::vector<std::string> models;              // the names followed (the configured models)
  std::function<void(const std::string&)> log;  // one line per event; may be empty
};

class PromotionFollower {
 public:
  // INVALID_ARGUMENT / NOT_FOUND when the TLS files or the token file cannot be read; INTERNAL
  // when cache_dir cannot be made. Connects lazily. `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<PromotionFollower>> Create(PromotionFollowerOptions options,
                                                                   ModelRegistry* registry,
                                                                   Metrics* metrics, Clock* clock);
  ~PromotionFollower();  // Stop()

  // Serves each model's last followed version from the cache, when there is one that loads and
  // matches the configured model (else logs why and keeps the configured one).
  void RestoreFromCache();
  // Polls at once, then every interval, on its own thread.
  void Start();
  // Cancels a poll in flight and joins the thread. Idempotent.
  void Stop();
  // One poll of every model (what the thread does each interval).
  void PollOnce();

 private:
  struct State;
  PromotionFollower(PromotionFollowerOptions options, std::unique_ptr<State> state,
                    ModelRegistry* registry, Metrics* metrics, Clock* clock);
  void Poll(const std::string& name);
  // The cached checkpoint `path` loaded with `served`'s settings, when it answers its task.
  absl::StatusOr<std::shared_ptr<ServedModel>> LoadCached(const ServedModel& served,
                                                          const std::string& path) const;
  // Checks, swaps in and records the checkpoint downloaded to `incoming`.
  absl::Status Adopt(const std::string& name, const std::string& incoming,
                     const std::string& version, const std::string& source, std::string* reason);
  void Failed(const std::string& name, const std::string& reason, const absl::Status& status);
  void Succeeded(const std::string& name);
  void Log(const std::string& line) const;
  std::string ModelDir(const std::string& name) const;

  const PromotionFollowerOptions options_;
  const std::unique_ptr<State> state_;  // the channel and stub
  ModelRegistry* const registry_;
  Metrics* const metrics_;
  Clock* const clock_;

  // Versions refused per model (not downloaded again), and the last error logged per model.
  std::map<std::string, std::set<std::string>> refused_;
  std::map<std::string, std::string> last_error_;
  int failed_polls_ = 0;  // calls that could not reach the jobs server, in this outage

  absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;  // last
};

}  // namespace ts::server

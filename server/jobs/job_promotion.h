// CheckpointPromoter: serves a checkpoint — a training job's best or last one, or a file in the
// data root — as a model version, and serves the promoted versions again after a restart.
//
// Promote copies the checkpoint to models/<name>/<version>.tsckpt (version = the CRC-32 of its
// bytes, written atomically), loads it with the settings of the model it replaces (or
// promoted_model_defaults for a new name), records the promotion in the store and hot-swaps it
// into the registry (requests holding the old version finish on it). With
// require_at_least_current_accuracy, a candidate whose recorded validation accuracy is below the
// served version's (or unknown) is FAILED_PRECONDITION. The task guard refuses (FAILED_PRECONDITION
// naming each difference) a candidate whose labels, modality or max length differ from the served
// version's, unless the request sets force. Rollback serves the version before the current one
// again, down to the configuration's own checkpoint, by the same hot swap, and records it, so
// that RestorePromotions serves it after a restart. Promotions and rollbacks are serialised with
// each other and with job deletions (JobContext::files_mu). Thread-safe; what it points to must
// outlive it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/config.h"
#include "server/jobs/job_checkpoints.h"
#include "server/jobs/job_context.h"
#include "server/jobs/promotion_store.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class ModelRegistry;
class ServedModel;

// What a promotion did.
struct Promotion {
  std::shared_ptr<ServedModel> model;  // the version now served
  std::string previous_version;        // empty for a new name
  std::optional<double> validation_accuracy;
  std::optional<double> previous_validation_accuracy;
};

// The file a served model's current version was loaded from, and that version.
struct ServedCheckpoint {
  std::string path;
  std::string version;
};

struct CheckpointPromoterOptions {
  std::string models_dir;  // <state_dir>/models
  // Settings of a model first served by a promotion (a name not in the configuration).
  ModelConfig promoted_model_defaults;
  // The configured models: a rollback past a name's first promotion serves its checkpoint again.
  std::vector<ModelConfig> configured_models;
  // Called after a promotion serves a model (health status, logs). May be empty.
  std::function<void(const std::string& model)> on_model_served;
};

class CheckpointPromoter {
 public:
  CheckpointPromoter(CheckpointPromoterOptions options, const CheckpointResolver* checkpoints,
                     ModelRegistry* registry, PromotionStore* promotions, JobContext* context)
      : options_(std::move(options)),
        checkpoints_(checkpoints),
        registry_(registry),
        promotions_(promotions),
        context_(context) {}

  // INVALID_ARGUMENT for a bad model name or no source; the resolver's errors for the source
  // ("job_id: ...", "checkpoint: ..."); the store's error when the promotion cannot be recorded
  // (then nothing is served); FAILED_PRECONDITION from the accuracy gate and the task guard.
  // `actor` (Authorizer::Identity) is recorded as who promoted.
  absl::StatusOr<Promotion> Promote(const taylorshift::v1::PromoteCheckpointRequest& request,
                                    const std::string& actor = "anonymous");

  // Serves the version that was current before the current one of `model` (its previous_version
  // is the one left). INVALID_ARGUMENT for a bad name; FAILED_PRECONDITION naming the model when
  // there is nothing to roll back to; the loader's and the store's errors (nothing changes).
  absl::StatusOr<Promotion> Rollback(const std::string& model,
                                     const std::string& actor = "anonymous");

  // Every promotion and rollback of `model`, oldest first. INVALID_ARGUMENT for a bad name.
  absl::StatusOr<std::vector<PromotionRecord>> History(const std::string& model) const;

  // Serves the latest promotion of each model name again (call once, after the configured models
  // are loaded). A promotion whose checkpoint cannot be loaded is logged and skipped.
  void RestorePromotions();

  // Where the version served under `model` was loaded from (a promoted copy under models/ or a
  // configured checkpoint). NOT_FOUND naming the model and listing the served ones.
  absl::StatusOr<ServedCheckpoint> ServedCheckpointOf(const std::string& model) const;

 private:
  // The configured model named `name`, or null.
  const ModelConfig* Configured(const std::string& name) const;

  const CheckpointPromoterOptions options_;
  const CheckpointResolver* const checkpoints_;
  ModelRegistry* const registry_;
  PromotionStore* const promotions_;
  JobContext* const context_;
};

}  // namespace ts::server

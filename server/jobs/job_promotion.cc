#include "server/jobs/job_promotion.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "model/checkpoints/checkpoint.h"
#include "server/serving/model_registry.h"
#include "server/serving/model_swap.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

namespace {

constexpr char kAccuracyKey[] = "validation_accuracy";

std::optional<double> RecordedAccuracy(const CheckpointMetadata& metadata) {
  const auto it = metadata.provenance.find(kAccuracyKey);
  double value = 0;
  if (it == metadata.provenance.end() || !absl::SimpleAtod(it->second, &value)) return {};
  return value;
}

absl::Status CheckName(const std::string& model) {
  // The same name rule as configured models.
  if (!IsValidName(model)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: must match ", kNameRule, ", got ", Quoted(model)));
  }
  return absl::OkStatus();
}

}  // namespace

const ModelConfig* CheckpointPromoter::Configured(const std::string& name) const {
  for (const ModelConfig& config : options_.configured_models) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

absl::StatusOr<Promotion> CheckpointPromoter::Promote(const pb::PromoteCheckpointRequest& request,
                                                      const std::string& actor) {
  TS_RETURN_IF_ERROR(CheckName(request.model()));
  std::string source_path;
  std::string source;
  switch (request.source_case()) {
    case pb::PromoteCheckpointRequest::kJobId: {
      auto path = checkpoints_->JobCheckpoint(request.job_id(), request.which());
      if (!path.ok()) return Prefixed(path.status(), "job_id: ");
      source_path = *path;
      source = absl::StrCat("job:", request.job_id(), ":",
                            request.which() == pb::CHECKPOINT_CHOICE_LAST ? "last" : "best");
      break;
    }
    case pb::PromoteCheckpointRequest::kCheckpoint: {
      TS_ASSIGN_OR_RETURN(source_path, checkpoints_->Resolve(request.checkpoint(), "checkpoint"));
      source = absl::StrCat("checkpoint:", request.checkpoint());
      break;
    }
    default:
      return absl::InvalidArgumentError("source: give job_id or checkpoint");
  }
  absl::MutexLock files_lock(&context_->files_mu);
  TS_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(source_path, "checkpoint"));
  auto candidate = LoadCheckpoint(source_path);
  if (!candidate.ok()) return Prefixed(candidate.status(), "checkpoint: ");

  Promotion promotion;
  promotion.validation_accuracy = RecordedAccuracy(candidate->metadata);
  const auto current = registry_->Find(request.model());
  if (current != nullptr) {
    promotion.previous_version = current->version();
    promotion.previous_validation_accuracy = RecordedAccuracy(current->metadata());
  }
  if (request.require_at_least_current_accuracy() && current != nullptr) {
    if (!promotion.validation_accuracy || !promotion.previous_validation_accuracy) {
      return absl::FailedPreconditionError(
          absl::StrCat("require_at_least_current_accuracy: ",
                       !promotion.validation_accuracy ? "the candidate" : "the served version",
                       " has no recorded validation accuracy"));
    }
    if (*promotion.validation_accuracy < *promotion.previous_validation_accuracy) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "require_at_least_current_accuracy: the candidate's validation accuracy %.4f is below "
          "the served version's %.4f",
          *promotion.validation_accuracy, *promotion.previous_validation_accuracy));
    }
  }
  bool forced = false;  // the guard found differences and force overrode it
  if (current != nullptr) {
    const auto differences =
        TaskDifferences(current->metadata(), candidate->metadata, current->options().max_length(),
                        candidate->options.max_length());
    if (!differences.empty() && !request.force()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", request.model(), "' (version ", current->version(),
          ") answers another task than the candidate: ", absl::StrJoin(differences, "; "),
          "; pass force to replace it"));
    }
    forced = !differences.empty();
  }
  const std::string version = CheckpointVersion(bytes);
  const std::string dir = (fs::path(options_.models_dir) / request.model()).string();
  TS_RETURN_IF_ERROR(CreateDirectories(dir));
  const std::string destination = (fs::path(dir) / absl::StrCat(version, ".tsckpt")).string();
  TS_RETURN_IF_ERROR(WriteFileAtomically(destination, bytes));

  ModelConfig config = current != nullptr ? current->config() : options_.promoted_model_defaults;
  config.name = request.model();
  TS_ASSIGN_OR_RETURN(auto model, LoadVersion(config, destination, candidate->options.max_length(),
                                              context_->metrics, context_->clock));

  PromotionRecord record;
  record.model = request.model();
  record.version = version;
  record.checkpoint = destination;
  record.source = source;
  record.validation_accuracy = promotion.validation_accuracy;
  record.time_ms = absl::ToUnixMillis(context_->clock->Now());
  record.job_id = request.job_id();
  record.actor = actor;
  record.kind = "promote";
  record.forced = forced;
  if (absl::Status s = promotions_->RecordPromotion(record); !context_->StoreWriteOk(
          s, "record_promotion", request.job_id().empty() ? "-" : request.job_id(),
          absl::StrCat("the promotion of ", source, " to model '", request.model(), "' version ",
                       version))) {
    return s;
  }

  SwapIn(*registry_, model, context_->metrics);
  promotion.model = model;
  context_->Log(absl::StrCat("model '", request.model(), "' now serves version ", version, " (",
                             source,
                             promotion.previous_version.empty()
                                 ? ", new model)"
                                 : absl::StrCat(", was ", promotion.previous_version, ")")));
  if (options_.on_model_served) options_.on_model_served(request.model());
  return promotion;
}

absl::StatusOr<Promotion> CheckpointPromoter::Rollback(const std::string& model,
                                                       const std::string& actor) {
  TS_RETURN_IF_ERROR(CheckName(model));
  absl::MutexLock files_lock(&context_->files_mu);
  TS_ASSIGN_OR_RETURN(const auto history, promotions_->PromotionHistory(model));
  // The promotions in force, oldest first: each rollback undid the latest one before it.
  std::vector<const PromotionRecord*> stack;
  for (const PromotionRecord& record : history) {
    if (record.kind == "rollback") {
      if (!stack.empty()) stack.pop_back();
    } else {
      stack.push_back(&record);
    }
  }
  const auto current = registry_->Find(model);
  if (current == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", Quoted(model), ": nothing to roll back (it is not served)"));
  }
  if (stack.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", Quoted(model), ": nothing to roll back to (",
        history.empty() ? "it was never promoted"
                        : "it already serves its configured checkpoint, the first version",
        ")"));
  }
  stack.pop_back();
  const ModelConfig* configured = Configured(model);
  if (stack.empty() && configured == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", Quoted(model), ": nothing to roll back to (version ", current->version(),
        " is its first promotion and the configuration has no checkpoint for it)"));
  }
  // The file and the settings to serve it with: the earlier promotion's copy with the served
  // version's settings, or the configuration's model as configured.
  ModelConfig config = stack.empty() ? *configured : current->config();
  const std::string path = stack.empty() ? configured->checkpoint : stack.back()->checkpoint;
  auto loaded = LoadCheckpoint(path);
  if (!loaded.ok()) return Prefixed(loaded.status(), "rollback: ");
  TS_ASSIGN_OR_RETURN(auto served, LoadVersion(config, path, loaded->options.max_length(),
                                               context_->metrics, context_->clock));

  PromotionRecord record;
  record.model = model;
  record.version = served->version();
  record.kind = "rollback";
  record.actor = actor;
  record.time_ms = absl::ToUnixMillis(context_->clock->Now());
  if (stack.empty()) {
    record.source = "config";  // checkpoint stays empty: the configuration's own
  } else {
    record.checkpoint = path;
    record.source = stack.back()->source;
    record.job_id = stack.back()->job_id;
  }
  record.validation_accuracy = RecordedAccuracy(loaded->metadata);
  if (absl::Status s = promotions_->RecordPromotion(record); !context_->StoreWriteOk(
          s, "record_promotion", "-",
          absl::StrCat("the rollback of model '", model, "' to version ", record.version))) {
    return s;
  }

  Promotion promotion;
  promotion.previous_version = current->version();
  promotion.previous_validation_accuracy = RecordedAccuracy(current->metadata());
  promotion.validation_accuracy = record.validation_accuracy;
  SwapIn(*registry_, served, context_->metrics);
  promotion.model = served;
  context_->Log(absl::StrCat("model '", model, "' rolled back to version ", record.version, " (",
                             record.source, ", was ", promotion.previous_version, ")"));
  if (options_.on_model_served) options_.on_model_served(model);
  return promotion;
}

absl::StatusOr<std::vector<PromotionRecord>> CheckpointPromoter::History(
    const std::string& model) const {
  TS_RETURN_IF_ERROR(CheckName(model));
  return promotions_->PromotionHistory(model);
}

void CheckpointPromoter::RestorePromotions() {
  auto promotions = promotions_->CurrentPromotions();
  if (!promotions.ok()) {
    context_->Log(absl::StrCat("cannot read promotions: ", promotions.status().message()));
    return;
  }
  for (const auto& record : *promotions) {
    // Recorded before the name rule excluded ".", ".." and dotted names: never served again.
    if (!IsValidName(record.model)) {
      context_->Log(absl::StrCat("promoted model ", Quoted(record.model), " version ",
                                 record.version, " not restored: the name does not match ",
                                 kNameRule));
      continue;
    }
    // Rolled back to the configuration's checkpoint: the configured model, already served.
    if (record.checkpoint.empty()) {
      context_->Log(absl::StrCat("model '", record.model, "' serves its configured checkpoint (",
                                 "rolled back to version ", record.version, ")"));
      continue;
    }
    ModelConfig config = options_.promoted_model_defaults;
    if (const auto current = registry_->Find(record.model); current != nullptr) {
      config = current->config();
    }
    config.name = record.model;
    auto loaded = LoadCheckpoint(record.checkpoint);
    auto model = LoadVersion(config, record.checkpoint,
                             loaded.ok() ? loaded->options.max_length() : config.max_length,
                             context_->metrics, context_->clock);
    if (!model.ok()) {
      context_->Log(absl::StrCat("promoted model '", record.model, "' version ", record.version,
                                 " not restored: ", model.status().message()));
      continue;
    }
    SwapIn(*registry_, *model, context_->metrics);
    context_->Log(absl::StrCat(
        "model '", record.model, "' version ", (*model)->version(), " restored from ",
        record.kind == "rollback" ? "rollback" : "promotion", " (", record.source, ")"));
    if (options_.on_model_served) options_.on_model_served(record.model);
  }
}

absl::StatusOr<ServedCheckpoint> CheckpointPromoter::ServedCheckpointOf(
    const std::string& model) const {
  const auto served = registry_->Find(model);
  if (served == nullptr) {
    std::vector<std::string> names;
    for (const auto& m : registry_->List()) names.push_back(m->name());
    return absl::NotFoundError(absl::StrCat("model ", Quoted(model), " is not served (",
                                            names.empty() ? "none are" : absl::StrJoin(names, ", "),
                                            ")"));
  }
  return ServedCheckpoint{served->config().checkpoint, served->version()};
}

}  // namespace ts::server

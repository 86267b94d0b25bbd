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

}  // namespace

absl::StatusOr<Promotion> CheckpointPromoter::Promote(const pb::PromoteCheckpointRequest& request) {
  // The same name rule as configured models.
  if (!IsValidName(request.model())) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: must match ", kNameRule, ", got ", Quoted(request.model())));
  }
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
    context_->Log(absl::StrCat("model '", record.model, "' version ", (*model)->version(),
                               " restored from promotion (", record.source, ")"));
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

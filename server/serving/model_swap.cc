#include "server/serving/model_swap.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ts::server {

std::vector<std::string> TaskDifferences(const CheckpointMetadata& served,
                                         const CheckpointMetadata& candidate,
                                         std::int64_t served_max_length,
                                         std::int64_t candidate_max_length) {
  std::vector<std::string> differences;
  if (served.labels != candidate.labels) {
    differences.push_back(absl::StrCat("labels differ: served [",
                                       absl::StrJoin(served.labels, ", "), "], candidate [",
                                       absl::StrJoin(candidate.labels, ", "), "]"));
  }
  if (served.modality != candidate.modality) {
    differences.push_back(absl::StrCat("modality differs: served ", served.modality, ", candidate ",
                                       candidate.modality));
  }
  if (served_max_length > 0 && candidate_max_length > 0 &&
      served_max_length != candidate_max_length) {
    differences.push_back(absl::StrCat("max length differs: served ", served_max_length,
                                       ", candidate ", candidate_max_length));
  }
  return differences;
}

absl::StatusOr<std::shared_ptr<ServedModel>> LoadVersion(ModelConfig base,
                                                         const std::string& checkpoint,
                                                         std::int64_t checkpoint_max_length,
                                                         Metrics* metrics, Clock* clock) {
  base.checkpoint = checkpoint;
  if (base.max_length > checkpoint_max_length) base.max_length = 0;
  return ServedModel::Load(base, metrics, clock);
}

std::shared_ptr<ServedModel> SwapIn(ModelRegistry& registry, std::shared_ptr<ServedModel> model,
                                    Metrics* metrics) {
  const std::string name = model->name();
  const std::string version = model->version();
  auto previous = registry.Put(std::move(model));
  if (previous != nullptr && metrics != nullptr && previous->version() != version) {
    metrics->RemoveModelInfo(name, previous->version());
  }
  return previous;
}

}  // namespace ts::server

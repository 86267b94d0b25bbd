#include "server/serving/model_swap.h"

#include <utility>

namespace ts::server {

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

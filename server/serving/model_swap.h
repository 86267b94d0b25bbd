// Serving a new version of a model: the one hot-swap path that a promotion, a restored promotion
// and a serving replica's followed promotion (promotion_follower.h) take.
//
// LoadVersion loads a checkpoint with the serving settings of the model it replaces (or the
// defaults for a new name), so a new version keeps its batching, policy and device; a configured
// max_length over the new checkpoint's falls back to the checkpoint's. SwapIn serves it: requests
// that already found the old version finish on it, new ones get the new one (ModelRegistry::Put),
// and the old version's taylorshift_model_info series goes. Thread-safe as ModelRegistry.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/serving/model_registry.h"

namespace ts::server {

// `base` (its name kept) served from `checkpoint`, whose encoder accepts at most
// `checkpoint_max_length` tokens. Errors: ServedModel::Load's.
absl::StatusOr<std::shared_ptr<ServedModel>> LoadVersion(ModelConfig base,
                                                         const std::string& checkpoint,
                                                         std::int64_t checkpoint_max_length,
                                                         Metrics* metrics, Clock* clock);

// Serves `model` under its name; returns the version it replaced (null for a new name).
// `metrics` may be null.
std::shared_ptr<ServedModel> SwapIn(ModelRegistry& registry, std::shared_ptr<ServedModel> model,
                                    Metrics* metrics);

}  // namespace ts::server

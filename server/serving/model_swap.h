// Serving a new version of a model: the one hot-swap path that a promotion, a restored promotion
// and a serving replica's followed promotion (promotion_follower.h) take.
//
// LoadVersion loads a checkpoint with the serving settings of the model it replaces (or the
// defaults for a new name), so a new version keeps its batching, policy and device; a configured
// max_length over the new checkpoint's falls back to the checkpoint's. SwapIn serves it: requests
// that already found the old version finish on it, new ones get the new one (ModelRegistry::Put),
// and the old version's taylorshift_model_info series goes. TaskDifferences is the one check of
// whether a checkpoint answers the task a served version answers (a promotion's guard and a
// followed promotion's). Thread-safe as ModelRegistry.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/serving/model_registry.h"

namespace ts::server {

// What makes `candidate` answer another task than `served`, one sentence each: its labels (names
// and order), its modality (bytes or pixels) and, when both are given (> 0), its encoder's max
// length. E.g. "labels differ: served [a, b], candidate [0, 1, 2]". Empty when they agree.
std::vector<std::string> TaskDifferences(const CheckpointMetadata& served,
                                         const CheckpointMetadata& candidate,
                                         std::int64_t served_max_length = 0,
                                         std::int64_t candidate_max_length = 0);

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

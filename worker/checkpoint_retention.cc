#include "worker/checkpoint_retention.h"

#include <algorithm>
#include <utility>

namespace ts::worker {
namespace pb = taylorshift::v1;

CheckpointRetention::CheckpointRetention(std::uint32_t keep_last,
                                         std::vector<pb::CheckpointInfo> kept)
    : keep_last_(static_cast<int>(std::max<std::uint32_t>(keep_last, 1))), kept_(std::move(kept)) {}

std::vector<pb::CheckpointInfo> CheckpointRetention::Add(const pb::CheckpointInfo& saved) {
  if (saved.kind() == "best") {
    const auto previous = std::find_if(
        kept_.begin(), kept_.end(), [](const pb::CheckpointInfo& c) { return c.kind() == "best"; });
    if (previous != kept_.end()) kept_.erase(previous);
  }
  kept_.push_back(saved);
  int lasts = static_cast<int>(std::count_if(
      kept_.begin(), kept_.end(), [](const pb::CheckpointInfo& c) { return c.kind() == "last"; }));
  std::vector<pb::CheckpointInfo> removed;
  for (auto it = kept_.begin(); it != kept_.end() && lasts > keep_last_;) {
    if (it->kind() == "last") {
      removed.push_back(std::move(*it));
      it = kept_.erase(it);
      --lasts;
    } else {
      ++it;
    }
  }
  return removed;
}

}  // namespace ts::worker

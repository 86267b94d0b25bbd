// CheckpointRetention: which of a training job's checkpoints stay on disk. A job keeps one "best"
// checkpoint (best.tsckpt, written again in place whenever the validation accuracy improves) and
// its last `keep_last` "last" checkpoints (step-<N>.tsckpt, the spec's keep_checkpoints, at least
// 1); an older "last" checkpoint goes once a newer one is saved. Torch-free; it decides, the
// training job removes the files. Not thread-safe (one per job, on its reporting rank).
#pragma once

#include <cstdint>
#include <vector>

#include "taylorshift/v1/jobs.pb.h"

namespace ts::worker {

class CheckpointRetention {
 public:
  // `kept`: the checkpoints the job has already (a resumed job's records), oldest first.
  CheckpointRetention(std::uint32_t keep_last, std::vector<taylorshift::v1::CheckpointInfo> kept);

  // Records `saved` and returns the checkpoints whose files are to be removed now, oldest first.
  // A new best replaces the previous best's record (the same file, so nothing is removed for it).
  std::vector<taylorshift::v1::CheckpointInfo> Add(const taylorshift::v1::CheckpointInfo& saved);

  // The checkpoints kept, oldest first.
  const std::vector<taylorshift::v1::CheckpointInfo>& kept() const { return kept_; }

 private:
  const int keep_last_;
  std::vector<taylorshift::v1::CheckpointInfo> kept_;
};

}  // namespace ts::worker

// The jobs a tsworker process runs: one training job (as one rank of a data-parallel world) or
// one evaluation job, described by a WorkerTask (taylorshift/v1/worker.proto) and reported as
// WorkerMessages. This is the code that ran inside tsserver before jobs moved to worker
// processes; it knows nothing of gRPC, the job store or the served models.
#pragma once

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "common/clock.h"
#include "model/training/data_parallel.h"
#include "taylorshift/v1/worker.pb.h"

namespace ts::worker {

struct JobContext {
  const taylorshift::v1::WorkerTask* task = nullptr;
  // Receives the job's reports (started, progress, validation, checkpoint, report, log). Ranks
  // other than 0 report only logs.
  std::function<void(taylorshift::v1::WorkerMessage)> emit;
  // Set (by SIGTERM) to stop: training stops at the next step boundary on every rank together
  // and rank 0 saves the training state; a job still loading its data stops before the next
  // record (LoadSource), with nothing to save.
  const std::atomic<bool>* stop = nullptr;
  DataParallelGroup* group = nullptr;  // never null: a world of one rank when alone
  // The time of reports, checkpoints and step timings (tests inject a fake one).
  Clock* clock = RealClock();
};

// OK when the job finished; ABORTED "stopped" when it stopped on request with its state saved.
absl::Status RunTrainingJob(const JobContext& context);
absl::Status RunEvaluationJob(const JobContext& context);

}  // namespace ts::worker

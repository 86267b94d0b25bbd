// JobAdmission: what a submitted spec must pass before its job is queued — the spec's own checks
// and jobs.limits (job_contract/job_spec.h), its data inside the data root, its checkpoint
// references, an evaluation's served model and whether its data can be what that model (or job)
// classifies (modality, and labels where the data's are known without reading it:
// FAILED_PRECONDITION naming both label sets), and (training) its estimated peak memory within
// jobs.memory_budget_bytes. Makes the job record to queue (with the estimate); the queue's own
// limits (jobs.max_queued, the budget of the running jobs) are JobQueue's.
//
// Errors: FAILED_PRECONDITION when jobs are disabled; INVALID_ARGUMENT naming the key;
// PERMISSION_DENIED / INVALID_ARGUMENT for paths outside the data root; NOT_FOUND for missing
// files, jobs and models; RESOURCE_EXHAUSTED with the estimate and the budget.
// Thread-safe (const); what it points to must outlive it.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_root.h"
#include "model/networks/cost_model.h"
#include "server/config.h"
#include "server/jobs/job_checkpoints.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class ModelRegistry;

class JobAdmission {
 public:
  // `jobs.threads_per_job` must be resolved already (ThreadsPerJob).
  JobAdmission(const JobsConfig& jobs, int num_cores, const DataRoot* data_root,
               const CheckpointResolver* checkpoints, const ModelRegistry* registry)
      : jobs_(jobs),
        num_cores_(num_cores),
        data_root_(data_root),
        checkpoints_(checkpoints),
        registry_(registry) {}

  // The job to queue for `spec` (normalised), or why not.
  absl::StatusOr<taylorshift::v1::Job> Training(taylorshift::v1::TrainingSpec spec) const;
  absl::StatusOr<taylorshift::v1::Job> Evaluation(taylorshift::v1::EvaluationSpec spec) const;

  // The peak memory of the spec's job over all its ranks (model/networks/cost_model.h), with the
  // data it loads (file sizes, or the generated examples) and, for init_from, the checkpoint's
  // size.
  std::int64_t EstimateMemory(const taylorshift::v1::TrainingSpec& spec) const;
  // One rank's estimate, term by term.
  TrainingMemoryEstimate EstimateRankMemory(const taylorshift::v1::TrainingSpec& spec) const;

 private:
  absl::Status CheckEnabled() const;
  // INVALID_ARGUMENT when the spec's protobuf encoding exceeds jobs.limits.max_spec_bytes.
  absl::Status CheckSpecSize(const google::protobuf::Message& spec) const;
  absl::Status CheckSourcePaths(const taylorshift::v1::DataSource& source,
                                const std::string& field) const;

  const JobsConfig jobs_;
  const int num_cores_;
  const DataRoot* const data_root_;
  const CheckpointResolver* const checkpoints_;
  const ModelRegistry* const registry_;
};

}  // namespace ts::server

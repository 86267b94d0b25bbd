#include "server/jobs/job_checkpoints.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "server/jobs/job_queue.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

absl::StatusOr<std::string> ChooseCheckpoint(const pb::Job& job, pb::CheckpointChoice which) {
  if (job.kind() != pb::JOB_KIND_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " is an evaluation job; it has no checkpoints"));
  }
  const pb::CheckpointInfo* best = nullptr;
  const pb::CheckpointInfo* last = nullptr;
  for (const auto& checkpoint : job.checkpoints()) {
    if (checkpoint.kind() == "best") best = &checkpoint;
    if (checkpoint.kind() == "last" && (last == nullptr || checkpoint.step() > last->step())) {
      last = &checkpoint;
    }
  }
  const pb::CheckpointInfo* chosen =
      which == pb::CHECKPOINT_CHOICE_LAST ? last : (best != nullptr ? best : last);
  if (chosen == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " (", JobStateName(job.state()), ") has no ",
        which == pb::CHECKPOINT_CHOICE_LAST ? "last" : "best or last", " checkpoint yet"));
  }
  return chosen->path();
}

void KeepCheckpoints(const pb::WorkerCheckpoint& message,
                     google::protobuf::RepeatedPtrField<pb::CheckpointInfo>* list) {
  const pb::CheckpointInfo& info = message.checkpoint();
  const auto& removed_paths = message.removed_paths();
  for (int i = 0; i < list->size();) {
    const pb::CheckpointInfo& c = list->Get(i);
    const bool replaced = info.kind() == "best" && c.kind() == "best";
    const bool removed =
        std::find(removed_paths.begin(), removed_paths.end(), c.path()) != removed_paths.end();
    if (replaced || removed) {
      list->DeleteSubrange(i, 1);
    } else {
      ++i;
    }
  }
  *list->Add() = info;
}

void RecordCheckpoint(JobHistoryStore* history, const JobContext& context,
                      const std::string& job_id, const pb::WorkerCheckpoint& message) {
  const pb::CheckpointInfo& info = message.checkpoint();
  const auto remove = [&](const std::string& path) {
    const absl::Status status = history->RemoveCheckpoint(job_id, path);
    // NOT_FOUND: no record of that path (a first best checkpoint, a file of an earlier attempt).
    if (absl::IsNotFound(status)) return;
    context.StoreWriteOk(status, "remove_checkpoint", job_id,
                         absl::StrCat("the removal of checkpoint ", path));
  };
  // The best checkpoint keeps its path; its record moves to the end, as in KeepCheckpoints.
  if (info.kind() == "best") remove(info.path());
  context.StoreWriteOk(history->RecordCheckpoint(job_id, info), "record_checkpoint", job_id,
                       absl::StrCat("the ", info.kind(), " checkpoint of step ", info.step(), " (",
                                    info.path(), ")"));
  for (const auto& removed : message.removed_paths()) remove(removed);
}

absl::StatusOr<std::string> CheckpointResolver::JobCheckpoint(const std::string& job_id,
                                                              pb::CheckpointChoice which) const {
  TS_ASSIGN_OR_RETURN(auto job, jobs_->Get(job_id));
  return ChooseCheckpoint(job, which);
}

absl::StatusOr<pb::Job> CheckpointResolver::GetJob(const std::string& job_id) const {
  return jobs_->Get(job_id);
}

absl::StatusOr<std::string> CheckpointResolver::Resolve(const std::string& reference,
                                                        const std::string& field) const {
  if (const auto id = job::ReferencedJobId(reference)) {
    return Prefixed(JobCheckpoint(*id, pb::CHECKPOINT_CHOICE_BEST), absl::StrCat(field, ": "));
  }
  auto resolved = data_root_->Resolve(reference);
  if (!resolved.ok()) return Prefixed(resolved.status(), absl::StrCat(field, ": "));
  std::error_code error;
  if (!fs::is_regular_file(*resolved, error)) {
    return absl::NotFoundError(
        absl::StrCat(field, ": ", Quoted(reference), " is not a file in the data root"));
  }
  return *resolved;
}

}  // namespace ts::server

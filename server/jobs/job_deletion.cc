#include "server/jobs/job_deletion.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace fs = std::filesystem;

absl::StatusOr<pb::DeleteJobResponse> JobDeleter::Delete(const std::string& id,
                                                         const std::string& reason) {
  // Serialised with promotions, so that none is copying a checkpoint this removes.
  absl::MutexLock files_lock(&context_->files_mu);
  // A final state the store refused before may go in now (else CheckDeletable refuses).
  queue_->WriteUnwrittenFinalStates();
  TS_RETURN_IF_ERROR(queue_->CheckDeletable(id));
  // Files first, then the record: a store that cannot take the record's deletion keeps both.
  TS_RETURN_IF_ERROR(jobs_->CheckWritable());
  TS_ASSIGN_OR_RETURN(auto job, jobs_->GetJob(id));
  if (!IsFinalJobState(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", JobStateName(job.state()), "; cancel it first"));
  }
  pb::DeleteJobResponse response;
  response.set_id(id);
  response.set_state(job.state());
  const std::string dir = (fs::path(jobs_dir_) / id).string();
  std::error_code error;
  if (fs::exists(dir, error)) {
    for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
      if (!it->is_regular_file(error)) continue;
      response.set_files_removed(response.files_removed() + 1);
      response.set_bytes_freed(response.bytes_freed() + it->file_size(error));
    }
    fs::remove_all(dir, error);
  }
  if (error) {
    return absl::InternalError(absl::StrCat("deleting job ", id, ": cannot remove ", dir, ": ",
                                            error.message(), "; the job is kept"));
  }
  if (absl::Status s = jobs_->DeleteJob(id);
      !context_->StoreWriteOk(s, "delete_job", id, "the deletion of its record")) {
    return s;
  }
  if (context_->metrics != nullptr) {
    context_->metrics->RemoveJob(id, JobKindName(job.kind()), reason);
  }
  context_->Log(absl::StrCat("job ", id, " (", job.name(), ", ", JobStateName(job.state()),
                             ") deleted by ", reason, ": ", response.files_removed(), " files, ",
                             response.bytes_freed(), " bytes"));
  return response;
}

int JobDeleter::Sweep(absl::Duration retention) {
  if (const absl::Status writable = jobs_->CheckWritable(); !writable.ok()) {
    context_->Log(absl::StrCat("retention: sweep skipped: ", writable.message()));
    return 0;
  }
  auto expired = jobs_->FinishedJobsBefore(context_->clock->Now() - retention, kMaxPerSweep);
  if (!expired.ok()) {
    context_->Log(
        absl::StrCat("retention: listing finished jobs failed: ", expired.status().message()));
    return 0;
  }
  int deleted = 0;
  for (const std::string& id : *expired) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (auto done = Delete(id, "retention"); done.ok()) {
      ++deleted;
    } else {
      context_->Log(absl::StrCat("retention: job ", id, " kept: ", done.status().message()));
    }
  }
  return deleted;
}

void JobDeleter::RunRetention(absl::Duration retention, absl::Duration interval) {
  for (;;) {
    Sweep(retention);
    absl::MutexLock lock(&mu_);
    const absl::Time next = context_->clock->Now() + interval;
    while (!stopping_ && context_->clock->Now() < next) {
      context_->clock->WaitUntil(stop_cv_, mu_, next);
    }
    if (stopping_) return;
  }
}

void JobDeleter::StopRetention() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  stop_cv_.SignalAll();
}

}  // namespace ts::server

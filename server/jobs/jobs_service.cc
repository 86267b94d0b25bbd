#include "server/jobs/jobs_service.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "api/checkpoint_transfer.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "server/jobs/job_ownership.h"
#include "server/serving/grpc_call.h"
#include "server/serving/grpc_status.h"
#include "server/serving/inference_core.h"

namespace ts::server {
namespace pb = taylorshift::v1;
namespace {

constexpr char kAdminRole[] = "admin";
// Events a slow watcher may have pending; beyond it the oldest PROGRESS events are dropped
// (state, validation and checkpoint events are always delivered).
constexpr std::size_t kMaxPendingEvents = 256;

// Runs `body` after the admin check and finishes the unary call; the value of the StatusOr it
// returns becomes `*response`.
// Errors carry no server paths (JobManager::ForClient).
template <typename Response, typename Body>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const JobManager& manager,
                                const Authorizer* authorizer, Response* response, Body&& body) {
  absl::Status status = authorizer->Check(*context, kAdminRole);
  if (status.ok()) {
    auto result = body();
    status = manager.ForClient(result.status());
    if (status.ok()) *response = *std::move(result);
  }
  return FinishUnary(*context, status);
}

// Whether the caller may reach every identity's jobs: authentication off (everyone is
// "anonymous"; nothing is owned) or a token with kAllJobsRole.
bool ReachesAllJobs(const grpc::CallbackServerContext& context, const Authorizer& authorizer) {
  return !authorizer.enabled() || authorizer.Check(context, kAllJobsRole).ok();
}

// The job id in a "job:<id>" checkpoint reference, else "" (CheckJobOwner's "no job").
std::string JobReference(const std::string& checkpoint) {
  return job::ReferencedJobId(checkpoint).value_or("");
}

// OK when the caller may reach job `id` (CheckJobAccess). An unknown id is left to the call
// itself, which answers NOT_FOUND.
absl::Status CheckJobOwner(const grpc::CallbackServerContext& context, const JobManager& manager,
                           const Authorizer& authorizer, const std::string& id) {
  if (id.empty() || ReachesAllJobs(context, authorizer)) return absl::OkStatus();
  const absl::StatusOr<pb::Job> job = manager.GetJob(id);
  if (!job.ok()) return absl::OkStatus();
  return CheckJobAccess(id, job->submitted_by(), authorizer.Identity(context), false);
}

class WatchReactor final : public grpc::ServerWriteReactor<pb::JobEvent> {
 public:
  WatchReactor(JobManager* manager, const Authorizer* authorizer,
               grpc::CallbackServerContext* context, const std::string& id)
      : manager_(manager) {
    if (auto auth = authorizer->Check(*context, kAdminRole); !auth.ok()) {
      FinishOnce(ToGrpcStatus(auth));
      return;
    }
    if (auto owner = CheckJobOwner(*context, *manager, *authorizer, id); !owner.ok()) {
      FinishOnce(ToGrpcStatus(owner));
      return;
    }
    auto handle = manager_->Watch(id, [this](const pb::JobEvent& event) { Enqueue(event); });
    if (!handle.ok()) {
      FinishOnce(ToGrpcStatus(manager_->ForClient(handle.status())));
      return;
    }
    absl::MutexLock lock(&mu_);
    handle_ = *handle;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away"));
      return;
    }
    WriteNextLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    std::int64_t handle = 0;
    {
      absl::MutexLock lock(&mu_);
      handle = handle_;
    }
    // After Unwatch returns the manager never calls Enqueue again.
    if (handle != 0) manager_->Unwatch(handle);
    delete this;
  }

 private:
  void Enqueue(const pb::JobEvent& event) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (event.type() == pb::JobEvent::TYPE_UNSPECIFIED) {
      // The manager is shutting down: end after what is already queued.
      closing_ = true;
      if (!writing_) WriteNextLocked();
      return;
    }
    if (pending_.size() >= kMaxPendingEvents) {
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->type() == pb::JobEvent::PROGRESS) {
          pending_.erase(it);
          break;
        }
      }
    }
    pending_.push_back(event);
    const pb::JobState state = event.job().state();
    if (state == pb::JOB_STATE_SUCCEEDED || state == pb::JOB_STATE_FAILED ||
        state == pb::JOB_STATE_CANCELLED) {
      final_ = true;
    }
    if (!writing_) WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (pending_.empty()) {
      if (final_) {
        FinishLocked(grpc::Status::OK);
      } else if (closing_) {
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "the server is shutting down; the job resumes after restart"));
      }
      return;
    }
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  JobManager* const manager_;
  absl::Mutex mu_;
  std::deque<pb::JobEvent> pending_ ABSL_GUARDED_BY(mu_);
  pb::JobEvent current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool final_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::int64_t handle_ ABSL_GUARDED_BY(mu_) = 0;
};

// DownloadCheckpoint: the header (with the first chunk), then one chunk per write, each read
// from the file when the previous write is done, so at most one chunk is held.
class DownloadReactor final : public grpc::ServerWriteReactor<pb::CheckpointChunk> {
 public:
  DownloadReactor(const JobManager* manager, const Authorizer* authorizer,
                  grpc::CallbackServerContext* context,
                  const pb::DownloadCheckpointRequest& request)
      : chunk_bytes_(request.chunk_bytes() == 0 ? api::kCheckpointChunkBytes
                                                : request.chunk_bytes()) {
    if (auto auth = authorizer->Check(*context, kAdminRole); !auth.ok()) {
      Finish(ToGrpcStatus(auth));
      return;
    }
    if (auto owner = CheckJobOwner(*context, *manager, *authorizer, request.job_id());
        !owner.ok()) {
      Finish(ToGrpcStatus(owner));
      return;
    }
    auto reader = manager->OpenCheckpoint(request);
    if (!reader.ok()) {
      Finish(ToGrpcStatus(manager->ForClient(reader.status())));
      return;
    }
    reader_ = *std::move(reader);
    *chunk_.mutable_header() = reader_->header();
    const auto& known = request.if_none_match();
    if (std::find(known.begin(), known.end(), reader_->header().version()) != known.end()) {
      chunk_.mutable_header()->set_not_modified(true);
      done_ = true;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the downloader went away"));
      return;
    }
    if (done_) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.Clear();
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  // Reads the next chunk into chunk_ (keeping a header already there) and writes it.
  void WriteNext() {
    if (!done_) {
      auto data = reader_->Next(chunk_bytes_);
      if (!data.ok()) {
        Finish(ToGrpcStatus(data.status()));
        return;
      }
      done_ = data->size() < chunk_bytes_;
      if (data->empty() && !chunk_.has_header()) {
        Finish(grpc::Status::OK);
        return;
      }
      chunk_.set_data(*std::move(data));
    }
    StartWrite(&chunk_);
  }

  const std::size_t chunk_bytes_;
  std::unique_ptr<CheckpointFileReader> reader_;
  pb::CheckpointChunk chunk_;
  bool done_ = false;
};

pb::PromoteCheckpointResponse ToResponse(const Promotion& promotion) {
  pb::PromoteCheckpointResponse promoted;
  FillModelInfo(*promotion.model, promoted.mutable_model());
  promoted.set_previous_version(promotion.previous_version);
  if (promotion.validation_accuracy) {
    promoted.set_validation_accuracy(*promotion.validation_accuracy);
  }
  if (promotion.previous_validation_accuracy) {
    promoted.set_previous_validation_accuracy(*promotion.previous_validation_accuracy);
  }
  return promoted;
}

}  // namespace

grpc::ServerWriteReactor<pb::CheckpointChunk>* JobsService::DownloadCheckpoint(
    grpc::CallbackServerContext* context, const pb::DownloadCheckpointRequest* request) {
  return new DownloadReactor(manager_, authorizer_, context, *request);
}

grpc::ServerUnaryReactor* JobsService::SubmitTraining(grpc::CallbackServerContext* context,
                                                      const pb::SubmitTrainingRequest* request,
                                                      pb::Job* response) {
  return Unary(context, *manager_, authorizer_, response, [&]() -> absl::StatusOr<pb::Job> {
    // A job that starts from another identity's job reads that job's checkpoint.
    TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_,
                                     JobReference(request->spec().init_from())));
    return manager_->SubmitTraining(request->spec(), authorizer_->Identity(*context));
  });
}

grpc::ServerUnaryReactor* JobsService::SubmitEvaluation(grpc::CallbackServerContext* context,
                                                        const pb::SubmitEvaluationRequest* request,
                                                        pb::Job* response) {
  return Unary(context, *manager_, authorizer_, response, [&]() -> absl::StatusOr<pb::Job> {
    TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->spec().job_id()));
    TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_,
                                     JobReference(request->spec().checkpoint())));
    return manager_->SubmitEvaluation(request->spec(), authorizer_->Identity(*context));
  });
}

grpc::ServerUnaryReactor* JobsService::GetJob(grpc::CallbackServerContext* context,
                                              const pb::GetJobRequest* request, pb::Job* response) {
  return Unary(context, *manager_, authorizer_, response, [&]() -> absl::StatusOr<pb::Job> {
    TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->id()));
    return manager_->GetJob(request->id());
  });
}

grpc::ServerUnaryReactor* JobsService::ListJobs(grpc::CallbackServerContext* context,
                                                const pb::ListJobsRequest* request,
                                                pb::ListJobsResponse* response) {
  return Unary(context, *manager_, authorizer_, response, [&] {
    // Without kAllJobsRole, the caller's own jobs (and those with no owner).
    const std::string owner =
        ReachesAllJobs(*context, *authorizer_) ? "" : authorizer_->Identity(*context);
    return manager_->ListJobs(*request, owner);
  });
}

grpc::ServerUnaryReactor* JobsService::GetJobHistory(grpc::CallbackServerContext* context,
                                                     const pb::GetJobHistoryRequest* request,
                                                     pb::GetJobHistoryResponse* response) {
  return Unary(
      context, *manager_, authorizer_, response,
      [&]() -> absl::StatusOr<pb::GetJobHistoryResponse> {
        TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->id()));
        return manager_->GetJobHistory(*request);
      });
}

grpc::ServerUnaryReactor* JobsService::CancelJob(grpc::CallbackServerContext* context,
                                                 const pb::CancelJobRequest* request,
                                                 pb::Job* response) {
  return Unary(context, *manager_, authorizer_, response, [&]() -> absl::StatusOr<pb::Job> {
    TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->id()));
    return manager_->CancelJob(request->id());
  });
}

grpc::ServerUnaryReactor* JobsService::DeleteJob(grpc::CallbackServerContext* context,
                                                 const pb::DeleteJobRequest* request,
                                                 pb::DeleteJobResponse* response) {
  return Unary(
      context, *manager_, authorizer_, response, [&]() -> absl::StatusOr<pb::DeleteJobResponse> {
        TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->id()));
        return manager_->DeleteJob(request->id());
      });
}

grpc::ServerWriteReactor<pb::JobEvent>* JobsService::WatchJob(grpc::CallbackServerContext* context,
                                                              const pb::WatchJobRequest* request) {
  return new WatchReactor(manager_, authorizer_, context, request->id());
}

grpc::ServerUnaryReactor* JobsService::PromoteCheckpoint(
    grpc::CallbackServerContext* context, const pb::PromoteCheckpointRequest* request,
    pb::PromoteCheckpointResponse* response) {
  return Unary(
      context, *manager_, authorizer_, response,
      [&]() -> absl::StatusOr<pb::PromoteCheckpointResponse> {
        TS_RETURN_IF_ERROR(CheckJobOwner(*context, *manager_, *authorizer_, request->job_id()));
        TS_ASSIGN_OR_RETURN(auto promotion,
                            manager_->Promote(*request, authorizer_->Identity(*context)));
        return ToResponse(promotion);
      });
}

grpc::ServerUnaryReactor* JobsService::RollbackPromotion(
    grpc::CallbackServerContext* context, const pb::RollbackPromotionRequest* request,
    pb::PromoteCheckpointResponse* response) {
  return Unary(
      context, *manager_, authorizer_, response,
      [&]() -> absl::StatusOr<pb::PromoteCheckpointResponse> {
        // Undoing another identity's promotion needs kAllJobsRole too.
        if (!ReachesAllJobs(*context, *authorizer_)) {
          auto history = manager_->PromotionHistory(request->model());
          if (history.ok() && !history->empty()) {
            TS_RETURN_IF_ERROR(CheckRollbackAccess(request->model(), history->back().actor,
                                                   authorizer_->Identity(*context), false));
          }
        }
        TS_ASSIGN_OR_RETURN(auto promotion, manager_->RollbackPromotion(
                                                request->model(), authorizer_->Identity(*context)));
        return ToResponse(promotion);
      });
}

grpc::ServerUnaryReactor* JobsService::ListPromotions(grpc::CallbackServerContext* context,
                                                      const pb::ListPromotionsRequest* request,
                                                      pb::ListPromotionsResponse* response) {
  return Unary(context, *manager_, authorizer_, response,
               [&]() -> absl::StatusOr<pb::ListPromotionsResponse> {
                 TS_ASSIGN_OR_RETURN(auto records, manager_->PromotionHistory(request->model()));
                 pb::ListPromotionsResponse listed;
                 for (const PromotionRecord& record : records) {
                   pb::PromotionEntry* entry = listed.add_entries();
                   entry->set_model(record.model);
                   entry->set_version(record.version);
                   entry->set_kind(record.kind);
                   entry->set_source(record.source);
                   entry->set_job_id(record.job_id);
                   entry->set_actor(record.actor);
                   *entry->mutable_time() =
                       google::protobuf::util::TimeUtil::MillisecondsToTimestamp(record.time_ms);
                   if (record.validation_accuracy) {
                     entry->set_has_validation_accuracy(true);
                     entry->set_validation_accuracy(*record.validation_accuracy);
                   }
                   entry->set_forced(record.forced);
                 }
                 return listed;
               });
}

}  // namespace ts::server

// The taylorshift.v1.Jobs gRPC service (callback API): a thin layer over JobManager. Every RPC
// needs the `admin` role when authentication is on; errors map through ToGrpcStatus. With
// authentication on, a job another identity submitted (Get, Watch, History, Cancel, Delete,
// Promote and Download of it; a new job that reads its checkpoint: init_from "job:<id>", an
// evaluation's job_id) and rolling back another identity's promotion also need the
// `all_jobs` role (job_ownership.h: PERMISSION_DENIED otherwise); ListJobs lists the caller's
// own jobs without it. Submissions record the caller's Authorizer::Identity.
#pragma once

#include "server/jobs/job_manager.h"
#include "server/serving/auth.h"
#include "taylorshift/v1/jobs.grpc.pb.h"

namespace ts::server {

class JobsService final : public taylorshift::v1::Jobs::CallbackService {
 public:
  JobsService(JobManager* manager, const Authorizer* authorizer)
      : manager_(manager), authorizer_(authorizer) {}

  grpc::ServerUnaryReactor* SubmitTraining(grpc::CallbackServerContext* context,
                                           const taylorshift::v1::SubmitTrainingRequest* request,
                                           taylorshift::v1::Job* response) final;
  grpc::ServerUnaryReactor* SubmitEvaluation(
      grpc::CallbackServerContext* context, const taylorshift::v1::SubmitEvaluationRequest* request,
      taylorshift::v1::Job* response) final;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const taylorshift::v1::GetJobRequest* request,
                                   taylorshift::v1::Job* response) final;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const taylorshift::v1::ListJobsRequest* request,
                                     taylorshift::v1::ListJobsResponse* response) final;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const taylorshift::v1::CancelJobRequest* request,
                                      taylorshift::v1::Job* response) final;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const taylorshift::v1::DeleteJobRequest* request,
                                      taylorshift::v1::DeleteJobResponse* response) final;
  grpc::ServerWriteReactor<taylorshift::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* context, const taylorshift::v1::WatchJobRequest* request) final;
  grpc::ServerUnaryReactor* PromoteCheckpoint(
      grpc::CallbackServerContext* context,
      const taylorshift::v1::PromoteCheckpointRequest* request,
      taylorshift::v1::PromoteCheckpointResponse* response) final;
  grpc::ServerUnaryReactor* RollbackPromotion(
      grpc::CallbackServerContext* context,
      const taylorshift::v1::RollbackPromotionRequest* request,
      taylorshift::v1::PromoteCheckpointResponse* response) final;
  grpc::ServerUnaryReactor* ListPromotions(grpc::CallbackServerContext* context,
                                           const taylorshift::v1::ListPromotionsRequest* request,
                                           taylorshift::v1::ListPromotionsResponse* response) final;
  grpc::ServerUnaryReactor* GetJobHistory(grpc::CallbackServerContext* context,
                                          const taylorshift::v1::GetJobHistoryRequest* request,
                                          taylorshift::v1::GetJobHistoryResponse* response) final;
  grpc::ServerWriteReactor<taylorshift::v1::CheckpointChunk>* DownloadCheckpoint(
      grpc::CallbackServerContext* context,
      const taylorshift::v1::DownloadCheckpointRequest* request) final;

 private:
  JobManager* manager_;
  const Authorizer* authorizer_;
};

}  // namespace ts::server

// A scripted taylorshift.v1.Jobs service on a loopback port, for client tests that need the
// wire (streams, paging, metadata) but not a real job manager. Each RPC records its request and
// the caller's "authorization" header, and answers from the script: `job` for the unary job
// RPCs, `events` for WatchJob (then OK, or `watch_end`), `jobs` for ListJobs in pages of
// page_size (default `default_page_size`; the token is the next index), `promoted` for
// PromoteCheckpoint and RollbackPromotion, `promotions` for ListPromotions, `history` for
// GetJobHistory in `history_pages` (each answered as scripted, the token is the next page's index).
// Tests set the script before the call and read the records after it. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "taylorshift/v1/jobs.grpc.pb.h"

namespace ts::testing {

class FakeJobsService final : public taylorshift::v1::Jobs::Service {
 public:
  struct Script {
    taylorshift::v1::Job job;
    std::vector<taylorshift::v1::JobEvent> events;
    grpc::Status watch_end = grpc::Status::OK;
    std::vector<taylorshift::v1::Job> jobs;
    std::uint32_t default_page_size = 2;
    taylorshift::v1::PromoteCheckpointResponse promoted;
    std::vector<taylorshift::v1::GetJobHistoryResponse> history_pages;
    taylorshift::v1::ListPromotionsResponse promotions;  // ListPromotions' answer
  };
  struct Record {
    std::vector<std::string> rpcs;  // names, in call order
    std::string authorization;      // of the last call
    taylorshift::v1::SubmitTrainingRequest training;
    taylorshift::v1::SubmitEvaluationRequest evaluation;
    std::vector<taylorshift::v1::ListJobsRequest> lists;
    std::string id;  // of the last Get/Cancel/Watch
    taylorshift::v1::PromoteCheckpointRequest promote;
    std::vector<taylorshift::v1::GetJobHistoryRequest> histories;
    std::string rollback_model;    // of the last RollbackPromotion
    std::string promotions_model;  // of the last ListPromotions
  };

  ~FakeJobsService() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Starts serving on 127.0.0.1 (any free port); address() is where.
  void Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  const std::string& address() const { return address_; }

  void set_script(Script script) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(script);
  }
  Record record() {
    absl::MutexLock lock(&mu_);
    return record_;
  }

  grpc::Status SubmitTraining(grpc::ServerContext* context,
                              const taylorshift::v1::SubmitTrainingRequest* request,
                              taylorshift::v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    Note("SubmitTraining", *context);
    record_.training = *request;
    *job = script_.job;
    return grpc::Status::OK;
  }

  grpc::Status SubmitEvaluation(grpc::ServerContext* context,
                                const taylorshift::v1::SubmitEvaluationRequest* request,
                                taylorshift::v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    Note("SubmitEvaluation", *context);
    record_.evaluation = *request;
    *job = script_.job;
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const taylorshift::v1::GetJobRequest* request,
                      taylorshift::v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    Note("GetJob", *context);
    record_.id = request->id();
    *job = script_.job;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* context,
                         const taylorshift::v1::CancelJobRequest* request,
                         taylorshift::v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    Note("CancelJob", *context);
    record_.id = request->id();
    *job = script_.job;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* context,
                        const taylorshift::v1::ListJobsRequest* request,
                        taylorshift::v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Note("ListJobs", *context);
    record_.lists.push_back(*request);
    std::size_t start = 0;
    if (!request->page_token().empty() && !absl::SimpleAtoi(request->page_token(), &start)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad page_token");
    }
    const std::size_t size =
        request->page_size() > 0 ? request->page_size() : script_.default_page_size;
    const std::size_t end = std::min(script_.jobs.size(), start + size);
    for (std::size_t i = start; i < end; ++i) *response->add_jobs() = script_.jobs[i];
    if (end < script_.jobs.size()) response->set_next_page_token(absl::StrCat(end));
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context,
                        const taylorshift::v1::WatchJobRequest* request,
                        grpc::ServerWriter<taylorshift::v1::JobEvent>* writer) override {
    std::vector<taylorshift::v1::JobEvent> events;
    grpc::Status end;
    {
      absl::MutexLock lock(&mu_);
      Note("WatchJob", *context);
      record_.id = request->id();
      events = script_.events;
      end = script_.watch_end;
    }
    for (const auto& event : events) {
      if (!writer->Write(event)) break;
    }
    return end;
  }

  grpc::Status PromoteCheckpoint(grpc::ServerContext* context,
                                 const taylorshift::v1::PromoteCheckpointRequest* request,
                                 taylorshift::v1::PromoteCheckpointResponse* response) override {
    absl::MutexLock lock(&mu_);
    Note("PromoteCheckpoint", *context);
    record_.promote = *request;
    *response = script_.promoted;
    return grpc::Status::OK;
  }

  grpc::Status RollbackPromotion(grpc::ServerContext* context,
                                 const taylorshift::v1::RollbackPromotionRequest* request,
                                 taylorshift::v1::PromoteCheckpointResponse* response) override {
    absl::MutexLock lock(&mu_);
    Note("RollbackPromotion", *context);
    record_.rollback_model = request->model();
    *response = script_.promoted;
    return grpc::Status::OK;
  }

  grpc::Status ListPromotions(grpc::ServerContext* context,
                              const taylorshift::v1::ListPromotionsRequest* request,
                              taylorshift::v1::ListPromotionsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Note("ListPromotions", *context);
    record_.promotions_model = request->model();
    *response = script_.promotions;
    return grpc::Status::OK;
  }

  grpc::Status GetJobHistory(grpc::ServerContext* context,
                             const taylorshift::v1::GetJobHistoryRequest* request,
                             taylorshift::v1::GetJobHistoryResponse* response) override {
    absl::MutexLock lock(&mu_);
    Note("GetJobHistory", *context);
    record_.histories.push_back(*request);
    std::size_t page = 0;
    if (!request->page_token().empty() &&
        (!absl::SimpleAtoi(request->page_token(), &page) || page >= script_.history_pages.size())) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad page_token");
    }
    if (page < script_.history_pages.size()) *response = script_.history_pages[page];
    return grpc::Status::OK;
  }

 private:
  void Note(const std::string& rpc, const grpc::ServerContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    record_.rpcs.push_back(rpc);
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find("authorization");
    record_.authorization =
        it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  }

  absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  Record record_ ABSL_GUARDED_BY(mu_);
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ts::testing

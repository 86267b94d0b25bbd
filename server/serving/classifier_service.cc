#include "server/serving/classifier_service.h"

#include <deque>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/serving/grpc_call.h"
#include "server/serving/grpc_status.h"

namespace ts::server {

namespace pb = taylorshift::v1;

namespace {

// ClassifyStream: reads requests as they come, classifies each through the batcher, writes
// each response when it is ready (one write in flight at a time), and finishes once the client
// has half-closed and every request has been answered. It never finishes while a request is
// still in the batcher, so no callback can outlive the reactor.
class ClassifyStreamReactor final
    : public grpc::ServerBidiReactor<pb::ClassifyRequest, pb::ClassifyResponse> {
 public:
  ClassifyStreamReactor(ClassifierService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = ShouldFinishLocked();
      }
      if (finish) FinishStream();
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    const pb::ClassifyRequest request = request_;
    StartRead(&request_);
    service_->inference()->Classify(CallFrom(*context_), request,
                                    [this, id = request.request_id()](
                                        const absl::Status& status, pb::ClassifyResponse response) {
                                      if (!status.ok()) {
                                        response.set_request_id(id);
                                        response.set_error_code(static_cast<int>(status.code()));
                                        response.set_error_message(std::string(status.message()));
                                      }
                                      bool finish = false;
                                      {
                                        absl::MutexLock lock(&mu_);
                                        --pending_;
                                        outbox_.push_back(std::move(response));
                                        MaybeWriteLocked();
                                        finish = ShouldFinishLocked();
                                      }
                                      if (finish) FinishStream();
                                    });
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) write_failed_ = true;
      outbox_.pop_front();
      MaybeWriteLocked();
      finish = ShouldFinishLocked();
    }
    if (finish) FinishStream();
  }

  void OnDone() override { delete this; }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || outbox_.empty() || write_failed_) return;
    writing_ = true;
    StartWrite(&outbox_.front());
  }
  // True exactly once: when the client has half-closed, nothing is pending and everything is
  // written. The caller then calls FinishStream() after releasing mu_ (OnDone may delete this
  // as soon as Finish is called, so it must be the caller's last action).
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_) return false;
    if (!outbox_.empty() && !write_failed_) return false;
    finished_ = true;
    return true;
  }
  void FinishStream() {
    Finish(context_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
  }

  ClassifierService* service_;
  grpc::CallbackServerContext* context_;
  pb::ClassifyRequest request_;
  absl::Mutex mu_;
  std::deque<pb::ClassifyResponse> outbox_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* ClassifierService::Classify(grpc::CallbackServerContext* context,
                                                      const pb::ClassifyRequest* request,
                                                      pb::ClassifyResponse* response) {
  auto* reactor = context->DefaultReactor();
  inference_->Classify(
      CallFrom(*context), *request,
      [reactor, response](const absl::Status& status, pb::ClassifyResponse result) {
        if (status.ok()) *response = std::move(result);
        reactor->Finish(ToGrpcStatus(status));
      });
  return reactor;
}

grpc::ServerBidiReactor<pb::ClassifyRequest, pb::ClassifyResponse>*
ClassifierService::ClassifyStream(grpc::CallbackServerContext* context) {
  return new ClassifyStreamReactor(this, context);
}

grpc::ServerUnaryReactor* ClassifierService::ListModels(grpc::CallbackServerContext* context,
                                                        const pb::ListModelsRequest* /*request*/,
                                                        pb::ListModelsResponse* response) {
  auto models = inference_->ListModels(CallFrom(*context));
  if (models.ok()) {
    for (auto& model : *models) *response->add_models() = std::move(model);
  }
  return FinishUnary(*context, models.status());
}

grpc::ServerUnaryReactor* ClassifierService::GetModel(grpc::CallbackServerContext* context,
                                                      const pb::GetModelRequest* request,
                                                      pb::ModelInfo* response) {
  auto model = inference_->GetModel(CallFrom(*context), request->name());
  if (model.ok()) *response = std::move(*model);
  return FinishUnary(*context, model.status());
}

}  // namespace ts::server

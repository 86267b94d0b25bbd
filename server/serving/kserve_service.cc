#include "server/serving/kserve_service.h"

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/serving/grpc_call.h"
#include "server/serving/grpc_status.h"
#include "server/serving/kserve_v2.h"

namespace ts::server {

namespace v2 = ::inference;

namespace {

// One ModelStreamInfer call. Requests are read one at a time and each goes to kserve::Infer at
// once (so a stream's requests share batches); answers are written one at a time in the order
// of the requests. The call finishes once the client has half-closed and every answer is
// written (or the stream is broken); it deletes itself in OnDone, after which no Infer callback
// can run (Finish waits for them).
class StreamInferReactor final
    : public grpc::ServerBidiReactor<v2::ModelInferRequest, v2::ModelStreamInferResponse> {
 public:
  StreamInferReactor(grpc::CallbackServerContext* context, Inference* inference,
                     std::int64_t max_batch)
      : inference_(inference), max_batch_(max_batch), call_(CallFrom(*context)) {
    call_.protocol = CallContext::kProtocolV2Grpc;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = WriteOrFinishLocked();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    auto slot = std::make_shared<Slot>();
    const v2::ModelInferRequest request = std::move(request_);
    const auto final_flag = request.parameters().find("triton_enable_empty_final_response");
    const bool mark_final =
        final_flag != request.parameters().end() &&
        final_flag->second.parameter_choice_case() == v2::InferParameter::kBoolParam &&
        final_flag->second.bool_param();
    {
      absl::MutexLock lock(&mu_);
      slots_.push_back(slot);
      ++computing_;
    }
    // Infer may answer before it returns (an invalid request): the lock is not held here.
    kserve::Infer(
        inference_, call_, request, max_batch_,
        [this, slot, mark_final, id = request.id(), model = request.model_name()](
            const absl::Status& status, const kserve::InferResult& result) {
          v2::ModelStreamInferResponse answer;
          if (status.ok()) {
            *answer.mutable_infer_response() = kserve::ToProto(result);
          } else {
            answer.set_error_message(std::string(status.message()));
            answer.mutable_infer_response()->set_id(id);
            answer.mutable_infer_response()->set_model_name(model);
          }
          if (mark_final) {
            // Triton's flag for a model that is not decoupled: this is the answer.
            (*answer.mutable_infer_response()->mutable_parameters())["triton_final_response"]
                .set_bool_param(true);
          }
          bool finish = false;
          {
            absl::MutexLock lock(&mu_);
            slot->answer = std::move(answer);
            slot->ready = true;
            --computing_;
            finish = WriteOrFinishLocked();
          }
          // Outside the lock: OnDone may delete this as soon as Finish is called.
          if (finish) Finish(grpc::Status::OK);
        });
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (static_cast<int>(slots_.size()) < KServeService::kMaxStreamPending && !broken_) {
        StartRead(&request_);
      } else {
        read_paused_ = true;
        finish = WriteOrFinishLocked();
      }
    }
    if (finish) Finish(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // the client is gone: later answers are dropped
      if (read_paused_ && !broken_ &&
          static_cast<int>(slots_.size()) < KServeService::kMaxStreamPending) {
        read_paused_ = false;
        StartRead(&request_);
      }
      finish = WriteOrFinishLocked();
    }
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  struct Slot {
    bool ready = false;
    v2::ModelStreamInferResponse answer;
  };

  // Writes the oldest answer when it is ready and no write is under way; true (once) when
  // nothing is left to read, compute or write: the caller then calls Finish, without the lock.
  bool WriteOrFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!writing_ && !slots_.empty() && slots_.front()->ready) {
      std::shared_ptr<Slot> slot = std::move(slots_.front());
      slots_.pop_front();
      if (broken_) continue;
      writing_ = true;
      writing_answer_ = std::move(slot->answer);
      StartWrite(&writing_answer_);
    }
    // A broken stream stops reading when paused; it finishes once its computations are done.
    const bool reading_over = reads_done_ || (broken_ && read_paused_);
    if (reading_over && computing_ == 0 && slots_.empty() && !writing_ && !finished_) {
      finished_ = true;
      return true;
    }
    return false;
  }

  Inference* const inference_;
  const std::int64_t max_batch_;
  CallContext call_;
  v2::ModelInferRequest request_;  // the read under way (only the reading side touches it)
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);  // request order
  v2::ModelStreamInferResponse writing_answer_ ABSL_GUARDED_BY(mu_);
  int computing_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* KServeService::ServerLive(grpc::CallbackServerContext* context,
                                                    const v2::ServerLiveRequest* /*request*/,
                                                    v2::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishUnary(*context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerReady(grpc::CallbackServerContext* context,
                                                     const v2::ServerReadyRequest* /*request*/,
                                                     v2::ServerReadyResponse* response) {
  response->set_ready(inference_->Ready());
  return FinishUnary(*context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelReady(grpc::CallbackServerContext* context,
                                                    const v2::ModelReadyRequest* request,
                                                    v2::ModelReadyResponse* response) {
  auto model = inference_->GetModel(CallFrom(*context), request->name());
  absl::Status status = model.status();
  if (status.ok()) status = kserve::CheckVersion(*model, request->version());
  if (status.ok()) response->set_ready(inference_->Ready());
  return FinishUnary(*context, status);
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context, const v2::ServerMetadataRequest* /*request*/,
    v2::ServerMetadataResponse* response) {
  *response = kserve::ServerMetadata();
  return FinishUnary(*context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(grpc::CallbackServerContext* context,
                                                       const v2::ModelMetadataRequest* request,
                                                       v2::ModelMetadataResponse* response) {
  auto model = inference_->GetModel(CallFrom(*context), request->name());
  absl::Status status = model.status();
  if (status.ok()) status = kserve::CheckVersion(*model, request->version());
  if (status.ok()) *response = kserve::ModelMetadata(*model);
  return FinishUnary(*context, status);
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* context,
                                                    const v2::ModelInferRequest* request,
                                                    v2::ModelInferResponse* response) {
  auto* reactor = context->DefaultReactor();
  CallContext call = CallFrom(*context);
  call.protocol = CallContext::kProtocolV2Grpc;
  kserve::Infer(inference_, call, *request, max_batch_,
                [reactor, response](const absl::Status& status, const kserve::InferResult& result) {
                  if (status.ok()) *response = kserve::ToProto(result);
                  reactor->Finish(ToGrpcStatus(status));
                });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(grpc::CallbackServerContext* context,
                                                     const v2::ModelConfigRequest* request,
                                                     v2::ModelConfigResponse* response) {
  auto model = inference_->GetModel(CallFrom(*context), request->name());
  absl::Status status = model.status();
  if (status.ok()) status = kserve::CheckVersion(*model, request->version());
  if (status.ok()) *response->mutable_config() = kserve::ModelConfig(*model, max_batch_);
  return FinishUnary(*context, status);
}

grpc::ServerBidiReactor<v2::ModelInferRequest, v2::ModelStreamInferResponse>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamInferReactor(context, inference_, max_batch_);
}

}  // namespace ts::server

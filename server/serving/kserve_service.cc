#include "server/serving/kserve_service.h"

#include "server/serving/grpc_call.h"
#include "server/serving/grpc_status.h"
#include "server/serving/kserve_v2.h"

namespace ts::server {

namespace v2 = ::inference;

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

}  // namespace ts::server

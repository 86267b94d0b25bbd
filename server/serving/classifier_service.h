// The taylorshift.v1.Classifier gRPC service (callback API): a thin front end over Inference
// (server/serving/inference.h), which authorises, validates, batches and records metrics. Bad
// requests get INVALID_ARGUMENT / NOT_FOUND with the field and the limit; nothing a client sends
// can crash the server or stall other requests.
#pragma once

#include "server/serving/inference.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::server {

class ClassifierService final : public taylorshift::v1::Classifier::CallbackService {
 public:
  explicit ClassifierService(Inference* inference) : inference_(inference) {}

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                     const taylorshift::v1::ClassifyRequest* request,
                                     taylorshift::v1::ClassifyResponse* response) final;
  grpc::ServerBidiReactor<taylorshift::v1::ClassifyRequest, taylorshift::v1::ClassifyResponse>*
  ClassifyStream(grpc::CallbackServerContext* context) final;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const taylorshift::v1::ListModelsRequest* request,
                                       taylorshift::v1::ListModelsResponse* response) final;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const taylorshift::v1::GetModelRequest* request,
                                     taylorshift::v1::ModelInfo* response) final;

  Inference* inference() { return inference_; }

 private:
  Inference* inference_;
};

}  // namespace ts::server

// inference.GRPCInferenceService, the KServe v2 Open Inference Protocol over gRPC, on the same
// port as the Classifier service: a thin front end over Inference (server/serving/kserve_v2.h has
// the mapping). ServerLive and ServerReady need no token (they are health checks, like the gRPC
// health service); the others need the classify role when authentication is on. Triton's
// additions: ModelConfig (the model's configuration, kserve::ModelConfig) and ModelStreamInfer
// (ModelInfer over one bidirectional stream: one response per request, in the order of the
// requests, an error answered as that request's error_message without ending the stream; at
// most kMaxStreamPending requests of a stream are computed or wait to be written at once — the
// stream is not read further until one is written).
#pragma once

#include <cstdint>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/serving/inference.h"

namespace ts::server {

class KServeService final : public inference::GRPCInferenceService::CallbackService {
 public:
  KServeService(Inference* inference, std::int64_t max_batch)
      : inference_(inference), max_batch_(max_batch) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) final;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) final;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) final;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) final;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) final;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) final;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) final;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) final;

  static constexpr int kMaxStreamPending = 64;

 private:
  Inference* inference_;
  std::int64_t max_batch_;
};

}  // namespace ts::server

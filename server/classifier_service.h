// The taylorshift.v1.Classifier gRPC service (callback API). Handlers are thin: authorise,
// validate, map the deadline, hand the work to the model's batcher, record metrics, reply.
// Bad requests get INVALID_ARGUMENT / NOT_FOUND with the field and the limit; nothing a
// client sends can crash the server or stall other requests.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/job_spec.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::server {


// The served model as the API describes it (ListModels, GetModel, PromoteCheckpoint).
void FillModelInfo(const ServedModel& model, taylorshift::v1::ModelInfo* info);

class ClassifierService final : public taylorshift::v1::Classifier::CallbackService {
 public:
  ClassifierService(ModelRegistry* registry, const Authorizer* authorizer, Metrics* metrics,
                    Clock* clock)
      : registry_(registry), authorizer_(authorizer), metrics_(metrics), clock_(clock) {}

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

  // Runs one classification; `done` is called exactly once (possibly before this returns).
  using ClassifyDone =
      std::function<void(const absl::Status& status, taylorshift::v1::ClassifyResponse response)>;
  void StartClassify(grpc::CallbackServerContext* context,
                     const taylorshift::v1::ClassifyRequest& request, ClassifyDone done);

 private:
  ModelRegistry* registry_;
  const Authorizer* authorizer_;
  Metrics* metrics_;
  Clock* clock_;
};

}  // namespace ts::server

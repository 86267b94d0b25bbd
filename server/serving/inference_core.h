// The one implementation of Inference (server/serving/inference.h): authorises the call, validates
// the request against the served model (input kind, length policy, top_k, diagnosis-only options),
// admits it by its estimated cost (the model's max_request_mflop and max_batch_mflop), hands it to
// the model's batcher and records the request metrics. Thread-safe; every front end shares one.
#pragma once

#include <atomic>

#include "common/clock.h"
#include "server/metrics.h"
#include "server/serving/auth.h"
#include "server/serving/inference.h"
#include "server/serving/model_registry.h"

namespace ts::server {

// The served model as the API describes it (ListModels, GetModel, PromoteCheckpoint).
void FillModelInfo(const ServedModel& model, taylorshift::v1::ModelInfo* info);

struct InferenceCoreOptions {
  // Classify tokens may use the diagnosis-only request options (a path other than auto);
  // false: only admin tokens may, others get PERMISSION_DENIED naming the option and
  // auth.classify_diagnostic_options. Without authentication everyone may.
  bool classify_diagnostic_options = false;
};

class InferenceCore final : public Inference {
 public:
  InferenceCore(ModelRegistry* registry, const Authorizer* authorizer, Metrics* metrics,
                Clock* clock, InferenceCoreOptions options = {})
      : registry_(registry),
        authorizer_(authorizer),
        metrics_(metrics),
        clock_(clock),
        options_(options) {}

  void Classify(const CallContext& call, const taylorshift::v1::ClassifyRequest& request,
                ClassifyDone done) override;
  absl::StatusOr<std::vector<taylorshift::v1::ModelInfo>> ListModels(
      const CallContext& call) override;
  absl::StatusOr<taylorshift::v1::ModelInfo> GetModel(const CallContext& call,
                                                      const std::string& name) override;
  absl::Status AdmitTogether(
      const CallContext& call,
      const std::vector<taylorshift::v1::ClassifyRequest>& requests) override;
  absl::Status Authorize(const CallContext& call) const override;
  absl::Status AuthorizeClassify(const CallContext& call, const std::string& model) const override;
  bool Ready() const override;

  // Shutdown has begun: Ready() turns false (Classify keeps answering until the front ends stop).
  void SetDraining() { draining_ = true; }

 private:
  // The `model` label of the request metrics for a requested name.
  std::string ModelLabel(const std::string& model) const;
  // NOT_FOUND for a name that is not served, listing the served ones: what Classify and GetModel
  // answer, so every front end (gRPC, REST, KServe v2, tsctl) shows the same list.
  absl::Status NotServed(const std::string& name) const;

  ModelRegistry* registry_;
  const Authorizer* authorizer_;
  Metrics* metrics_;
  Clock* clock_;
  const InferenceCoreOptions options_;
  std::atomic<bool> draining_{false};
};

}  // namespace ts::server

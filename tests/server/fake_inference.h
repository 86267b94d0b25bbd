// An Inference (server/serving/inference.h) without a model, for front-end tests: one served model
// whose probabilities are a function of the document, a scripted status for every request, and a
// record of the calls it received.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/serving/inference.h"

namespace ts::server::testing {

class FakeInference final : public Inference {
 public:
  // "classes" labels "c0".."c{n-1}"; modality "bytes" or "pixels".
  FakeInference(int classes = 3, std::string modality = "bytes") {
    model_.set_name("m");
    model_.set_version("v1");
    model_.set_modality(std::move(modality));
    for (int i = 0; i < classes; ++i) model_.add_labels("c" + std::to_string(i));
  }

  // Every Classify answers this status when it is not OK.
  void FailWith(absl::Status status) { fail_ = std::move(status); }
  void SetReady(bool ready) { ready_ = ready; }
  // The one model's name ("m" unless set): a test may serve a name the rules refuse.
  void SetModelName(const std::string& name) { model_.set_name(name); }
  // Runs inside every Classify before it answers (a test's fake clock advancing, as a batch
  // that takes time would).
  void WhileComputing(std::function<void()> compute) { compute_ = std::move(compute); }
  // Classify calls received, in order.
  std::vector<taylorshift::v1::ClassifyRequest> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<CallContext> contexts() const {
    absl::MutexLock lock(&mu_);
    return contexts_;
  }

  // The probabilities the fake gives a document: class i gets weight (size + i + 1).
  static std::vector<float> Probabilities(std::size_t size, int classes) {
    std::vector<float> p;
    p.reserve(static_cast<std::size_t>(classes));
    float sum = 0;
    for (int i = 0; i < classes; ++i) sum += static_cast<float>(size + i + 1);
    for (int i = 0; i < classes; ++i) p.push_back(static_cast<float>(size + i + 1) / sum);
    return p;
  }

  void Classify(const CallContext& call, const taylorshift::v1::ClassifyRequest& request,
                ClassifyDone done) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(request);
      contexts_.push_back(call);
    }
    if (request.model() != model_.name()) return done(absl::NotFoundError("no such model"), {});
    if (!fail_.ok()) return done(fail_, {});
    if (compute_) compute_();
    const std::size_t size =
        request.has_image() ? request.image().pixels().size() : request.document().size();
    const auto p = Probabilities(size, model_.labels_size());
    taylorshift::v1::ClassifyResponse response;
    response.set_request_id(request.request_id());
    response.set_label(model_.labels(model_.labels_size() - 1));
    response.set_model_version(model_.version());
    std::vector<int> order;
    for (int i = model_.labels_size() - 1; i >= 0; --i) order.push_back(i);  // best first
    if (request.top_k() == 0) {
      order.clear();
      for (int i = 0; i < model_.labels_size(); ++i) order.push_back(i);
    } else {
      order.resize(request.top_k());
    }
    for (const int c : order) {
      auto* entry = response.add_probabilities();
      entry->set_label(model_.labels(c));
      entry->set_index(c);
      entry->set_probability(p[c]);
    }
    done(absl::OkStatus(), response);
  }

  absl::StatusOr<std::vector<taylorshift::v1::ModelInfo>> ListModels(
      const CallContext& /*call*/) override {
    return std::vector<taylorshift::v1::ModelInfo>{model_};
  }

  absl::StatusOr<taylorshift::v1::ModelInfo> GetModel(const CallContext& /*call*/,
                                                      const std::string& name) override {
    if (name != model_.name()) return absl::NotFoundError("model \"" + name + "\" is not served");
    return model_;
  }

  // Set: Authorize wants "Bearer TOKEN" (UNAUTHENTICATED without it); Classify does not check.
  void RequireToken(std::string token) { token_ = std::move(token); }
  absl::Status Authorize(const CallContext& call) const override {
    if (token_.empty() || call.authorization == "Bearer " + token_) return absl::OkStatus();
    return absl::UnauthenticatedError("authorization: a bearer token is required");
  }

  bool Ready() const override { return ready_; }

 private:
  taylorshift::v1::ModelInfo model_;
  std::string token_;
  absl::Status fail_;
  bool ready_ = true;
  mutable absl::Mutex mu_;
  std::function<void()> compute_;
  std::vector<taylorshift::v1::ClassifyRequest> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<CallContext> contexts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ts::server::testing

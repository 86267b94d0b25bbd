// The Inference (server/serving/inference.h) the HTTP and KServe fuzz targets route to: two served
// models, "doc" (documents) and "img" (pixels), three classes each. Before it answers, a request's
// input goes through what the server does to every input ahead of batching
// (server/serving/inference_core.cc): an image's pixels through ImageToTokens, the over_length
// policy through ParseLengthPolicy, the tokens through PrepareTokens, so the bytes a client sends
// reach the same torch-free functions as on tsserver. No model runs: the answer is uniform over the
// classes. Synchronous (`done` runs before Classify returns); one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/api/inputs.h"
#include "server/serving/inference.h"

namespace ts::fuzz {

class FuzzInference final : public server::Inference {
 public:
  FuzzInference() {
    for (const char* modality : {"bytes", "pixels"}) {
      taylorshift::v1::ModelInfo& model = models_.emplace_back();
      model.set_name(std::string(modality) == "bytes" ? "doc" : "img");
      model.set_version("1");
      model.set_modality(modality);
      model.set_max_length(64);
      for (const char* label : {"neg", "neutral", "pos"}) model.add_labels(label);
    }
  }

  void Classify(const server::CallContext& call, const taylorshift::v1::ClassifyRequest& request,
                ClassifyDone done) override {
    auto model = GetModel(call, request.model());
    if (!model.ok()) return done(model.status(), {});
    std::string tokens = request.document();
    if (request.has_image()) {
      const auto& image = request.image();
      if (model->modality() != "pixels") {
        return done(absl::InvalidArgumentError("image: the model takes documents"), {});
      }
      auto pixels = ImageToTokens(image.width(), image.height(), image.channels(), image.pixels());
      if (!pixels.ok()) return done(pixels.status(), {});
      tokens = *std::move(pixels);
    }
    LengthPolicyOptions policy;
    policy.max_length = model->max_length();
    if (!request.over_length().empty()) {
      auto parsed = ParseLengthPolicy(request.over_length());
      if (!parsed.ok()) return done(parsed.status(), {});
      policy.policy = *parsed;
    }
    auto prepared = PrepareTokens(tokens, policy);
    if (!prepared.ok()) return done(prepared.status(), {});

    taylorshift::v1::ClassifyResponse response;
    response.set_request_id(request.request_id());
    response.set_label(model->labels(0));
    response.set_model_version(model->version());
    const int classes = model->labels_size();
    int shown = classes;
    if (request.top_k() > 0 && request.top_k() < static_cast<std::uint32_t>(classes)) {
      shown = static_cast<int>(request.top_k());
    }
    for (int c = 0; c < shown; ++c) {
      auto* p = response.add_probabilities();
      p->set_index(c);
      p->set_label(model->labels(c));
      p->set_probability(1.0f / static_cast<float>(classes));
    }
    response.set_windows(static_cast<std::uint32_t>(prepared->windows.size()));
    response.set_truncated(prepared->truncated);
    done(absl::OkStatus(), std::move(response));
  }

  absl::StatusOr<std::vector<taylorshift::v1::ModelInfo>> ListModels(
      const server::CallContext& /*call*/) override {
    return models_;
  }

  absl::StatusOr<taylorshift::v1::ModelInfo> GetModel(const server::CallContext& /*call*/,
                                                      const std::string& name) override {
    for (const auto& model : models_) {
      if (model.name() == name) return model;
    }
    return absl::NotFoundError(absl::StrCat("model ", name, " is not served"));
  }

  absl::Status Authorize(const server::CallContext& /*call*/) const override {
    return absl::OkStatus();
  }
  bool Ready() const override { return true; }

 private:
  std::vector<taylorshift::v1::ModelInfo> models_;
};

}  // namespace ts::fuzz

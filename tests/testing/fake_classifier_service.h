// A scripted taylorshift.v1.Classifier service on a loopback port, for tests of tsctl's classify
// command that need the wire but not a model. Classify records each request and answers with the
// scripted `labels`' probabilities (GetModel answers the scripted ModelInfo, if any): every class
// in class order, or (top_k > 0) the top_k best, best first, as the real server does; tokens =
// document bytes + 1 (CLS). Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "taylorshift/v1/classifier.grpc.pb.h"

namespace ts::testing {

class FakeClassifierService final : public taylorshift::v1::Classifier::Service {
 public:
  // `probabilities[i]` is the answer for class `labels[i]`.
  FakeClassifierService(std::vector<std::string> labels, std::vector<float> probabilities)
      : labels_(std::move(labels)), probabilities_(std::move(probabilities)) {}

  ~FakeClassifierService() override {
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

  // GetModel answers `info` from now on (before: UNIMPLEMENTED, as a server without it).
  void set_model_info(taylorshift::v1::ModelInfo info) {
    absl::MutexLock lock(&mu_);
    model_info_ = std::move(info);
  }

  grpc::Status GetModel(grpc::ServerContext* /*context*/,
                        const taylorshift::v1::GetModelRequest* /*request*/,
                        taylorshift::v1::ModelInfo* response) override {
    absl::MutexLock lock(&mu_);
    if (!model_info_.has_value()) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "GetModel is not scripted");
    }
    *response = *model_info_;
    return grpc::Status::OK;
  }

  std::vector<taylorshift::v1::ClassifyRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  grpc::Status Classify(grpc::ServerContext* /*context*/,
                        const taylorshift::v1::ClassifyRequest* request,
                        taylorshift::v1::ClassifyResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(*request);
    }
    if (request->top_k() > labels_.size()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("top_k ", request->top_k(), " is above the ", labels_.size(), " classes"));
    }
    std::vector<std::size_t> order(labels_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return probabilities_[a] > probabilities_[b];
    });
    response->set_request_id(request->request_id());
    response->set_label(labels_[order[0]]);
    if (request->top_k() > 0) order.resize(request->top_k());
    if (request->top_k() == 0) std::sort(order.begin(), order.end());
    for (const std::size_t i : order) {
      auto* entry = response->add_probabilities();
      entry->set_label(labels_[i]);
      entry->set_index(static_cast<std::uint32_t>(i));
      entry->set_probability(probabilities_[i]);
    }
    response->set_path(taylorshift::v1::ATTENTION_PATH_DIRECT);
    response->set_tokens(static_cast<std::uint32_t>(request->document().size() + 1));
    response->set_windows(1);
    response->set_model_version("v1");
    response->mutable_timing()->set_batch_size(1);
    return grpc::Status::OK;
  }

 private:
  const std::vector<std::string> labels_;
  const std::vector<float> probabilities_;
  absl::Mutex mu_;
  std::vector<taylorshift::v1::ClassifyRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::optional<taylorshift::v1::ModelInfo> model_info_ ABSL_GUARDED_BY(mu_);
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ts::testing

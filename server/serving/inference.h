// The transport-neutral inference API that every front end calls: the Classifier gRPC service,
// the KServe v2 gRPC service and the HTTP/JSON front end (docs/PROTOCOLS.md). A front end turns
// its call into a CallContext (bearer token, deadline, cancellation) and a ClassifyRequest;
// authorisation, validation, batching, limits and metrics happen behind this interface, once.
// Torch-free, gRPC-free: only the API's messages.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts::server {

// What a front end knows of one call.
struct CallContext {
  // The caller's `authorization` header or metadata ("Bearer TOKEN"); empty when absent.
  std::string authorization;
  // How long the caller waits, counted from when the front end took the call; requests still
  // queued then get DEADLINE_EXCEEDED. A duration, not a time: each side reads it on its own
  // clock (the batcher on the injected one).
  absl::Duration timeout = absl::InfiniteDuration();
  // True once the caller has gone away (null: never).
  std::function<bool()> cancelled;
  // The front end, the `protocol` label of taylorshift_requests_total: kProtocolGrpc
  // (taylorshift.v1.Classifier), kProtocolV2Grpc, kProtocolV2Rest or kProtocolRest (the plain
  // route POST /v1/models/NAME:classify).
  const char* protocol = kProtocolGrpc;

  static constexpr const char* kProtocolGrpc = "grpc";
  static constexpr const char* kProtocolV2Grpc = "v2_grpc";
  static constexpr const char* kProtocolV2Rest = "v2_rest";
  static constexpr const char* kProtocolRest = "rest";
};

class Inference {
 public:
  virtual ~Inference() = default;

  // Classifies one input; `done` is called exactly once, possibly before this returns and
  // possibly on a batcher thread.
  using ClassifyDone =
      std::function<void(const absl::Status& status, taylorshift::v1::ClassifyResponse response)>;
  virtual void Classify(const CallContext& call, const taylorshift::v1::ClassifyRequest& request,
                        ClassifyDone done) = 0;

  // Whether the requests of one call that carries several (a KServe v2 request's batch
  // elements) may be classified, judged together before any is queued: each as Classify would
  // judge it (an error names its element) and their estimated cost together against the
  // model's max_request_mflop, as one request of that many windows. A refusal is counted once
  // per element, like Classify's; OK means each is to be passed to Classify.
  virtual absl::Status AdmitTogether(
      const CallContext& /*call*/,
      const std::vector<taylorshift::v1::ClassifyRequest>& /*requests*/) {
    return absl::OkStatus();
  }

  // The served models, by name; UNAUTHENTICATED / PERMISSION_DENIED as Classify.
  virtual absl::StatusOr<std::vector<taylorshift::v1::ModelInfo>> ListModels(
      const CallContext& call) = 0;
  // One model; NOT_FOUND naming it and the served models when it is not served.
  virtual absl::StatusOr<taylorshift::v1::ModelInfo> GetModel(const CallContext& call,
                                                              const std::string& name) = 0;
  // Whether the call's token may classify and read models: OK when authentication is off;
  // UNAUTHENTICATED / PERMISSION_DENIED as Classify answers them. Cheap and never blocks: a
  // front end asks it from a request's headers, before it reads the body.
  virtual absl::Status Authorize(const CallContext& call) const = 0;
  // Authorize for a classification of `model` that a front end refuses before it reads the
  // request (and so never calls Classify): a refusal is also counted as a finished request of
  // `model` under call.protocol, as Classify counts its own refusals.
  virtual absl::Status AuthorizeClassify(const CallContext& call,
                                         const std::string& /*model*/) const {
    return Authorize(call);
  }
  // Whether Classify can be answered now: models are loaded and the server is not draining.
  virtual bool Ready() const = 0;
};

}  // namespace ts::server

// The HTTP/JSON front end: the KServe v2 REST routes (/v2/...) and a plain route for curl
// (POST /v1/models/{name}:classify), on a listener of its own (http.listen). A thin layer over
// Inference (server/serving/inference.h), like the gRPC services: the same batcher, limits, bearer
// tokens (Authorization header), deadlines (X-Timeout-Ms header) and metrics. Errors answer
// {"error": MESSAGE, "code": GRPC_CODE_NAME} with the HTTP status HttpStatusFor gives.
// Routes and JSON forms: docs/PROTOCOLS.md. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/config.h"
#include "server/serving/http_listener.h"
#include "server/serving/inference.h"

namespace ts::server {

struct RouteOptions {
  std::int64_t max_infer_batch = 256;                     // elements of one v2 infer request
  absl::Duration default_timeout = absl::ZeroDuration();  // without X-Timeout-Ms; 0 = none
  int max_json_depth = 32;     // deeper JSON bodies → 400 before anything recurses
  Clock* clock = RealClock();  // latency_ms and the deadline of a call (not owned)
};

// Answers one request as the listener does, without a socket (tests, fuzzers): its route (the
// routes the listener serves, their before_body checks included), JSON decoding, the call through
// `inference`, JSON encoding. Blocks until the classification (if any) is done.
HttpAnswer Route(Inference* inference, const RouteOptions& options, const HttpExchange& request);

struct HttpFrontendOptions {
  HttpConfig http;
  TlsConfig tls;                              // cert_file set: HTTPS (client_ca_file: mTLS)
  std::int64_t max_message_bytes = 64 << 20;  // the body limit when http.max_body_bytes is 0
  std::int64_t max_infer_batch = 256;
  // Called with every answer's status code (the server counts them in its metrics).
  std::function<void(int status)> on_response;
  Clock* clock = RealClock();  // not owned
};

class HttpFrontend {
 public:
  // Binds http.listen (port 0: any free port) and starts serving on http.threads threads.
  static absl::StatusOr<std::unique_ptr<HttpFrontend>> Start(const HttpFrontendOptions& options,
                                                             Inference* inference);
  ~HttpFrontend();  // Stop()
  HttpFrontend(const HttpFrontend&) = delete;
  HttpFrontend& operator=(const HttpFrontend&) = delete;

  // host:port actually bound.
  const std::string& address() const;
  // Stops accepting connections and waits for the requests being answered.
  void Stop();

 private:
  explicit HttpFrontend(std::unique_ptr<HttpListener> listener);
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace ts::server

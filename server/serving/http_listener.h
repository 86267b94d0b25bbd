// An HTTP(S) listener on cpp-httplib (Debian's libcpp-httplib): binds host:port (port 0: any
// free port), answers requests through routes registered on httplib's router (or one handler
// for every request) on a pool of ordinary threads, stops on request. Both HTTP endpoints use
// it: the HTTP/JSON front end (server/serving/http_frontend.h) and the Prometheus /metrics
// endpoint (server/metrics.h). Torch-free; httplib stays out of this header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ts::server {

// One HTTP exchange without the socket.
struct HttpExchange {
  std::string method;                          // GET, HEAD, POST, …
  std::string path;                            // without the query string
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::vector<std::string> path_groups = {};  // the route pattern's capture groups, from 1
};

struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::map<std::string, std::string> headers;  // extra headers (Retry-After, WWW-Authenticate)
  std::string body;
};

using HttpHandler = std::function<HttpAnswer(const HttpExchange&)>;

// Requests with `method` whose whole path matches `pattern` (a std::regex, as httplib's router
// takes it) go to `handler`, with the pattern's groups in HttpExchange::path_groups ("" for a
// group that took no part). Routes are tried in order; a GET route answers HEAD too (httplib
// sends no body).
struct HttpRoute {
  std::string method;  // GET, POST, PUT, PATCH, DELETE or OPTIONS
  std::string pattern;
  HttpHandler handler;
};

// Answers `request` as a listener serving `routes` does, without a socket (for tests and
// fuzzers): the first route of its method (HEAD: GET) whose pattern matches the whole path;
// none → 404 with an empty body (the listener's error handler fills it).
HttpAnswer AnswerInProcess(const std::vector<HttpRoute>& routes, const HttpExchange& request);

struct HttpListenerOptions {
  std::string name = "http";  // prefixes start-up errors ("http: cannot listen on …")
  std::string listen;         // host:port, [v6]:port
  std::string cert_file;      // set: HTTPS with this certificate chain and key_file
  std::string key_file;
  std::string client_ca_file;  // set: clients must present a certificate signed by it
  int threads = 1;             // threads kept ready for connections
  int max_connections = 64;    // connections served at once (the pool grows to it)
  absl::Duration read_timeout = absl::Seconds(5);  // silence while reading a request → closed
  std::int64_t max_body_bytes = 1 << 20;           // larger → 413
  absl::Duration keep_alive = absl::Seconds(5);
  int keep_alive_max_requests = 1000;
  // Called with the status of every answer sent, httplib's own (400, 413) included; set: must be
  // thread-safe.
  std::function<void(int status)> on_response;
};

class HttpListener {
 public:
  // Registers `routes` on httplib's router; a request no route takes is answered 404, one with
  // a method httplib does not route 400. Handlers are called from the pool's threads and must
  // be thread-safe. An unknown method is INVALID_ARGUMENT; an address in use is UNAVAILABLE
  // (SO_REUSEPORT is not set, so two servers cannot share a port).
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(const HttpListenerOptions& options,
                                                             std::vector<HttpRoute> routes);
  // Every method and path to `handler`, which answers 404 and 405 itself.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(const HttpListenerOptions& options,
                                                             const HttpHandler& handler);
  ~HttpListener();  // Stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  const std::string& address() const { return address_; }  // host:port bound
  int port() const { return port_; }
  // Stops accepting connections and waits for the requests being answered. Idempotent.
  void Stop();

 private:
  struct Impl;
  HttpListener(std::unique_ptr<Impl> impl, std::string address, int port);
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int port_;
};

}  // namespace ts::server

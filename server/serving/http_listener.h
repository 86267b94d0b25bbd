// An HTTP/1.1 (and HTTPS) listener on Boost.Beast/Asio: binds host:port (port 0: any free
// port), reads every connection asynchronously on a few io threads (an idle connection holds no
// thread), answers requests through routes (or one handler for every request) on a bounded pool
// of handler threads, stops on request. Every body is bounded however it is framed
// (Content-Length, chunked, gzip/deflate: server/serving/http_body.h); a route may refuse a
// request from its headers before any body byte is read (authentication); connections have total
// header and body deadlines and caps (in total and per peer address) that shed the oldest idle
// connection first. Both HTTP endpoints use it: the HTTP/JSON front end
// (server/serving/http_frontend.h) and the Prometheus /metrics endpoint (server/metrics.h).
// Torch-free; Beast stays out of this header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
// Given a request's method, path, headers and path groups (its body not read yet): an answer
// refuses the request before its body is read; nullopt reads the body and calls the handler.
using HttpBeforeBody = std::function<std::optional<HttpAnswer>(const HttpExchange&)>;

// Requests with `method` whose whole path matches `pattern` (a std::regex) go to `handler`,
// with the pattern's groups in HttpExchange::path_groups ("" for a group that took no part).
// Routes are tried in order; a GET route answers HEAD too (without a body).
struct HttpRoute {
  std::string method;  // GET, POST, PUT, PATCH, DELETE or OPTIONS
  std::string pattern;
  HttpHandler handler;
  // Set: called on an io thread once the request's headers are read, before any byte of its
  // body (so a request without a valid token is answered 401 without being read). An answer
  // is sent as the request's answer and the connection closes (the body is never read); it must
  // not block, and must be thread-safe.
  HttpBeforeBody before_body = nullptr;
};

// Answers `request` as a listener serving `routes` does, without a socket (for tests and
// fuzzers): the first route of its method (HEAD: GET) whose pattern matches the whole path,
// its before_body (an answer stops there) then its handler; none → 404 with an empty body.
HttpAnswer AnswerInProcess(const std::vector<HttpRoute>& routes, const HttpExchange& request);

struct HttpListenerOptions {
  std::string name = "http";  // prefixes start-up errors ("http: cannot listen on …")
  std::string listen;         // host:port, [v6]:port
  std::string cert_file;      // set: HTTPS with this certificate chain and key_file
  std::string key_file;
  std::string client_ca_file;  // set: clients must present a certificate signed by it
  // Handler threads: requests whose handlers run at once (handlers may block); more wait in
  // order. Never the threads that read and write connections.
  int threads = 1;
  int io_threads = 1;  // threads that read and write every connection (asynchronously)
  // Connections open at once. A new connection at the cap closes the connection idle the
  // longest (one in its TLS handshake, waiting for or reading a request's headers), not one
  // whose request is being read or answered; with none idle, the new connection is closed.
  int max_connections = 64;
  int max_connections_per_peer = 64;  // the same, per client IP address
  // A request's headers (from the accept, TLS handshake included, or from the end of the
  // previous answer on a keep-alive connection) must arrive within header_timeout, its body
  // within body_timeout of its headers, an answer must be written within write_timeout, and
  // no read may wait more than read_timeout for a byte; past any, the connection is closed.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(10);
  absl::Duration read_timeout = absl::Seconds(5);
  // A body larger than this (as sent, or once inflated) → 413, counted as it arrives however
  // it is framed; Content-Length over it → 413 before a byte of the body is read.
  std::int64_t max_body_bytes = 1 << 20;
  // A gzip/deflate body inflating more than this many times its compressed size → 413.
  std::int64_t max_inflate_ratio = 100;
  // Request bodies held at once by all connections together (as read, until their answers are
  // written); a body that would pass it → 503 with Retry-After, naming the limit. 0 = four times
  // max_body_bytes; at least max_body_bytes.
  std::int64_t max_buffered_body_bytes = 0;
  std::int64_t max_header_bytes = 16 << 10;      // request line and headers; larger → 431
  absl::Duration keep_alive = absl::Seconds(5);  // idle between requests, then closed
  int keep_alive_max_requests = 1000;
  // Called with the status of every answer sent, the listener's own (400, 404, 413, 415, 431)
  // included; set: must be thread-safe.
  std::function<void(int status)> on_response;
};

class HttpListener {
 public:
  // Serves `routes`; a request no route takes is answered 404, one with a method no route can
  // take (not GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS) 400. Handlers are called from the
  // handler threads and must be thread-safe. An unknown method is INVALID_ARGUMENT; an address in
  // use is UNAVAILABLE (SO_REUSEPORT is not set, so two servers cannot share a port).
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
  // Stops accepting connections, closes the connections no handler is answering and waits for
  // the requests being answered. Idempotent.
  void Stop();

 private:
  struct Impl;
  HttpListener(std::unique_ptr<Impl> impl, std::string address, int port);
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int port_;
};

}  // namespace ts::server

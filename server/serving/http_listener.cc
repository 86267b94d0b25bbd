#include "server/serving/http_listener.h"

#include <httplib.h>

#include <atomic>
#include <deque>
#include <map>
#include <regex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ts::server {

namespace {

// httplib's task queue with a pool that grows: `min_threads` start at once, one more is started
// whenever a connection arrives while every thread is busy, up to `max_threads`; beyond that,
// connections wait in order. A connection holds its thread while its client sends the request,
// so a fixed pool lets a few clients that trickle bytes starve every other one (health checks
// included); growing to max_threads bounds what they can take. Threads stay until shutdown().
class GrowingThreadPool : public httplib::TaskQueue {
 public:
  GrowingThreadPool(int min_threads, int max_threads)
      : max_threads_(std::max(min_threads, max_threads)) {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < min_threads; ++i) StartThreadLocked();
  }
  ~GrowingThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(fn));
    if (!stopping_ && idle_ < static_cast<int>(tasks_.size()) &&
        static_cast<int>(threads_.size()) < max_threads_) {
      StartThreadLocked();
    }
    ready_.Signal();
  }

  void shutdown() override {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      threads.swap(threads_);
      ready_.SignalAll();
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  void StartThreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    threads_.emplace_back([this] { Run(); });
  }

  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        ++idle_;
        while (!stopping_ && tasks_.empty()) ready_.Wait(&mu_);
        --idle_;
        // httplib's own pool finishes the queued connections before it stops; so does this one.
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  const int max_threads_;
  absl::Mutex mu_;
  absl::CondVar ready_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);  // joined by shutdown()
};

// httplib's router, by method (HEAD goes to GET's routes).
using AddRoute = httplib::Server& (httplib::Server::*)(const std::string&,
                                                       httplib::Server::Handler);
const std::map<std::string, AddRoute>& Router() {
  static const auto* router = new std::map<std::string, AddRoute>{
      {"GET", &httplib::Server::Get},       {"POST", &httplib::Server::Post},
      {"PUT", &httplib::Server::Put},       {"PATCH", &httplib::Server::Patch},
      {"DELETE", &httplib::Server::Delete}, {"OPTIONS", &httplib::Server::Options}};
  return *router;
}

// `pattern` compiled once (as the listener compiles its routes once); never freed.
const std::regex& Compiled(const std::string& pattern) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* compiled = new std::map<std::string, std::regex>();
  absl::MutexLock lock(&mu);
  return compiled->try_emplace(pattern, pattern).first->second;
}

}  // namespace

HttpAnswer AnswerInProcess(const std::vector<HttpRoute>& routes, const HttpExchange& request) {
  const std::string method = request.method == "HEAD" ? "GET" : request.method;
  for (const HttpRoute& route : routes) {
    std::smatch match;
    if (route.method != method || !std::regex_match(request.path, match, Compiled(route.pattern))) {
      continue;
    }
    HttpExchange routed = request;
    routed.path_groups.clear();
    for (std::size_t i = 1; i < match.size(); ++i) routed.path_groups.push_back(match[i].str());
    return route.handler(routed);
  }
  HttpAnswer none;
  none.status = 404;
  return none;
}

struct HttpListener::Impl {
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
};

HttpListener::HttpListener(std::unique_ptr<Impl> impl, std::string address, int port)
    : impl_(std::move(impl)), address_(std::move(address)), port_(port) {}

HttpListener::~HttpListener() { Stop(); }

void HttpListener::Stop() {
  if (impl_ == nullptr || !impl_->thread.joinable()) return;
  impl_->server->stop();
  impl_->thread.join();
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(
    const HttpListenerOptions& options, const HttpHandler& handler) {
  std::vector<HttpRoute> routes;
  for (const auto& [method, add] : Router()) routes.push_back({method, ".*", handler});
  return Start(options, std::move(routes));
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(
    const HttpListenerOptions& options, std::vector<HttpRoute> routes) {
  const std::string& listen = options.listen;
  const auto colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name, ": expected HOST:PORT, got \"", listen, "\""));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto impl = std::make_unique<Impl>();
  if (options.cert_file.empty()) {
    impl->server = std::make_unique<httplib::Server>();
  } else {
    impl->server = std::make_unique<httplib::SSLServer>(
        options.cert_file.c_str(), options.key_file.c_str(),
        options.client_ca_file.empty() ? nullptr : options.client_ca_file.c_str());
    if (!impl->server->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.name, ": cannot load the TLS certificate ", options.cert_file, " or key ",
          options.key_file, options.client_ca_file.empty() ? "" : " or client CA ",
          options.client_ca_file));
    }
  }
  httplib::Server& server = *impl->server;
  const int threads = std::max(1, options.threads);
  const int max_connections = std::max(threads, options.max_connections);
  server.new_task_queue = [threads, max_connections] {
    return new GrowingThreadPool(threads, max_connections);
  };
  server.set_read_timeout(std::max<time_t>(1, absl::ToInt64Seconds(options.read_timeout)));
  server.set_payload_max_length(
      static_cast<std::size_t>(std::max<std::int64_t>(1, options.max_body_bytes)));
  server.set_keep_alive_timeout(std::max<time_t>(1, absl::ToInt64Seconds(options.keep_alive)));
  server.set_keep_alive_max_count(
      static_cast<std::size_t>(std::max(1, options.keep_alive_max_requests)));
  server.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port
  // and silently share its connections; refuse an address in use instead.
  auto listening = std::make_shared<socket_t>(INVALID_SOCKET);
  server.set_socket_options([listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listening = sock;
  });
  for (HttpRoute& route : routes) {
    auto serve = [handler = std::move(route.handler)](const httplib::Request& req,
                                                      httplib::Response& res) {
      HttpExchange exchange;
      exchange.method = req.method;
      exchange.path = req.path;
      for (const auto& [name, value] : req.headers) {
        exchange.headers[absl::AsciiStrToLower(name)] = value;
      }
      exchange.body = req.body;
      for (std::size_t i = 1; i < req.matches.size(); ++i) {
        exchange.path_groups.push_back(req.matches[i].str());
      }
      HttpAnswer answer = handler(exchange);
      res.status = answer.status;
      for (const auto& [name, value] : answer.headers) res.set_header(name, value);
      res.set_content(answer.body, answer.content_type.c_str());
    };
    const auto add = Router().find(route.method);
    if (add == Router().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.name, ": no route can take the method ", route.method));
    }
    (server.*add->second)(route.pattern, std::move(serve));
  }
  if (options.on_response) {
    server.set_logger([on_response = options.on_response](const httplib::Request& /*req*/,
                                                          const httplib::Response& res) {
      on_response(res.status);
    });
  }
  // What httplib answers itself: a body over the limit (413), a malformed request (400).
  server.set_error_handler(
      [name = options.name](const httplib::Request& /*req*/, httplib::Response& res) {
        if (!res.body.empty()) return;
        const std::string message =
            res.status == 413 ? absl::StrCat("body: larger than ", name, ".max_body_bytes")
                              : absl::StrCat("the request was refused with HTTP ", res.status);
        res.set_content(
            absl::StrCat("{\"error\":\"", message, "\",\"code\":\"",
                         res.status == 413 ? "RESOURCE_EXHAUSTED" : "INVALID_ARGUMENT", "\"}"),
            "application/json");
      });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat(options.name, ": cannot listen on ", listen));
  }
  // Debian's libcpp-httplib listens with a backlog of 5 (compiled in): connections beyond it
  // wait for the client's SYN retry (1 s). listen() on a listening socket sets a new backlog.
  if (*listening != INVALID_SOCKET) ::listen(*listening, SOMAXCONN);
  auto returned = std::make_shared<std::atomic<bool>>(false);
  impl->thread = std::thread([&server, returned] {
    server.listen_after_bind();
    *returned = true;
  });
  // stop() is a no-op until the accept loop runs: wait for it, so that Stop() always stops.
  while (!server.is_running() && !*returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (*returned) {
    impl->thread.join();
    return absl::UnavailableError(
        absl::StrCat(options.name, ": the listener on ", listen, " stopped"));
  }
  const std::string shown =
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  return std::unique_ptr<HttpListener>(
      new HttpListener(std::move(impl), absl::StrCat(shown, ":", bound), bound));
}

}  // namespace ts::server

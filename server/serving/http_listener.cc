#include "server/serving/http_listener.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/serving/http_body.h"
#include "server/serving/http_response_encoding.h"

namespace ts::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using SteadyTime = std::chrono::steady_clock::time_point;

// The methods routes take (HEAD goes to GET's routes).
constexpr const char* kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};

// A body is read this many bytes at a time (before decoding).
constexpr std::size_t kBodyPieceBytes = 16 << 10;
// What a refused request may still send before its connection closes (so that the client reads
// the answer instead of a reset), and for how long.
constexpr std::size_t kDrainBytes = 64 << 10;
constexpr auto kDrainTime = std::chrono::seconds(1);
// The TLS 1.2 suites: forward secret (ECDHE) and authenticated encryption (GCM, ChaCha20) only,
// as the gRPC port offers. TLS 1.3's suites are all of that kind.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

// `pattern` compiled once (as the listener compiles its routes once); never freed.
const std::regex& Compiled(const std::string& pattern) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* compiled = new std::map<std::string, std::regex>();
  absl::MutexLock lock(&mu);
  return compiled->try_emplace(pattern, pattern).first->second;
}

// The first route of the request's method (HEAD: GET) that matches its whole path, with the
// path groups set in `request`; null when none does.
const HttpRoute* Match(const std::vector<HttpRoute>& routes, HttpExchange& request) {
  const std::string method = request.method == "HEAD" ? "GET" : request.method;
  for (const HttpRoute& route : routes) {
    std::smatch match;
    if (route.method != method || !std::regex_match(request.path, match, Compiled(route.pattern))) {
      continue;
    }
    request.path_groups.clear();
    for (std::size_t i = 1; i < match.size(); ++i) request.path_groups.push_back(match[i].str());
    return &route;
  }
  return nullptr;
}

HttpAnswer ErrorAnswer(int status, const std::string& message, const std::string& code) {
  HttpAnswer answer;
  answer.status = status;
  std::string quoted;
  for (const char c : message) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    quoted += c;
  }
  answer.body = absl::StrCat("{\"error\":\"", quoted, "\",\"code\":\"", code, "\"}");
  return answer;
}

HttpAnswer FromStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return ErrorAnswer(413, std::string(status.message()), "RESOURCE_EXHAUSTED");
    case absl::StatusCode::kUnimplemented: {
      HttpAnswer answer = ErrorAnswer(415, std::string(status.message()), "UNIMPLEMENTED");
      answer.headers["Accept-Encoding"] = kAcceptedContentEncodings;
      return answer;
    }
    default:
      return ErrorAnswer(400, std::string(status.message()), "INVALID_ARGUMENT");
  }
}

// The path of a request target ("/a%20b?x=1" → "/a b"); nullopt when it is not origin-form.
std::optional<std::string> PathOf(beast::string_view target) {
  if (target.empty() || target.front() != '/') return std::nullopt;
  const auto query = target.find('?');
  const beast::string_view raw = target.substr(0, query);
  std::string path;
  path.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    int hi = 0;
    int lo = 0;
    const auto hex = [](char c, int* v) {
      if (c >= '0' && c <= '9') return *v = c - '0', true;
      if (c >= 'a' && c <= 'f') return *v = c - 'a' + 10, true;
      if (c >= 'A' && c <= 'F') return *v = c - 'A' + 10, true;
      return false;
    };
    if (raw[i] == '%' && i + 2 < raw.size() + 0 && hex(raw[i + 1], &hi) && hex(raw[i + 2], &lo)) {
      path += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      path += raw[i];
    }
  }
  return path;
}

// Handlers run here, never on the io threads: `threads` threads take tasks in order. Stop()
// runs the tasks queued and joins.
class HandlerPool {
 public:
  explicit HandlerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~HandlerPool() { Stop(); }

  void Schedule(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](HandlerPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
              return pool->stopping_ || !pool->tasks_.empty();
            },
            this));
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // joined by Stop()
};

class Connection;

// What the listener's connections share (HttpListener::Impl is one).
struct Listener {
  explicit Listener(const HttpListenerOptions& options)
      : options(options),
        buffered_budget(options.max_buffered_body_bytes > 0
                            ? std::max(options.max_buffered_body_bytes, options.max_body_bytes)
                            : 4 * options.max_body_bytes),
        io(std::max(1, options.io_threads)),
        acceptor(asio::make_strand(io)),
        pool(std::max(1, options.threads)) {}

  // A new connection from `peer` may open: at a cap, the connection idle the longest (of the
  // same peer, at the peer's cap) is closed for it; false when none is idle.
  // `shed` keeps the closed connection (its last reference must go outside `mu`).
  bool Admit(const std::string& peer, std::shared_ptr<Connection>* shed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Accept();
  void Remove(std::uint64_t id) {
    absl::MutexLock lock(&mu);
    connections.erase(id);
  }

  const HttpListenerOptions options;
  const std::int64_t buffered_budget;  // of buffered_bytes
  std::vector<HttpRoute> routes;
  asio::io_context io;
  std::optional<asio::ssl::context> tls;
  tcp::acceptor acceptor;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> next_id{0};
  // Body bytes held by all connections (Connection::HoldBody); at most buffered_budget.
  std::atomic<std::int64_t> buffered_bytes{0};
  absl::Mutex mu;
  // Every open connection, by id (accept order); an entry leaves before its connection is gone.
  std::map<std::uint64_t, Connection*> connections ABSL_GUARDED_BY(mu);
  HandlerPool pool;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> io_threads;  // joined by Stop()
};

// One connection's life: TLS handshake, then requests one at a time (read headers, maybe refuse,
// read and decode the body, run the handler on the pool, write the answer), until it closes.
// Its io runs on its own strand; `state` and `idle_since` are read by Admit() and Stop() from
// other threads.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum State : int { kIdle, kReadingBody, kAnswering, kClosed };

  Connection(Listener* listener, std::string peer)
      : listener_(listener), id_(++listener->next_id), peer_(std::move(peer)) {}
  virtual ~Connection() { listener_->Remove(id_); }
  virtual void Begin() = 0;
  // From any thread: closes the connection on its strand.
  virtual void CloseSoon() = 0;

  std::uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }
  std::atomic<int> state{kIdle};
  std::atomic<std::int64_t> idle_since_ns{0};

 protected:
  // Moves from `from` to `to` unless the connection was closed (shed) meanwhile.
  bool Transition(State from, State to) {
    int expected = from;
    return state.compare_exchange_strong(expected, to);
  }
  void BecomeIdle() {
    idle_since_ns = std::chrono::steady_clock::now().time_since_epoch().count();
    int expected = kAnswering;
    state.compare_exchange_strong(expected, kIdle);
  }

  Listener* const listener_;
  const std::uint64_t id_;
  const std::string peer_;
};

template <bool kTls>
class ConnectionOn final : public Connection {
 public:
  using Stream = std::conditional_t<kTls, beast::ssl_stream<beast::tcp_stream>, beast::tcp_stream>;

  ConnectionOn(Listener* listener, tcp::socket socket, std::string peer)
      : Connection(listener, std::move(peer)),
        stream_(MakeStream(listener, std::move(socket))),
        timer_(stream_.get_executor()),
        buffer_(static_cast<std::size_t>(listener->options.max_header_bytes) + kBodyPieceBytes) {}

  void Begin() override {
    idle_since_ns = std::chrono::steady_clock::now().time_since_epoch().count();
    header_deadline_ = std::chrono::steady_clock::now() + Chrono(options().header_timeout);
    first_byte_deadline_ = header_deadline_;
    if constexpr (kTls) {
      Lowest().expires_at(header_deadline_);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = Self()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHeader();
                              });
    } else {
      ReadHeader();
    }
  }

  ~ConnectionOn() override { ReleaseBody(); }

  void CloseSoon() override {
    asio::post(stream_.get_executor(), [self = Self()] { self->Close(); });
  }

 private:
  static Stream MakeStream(Listener* listener, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *listener->tls);
    } else {
      return Stream(std::move(socket));
    }
  }
  std::shared_ptr<ConnectionOn> Self() {
    return std::static_pointer_cast<ConnectionOn>(shared_from_this());
  }
  const HttpListenerOptions& options() const { return listener_->options; }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void Close() {
    state = kClosed;
    timer_.cancel();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  // --- headers ---

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::int64_t>(
        options().max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    // The decoder counts the body (http_body.h); the parser only removes its framing.
    parser_->body_limit((std::numeric_limits<std::uint64_t>::max)());
    ReadSomeHeader();
  }

  void ReadSomeHeader() {
    const SteadyTime now = std::chrono::steady_clock::now();
    SteadyTime expiry = std::min(header_deadline_, now + Chrono(options().read_timeout));
    if (!seen_bytes_) expiry = std::min(expiry, first_byte_deadline_);
    ReadUntil(expiry);
    http::async_read_some(
        stream_, buffer_, *parser_,
        [self = Self()](beast::error_code ec, std::size_t n) { self->OnHeaderBytes(ec, n); });
  }

  // Bounds the read about to start: at `expiry` the read is cancelled (timed_out_ tells its
  // handler, which answers 408 when a request had begun). beast's own expiry, which closes the
  // socket, stays one write_timeout later as a backstop.
  void ReadUntil(SteadyTime expiry) {
    Lowest().expires_at(expiry + Chrono(options().write_timeout));
    timed_out_ = false;
    timer_.expires_at(expiry);
    timer_.async_wait([self = Self(), generation = ++timer_generation_](beast::error_code ec) {
      // A wait cancelled, or one that expired after its read had finished (a later read is
      // another generation), cancels nothing.
      if (ec || generation != self->timer_generation_) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->Lowest().socket().cancel(ignored);
    });
  }
  // The read's handler runs: its deadline no longer applies.
  void ReadEnded() {
    ++timer_generation_;
    timer_.cancel();
  }

  void OnHeaderBytes(beast::error_code ec, std::size_t n) {
    ReadEnded();
    if (n > 0) seen_bytes_ = true;
    if (ec == http::error::header_limit) {
      return Refuse(ErrorAnswer(431,
                                absl::StrCat("headers: larger than ", options().name,
                                             ".max_header_bytes ", options().max_header_bytes),
                                "RESOURCE_EXHAUSTED"));
    }
    // A request begun and not finished in time is told so (408) before the connection closes;
    // an idle connection that sent nothing is closed without a word.
    if (ec == asio::error::operation_aborted && timed_out_ && seen_bytes_ && state != kClosed) {
      return Refuse(
          TimeoutAnswer("headers", header_deadline_, "header_timeout", options().header_timeout));
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        state == kClosed) {
      return Close();
    }
    if (ec) {
      if (!seen_bytes_) return Close();
      return Refuse(ErrorAnswer(400, absl::StrCat("the request is malformed (", ec.message(), ")"),
                                "INVALID_ARGUMENT"));
    }
    if (!parser_->is_header_done()) return ReadSomeHeader();
    if (!Transition(kIdle, kReadingBody)) return Close();  // shed meanwhile
    OnHeader();
  }

  void OnHeader() {
    const auto& request = parser_->get();
    exchange_ = HttpExchange{};
    exchange_.method = std::string(request.method_string());
    const auto path = PathOf(request.target());
    if (!path) {
      return Refuse(
          ErrorAnswer(400, "the request target must be a path (origin-form)", "INVALID_ARGUMENT"));
    }
    exchange_.path = *path;
    for (const auto& field : request) {
      exchange_.headers.emplace(absl::AsciiStrToLower(std::string(field.name_string())),
                                std::string(field.value()));
    }
    head_ = exchange_.method == "HEAD";
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    if (!head_ && std::find_if(std::begin(kMethods), std::end(kMethods), [&](const char* m) {
                    return exchange_.method == m;
                  }) == std::end(kMethods)) {
      return Refuse(ErrorAnswer(
          400, absl::StrCat("the method ", exchange_.method.substr(0, 16), " is not served"),
          "INVALID_ARGUMENT"));
    }
    route_ = Match(listener_->routes, exchange_);
    if (route_ == nullptr) {
      return Refuse(ErrorAnswer(
          404, absl::StrCat("no route ", exchange_.method, " ", exchange_.path.substr(0, 64)),
          "NOT_FOUND"));
    }
    // Authentication first: a caller without a token learns nothing of the limits.
    if (route_->before_body) {
      std::optional<HttpAnswer> early = route_->before_body(exchange_);
      if (early) return Refuse(*std::move(early));
    }
    const auto length = parser_->content_length();
    if (length &&
        static_cast<std::int64_t>(std::min<std::uint64_t>(
            *length, std::numeric_limits<std::int64_t>::max())) > options().max_body_bytes) {
      return Refuse(FromStatus(absl::ResourceExhaustedError(
          absl::StrCat("body: Content-Length ", *length, " is larger than ", options().name,
                       ".max_body_bytes ", options().max_body_bytes))));
    }
    HttpBodyOptions body;
    body.name = options().name;
    body.max_body_bytes = options().max_body_bytes;
    body.max_inflate_ratio = options().max_inflate_ratio;
    const auto coding = exchange_.headers.find("content-encoding");
    auto decoder =
        HttpBodyDecoder::Create(coding == exchange_.headers.end() ? "" : coding->second, body);
    if (!decoder.ok()) return Refuse(FromStatus(decoder.status()));
    decoder_ = *std::move(decoder);
    body_deadline_ = std::chrono::steady_clock::now() + Chrono(options().body_timeout);
    wire_body_bytes_ = 0;
    const auto expect = exchange_.headers.find("expect");
    if (!parser_->is_done() && expect != exchange_.headers.end() &&
        absl::AsciiStrToLower(expect->second) == "100-continue" && version_ >= 11) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      Lowest().expires_after(Chrono(options().write_timeout));
      asio::async_write(stream_, asio::buffer(kContinue, sizeof(kContinue) - 1),
                        [self = Self()](beast::error_code ec, std::size_t) {
                          if (ec) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  // --- body ---

  void ReadBody() {
    if (parser_->is_done()) return OnBody();
    piece_.resize(kBodyPieceBytes);
    parser_->get().body().data = piece_.data();
    parser_->get().body().size = piece_.size();
    const SteadyTime now = std::chrono::steady_clock::now();
    ReadUntil(std::min(body_deadline_, now + Chrono(options().read_timeout)));
    http::async_read_some(
        stream_, buffer_, *parser_,
        [self = Self()](beast::error_code ec, std::size_t n) { self->OnBodyBytes(ec, n); });
  }

  void OnBodyBytes(beast::error_code ec, std::size_t n) {
    ReadEnded();
    if (ec == http::error::need_buffer) ec = {};
    if (ec == asio::error::operation_aborted && timed_out_ && state != kClosed) {
      return Refuse(TimeoutAnswer("body", body_deadline_, "body_timeout", options().body_timeout));
    }
    if (ec || state == kClosed) return Close();
    const std::size_t decoded = piece_.size() - parser_->get().body().size;
    wire_body_bytes_ += static_cast<std::int64_t>(n);
    absl::Status added = decoder_->Add(std::string_view(piece_.data(), decoded));
    if (added.ok() && !HoldBody(decoder_->decoded_bytes())) {
      return Refuse(BusyAnswer());
    }
    // Chunk framing counts too: a body sent one byte per chunk is bounded by its wire size.
    if (added.ok() && wire_body_bytes_ > 2 * options().max_body_bytes + (64 << 10)) {
      added = absl::ResourceExhaustedError(
          absl::StrCat("body: its chunked framing is larger than twice ", options().name,
                       ".max_body_bytes ", options().max_body_bytes));
    }
    if (!added.ok()) return Refuse(FromStatus(added));
    ReadBody();
  }

  void OnBody() {
    auto body = decoder_->Finish();
    decoder_.reset();
    std::vector<char>().swap(piece_);  // an idle connection holds no body piece
    if (!body.ok()) return Refuse(FromStatus(body.status()));
    exchange_.body = *std::move(body);
    if (!Transition(kReadingBody, kAnswering)) return Close();
    const HttpRoute* route = route_;
    listener_->pool.Schedule([self = Self(), route] {
      HttpAnswer answer;
      try {
        answer = route->handler(self->exchange_);
      } catch (const std::exception& e) {
        answer = ErrorAnswer(500, absl::StrCat("the handler failed: ", e.what()), "INTERNAL");
      }
      asio::post(self->stream_.get_executor(),
                 [self, answer = std::move(answer)]() mutable { self->Write(std::move(answer)); });
    });
  }

  // --- the body budget shared by all connections ---

  // Counts this request's body as `bytes` held; false (nothing more held) when that would pass
  // the listener's budget.
  bool HoldBody(std::int64_t bytes) {
    const std::int64_t more = bytes - held_bytes_;
    if (more <= 0) return true;
    const std::int64_t before = listener_->buffered_bytes.fetch_add(more);
    if (before + more > listener_->buffered_budget) {
      listener_->buffered_bytes.fetch_sub(more);
      return false;
    }
    held_bytes_ = bytes;
    return true;
  }
  // The request's body is gone (answered, refused or closed): its bytes leave the budget.
  void ReleaseBody() {
    exchange_.body = std::string();
    decoder_.reset();
    if (held_bytes_ == 0) return;
    listener_->buffered_bytes.fetch_sub(held_bytes_);
    held_bytes_ = 0;
  }
  HttpAnswer BusyAnswer() const {
    HttpAnswer answer =
        ErrorAnswer(503,
                    absl::StrCat("body: the server holds as many request bodies as ",
                                 options().name, ".max_buffered_body_bytes ",
                                 listener_->buffered_budget, " allows; retry shortly"),
                    "UNAVAILABLE");
    answer.headers["Retry-After"] = "1";
    return answer;
  }

  // --- answers ---

  // 408 naming the deadline that passed: the part's total one (`key`, counted from the headers'
  // first chance) or the time allowed between two reads.
  HttpAnswer TimeoutAnswer(const char* part, SteadyTime deadline, const char* key,
                           absl::Duration total) const {
    if (std::chrono::steady_clock::now() >= deadline) {
      return ErrorAnswer(408,
                         absl::StrCat(part, ": not received within ", options().name, ".", key,
                                      "_ms ", absl::ToInt64Milliseconds(total)),
                         "DEADLINE_EXCEEDED");
    }
    return ErrorAnswer(
        408,
        absl::StrCat(part, ": no byte arrived within ", options().name, ".read_timeout_ms ",
                     absl::ToInt64Milliseconds(options().read_timeout)),
        "DEADLINE_EXCEEDED");
  }

  // An answer before the body was read: the connection closes after it (what the client still
  // sends is drained, at most kDrainBytes for kDrainTime, so that it reads the answer).
  void Refuse(HttpAnswer answer) {
    int current = state.load();
    while (current != kClosed && !state.compare_exchange_weak(current, kAnswering)) {
    }
    if (current == kClosed) return Close();  // shed or stopped meanwhile
    keep_alive_ = false;
    refused_ = true;
    Write(std::move(answer));
  }

  void Write(HttpAnswer answer) {
    ++requests_;
    const bool close =
        !keep_alive_ || listener_->stopping || requests_ >= options().keep_alive_max_requests;
    response_.emplace();
    response_->version(version_ == 10 ? 10 : 11);
    response_->result(static_cast<unsigned>(answer.status));
    EncodeForClient(exchange_.headers, &answer.headers, &answer.body);  // gzip only when asked
    for (const auto& [name, value] : answer.headers) response_->set(name, value);
    response_->set(http::field::content_type, answer.content_type);
    response_->body() = std::move(answer.body);
    response_->keep_alive(!close);
    response_->prepare_payload();
    if (head_) response_->body().clear();  // Content-Length stays the GET answer's
    status_ = answer.status;
    Lowest().expires_after(Chrono(options().write_timeout));
    http::async_write(
        stream_, *response_,
        [self = Self(), close](beast::error_code ec, std::size_t) { self->OnWritten(ec, close); });
  }

  void OnWritten(beast::error_code ec, bool close) {
    if (options().on_response) options().on_response(status_);
    response_.reset();
    ReleaseBody();
    if (ec || state == kClosed) return Close();
    if (refused_) return Drain();
    if (close) return Close();
    // Keep-alive: the next request's headers within header_timeout, its first byte within
    // keep_alive.
    const SteadyTime now = std::chrono::steady_clock::now();
    header_deadline_ = now + Chrono(options().header_timeout);
    first_byte_deadline_ = now + Chrono(options().keep_alive);
    seen_bytes_ = buffer_.size() > 0;
    if (!seen_bytes_) buffer_.shrink_to_fit();  // nor the room its last headers took
    BecomeIdle();
    ReadHeader();
  }

  void Drain() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(kDrainTime);
    piece_.resize(kBodyPieceBytes);
    DrainSome();
  }
  void DrainSome() {
    Lowest().async_read_some(asio::buffer(piece_),
                             [self = Self()](beast::error_code ec, std::size_t n) {
                               self->drained_ += n;
                               if (ec || self->drained_ >= kDrainBytes) return self->Close();
                               self->DrainSome();
                             });
  }

  Stream stream_;
  std::int64_t held_bytes_ = 0;  // of listener_->buffered_bytes, for this request's body
  asio::steady_timer timer_;     // the deadline of the read in progress (ReadUntil)
  std::uint64_t timer_generation_ = 0;
  bool timed_out_ = false;     // the read in progress was cancelled at its deadline
  beast::flat_buffer buffer_;  // bytes read and not parsed yet (bounded by its max size)
  std::optional<http::request_parser<http::buffer_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  std::unique_ptr<HttpBodyDecoder> decoder_;
  std::vector<char> piece_;
  HttpExchange exchange_;
  const HttpRoute* route_ = nullptr;
  SteadyTime header_deadline_;
  SteadyTime first_byte_deadline_;
  SteadyTime body_deadline_;
  std::int64_t wire_body_bytes_ = 0;
  std::size_t drained_ = 0;
  int requests_ = 0;
  int status_ = 0;
  unsigned version_ = 11;
  bool seen_bytes_ = false;
  bool keep_alive_ = true;
  bool head_ = false;
  bool refused_ = false;
};

}  // namespace

struct HttpListener::Impl : Listener {
  using Listener::Listener;
};

namespace {

bool Listener::Admit(const std::string& peer, std::shared_ptr<Connection>* shed) {
  // Connections closing (shed, timed out) count no more.
  int open = 0;
  int from_peer = 0;
  for (const auto& [id, connection] : connections) {
    if (connection->state == Connection::kClosed) continue;
    ++open;
    from_peer += connection->peer() == peer;
  }
  const bool peer_full = from_peer >= std::max(1, options.max_connections_per_peer);
  const bool full = open >= std::max(1, options.max_connections);
  if (!peer_full && !full) return true;
  Connection* oldest = nullptr;
  for (const auto& [id, connection] : connections) {
    if (connection->state != Connection::kIdle || (peer_full && connection->peer() != peer)) {
      continue;
    }
    if (oldest == nullptr || connection->idle_since_ns < oldest->idle_since_ns) {
      oldest = connection;
    }
  }
  if (oldest == nullptr) return false;
  int expected = Connection::kIdle;
  *shed = oldest->weak_from_this().lock();
  if (*shed == nullptr || !oldest->state.compare_exchange_strong(expected, Connection::kClosed)) {
    return false;  // it began a request meanwhile (or is going)
  }
  (*shed)->CloseSoon();
  return true;
}

void Listener::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopping) return;
    if (!ec) {
      beast::error_code peer_error;
      const auto endpoint = socket.remote_endpoint(peer_error);
      const std::string peer = peer_error ? "" : endpoint.address().to_string();
      socket.set_option(tcp::no_delay(true), peer_error);
      std::shared_ptr<Connection> connection;
      std::shared_ptr<Connection> shed;
      {
        absl::MutexLock lock(&mu);
        if (!Admit(peer, &shed)) {
          socket.close(peer_error);  // every connection busy: refused
        } else if (tls) {
          connection = std::make_shared<ConnectionOn<true>>(this, std::move(socket), peer);
        } else {
          connection = std::make_shared<ConnectionOn<false>>(this, std::move(socket), peer);
        }
        if (connection != nullptr) connections[connection->id()] = connection.get();
      }
      if (connection != nullptr) connection->Begin();
    }
    Accept();
  });
}

}  // namespace

HttpAnswer AnswerInProcess(const std::vector<HttpRoute>& routes, const HttpExchange& request) {
  HttpExchange routed = request;
  const HttpRoute* route = Match(routes, routed);
  if (route == nullptr) {
    HttpAnswer none;
    none.status = 404;
    return none;
  }
  if (route->before_body) {
    HttpExchange headers = routed;
    headers.body.clear();
    if (std::optional<HttpAnswer> early = route->before_body(headers)) return *std::move(early);
  }
  return route->handler(routed);
}

HttpListener::HttpListener(std::unique_ptr<Impl> impl, std::string address, int port)
    : impl_(std::move(impl)), address_(std::move(address)), port_(port) {}

HttpListener::~HttpListener() { Stop(); }

void HttpListener::Stop() {
  if (impl_ == nullptr || impl_->stopping.exchange(true)) return;
  Impl& impl = *impl_;
  absl::Notification closed;
  asio::post(impl.acceptor.get_executor(), [&impl, &closed] {
    beast::error_code ignored;
    impl.acceptor.close(ignored);
    closed.Notify();
  });
  closed.WaitForNotification();
  // Connections no handler is answering close now; the others after their answer. Their last
  // references go outside the lock (a connection's destructor takes it).
  std::vector<std::shared_ptr<Connection>> closing;
  {
    absl::MutexLock lock(&impl.mu);
    for (const auto& [id, connection] : impl.connections) {
      int expected = Connection::kIdle;
      if (connection->state.compare_exchange_strong(expected, Connection::kClosed) ||
          (expected = Connection::kReadingBody,
           connection->state.compare_exchange_strong(expected, Connection::kClosed))) {
        if (auto alive = connection->weak_from_this().lock()) {
          alive->CloseSoon();
          closing.push_back(std::move(alive));
        }
      }
    }
  }
  closing.clear();
  {
    absl::MutexLock lock(&impl.mu);
    impl.mu.Await(absl::Condition(
        +[](Listener* i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i->mu) { return i->connections.empty(); },
        static_cast<Listener*>(&impl)));
  }
  impl.work.reset();
  impl.io.stop();
  for (std::thread& t : impl.io_threads) t.join();
  impl.pool.Stop();
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(
    const HttpListenerOptions& options, const HttpHandler& handler) {
  std::vector<HttpRoute> routes;
  for (const char* method : kMethods) routes.push_back({method, ".*", handler});
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
  for (const HttpRoute& route : routes) {
    if (std::find_if(std::begin(kMethods), std::end(kMethods),
                     [&](const char* m) { return route.method == m; }) == std::end(kMethods)) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.name, ": no route can take the method ", route.method));
    }
    Compiled(route.pattern);
  }
  auto impl = std::make_unique<Impl>(options);
  impl->routes = std::move(routes);
  if (!options.cert_file.empty()) {
    impl->tls.emplace(asio::ssl::context::tls_server);
    asio::ssl::context& tls = *impl->tls;
    SSL_CTX* native = tls.native_handle();
    tls.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                    asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    SSL_CTX_set_options(
        native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
    // An idle TLS connection keeps no read or write buffer (about 34 KiB each otherwise).
    SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
    beast::error_code ec;
    const bool loaded =
        SSL_CTX_set_cipher_list(native, kTls12Ciphers) == 1 &&
        !tls.use_certificate_chain_file(options.cert_file, ec) &&
        !tls.use_private_key_file(options.key_file, asio::ssl::context::pem, ec) &&
        SSL_CTX_check_private_key(native) == 1 &&
        (options.client_ca_file.empty() || !tls.load_verify_file(options.client_ca_file, ec));
    if (!loaded) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.name, ": cannot load the TLS certificate ", options.cert_file, " or key ",
          options.key_file, options.client_ca_file.empty() ? "" : " or client CA ",
          options.client_ca_file));
    }
    if (!options.client_ca_file.empty()) {
      // The CAs a client may choose its certificate for; one without a certificate (or with
      // one no CA signed) fails the handshake.
      SSL_CTX_set_client_CA_list(native, SSL_load_client_CA_file(options.client_ca_file.c_str()));
      tls.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    }
  }
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto resolved =
      resolver.resolve(host.empty() ? "0.0.0.0" : host, std::to_string(port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || resolved.empty()) {
    return absl::UnavailableError(absl::StrCat(options.name, ": cannot listen on ", listen));
  }
  const tcp::endpoint endpoint = resolved.begin()->endpoint();
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server bind the same port and silently
  // share its connections; an address in use is refused instead.
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(options.name, ": cannot listen on ", listen, " (", ec.message(), ")"));
  }
  const int bound = impl->acceptor.local_endpoint().port();
  impl->work.emplace(impl->io.get_executor());
  Impl* started = impl.get();
  asio::post(impl->acceptor.get_executor(), [started] { started->Accept(); });
  for (int i = 0; i < std::max(1, options.io_threads); ++i) {
    impl->io_threads.emplace_back([started] { started->io.run(); });
  }
  const std::string shown =
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  return std::unique_ptr<HttpListener>(
      new HttpListener(std::move(impl), absl::StrCat(shown, ":", bound), bound));
}

}  // namespace ts::server

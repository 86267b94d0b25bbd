// The HTTP listener (server/serving/http_listener.h) under the attacks of issue 41, each against
// the real HTTP front end on loopback: bodies bounded however they are framed (chunked, gzip)
// with the process's memory measured, a token checked before the body, idle and slow
// connections that do not delay a second client's health check, total header deadlines (TLS
// handshake included), the oldest idle connection shed at the cap, and the TLS cipher policy.
#include "server/serving/http_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/serving/http_frontend.h"
#include "tests/server/fake_inference.h"

namespace ts::server {
namespace {

using testing::FakeInference;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// This process's resident memory (the server runs in it), in bytes.
std::int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

void RaiseFileLimit() {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
}

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// What a connection answered: its bytes until the answer's Content-Length is read, EOF, an error
// or `wait` passes.
std::string ReadAnswer(int fd, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
  const Clock::time_point until = Clock::now() + wait;
  std::string text;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    const auto end = text.find("\r\n\r\n");
    const auto length = text.find("Content-Length: ");
    if (end != std::string::npos && length != std::string::npos && length < end) {
      const std::size_t body = std::stoul(text.substr(length + 16));
      if (text.size() >= end + 4 + body) break;
    }
  }
  return text;
}

int StatusOf(const std::string& answer) {
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(answer.substr(9, 3)) : -1;
}

// Whether the server closed `fd` within `wait` (EOF or reset, after any answer).
bool ClosedWithin(int fd, std::chrono::milliseconds wait) {
  const Clock::time_point until = Clock::now() + wait;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    if (::recv(fd, buffer, sizeof(buffer), 0) <= 0) return true;
  }
}

struct Started {
  std::unique_ptr<HttpFrontend> frontend;
  int port = 0;
};

Started Start(FakeInference* fake, HttpFrontendOptions options) {
  if (options.http.listen.empty()) options.http.listen = "127.0.0.1:0";
  auto frontend = HttpFrontend::Start(options, fake);
  EXPECT_TRUE(frontend.ok()) << frontend.status();
  if (!frontend.ok()) return {};
  Started started;
  started.frontend = *std::move(frontend);
  const std::string& address = started.frontend->address();
  started.port = std::stoi(address.substr(address.rfind(':') + 1));
  return started;
}

// `bytes` zeros, gzip-compressed a piece at a time (never held whole).
std::string GzipOfZeros(std::size_t bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  const std::string zeros(1 << 20, '\0');
  std::string out;
  char buffer[1 << 16];
  std::size_t left = bytes;
  int flush = Z_NO_FLUSH;
  do {
    const std::size_t piece = std::min(left, zeros.size());
    left -= piece;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
    z.avail_in = static_cast<uInt>(piece);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer);
      z.avail_out = sizeof(buffer);
      deflate(&z, flush);
      out.append(buffer, sizeof(buffer) - z.avail_out);
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  return out;
}

std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

// Issue 41 (1): 2 GiB chunked grew the server to 11 GB before authentication. Here 256 MiB are
// streamed chunked at a 1 MiB limit: 413 as soon as the limit passes, memory flat.
TEST(HttpListenerTest, ChunkedBodyFarPastTheLimitIs413WithFlatMemory) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.max_body_bytes = 1 << 20;
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);
  const std::int64_t before = ResidentBytes();
  const int fd = Connect(server.port);
  ASSERT_GE(fd, 0);
  timeval wait{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
  const Clock::time_point start = Clock::now();
  std::atomic<std::int64_t> sent{0};
  std::thread sender([&] {
    if (!SendAll(fd,
                 "POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 "application/json\r\nTransfer-Encoding: chunked\r\n\r\n")) {
      return;
    }
    const std::string chunk = absl::StrCat("10000\r\n", std::string(1 << 16, 'a'), "\r\n");
    for (int i = 0; i < 4096; ++i) {  // 4096 x 64 KiB = 256 MiB
      if (!SendAll(fd, chunk)) return;
      sent += 1 << 16;
    }
    SendAll(fd, "0\r\n\r\n");
  });
  const std::string answer = ReadAnswer(fd, std::chrono::seconds(20));
  const double ms = MillisecondsSince(start);
  sender.join();
  ::close(fd);
  const std::int64_t growth = ResidentBytes() - before;
  std::printf(
      "chunked 256 MiB at a 1 MiB limit: HTTP %d after %.0f ms, %lld bytes sent, RSS "
      "growth %.1f MiB\n",
      StatusOf(answer), ms, static_cast<long long>(sent.load()), growth / 1048576.0);
  EXPECT_EQ(StatusOf(answer), 413) << answer.substr(0, 300);
  EXPECT_THAT(answer, HasSubstr("http.max_body_bytes"));
  EXPECT_LT(sent.load(), std::int64_t{64} << 20) << "the server read far past its limit";
  EXPECT_LT(growth, std::int64_t{32} << 20);
  EXPECT_TRUE(fake.calls().empty());
}

// Issue 41 (2): a 1 MB gzip inflating to 1 GiB took 7 GB. 100 MiB of zeros gzipped (about
// 100 KB): 413 at max_body_bytes; with a large limit, 413 at max_inflate_ratio; memory flat.
TEST(HttpListenerTest, GzipBombIs413WithFlatMemory) {
  const std::string bomb = GzipOfZeros(std::size_t{100} << 20);
  // {max_body_bytes, max_inflate_ratio}: the ratio is reached first unless it is raised.
  for (const auto& [limit, ratio] :
       {std::pair<std::int64_t, std::int64_t>{1 << 20, 100}, {64 << 20, 100}, {1 << 20, 100000}}) {
    FakeInference fake;
    HttpFrontendOptions options;
    options.http.max_body_bytes = limit;
    options.http.max_inflate_ratio = ratio;
    Started server = Start(&fake, options);
    ASSERT_NE(server.frontend, nullptr);
    const std::int64_t before = ResidentBytes();
    const int fd = Connect(server.port);
    ASSERT_GE(fd, 0);
    const Clock::time_point start = Clock::now();
    std::thread sender([&] {
      SendAll(fd, absl::StrCat("POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\n"
                               "Content-Encoding: gzip\r\nContent-Length: ",
                               bomb.size(), "\r\n\r\n", bomb));
    });
    const std::string answer = ReadAnswer(fd);
    const double ms = MillisecondsSince(start);
    sender.join();
    ::close(fd);
    const std::int64_t growth = ResidentBytes() - before;
    std::printf(
        "gzip bomb (%zu bytes, 100 MiB inflated), limit %lld, ratio %lld: HTTP %d after "
        "%.0f ms, RSS growth %.1f MiB\n",
        bomb.size(), static_cast<long long>(limit), static_cast<long long>(ratio), StatusOf(answer),
        ms, growth / 1048576.0);
    EXPECT_EQ(StatusOf(answer), 413) << answer.substr(0, 300);
    EXPECT_THAT(answer, HasSubstr(ratio == 100 ? "http.max_inflate_ratio 100"
                                               : "http.max_body_bytes 1048576 once inflated"));
    EXPECT_LT(growth, std::int64_t{32} << 20);
    EXPECT_TRUE(fake.calls().empty());
  }
}

TEST(HttpListenerTest, GzipAndDeflateBodiesAreReadOtherCodingsAre415) {
  FakeInference fake;
  Started server = Start(&fake, {});
  ASSERT_NE(server.frontend, nullptr);
  const std::string json = R"({"text": "abc"})";
  const std::string gzip = Gzip(json);
  const auto post = [&](const std::string& coding, const std::string& body) {
    const int fd = Connect(server.port);
    SendAll(fd, absl::StrCat("POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\n"
                             "Content-Encoding: ",
                             coding, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
    std::string answer = ReadAnswer(fd);
    ::close(fd);
    return answer;
  };
  EXPECT_EQ(StatusOf(post("gzip", gzip)), 200);
  ASSERT_EQ(fake.calls().size(), 1u);
  EXPECT_EQ(fake.calls()[0].document(), "abc");
  EXPECT_EQ(StatusOf(post("identity", json)), 200);
  const std::string br = post("br", "xyz");
  EXPECT_EQ(StatusOf(br), 415);
  EXPECT_THAT(br, HasSubstr("identity, gzip, deflate"));
  const std::string corrupt = post("gzip", gzip.substr(0, gzip.size() - 6));
  EXPECT_EQ(StatusOf(corrupt), 400) << corrupt;
  // Answers are never compressed (Triton's aiohttp client broke on httplib's brotli answers).
  const int fd = Connect(server.port);
  SendAll(fd, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip, br\r\n\r\n");
  const std::string ready = ReadAnswer(fd);
  ::close(fd);
  EXPECT_EQ(StatusOf(ready), 200);
  EXPECT_THAT(ready, ::testing::Not(HasSubstr("Content-Encoding")));
}

// Authentication comes before the body: headers alone get 401 (chunked or not), and nothing
// reaches the model; with the token, Expect: 100-continue is answered and the body read.
TEST(HttpListenerTest, TokenRouteAnswers401BeforeTheBodyIsSent) {
  FakeInference fake;
  fake.RequireToken("secret");
  Started server = Start(&fake, {});
  ASSERT_NE(server.frontend, nullptr);
  for (const std::string framing : {"Content-Length: 1000000000", "Transfer-Encoding: chunked"}) {
    const int fd = Connect(server.port);
    ASSERT_TRUE(SendAll(fd, absl::StrCat("POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\n",
                                         framing, "\r\n\r\n")));
    const Clock::time_point start = Clock::now();
    const std::string answer = ReadAnswer(fd, std::chrono::seconds(5));
    EXPECT_EQ(StatusOf(answer), 401) << framing << ": " << answer;
    EXPECT_THAT(answer, HasSubstr("WWW-Authenticate: Bearer"));
    EXPECT_LT(MillisecondsSince(start), 1000);
    EXPECT_TRUE(ClosedWithin(fd, std::chrono::seconds(3)));
    ::close(fd);
  }
  const int fd = Connect(server.port);
  ASSERT_TRUE(SendAll(fd,
                      "POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                      "secret\r\nExpect: 100-continue\r\nContent-Length: 15\r\n\r\n"));
  EXPECT_THAT(ReadAnswer(fd, std::chrono::milliseconds(500)), HasSubstr("100 Continue"));
  ASSERT_TRUE(SendAll(fd, R"({"text": "abc"})"));
  EXPECT_EQ(StatusOf(ReadAnswer(fd)), 200);
  ::close(fd);
  EXPECT_EQ(fake.calls().size(), 1u);
  // Health needs no token.
  const int health = Connect(server.port);
  SendAll(health, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(ReadAnswer(health)), 200);
  ::close(health);
}

// Issue 41 (4): 1,000 idle connections, or 300 sending a header byte every 3 s, left
// GET /v2/health/ready unanswered. Both at once here, reopened whenever the server closes one,
// while a second client's health checks are timed.
TEST(HttpListenerTest, IdleAndSlowConnectionsDoNotDelayHealthChecks) {
  RaiseFileLimit();
  FakeInference fake;
  Started server = Start(&fake, {});  // the documented defaults
  ASSERT_NE(server.frontend, nullptr);
  constexpr int kIdle = 1000;
  constexpr int kSlow = 300;
  std::vector<int> fds(kIdle + kSlow, -1);
  std::atomic<bool> stop{false};
  std::atomic<int> reopened{0};
  const auto open = [&](int i) {
    fds[i] = Connect(server.port);
    if (fds[i] >= 0 && i >= kIdle) SendAll(fds[i], "GET /v2/health/ready HTTP/1.1\r\nX-");
    if (fds[i] >= 0) fcntl(fds[i], F_SETFL, O_NONBLOCK);
  };
  for (int i = 0; i < kIdle + kSlow; ++i) open(i);
  std::thread attacker([&] {
    Clock::time_point last_byte = Clock::now();
    std::vector<pollfd> polled(fds.size());
    while (!stop) {
      for (std::size_t i = 0; i < fds.size(); ++i) polled[i] = {fds[i], POLLIN, 0};
      ::poll(polled.data(), polled.size(), 50);
      for (std::size_t i = 0; i < fds.size() && !stop; ++i) {
        if (fds[i] >= 0 && !(polled[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buffer[512];
        if (fds[i] >= 0 && ::recv(fds[i], buffer, sizeof(buffer), 0) > 0) continue;
        if (fds[i] >= 0) ::close(fds[i]);
        open(static_cast<int>(i));
        ++reopened;
      }
      if (Clock::now() - last_byte > std::chrono::seconds(1)) {
        for (int i = kIdle; i < kIdle + kSlow; ++i) {
          if (fds[i] >= 0) ::send(fds[i], "a", 1, MSG_NOSIGNAL);
        }
        last_byte = Clock::now();
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<double> latencies;
  for (int i = 0; i < 20; ++i) {
    const Clock::time_point start = Clock::now();
    const int fd = Connect(server.port);
    ASSERT_GE(fd, 0);
    SendAll(fd, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string answer = ReadAnswer(fd, std::chrono::seconds(5));
    latencies.push_back(MillisecondsSince(start));
    ::close(fd);
    EXPECT_EQ(StatusOf(answer), 200) << "health check " << i << ": " << answer;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  attacker.join();
  for (const int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  std::sort(latencies.begin(), latencies.end());
  std::printf(
      "health with %d idle + %d slow connections (reopened %d times): median %.1f ms, "
      "max %.1f ms\n",
      kIdle, kSlow, reopened.load(), latencies[latencies.size() / 2], latencies.back());
  EXPECT_LT(latencies.back(), 1000.0);
}

// The header deadline is total, not per read: a byte every 200 ms does not keep a connection
// open past http.header_timeout_ms; a TLS handshake that never starts is bounded by it too.
TEST(HttpListenerTest, HeaderDeadlineClosesSlowlorisAndSilentTlsHandshakes) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.header_timeout = absl::Seconds(1);
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);
  const int fd = Connect(server.port);
  const Clock::time_point start = Clock::now();
  SendAll(fd, "GET /v2/health/ready HTTP/1.1\r\n");
  bool closed = false;
  while (!closed && MillisecondsSince(start) < 5000) {
    if (!SendAll(fd, "X")) break;
    closed = ClosedWithin(fd, std::chrono::milliseconds(200));
  }
  const double ms = MillisecondsSince(start);
  ::close(fd);
  EXPECT_GT(ms, 900);
  EXPECT_LT(ms, 2500) << "a slowloris connection outlived the 1 s header deadline";

  const std::string dir = ::testing::TempDir() + "/http_listener_tls";
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes " +
                         "-keyout " + dir + "/key.pem -out " + dir +
                         "/cert.pem -days 1 -subj /CN=localhost 2>/dev/null")
                            .c_str()),
            0);
  options.tls.cert_file = dir + "/cert.pem";
  options.tls.key_file = dir + "/key.pem";
  Started tls = Start(&fake, options);
  ASSERT_NE(tls.frontend, nullptr);
  const int silent = Connect(tls.port);
  const Clock::time_point handshake = Clock::now();
  EXPECT_TRUE(ClosedWithin(silent, std::chrono::seconds(3)));
  EXPECT_LT(MillisecondsSince(handshake), 2500);
  ::close(silent);
}

// A request begun and not finished in time is answered 408 naming the deadline that passed,
// then closed: the headers' total deadline, the body's, and the time allowed between two reads.
// A connection that sent nothing is closed without an answer.
TEST(HttpListenerTest, RequestsNotReceivedInTimeAre408NamingTheDeadline) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.header_timeout = absl::Milliseconds(600);
  options.http.body_timeout = absl::Milliseconds(600);
  options.http.read_timeout = absl::Seconds(5);
  options.http.keep_alive = absl::Milliseconds(600);
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);

  const int headers = Connect(server.port);
  SendAll(headers, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n");
  std::string answer = ReadAnswer(headers, std::chrono::seconds(3));
  EXPECT_EQ(StatusOf(answer), 408) << answer;
  EXPECT_THAT(answer, HasSubstr("headers: not received within http.header_timeout_ms 600"));
  EXPECT_TRUE(ClosedWithin(headers, std::chrono::seconds(3)));
  ::close(headers);

  const int body = Connect(server.port);
  SendAll(body,
          "POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"x");
  answer = ReadAnswer(body, std::chrono::seconds(3));
  EXPECT_EQ(StatusOf(answer), 408) << answer;
  EXPECT_THAT(answer, HasSubstr("body: not received within http.body_timeout_ms 600"));
  ::close(body);

  options.http.header_timeout = absl::Seconds(10);
  options.http.read_timeout = absl::Milliseconds(400);
  Started slow = Start(&fake, options);
  ASSERT_NE(slow.frontend, nullptr);
  const int pause = Connect(slow.port);
  SendAll(pause, "GET /v2/health/ready HTTP/1.1\r\n");
  answer = ReadAnswer(pause, std::chrono::seconds(3));
  EXPECT_EQ(StatusOf(answer), 408) << answer;
  EXPECT_THAT(answer, HasSubstr("headers: no byte arrived within http.read_timeout_ms 400"));
  ::close(pause);

  const int silent = Connect(server.port);
  const Clock::time_point start = Clock::now();
  answer = ReadAnswer(silent, std::chrono::seconds(3));
  EXPECT_EQ(answer, "");
  EXPECT_LT(MillisecondsSince(start), 2500);
  ::close(silent);
}

// Many clients each sending a large body at once: the bodies held together stay within
// http.max_buffered_body_bytes (the rest are 503 with Retry-After, naming the limit), memory
// stays flat, and once the held bodies are answered a new one is read again.
TEST(HttpListenerTest, BodiesHeldAtOnceStayWithinTheSharedBudget) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.max_body_bytes = 4 << 20;
  // Two 3 MiB bodies fit; a third is refused 32 KiB before its end, so that what the client
  // still sends is drained and the answer is not lost to a reset.
  options.http.max_buffered_body_bytes = (9 << 20) - (32 << 10);
  options.http.body_timeout = absl::Seconds(20);
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);
  const std::int64_t rss_before = ResidentBytes();
  const std::string piece(3 << 20, 'x');  // 3 of a body's 4 MiB: held, not finished
  const std::string head =
      "POST /v1/models/m:classify HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n";
  constexpr int kClients = 40;
  std::vector<int> fds;
  int busy = 0;
  std::string busy_answer;
  for (int i = 0; i < kClients; ++i) {
    const int fd = Connect(server.port);
    ASSERT_GE(fd, 0);
    SendAll(fd, head);
    SendAll(fd, piece);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 300) > 0) {
      const std::string answer = ReadAnswer(fd, std::chrono::seconds(2));
      if (StatusOf(answer) == 503) {
        ++busy;
        busy_answer = answer;
      }
    }
    fds.push_back(fd);
  }
  const std::int64_t grown = ResidentBytes() - rss_before;
  std::printf(
      "%d clients with 3 MiB bodies under way at a 9 MiB budget: %d answered 503, RSS "
      "growth %.1f MiB\n",
      kClients, busy, static_cast<double>(grown) / (1 << 20));
  EXPECT_EQ(busy, kClients - 2) << "two 3 MiB bodies fit, a third does not";
  EXPECT_THAT(busy_answer, HasSubstr("http.max_buffered_body_bytes 9404416"));
  EXPECT_THAT(busy_answer, HasSubstr("Retry-After: 1"));
  EXPECT_LT(grown, 48 << 20);
  for (const int fd : fds) ::close(fd);
  // The held bodies' connections are gone: a whole body is read and answered again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int fd = Connect(server.port);
  SendAll(fd, head);
  SendAll(fd, std::string(4 << 20, 'x'));
  const std::string answer = ReadAnswer(fd, std::chrono::seconds(5));
  EXPECT_EQ(StatusOf(answer), 400) << answer.substr(0, 300);  // read whole, then not JSON
  ::close(fd);
}

// At the cap the connection idle the longest is closed for the new one; a connection whose
// request is being answered is not.
TEST(HttpListenerTest, TheOldestIdleConnectionIsShedAtTheCap) {
  FakeInference fake;
  HttpFrontendOptions options;
  options.http.threads = 2;
  options.http.max_connections = 4;
  options.http.max_connections_per_peer = 4;
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(Connect(server.port));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int newcomer = Connect(server.port);
  SendAll(newcomer, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(StatusOf(ReadAnswer(newcomer, std::chrono::seconds(3))), 200);
  EXPECT_TRUE(ClosedWithin(idle[0], std::chrono::seconds(2))) << "the oldest was not shed";
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(ClosedWithin(idle[i], std::chrono::milliseconds(50)));
  ::close(newcomer);
  for (const int fd : idle) ::close(fd);
}

// Issue 41 (6): HTTPS accepted AES128-SHA (no forward secrecy, CBC, SHA-1). TLS 1.2 takes ECDHE
// with GCM or ChaCha20 only, and TLS 1.3; TLS 1.1 is refused. openssl s_client as the client.
TEST(HttpListenerTest, HttpsOffersForwardSecretAeadSuitesOnly) {
  const std::string dir = ::testing::TempDir() + "/http_listener_ciphers";
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes " +
                         "-keyout " + dir + "/key.pem -out " + dir +
                         "/cert.pem -days 1 -subj /CN=localhost 2>/dev/null")
                            .c_str()),
            0);
  FakeInference fake;
  HttpFrontendOptions options;
  options.tls.cert_file = dir + "/cert.pem";
  options.tls.key_file = dir + "/key.pem";
  Started server = Start(&fake, options);
  ASSERT_NE(server.frontend, nullptr);
  const auto handshake = [&](const std::string& flags) {
    const std::string command =
        absl::StrCat("timeout 10 openssl s_client -connect 127.0.0.1:", server.port, " ", flags,
                     " </dev/null >/dev/null 2>&1");
    return std::system(command.c_str()) == 0;
  };
  EXPECT_TRUE(handshake("-tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256"));
  EXPECT_TRUE(handshake("-tls1_2 -cipher ECDHE-RSA-CHACHA20-POLY1305"));
  EXPECT_TRUE(handshake("-tls1_3"));
  EXPECT_FALSE(handshake("-tls1_2 -cipher AES128-SHA"));
  EXPECT_FALSE(handshake("-tls1_2 -cipher AES256-SHA"));
  EXPECT_FALSE(handshake("-tls1_2 -cipher ECDHE-RSA-AES128-SHA"));
  EXPECT_FALSE(handshake("-tls1_2 -cipher AES128-GCM-SHA256"));  // no forward secrecy
  EXPECT_FALSE(handshake("-tls1_1 -cipher DEFAULT@SECLEVEL=0"));
}

}  // namespace
}  // namespace ts::server

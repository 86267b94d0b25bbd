// Answers are gzip-compressed only for clients that ask for gzip, never in another coding: the
// Accept-Encoding parsing, and raw HTTP requests against a real listener on loopback.
#include "server/serving/http_response_encoding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <string>

#include "absl/strings/ascii.h"
#include "server/serving/http_listener.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(HttpResponseEncodingTest, AcceptsGzipFollowsAcceptEncodingAndQValues) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("br, gzip;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("GZIP"));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_TRUE(AcceptsGzip("deflate, gzip ; q=1.0"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("br"));
  EXPECT_FALSE(AcceptsGzip("br, deflate, zstd"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("*, gzip;q=0"));  // the explicit element wins
  EXPECT_FALSE(AcceptsGzip("*;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=nonsense"));
}

// `bytes` inflated as gzip; "" on any error.
std::string Gunzip(const std::string& bytes) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) return "";
  std::string out(1 << 20, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = inflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  inflateEnd(&stream);
  return result == Z_STREAM_END ? out : "";
}

TEST(HttpResponseEncodingTest, GzipBytesRoundTrips) {
  const std::string text(5000, 'a');
  const std::string packed = GzipBytes(text);
  EXPECT_LT(packed.size(), 200u);
  EXPECT_EQ(Gunzip(packed), text);
}

// One request on a fresh connection; the answer's head (lower-cased) and body.
struct RawAnswer {
  std::string head;
  std::string body;
};
RawAnswer Get(int port, const std::string& path, const std::string& extra_headers) {
  RawAnswer answer;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return answer;
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra_headers + "\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return answer;
  }
  std::string text;
  char buffer[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;  // Connection: close ends the answer
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto end = text.find("\r\n\r\n");
  if (end == std::string::npos) return answer;
  answer.head = absl::AsciiStrToLower(text.substr(0, end));
  answer.body = text.substr(end + 4);
  return answer;
}

TEST(HttpResponseEncodingTest, ListenerGzipsOnlyForClientsThatAskForIt) {
  const std::string large(8000, 'x');
  HttpListenerOptions options;
  options.listen = "127.0.0.1:0";
  auto listener = HttpListener::Start(options, [&large](const HttpExchange& request) {
    HttpAnswer answer;
    answer.content_type = "text/plain";
    answer.body = request.path == "/small" ? std::string("tiny") : large;
    return answer;
  });
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = (*listener)->port();

  const RawAnswer gzip = Get(port, "/large", "Accept-Encoding: gzip\r\n");
  EXPECT_THAT(gzip.head, HasSubstr("\r\ncontent-encoding: gzip"));
  EXPECT_THAT(gzip.head, HasSubstr("\r\nvary: accept-encoding"));
  EXPECT_LT(gzip.body.size(), 200u);
  EXPECT_EQ(Gunzip(gzip.body), large);

  // br only (what cpp-httplib once answered with unasked), none, or gzip refused: identity.
  for (const std::string& headers : {std::string("Accept-Encoding: br\r\n"), std::string(""),
                                     std::string("Accept-Encoding: gzip;q=0, br\r\n")}) {
    const RawAnswer plain = Get(port, "/large", headers);
    EXPECT_THAT(plain.head, Not(HasSubstr("content-encoding"))) << headers;
    EXPECT_THAT(plain.head, HasSubstr("\r\nvary: accept-encoding")) << headers;
    EXPECT_EQ(plain.body, large) << headers;
  }
  // A short body is not worth compressing.
  const RawAnswer small = Get(port, "/small", "Accept-Encoding: gzip\r\n");
  EXPECT_THAT(small.head, Not(HasSubstr("content-encoding")));
  EXPECT_EQ(small.body, "tiny");
  (*listener)->Stop();
}

}  // namespace
}  // namespace ts::server

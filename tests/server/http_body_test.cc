// The request body decoder (server/serving/http_body.h): identity, gzip (several members) and
// deflate bodies decoded; each limit refused by its name; corrupt and truncated streams 400s.
#include "server/serving/http_body.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <fstream>
#include <string>

#include "common/sanitizers.h"

namespace ts::server {
namespace {

using ::testing::HasSubstr;

std::string Compress(const std::string& text, int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
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

// Adds `bytes` a few at a time, as they might arrive.
absl::StatusOr<std::string> Decode(const std::string& coding, const std::string& bytes,
                                   const HttpBodyOptions& options = {}, std::size_t piece = 7) {
  auto decoder = HttpBodyDecoder::Create(coding, options);
  if (!decoder.ok()) return decoder.status();
  for (std::size_t i = 0; i < bytes.size(); i += piece) {
    if (absl::Status s = (*decoder)->Add(std::string_view(bytes).substr(i, piece)); !s.ok()) {
      return s;
    }
  }
  return (*decoder)->Finish();
}

TEST(HttpBodyTest, DecodesIdentityGzipAndDeflate) {
  const std::string text = R"({"text": "a document, a document, a document"})";
  EXPECT_EQ(*Decode("", text), text);
  EXPECT_EQ(*Decode("Identity", text), text);
  EXPECT_EQ(*Decode("gzip", Compress(text, 16 + MAX_WBITS)), text);
  EXPECT_EQ(*Decode(" GZIP ", Compress(text, 16 + MAX_WBITS), {}, 1), text);
  EXPECT_EQ(*Decode("deflate", Compress(text, MAX_WBITS)), text);
  // Two gzip members are one body (RFC 1952).
  EXPECT_EQ(*Decode("gzip", Compress("ab", 16 + MAX_WBITS) + Compress("cd", 16 + MAX_WBITS)),
            "abcd");
}

TEST(HttpBodyTest, OtherCodingsAreUnimplementedNamingTheAcceptedOnes) {
  for (const std::string coding : {"br", "gzip, gzip", "compress", "zstd"}) {
    const auto decoded = Decode(coding, "x");
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kUnimplemented) << coding;
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("identity, gzip, deflate"));
  }
}

TEST(HttpBodyTest, LimitsAreRefusedByName) {
  HttpBodyOptions options;
  options.max_body_bytes = 1000;
  auto big = Decode("", std::string(1001, 'a'), options, 100);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("http.max_body_bytes 1000"));
  EXPECT_TRUE(Decode("", std::string(1000, 'a'), options).ok());
  // Inflated past the limit.
  const std::string zeros = Compress(std::string(1 << 20, '\0'), 16 + MAX_WBITS);
  options.max_body_bytes = 100000;
  auto inflated = Decode("gzip", zeros, options, 4096);
  EXPECT_EQ(inflated.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(inflated.status().message()), HasSubstr("once inflated"));
  // Inflated past the ratio (1 MiB of zeros compresses about 1000 times).
  options.max_body_bytes = 8 << 20;
  options.max_inflate_ratio = 100;
  auto ratio = Decode("gzip", zeros, options, 4096);
  EXPECT_EQ(ratio.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(ratio.status().message()), HasSubstr("http.max_inflate_ratio 100"));
  options.max_inflate_ratio = 100000;
  EXPECT_EQ(Decode("gzip", zeros, options, 4096)->size(), std::size_t{1} << 20);
}

TEST(HttpBodyTest, CorruptOrTruncatedStreamsAreInvalid) {
  const std::string gzip = Compress("hello, hello, hello", 16 + MAX_WBITS);
  EXPECT_EQ(Decode("gzip", gzip.substr(0, gzip.size() - 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode("gzip", "not gzip at all").status().code(), absl::StatusCode::kInvalidArgument);
  const std::string deflate = Compress("x", MAX_WBITS);
  EXPECT_EQ(Decode("deflate", deflate + "tail").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The soak of issue 41 saw tsserver keep 64 MiB after one refused 64 MiB body: the body grew by
// doubling through heap blocks that the server's heap policy (heap_keep_freed_bytes) keeps. A
// large body is now held in a mapped block, which goes back to the system when freed.
TEST(HttpBodyTest, ALargeBodyGivesItsMemoryBackWhenFreedUnderTheServersHeapPolicy) {
  if (kAddressSanitizer || kThreadSanitizer) GTEST_SKIP() << "the sanitizer's allocator";
#if defined(__GLIBC__)
  // What tsserver sets with heap_keep_freed_bytes 1 GiB (model/heap_policy.cc).
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 1 << 30), 1);
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 32 << 20), 1);
  const auto resident = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    }
    return -1LL;
  };
  const long long before = resident();
  {
    HttpBodyOptions options;
    options.max_body_bytes = 64 << 20;
    auto decoder = HttpBodyDecoder::Create("", options);
    ASSERT_TRUE(decoder.ok());
    const std::string piece(16 << 10, 'x');
    absl::Status added;
    for (int i = 0; i < 4097 && added.ok(); ++i) added = (*decoder)->Add(piece);
    EXPECT_THAT(std::string(added.message()), HasSubstr("max_body_bytes 67108864"));
  }
  const long long after = resident();
  std::printf("RSS before a refused 64 MiB body %.1f MiB, after %.1f MiB\n",
              static_cast<double>(before) / (1 << 20), static_cast<double>(after) / (1 << 20));
  EXPECT_LT(after - before, 8LL << 20);
#else
  GTEST_SKIP() << "glibc's malloc only";
#endif
}

}  // namespace
}  // namespace ts::server

// RequestFramer: the HTTP framing checks that run before cpp-httplib parses a request.
#include <gtest/gtest.h>

#include <string>

#include "server/request_framing.h"

using hearth::server::RequestFramer;

namespace {

// Feeds `bytes` one at a time (as httplib's line reader does) and returns the status
// of the refusal, 0 when the request passed whole, -1 when it is still incomplete.
int feed_bytewise(RequestFramer& f, const std::string& bytes) {
  for (char c : bytes) {
    if (!f.feed(&c, 1)) return f.error().status;
  }
  return f.complete() ? 0 : -1;
}

const std::string kPost = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";

}  // namespace

TEST(RequestFramer, ContentLengthRequestEndsAfterItsBody) {
  RequestFramer f(1024, 100);
  EXPECT_EQ(feed_bytewise(f, kPost + "Content-Length: 5\r\n\r\nhel"), -1);
  EXPECT_EQ(feed_bytewise(f, "lo"), 0);
  EXPECT_EQ(f.path(), "/v1/chat/completions");
  f.reset();
  EXPECT_TRUE(f.at_start());
  EXPECT_EQ(feed_bytewise(f, "GET /health?x=1 HTTP/1.1\r\n\r\n"), 0);
  EXPECT_EQ(f.path(), "/health");
}

TEST(RequestFramer, BodyIsCountedInBulk) {
  RequestFramer f(1024, 1 << 20);
  const std::string head = kPost + "Content-Length: 100000\r\n\r\n";
  ASSERT_EQ(feed_bytewise(f, head), -1);
  const std::string body(100000, 'a');
  EXPECT_TRUE(f.feed(body.data(), body.size()));
  EXPECT_TRUE(f.complete());
}

TEST(RequestFramer, LimitsGiveTheirStatus) {
  RequestFramer f(64, 10);
  EXPECT_EQ(feed_bytewise(f, kPost + "X-Pad: " + std::string(100, 'a') + "\r\n\r\n"), 431);
  EXPECT_NE(f.error().message.find("--max-header-bytes"), std::string::npos);
  RequestFramer g(1024, 10);
  EXPECT_EQ(feed_bytewise(g, kPost + "Content-Length: 11\r\n\r\n"), 413);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, kPost + "\r\n"), 411);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, kPost + "Transfer-Encoding: gzip\r\n\r\n"), 501);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, kPost + "Content-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, kPost + "Content-Length: 0x5\r\n\r\n"), 400);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, kPost + "Content-Length: 99999999999999999999\r\n\r\n"), 400);
  g.reset();
  EXPECT_EQ(feed_bytewise(g, "GARBAGE\r\n\r\n"), 400);
}

TEST(RequestFramer, ValidChunkedBody) {
  RequestFramer f(1024, 100);
  EXPECT_EQ(
      feed_bytewise(
          f,
          kPost +
              "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n"),
      0);
  f.reset();  // Transfer-Encoding wins over Content-Length, as in httplib.
  EXPECT_EQ(
      feed_bytewise(
          f, kPost + "Content-Length: 3\r\ntransfer-encoding: Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
      0);
}

TEST(RequestFramer, MalformedChunkedBodiesAre400WithTheOffset) {
  const std::string head = kPost + "Transfer-Encoding: chunked\r\n\r\n";
  for (const std::string& bad :
       {std::string("zz\r\n"), std::string("\r\n"), std::string("2\r\nhello"),
        std::string("5\nhello"), std::string("00000000000000005\r\n"),
        std::string("0\r\nX-Trailer: 1\r\n\r\n"), std::string("5\r\nhello\n"),
        std::string("-1\r\n")}) {
    RequestFramer f(1024, 100);
    EXPECT_EQ(feed_bytewise(f, head + bad), 400) << bad;
    EXPECT_NE(f.error().message.find("malformed chunked body"), std::string::npos)
        << f.error().message;
    EXPECT_NE(f.error().message.find("at byte "), std::string::npos) << f.error().message;
  }
}

TEST(RequestFramer, ChunkedBodyOverTheLimitIs413AtTheSizeLine) {
  const std::string head = kPost + "Transfer-Encoding: chunked\r\n\r\n";
  RequestFramer f(1024, 100);
  EXPECT_EQ(feed_bytewise(f, head + "FFFFFFFFFF\r\n"), 413);
  RequestFramer g(1024, 100);
  EXPECT_EQ(feed_bytewise(g, head + "40\r\n" + std::string(64, 'a') + "\r\n40\r\n"), 413);
}

TEST(RequestFramer, LinesWithoutCrlfAreSkippedLikeHttplib) {
  RequestFramer f(1024, 100);
  // httplib ignores a header line ending in a bare LF: its Content-Length does not count.
  EXPECT_EQ(feed_bytewise(f, kPost + "Content-Length: 5\nContent-Length: 2\r\n\r\nhi"), 0);
}

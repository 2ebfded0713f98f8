// RequestFramer: checks the framing of one HTTP/1.1 request as its bytes go by, before
// cpp-httplib parses them: the size of the request line + headers, Content-Length,
// Transfer-Encoding, the chunked encoding (sizes, CRLFs, the terminator) and the size
// of the body. It mirrors httplib 0.11's reading rules (headers end at a "\r\n" line;
// lines not ending in CRLF are ignored; only POST/PUT/PATCH/DELETE/PRI read a body;
// chunked wins over Content-Length) so that both agree on where a request ends. Pure:
// no I/O; one instance per connection, reset() between requests. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::server {

// Why a request was refused: HTTP status (400, 411, 413, 431, 501) and a message that
// says what and where (byte offset within the request).
struct FramingError {
  int status = 0;
  std::string message;
};

class RequestFramer {
 public:
  RequestFramer(size_t max_header_bytes, size_t max_body_bytes);
  // Forget the previous request (keep-alive).
  void reset();
  // Accounts for `n` more bytes of the request; false once it breaks a rule (error()).
  // Bytes past the end of the request are not accepted here (see complete()).
  bool feed(const char* data, size_t n);
  // The request line, headers and body have all passed.
  bool complete() const { return state_ == State::kDone; }
  // Still in the request line or headers.
  bool in_headers() const { return state_ == State::kHeaders; }
  // No byte of this request has been fed yet.
  bool at_start() const { return offset_ == 0; }
  const FramingError& error() const { return error_; }
  // The request target ("/v1/messages?x=1" -> "/v1/messages"); empty before the headers end.
  const std::string& path() const { return path_; }
  // Bytes of this request fed so far.
  uint64_t offset() const { return offset_; }

 private:
  enum class State {
    kHeaders,
    kBody,         // Content-Length
    kChunkSize,    // hex digits of a chunk size
    kChunkExt,     // after the size: spaces or ';' extensions up to CR
    kChunkSizeLf,  // LF after the size line's CR
    kChunkData,
    kChunkDataCr,  // CR after a chunk's data
    kChunkDataLf,
    kLastCr,  // after "0...\r\n": the final CRLF (no trailers)
    kLastLf,
    kDone,
    kFailed,
  };
  bool fail(int status, std::string message);
  bool end_of_headers();
  bool header_line(std::string_view line);
  bool feed_byte(char c);

  size_t max_header_;
  size_t max_body_;
  State state_ = State::kHeaders;
  uint64_t offset_ = 0;
  std::string head_;       // request line + headers seen so far
  size_t line_start_ = 0;  // where the current line starts in head_
  bool first_line_ = true;
  std::string method_, path_;
  bool chunked_ = false;
  bool has_length_ = false;
  uint64_t content_length_ = 0;
  uint64_t body_ = 0;  // decoded body bytes so far
  uint64_t chunk_left_ = 0;
  int size_digits_ = 0;
  FramingError error_;
};

}  // namespace hearth::server

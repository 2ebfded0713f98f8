#include "server/request_framing.h"

#include <algorithm>
#include <cctype>

namespace hearth::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte for a message: printable as is, else \xNN.
std::string show(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static const char* digits = "0123456789abcdef";
  return std::string("\\x") + digits[u >> 4] + digits[u & 15];
}

}  // namespace

RequestFramer::RequestFramer(size_t max_header_bytes, size_t max_body_bytes)
    : max_header_(max_header_bytes), max_body_(max_body_bytes) {}

void RequestFramer::reset() {
  state_ = State::kHeaders;
  offset_ = 0;
  head_.clear();
  line_start_ = 0;
  first_line_ = true;
  method_.clear();
  path_.clear();
  chunked_ = false;
  has_length_ = false;
  content_length_ = 0;
  body_ = 0;
  chunk_left_ = 0;
  size_digits_ = 0;
  error_ = {};
}

bool RequestFramer::fail(int status, std::string message) {
  state_ = State::kFailed;
  error_ = {status, std::move(message)};
  return false;
}

bool RequestFramer::header_line(std::string_view line) {
  // `line` excludes its CRLF. httplib skips lines that do not end in CRLF; so do we.
  if (first_line_) {
    first_line_ = false;
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) {
      return fail(400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
    }
    method_ = std::string(line.substr(0, sp1));
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path_ = std::string(target.substr(0, target.find('?')));
    return true;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return true;  // httplib ignores it too
  const std::string name = lower(trim(line.substr(0, colon)));
  const std::string_view value = trim(line.substr(colon + 1));
  if (name == "content-length") {
    if (value.empty() || value.size() > 18 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return fail(400, "invalid Content-Length '" + std::string(value.substr(0, 40)) +
                           "' (decimal digits expected)");
    }
    const uint64_t n = std::stoull(std::string(value));
    if (has_length_ && n != content_length_) {
      return fail(400, "conflicting Content-Length headers (" + std::to_string(content_length_) +
                           " and " + std::to_string(n) + ")");
    }
    has_length_ = true;
    content_length_ = n;
  } else if (name == "transfer-encoding") {
    if (lower(value) != "chunked") {
      return fail(501, "Transfer-Encoding '" + std::string(value.substr(0, 40)) +
                           "' is not supported (only 'chunked')");
    }
    chunked_ = true;
  }
  return true;
}

bool RequestFramer::end_of_headers() {
  const bool has_body = method_ == "POST" || method_ == "PUT" || method_ == "PATCH" ||
                        method_ == "DELETE" ||
                        method_ == "PRI";  // the methods httplib reads a body for
  if (!has_body) {
    state_ = State::kDone;
    return true;
  }
  if (chunked_) {
    state_ = State::kChunkSize;
    size_digits_ = 0;
    chunk_left_ = 0;
    return true;
  }
  if (!has_length_)
    return fail(411,
                "a " + method_ + " request needs Content-Length or Transfer-Encoding: chunked");
  if (content_length_ > max_body_) {
    return fail(413, "the request body is " + std::to_string(content_length_) +
                         " bytes; the limit is " + std::to_string(max_body_) +
                         " (--max-body-bytes)");
  }
  state_ = content_length_ == 0 ? State::kDone : State::kBody;
  return true;
}

bool RequestFramer::feed_byte(char c) {
  const std::string at = " at byte " + std::to_string(offset_) + " of the request";
  switch (state_) {
    case State::kHeaders: {
      if (head_.size() >= max_header_) {
        return fail(431, "the request line and headers exceed " + std::to_string(max_header_) +
                             " bytes (--max-header-bytes)");
      }
      head_.push_back(c);
      if (c != '\n') return true;
      const std::string_view line(head_.data() + line_start_, head_.size() - line_start_);
      line_start_ = head_.size();
      if (line.size() < 2 || line[line.size() - 2] != '\r') {
        if (first_line_) return fail(400, "the request line must end with CRLF");
        return true;  // skipped, as httplib does
      }
      if (line.size() == 2 && !first_line_) return end_of_headers();
      return header_line(line.substr(0, line.size() - 2));
    }
    case State::kChunkSize: {
      const int v = hex_value(c);
      if (v >= 0) {
        if (++size_digits_ > 15)
          return fail(400, "malformed chunked body: chunk size has too many digits" + at);
        chunk_left_ = chunk_left_ * 16 + static_cast<uint64_t>(v);
        return true;
      }
      if (size_digits_ == 0)
        return fail(400, "malformed chunked body: expected a hex chunk size, got " + show(c) + at);
      if (c == '\r') {
        state_ = State::kChunkSizeLf;
        return true;
      }
      if (c == ';' || c == ' ' || c == '\t') {
        state_ = State::kChunkExt;
        return true;
      }
      return fail(400,
                  "malformed chunked body: unexpected " + show(c) + " after the chunk size" + at);
    }
    case State::kChunkExt:
      if (c == '\r')
        state_ = State::kChunkSizeLf;
      else if (c == '\n' || c == '\0')
        return fail(400, "malformed chunked body: bad chunk extension" + at);
      return true;
    case State::kChunkSizeLf:
      if (c != '\n') return fail(400, "malformed chunked body: expected LF after CR" + at);
      if (chunk_left_ == 0) {
        state_ = State::kLastCr;
        return true;
      }
      if (body_ + chunk_left_ > max_body_) {
        return fail(413, "the chunked request body exceeds " + std::to_string(max_body_) +
                             " bytes (--max-body-bytes)");
      }
      state_ = State::kChunkData;
      return true;
    case State::kChunkDataCr:
      if (c != '\r')
        return fail(400,
                    "malformed chunked body: chunk data longer than its size (expected CRLF, got " +
                        show(c) + ")" + at);
      state_ = State::kChunkDataLf;
      return true;
    case State::kChunkDataLf:
      if (c != '\n')
        return fail(400, "malformed chunked body: expected LF after a chunk's CR" + at);
      state_ = State::kChunkSize;
      size_digits_ = 0;
      chunk_left_ = 0;
      return true;
    case State::kLastCr:
      if (c != '\r')
        return fail(400,
                    "malformed chunked body: trailers are not supported (expected CRLF after the "
                    "last chunk)" +
                        at);
      state_ = State::kLastLf;
      return true;
    case State::kLastLf:
      if (c != '\n')
        return fail(400, "malformed chunked body: expected LF after the last chunk" + at);
      state_ = State::kDone;
      return true;
    case State::kDone:
      return fail(400, "bytes past the end of the request" + at);
    case State::kFailed:
      return false;
    case State::kBody:
    case State::kChunkData:
      break;  // handled in bulk by feed()
  }
  return true;
}

bool RequestFramer::feed(const char* data, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (state_ == State::kFailed) return false;
    if (state_ == State::kBody || state_ == State::kChunkData) {
      const uint64_t left = state_ == State::kBody ? content_length_ - body_ : chunk_left_;
      const auto take = static_cast<size_t>(std::min<uint64_t>(left, n - i));
      body_ += take;
      offset_ += take;
      i += take;
      if (state_ == State::kBody) {
        if (body_ == content_length_) state_ = State::kDone;
      } else {
        chunk_left_ -= take;
        if (chunk_left_ == 0) state_ = State::kChunkDataCr;
      }
      continue;
    }
    if (!feed_byte(data[i])) return false;
    ++offset_;
    ++i;
  }
  return state_ != State::kFailed;
}

}  // namespace hearth::server

// Byte-at-a-time JSON value scanner; see json_stream.h.
#include "server/json_stream.h"

#include <cstdio>

namespace hearth::server {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_scalar_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' ||
         c == '-' || c == '.';
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

bool is_json_scalar(const std::string& s) {
  if (s == "true" || s == "false" || s == "null") return true;
  if (s.empty()) return false;
  // JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > start;
  };
  if (s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

size_t utf8_whole_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t len = 1;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
    }
    return len > back ? n - back : n;
  }
  return n;
}

void JsonScanner::mark_safe(bool in_string) {
  safe_len_ = out_.size();
  safe_heal_.clear();
  if (in_string) safe_heal_ += '"';
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) safe_heal_ += *it == '{' ? '}' : ']';
}

JsonScanner::Result JsonScanner::after_value() {
  if (stack_.empty()) {
    complete_ = true;
    mark_safe(false);
    return Result::kComplete;
  }
  expect_ = Expect::kCommaOrClose;
  mark_safe(false);
  return Result::kMore;
}

bool JsonScanner::end_scalar() {
  in_scalar_ = false;
  if (!is_json_scalar(scalar_)) return false;
  return true;
}

JsonScanner::Result JsonScanner::push(char c) {
  if (complete_) return Result::kError;
  if (in_string_) {
    const auto u = static_cast<unsigned char>(c);
    if (escape_ == 1) {
      if (c == 'u') {
        escape_ = 5;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                 c == 'r' || c == 't') {
        escape_ = 0;
      } else {
        return Result::kError;
      }
      out_ += c;
    } else if (escape_ > 1) {
      if (!is_hex(c)) return Result::kError;
      out_ += c;
      escape_ = escape_ == 2 ? 0 : escape_ - 1;
    } else if (c == '"') {
      out_ += c;
      in_string_ = false;
      if (string_is_key_) {
        expect_ = Expect::kColon;
        return Result::kMore;
      }
      return after_value();
    } else if (c == '\\') {
      out_ += c;
      escape_ = 1;
    } else if (u < 0x20) {
      out_ += json_escape(std::string_view(&c, 1));  // a model's raw newline / tab
    } else {
      out_ += c;
      if ((u & 0xC0) == 0x80) {
        if (utf8_left_ > 0) --utf8_left_;
      } else if ((u & 0xE0) == 0xC0) {
        utf8_left_ = 1;
      } else if ((u & 0xF0) == 0xE0) {
        utf8_left_ = 2;
      } else if ((u & 0xF8) == 0xF0) {
        utf8_left_ = 3;
      } else {
        utf8_left_ = 0;
      }
    }
    if (!string_is_key_ && escape_ == 0 && utf8_left_ == 0) mark_safe(true);
    return Result::kMore;
  }
  if (in_scalar_) {
    if (is_scalar_char(c)) {
      scalar_ += c;
      out_ += c;
      return Result::kMore;
    }
    if (!end_scalar()) return Result::kError;
    const Result r = after_value();
    if (r == Result::kComplete) return Result::kEnded;
    // The byte that ended the scalar continues the container.
  }
  return structural(c);
}

JsonScanner::Result JsonScanner::structural(char c) {
  if (is_ws(c)) return Result::kMore;
  const bool value_ok = expect_ == Expect::kValue || expect_ == Expect::kValueOrClose;
  if (value_ok) {
    if (c == '{' || c == '[') {
      started_ = true;
      out_ += c;
      stack_.push_back(c);
      expect_ = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
      mark_safe(false);
      return Result::kMore;
    }
    if (c == '"') {
      started_ = true;
      out_ += c;
      in_string_ = true;
      string_is_key_ = false;
      utf8_left_ = 0;
      mark_safe(true);
      return Result::kMore;
    }
    if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
      started_ = true;
      out_ += c;
      in_scalar_ = true;
      scalar_.assign(1, c);
      return Result::kMore;
    }
  }
  if ((c == ']' && (expect_ == Expect::kValueOrClose || expect_ == Expect::kCommaOrClose) &&
       !stack_.empty() && stack_.back() == '[') ||
      (c == '}' && (expect_ == Expect::kKeyOrClose || expect_ == Expect::kCommaOrClose) &&
       !stack_.empty() && stack_.back() == '{')) {
    out_ += c;
    stack_.pop_back();
    return after_value();
  }
  if (c == '"' && (expect_ == Expect::kKey || expect_ == Expect::kKeyOrClose)) {
    out_ += c;
    in_string_ = true;
    string_is_key_ = true;
    utf8_left_ = 0;
    return Result::kMore;
  }
  if (c == ':' && expect_ == Expect::kColon) {
    out_ += c;
    expect_ = Expect::kValue;
    return Result::kMore;
  }
  if (c == ',' && expect_ == Expect::kCommaOrClose) {
    out_ += c;
    expect_ = stack_.back() == '{' ? Expect::kKey : Expect::kValue;
    return Result::kMore;
  }
  return Result::kError;
}

bool JsonScanner::finish() {
  if (complete_) return true;
  if (in_scalar_ && stack_.empty()) {
    if (!end_scalar()) return false;
    complete_ = true;
    mark_safe(false);
    return true;
  }
  return false;
}

}  // namespace hearth::server

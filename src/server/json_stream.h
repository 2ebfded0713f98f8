// A JSON value read one byte at a time, as a model writes it: the scanner keeps a
// compact copy of the value (whitespace outside strings dropped, raw control characters
// inside strings escaped, so a model's literal newline in a string still gives valid
// JSON) and knows, after every byte, how much of that copy can be sent already and
// what would close it (`"`, `}`, `]`) if the text ended there. The tool-call parsers
// stream arguments from it and close a truncated call with heal().
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

class JsonScanner {
 public:
  enum class Result {
    kMore,      // byte consumed, the value goes on
    kComplete,  // byte consumed and it ended the value (a string, object or array)
    kEnded,     // byte NOT consumed: it ended a bare number or literal before it
    kError,     // byte NOT consumed: it cannot continue a JSON value here
  };
  // Feeds the next byte. After kComplete / kEnded / kError the scanner takes no more bytes.
  Result push(char c);
  // End of input: a pending number / literal completes if it is valid. True when the
  // value is complete.
  bool finish();

  bool complete() const { return complete_; }
  bool started() const { return started_; }
  char first() const { return out_.empty() ? '\0' : out_[0]; }
  // The compact text of the value so far.
  const std::string& text() const { return out_; }
  // Bytes of text() that may be sent now: text().substr(0, safe_len()) + heal() is valid JSON.
  size_t safe_len() const { return safe_len_; }
  const std::string& heal() const { return safe_heal_; }

 private:
  enum class Expect { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kCommaOrClose };
  Result structural(char c);
  Result after_value();
  bool end_scalar();
  void mark_safe(bool in_string);

  std::string out_;
  std::vector<char> stack_;  // '{' / '['
  Expect expect_ = Expect::kValue;
  bool started_ = false, complete_ = false;
  bool in_string_ = false, string_is_key_ = false;
  int escape_ = 0;     // 1: after a backslash; 2..5: \u hex digits still to come (+1)
  int utf8_left_ = 0;  // continuation bytes still to come in a string
  bool in_scalar_ = false;
  std::string scalar_;
  size_t safe_len_ = 0;
  std::string safe_heal_;
};

// True when `s` is a whole valid JSON number or true / false / null.
bool is_json_scalar(const std::string& s);

// `s` as a JSON string literal's inside: quotes, backslashes and control characters
// escaped; every other byte (UTF-8 included) copied.
std::string json_escape(std::string_view s);

// Bytes of `s` that form whole UTF-8 characters (an incomplete sequence at the end is
// left out; invalid bytes count as whole).
size_t utf8_whole_prefix(std::string_view s);

}  // namespace hearth::server

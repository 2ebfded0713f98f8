// Jinja lexer with jinja2's whitespace rules (trim_blocks + lstrip_blocks); see lexer.h.
#include "template/lexer.h"

#include <cctype>

#include "core/error.h"
#include "template/value.h"

namespace hearth::tmpl {

std::string located(int line, int col, const std::string& message) {
  return "[template] line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + message;
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s_.size(); ++i) {
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t start = find_tag(pos);
      std::string text = s_.substr(pos, (start == std::string::npos ? s_.size() : start) - pos);
      if (start == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char kind = s_[start + 1];
      char mod = start + 2 < s_.size() ? s_[start + 2] : '\0';
      if (mod == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (mod != '+' && kind != '{') {  // lstrip_blocks for block and comment tags
        size_t nl = text.rfind('\n');
        size_t l = nl == std::string::npos ? 0 : nl + 1;
        if (l > 0 || line_starting) {
          bool only_ws = true;
          for (size_t i = l; i < text.size(); ++i) only_ws = only_ws && is_ws(text[i]);
          if (only_ws) text.resize(l);
        }
      }
      emit_text(std::move(text), pos);
      size_t body = start + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, body);
      } else if (kind == '%' && is_raw(body)) {
        pos = lex_raw(start, body);
      } else {
        pos = lex_tag(start, body, kind == '%');
      }
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    toks_.push_back({Tok::kEof, "", pos_line(s_.size()), pos_col(s_.size())});
    return std::move(toks_);
  }

 private:
  int pos_line(size_t off) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= off ? lo : hi) = mid;
    }
    return static_cast<int>(lo + 1);
  }
  int pos_col(size_t off) const {
    return static_cast<int>(off - line_starts_[static_cast<size_t>(pos_line(off) - 1)] + 1);
  }
  [[noreturn]] void error(size_t off, const std::string& msg) const {
    throw Error(ErrorKind::kInvalidInput, located(pos_line(off), pos_col(off), msg));
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = s_.find('{', pos); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t off) {
    if (!text.empty()) toks_.push_back({Tok::kText, std::move(text), pos_line(off), pos_col(off)});
  }

  // After a closing `%}`/`#}`/`}}` at `end` (index past it): `-` strips all
  // whitespace, a block/comment end otherwise drops one newline (trim_blocks).
  size_t after_close(size_t end, char close_mod, bool block) const {
    if (close_mod == '-') {
      while (end < s_.size() && is_ws(s_[end])) ++end;
    } else if (block && close_mod != '+' && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t lex_comment(size_t start, size_t body) {
    size_t close = s_.find("#}", body);
    if (close == std::string::npos) error(start, "unterminated comment (missing '#}')");
    char mod = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : '\0';
    return after_close(close + 2, mod, true);
  }

  // `{% raw %}` starts at body (after `{%` and modifier)?
  bool is_raw(size_t body) const {
    size_t i = body;
    while (i < s_.size() && is_ws(s_[i])) ++i;
    if (s_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    if (i < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i])) || s_[i] == '_')) return false;
    return true;
  }

  size_t lex_raw(size_t start, size_t body) {
    size_t close = s_.find("%}", body);
    if (close == std::string::npos) error(start, "unterminated 'raw' tag");
    size_t content = close + 2;
    if (s_[close - 1] == '-') {
      while (content < s_.size() && is_ws(s_[content])) ++content;
    }
    for (size_t i = s_.find("{%", content); i != std::string::npos; i = s_.find("{%", i + 2)) {
      size_t j = i + 2;
      char mod = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j++] : '\0';
      while (j < s_.size() && is_ws(s_[j])) ++j;
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < s_.size() && is_ws(s_[j])) ++j;
      char cmod = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j++] : '\0';
      if (s_.compare(j, 2, "%}") != 0) continue;
      std::string text = s_.substr(content, i - content);
      if (mod == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      }
      emit_text(std::move(text), content);
      return after_close(j + 2, cmod, true);
    }
    error(start, "unterminated 'raw' block (missing '{% endraw %}')");
  }

  size_t lex_tag(size_t start, size_t pos, bool block) {
    toks_.push_back({block ? Tok::kBlockBegin : Tok::kVarBegin, "", pos_line(start), pos_col(start)});
    const char close_ch = block ? '%' : '}';
    int depth = 0;
    while (true) {
      while (pos < s_.size() && is_ws(s_[pos])) ++pos;
      if (pos >= s_.size()) error(start, block ? "unexpected end of template, expected '%}'" :
                                                 "unexpected end of template, expected '}}'");
      if (depth == 0) {
        size_t p = pos;
        char mod = '\0';
        if ((s_[p] == '-' || s_[p] == '+') && p + 1 < s_.size() && s_[p + 1] == close_ch) mod = s_[p++];
        if (s_[p] == close_ch && p + 1 < s_.size() && s_[p + 1] == '}') {
          toks_.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, "", pos_line(pos), pos_col(pos)});
          return after_close(p + 2, mod, block);
        }
      }
      pos = lex_token(pos, depth);
    }
  }

  size_t lex_token(size_t pos, int& depth) {
    char c = s_[pos];
    int line = pos_line(pos), col = pos_col(pos);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos;
      while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
      toks_.push_back({Tok::kName, s_.substr(pos, e - pos), line, col});
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(pos, line, col);
    if (c == '\'' || c == '"') return lex_string(pos, line, col);
    static const char* const kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2) {
      if (s_.compare(pos, 2, op) == 0) {
        toks_.push_back({Tok::kOp, op, line, col});
        return pos + 2;
      }
    }
    if (std::string_view("+-*/%~<>=()[]{},.:|!").find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      toks_.push_back({Tok::kOp, std::string(1, c), line, col});
      return pos + 1;
    }
    error(pos, std::string("unexpected char '") + c + "'");
  }

  size_t lex_number(size_t pos, int line, int col) {
    auto digits = [&](size_t p, std::string& out) {
      while (p < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[p])) || s_[p] == '_')) {
        if (s_[p] != '_') out += s_[p];
        ++p;
      }
      return p;
    };
    std::string v;
    size_t p = digits(pos, v);
    bool is_float = false;
    if (p + 1 < s_.size() && s_[p] == '.' && std::isdigit(static_cast<unsigned char>(s_[p + 1]))) {
      v += '.';
      p = digits(p + 1, v);
      is_float = true;
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) {
        v += s_.substr(p, q - p);
        p = digits(q, v);
        is_float = true;
      }
    }
    toks_.push_back({is_float ? Tok::kFloat : Tok::kInt, v, line, col});
    return p;
  }

  // Python "unicode-escape" semantics for the string body.
  size_t lex_string(size_t pos, int line, int col) {
    char q = s_[pos];
    std::string out;
    size_t p = pos + 1;
    while (true) {
      if (p >= s_.size()) error(pos, "unterminated string");
      char c = s_[p];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= s_.size()) error(pos, "unterminated string");
      char e = s_[p + 1];
      p += 2;
      auto hex = [&](int n) {
        if (p + n > s_.size()) error(p, "truncated \\x/\\u escape");
        char32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          char h = s_[p + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) error(p, "truncated \\x/\\u escape");
          cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        p += n;
        utf8_append(out, cp);
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < s_.size() && s_[p] >= '0' && s_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(s_[p++] - '0');
            }
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    toks_.push_back({Tok::kString, std::move(out), line, col});
    return p + 1;
  }

  std::string s_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
};

std::string normalize_source(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_source(source)).run(); }

}  // namespace hearth::tmpl

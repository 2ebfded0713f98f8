// Jinja lexer: splits a template into text and tag tokens, applying whitespace
// control exactly as jinja2 does with trim_blocks=True and lstrip_blocks=True
// (`{%-`/`-%}` strip all whitespace, `{%+` disables lstrip, the first newline
// after a block or comment tag is dropped, one trailing newline of the source is
// dropped, \r\n and \r become \n).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tmpl {

enum class Tok : uint8_t {
  kText,        // literal output (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (value)
  kString,      // string literal, escapes resolved (value)
  kInt,         // integer literal (value: digits without '_')
  kFloat,       // float literal (value)
  kOp,          // operator or punctuation (value)
  kEof,
};

struct Token {
  Tok type;
  std::string value;
  int line = 1;
  int col = 1;
};

// Tokenizes `source`. Throws hearth::Error(kInvalidInput) "[template] line L, column C: ..."
// on an unterminated tag, comment or string.
std::vector<Token> lex(std::string_view source);

// "[template] line L, column C: message" helper shared by lexer/parser/evaluator.
std::string located(int line, int col, const std::string& message);

}  // namespace hearth::tmpl

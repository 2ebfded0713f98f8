// Chat-template rendering as Hugging Face transformers does it: the template
// gets `messages`, `tools` (None when absent), `documents` (None),
// `add_generation_prompt` (False when absent), every other key of the input
// object (bos_token, eos_token, enable_thinking, ...), and the globals
// raise_exception(msg) and strftime_now(fmt).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/evaluator.h"
#include "template/value.h"

namespace hearth::tmpl {

struct ChatRenderOptions {
  // The clock strftime_now sees; unset: the current local time.
  std::optional<std::tm> now;
  Limits limits;
};

// Parses "YYYY-MM-DDTHH:MM[:SS]" (or with a space). Throws Error(kInvalidInput).
std::tm parse_iso_datetime(const std::string& text);

// Deepest nesting of arrays / objects json_to_value accepts (the top-level container is
// level 1). Real chat payloads stay below 10; the limit keeps a hostile request from
// overflowing the stack. The server's request parser enforces the same limit.
inline constexpr int kMaxJsonDepth = 128;

// JSON -> template value; object key order is kept. Throws Error(kInvalidInput) when
// `j` nests deeper than kMaxJsonDepth.
Value json_to_value(const nlohmann::ordered_json& j);

class ChatTemplate {
 public:
  // Parses the template once. Throws hearth::Error on a syntax error.
  explicit ChatTemplate(std::string_view source) : template_(source) {}

  // Renders the prompt for `input` (a JSON object). Thread-safe. Throws hearth::Error
  // (kInvalidInput when input is not an object or the template raises).
  std::string apply(const nlohmann::ordered_json& input, const ChatRenderOptions& options = {}) const;

 private:
  Template template_;
};

}  // namespace hearth::tmpl

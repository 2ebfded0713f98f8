// libFuzzer target for the chat-template engine (lexer, parser, renderer).
// The input is template text, rendered against a fixed small conversation; if it
// contains the line "#json#", the part after it is parsed as the JSON object of
// template variables instead (when it is not valid JSON, the fixed conversation
// is used). A hearth::Error is the expected way to reject bad input; anything
// else (crash, sanitizer report, other exception, time-out, huge allocation) is
// a bug. The render limits are lowered so that a template that runs into one
// stops well inside libFuzzer's time-out; the product's defaults are larger.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/chat_template.h"

namespace {

constexpr std::string_view kSplit = "\n#json#\n";

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({
  "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "<think>short</think>It is 21 \u00b0C in Paris. \ud83c\udf24"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks! And tomorrow?"}]}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}],
  "add_generation_prompt": true,
  "enable_thinking": false,
  "bos_token": "<s>",
  "eos_token": "</s>"
})");
  return j;
}

hearth::tmpl::ChatRenderOptions options() {
  hearth::tmpl::ChatRenderOptions o;
  std::tm now{};
  now.tm_year = 2025 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  now.tm_hour = 12;
  now.tm_wday = 6;
  o.now = now;
  // Small enough that hitting a limit costs milliseconds, large enough for real templates.
  o.limits.max_output_bytes = 1u << 20;
  o.limits.max_loop_iterations = 100'000;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const hearth::tmpl::ChatRenderOptions opts = options();
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view source = input;
  nlohmann::ordered_json vars;
  const size_t split = input.find(kSplit);
  if (split != std::string_view::npos) {
    source = input.substr(0, split);
    vars = nlohmann::ordered_json::parse(input.substr(split + kSplit.size()), nullptr, /*allow_exceptions=*/false);
  }
  if (!vars.is_object()) vars = conversation();  // also when parsing failed (discarded value)
  try {
    hearth::tmpl::ChatTemplate t(source);
    try {
      std::string out = t.apply(vars, opts);
      if (out.size() > opts.limits.max_output_bytes) __builtin_trap();
    } catch (const hearth::Error&) {
    }
    if (split != std::string_view::npos) {
      // The same tree rendered again with other variables: each render has its own state.
      try {
        (void)t.apply(conversation(), opts);
      } catch (const hearth::Error&) {
      }
    }
  } catch (const hearth::Error&) {
  }
  return 0;
}

// From a chat request to the prompt and the output rules, API-neutral (the OpenAI and
// Anthropic routes both build ChatInputs in OpenAI's message shape): tools given to the
// template when it renders them in a syntax the parser knows, else a Hermes-style tool
// list injected into the system message (and the history's calls / results written the
// Hermes way); tool_choice reflected in the prompt; chat_template_kwargs merged over the
// server default; later system messages folded into the first when the template refuses
// them. Throws ApiException (400) when the template cannot render the conversation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/chat_prompt.h"
#include "engine/reasoning_budget.h"
#include "server/chat_output.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

// Server-wide chat settings (flags and the template in use), fixed at start-up.
struct ChatSettings {
  TemplateCaps caps;  // of the template in use
  nlohmann::ordered_json default_kwargs =
      nlohmann::ordered_json::object();  // --chat-template-kwargs
  bool parse_reasoning = true;           // --reasoning-format auto
  int32_t reasoning_budget = -1;         // --reasoning-budget (< 0: off)
};

// One request's conversation, in OpenAI's shape.
struct ChatInputs {
  nlohmann::ordered_json messages;  // as messages_for_template gives them
  nlohmann::ordered_json tools;     // [{type: "function", function: {...}}] or null
  ToolChoice tool_choice;
  // Unset: not sent. Calls may then come in parallel, except under a forced tool_choice
  // (required / named): one call unless the client asked for parallel calls.
  std::optional<bool> parallel_tool_calls;
  nlohmann::ordered_json kwargs;  // chat_template_kwargs of the request (object or null)
  std::optional<bool> parse_reasoning;  // this request's reasoning_format (unset: the server's)
  int32_t reasoning_budget = -1;  // this request's cap on reasoning tokens (e.g. Anthropic's
                                  //   thinking.budget_tokens); < 0: the server's --reasoning-budget
};

// What the request demands of the model's tool calls. This is the one place it is
// computed: constrained decoding enforces kRequired / kNamed from it (a call, in
// `format`, to one of `tools` / to `name`, arguments valid for its schema).
struct ToolConstraint {
  enum class Kind { kFree, kRequired, kNamed };
  Kind kind = Kind::kFree;       // kFree: free text, calls optional (or no tools)
  std::string name;              // kNamed
  nlohmann::ordered_json tools;  // the request's tools
  ToolFormat format = ToolFormat::kNone;
  bool parallel = true;  // more than one call allowed
};

struct PreparedChat {
  std::string prompt;    // the rendered prompt text
  OutputOptions output;  // how the model's answer is parsed
  ToolConstraint constraint;
  bool tools_injected = false;    // the Hermes tool list was written into the system message
  int32_t reasoning_budget = -1;  // the cap that applies (request, else server; < 0: none)
};

ChatInputs chat_inputs(const ParsedRequest& request);

PreparedChat prepare_chat(const ChatInputs& in, const engine::ChatPrompt& chat,
                          const ChatSettings& settings);

// The engine's reasoning cut for a prepared chat: after `prepared.reasoning_budget`
// tokens inside <think>, the tokens of "\n</think>\n\n" (nothing when there is no
// budget, reasoning is not parsed, or the template knows no <think>).
engine::ReasoningLimit reasoning_limit(const PreparedChat& prepared, const ChatSettings& settings,
                                       const tokenizer::Tokenizer& tok);

// The system-message text listing `tools` in the Hermes style (for templates without
// tool support), with the tool_choice / parallel instruction.
std::string hermes_tools_text(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                              bool parallel);

}  // namespace hearth::server

// What the model wrote, as an agent client needs it: the generated text of an
// assistant turn split, while it streams, into reasoning (<think>...</think>), answer
// content and tool calls, in the tool-call format the model's chat template uses.
// Both APIs (OpenAI chat completions and Anthropic messages) format their responses
// from these events; neither looks at raw model text. Pure code, no model, no HTTP.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

// The tool-call syntax a model emits, detected from its chat template (not its name).
enum class ToolFormat {
  kNone,        // template knows no tools and no tools were injected: output is content
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5, Qwen3, injected)
  kQwenXml,     // <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call> (Qwen3.5, Qwen3-Coder)
  kLlama3Json,  // {"name": ..., "parameters": {...}} (optionally after <|python_tag|>) (Llama 3.x)
  kMistral,     // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]NAME[ARGS]{...}
};

// One piece of an assistant turn, in output order.
struct OutputEvent {
  enum class Kind {
    kReasoning,      // text: reasoning text (inside <think>)
    kContent,        // text: answer text
    kToolCallBegin,  // index, id, name: a tool call whose name is now known
    kToolCallArgs,   // index, text: the next fragment of the call's arguments as JSON
                     //   (all fragments of one call concatenated are one JSON object)
    kToolCallEnd,    // index: the call is complete
    kToolCallCut,    // index, name (empty when not yet known), text (the call's raw text):
                     //   generation ended inside this call; it is not a call and none of
                     //   its Begin / Args / End events were (or will be) emitted
  };
  Kind kind = Kind::kContent;
  int index = 0;     // tool calls: 0, 1, ... in order of appearance within the turn
  std::string id;    // kToolCallBegin: "call_" + 24 alphanumerics
  std::string name;  // kToolCallBegin: the function name
  std::string text;
};

// One completed tool call.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text (compact)
};

// A whole turn, the events folded together.
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // complete calls only
  int n_cut_calls = 0;               // calls the end of generation cut (not in tool_calls)
};

struct OutputOptions {
  ToolFormat tool_format = ToolFormat::kNone;
  bool parse_reasoning = true;        // false (--reasoning-format none): <think> stays in content
  bool starts_in_reasoning = false;   // the prompt ended inside an open <think> (Qwen3.5 templates)
  nlohmann::ordered_json tools;       // the request's OpenAI-format tools (schemas type the values), or null
  bool parse_tools = true;            // false: tool_choice "none" or no tools in the request
  // The calls were written under a tool grammar (a forced tool_choice): parse them exactly
  // as the grammar lays them out, without the leniency for free-running models (a Qwen XML
  // value then ends only at its </parameter>: a grammar lets a value hold "</function>").
  bool strict_calls = false;
};

// Incremental parser of one assistant turn. Not thread-safe; one per request.
class OutputParser {
 public:
  virtual ~OutputParser() = default;
  // Newly generated text (any split, even inside a UTF-8 character or a tag); returns
  // the events that are now certain. Text that may still turn out to be the start of
  // a tag is held back until it is resolved. A tool call's events (Begin, Args..., End)
  // are held until the call is complete and then come out together, so that no client
  // ever receives part of a call that generation may still cut.
  virtual std::vector<OutputEvent> feed(std::string_view text) = 0;
  // End of generation: flushes what was held back. A call that generation ended inside
  // (max_tokens, a stop string, EOS) is never returned as a call: it comes out as one
  // kToolCallCut event, whether or not its name was known. Text that turned out not to
  // be a call comes out as content; nothing throws.
  virtual std::vector<OutputEvent> finish() = 0;
};

std::unique_ptr<OutputParser> make_output_parser(const OutputOptions& options);

// Folds events (in order) into a whole turn. Each call's arguments are re-written as
// compact JSON (left as sent if they do not parse, which the parser never produces).
ParsedOutput fold_events(const std::vector<OutputEvent>& events);

// What a chat template's source says about tools and reasoning.
struct TemplateCaps {
  ToolFormat tool_format = ToolFormat::kNone;  // the syntax its tool calls use
  bool renders_tools = false;  // it reads `tools` (else the server injects a Hermes tool list)
  bool knows_reasoning = false;  // it mentions <think> (reasoning_content / enable_thinking)
};
// Detects from the template source text (never the model name): XML <function=... ->
// kQwenXml, <tool_call> -> kHermes, [TOOL_CALLS] -> kMistral, <|python_tag|> or Llama 3
// headers with "parameters" -> kLlama3Json.
TemplateCaps detect_template_caps(std::string_view template_source);

// True when a rendered generation prompt ends inside an open <think> block (Qwen3.5,
// Qwen3 with thinking on): the output then starts in reasoning.
bool prompt_opens_reasoning(std::string_view prompt);

// "hermes" / "qwen_xml" / "llama3_json" / "mistral" / "none".
const char* tool_format_name(ToolFormat format);

}  // namespace hearth::server

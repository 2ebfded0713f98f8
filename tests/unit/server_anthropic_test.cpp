// The Anthropic Messages protocol layer of `hearth serve`: request parsing into the chat
// template's OpenAI-shaped messages (every error path names its field), Anthropic's error
// shapes, and the message / SSE event formatting from output events, parsed back as JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/anthropic_protocol.h"
#include "server/anthropic_routes.h"
#include "template/chat_template.h"

using namespace hearth::server;
using hearth::engine::Final;
using json = nlohmann::ordered_json;
using Kind = OutputEvent::Kind;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kUser = R"("messages": [{"role": "user", "content": "hi"}])";

AnthropicRequest parse(const std::string& body,
                       AnthropicEndpoint ep = AnthropicEndpoint::kMessages) {
  return parse_anthropic_request(body, ep);
}

// A /v1/messages body: max_tokens 16, one user message, plus `extra` fields.
std::string with(const std::string& extra) {
  return R"({"max_tokens": 16, )" + kUser + ", " + extra + "}";
}
std::string msgs(const std::string& messages) {
  return R"({"max_tokens": 16, "messages": )" + messages + "}";
}

ApiError error_of(const std::string& body, AnthropicEndpoint ep = AnthropicEndpoint::kMessages) {
  try {
    parse_anthropic_request(body, ep);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

// A 400 whose message contains `want` and whose param is `param`.
void expect_400(const std::string& body, const std::string& want, const std::string& param) {
  SCOPED_TRACE(body);
  const ApiError e = error_of(body);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_TRUE(contains(e.message, want)) << e.message;
  EXPECT_EQ(e.param, param);
}

OutputEvent ev(Kind kind, std::string text, int index = 0) {
  OutputEvent e;
  e.kind = kind;
  e.text = std::move(text);
  e.index = index;
  return e;
}

OutputEvent tool_begin(int index, std::string id, std::string name) {
  OutputEvent e = ev(Kind::kToolCallBegin, "", index);
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}

Final final_of(const std::string& reason, int prompt = 10, int cached = 0, int completion = 3) {
  Final f;
  f.finish_reason = reason;
  f.prompt_tokens = prompt;
  f.cached_tokens = cached;
  f.completion_tokens = completion;
  return f;
}

struct SseEvent {
  std::string name;
  json data;
};

// Splits "event: X\ndata: {...}\n\n" text; fails the test on any other framing.
std::vector<SseEvent> split_events(const std::string& text) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event at " << pos << ": " << text.substr(pos);
      break;
    }
    const std::string ev_text = text.substr(pos, end - pos);
    const size_t nl = ev_text.find('\n');
    if (ev_text.rfind("event: ", 0) != 0 || nl == std::string::npos ||
        ev_text.compare(nl + 1, 6, "data: ") != 0) {
      ADD_FAILURE() << "bad event framing: " << ev_text;
      break;
    }
    SseEvent e{ev_text.substr(7, nl - 7), json::parse(ev_text.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.name) << ev_text;
    out.push_back(std::move(e));
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> names(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    if (e.name == "content_block_delta") {
      out.push_back(e.name + ':' + e.data["delta"]["type"].get<std::string>());
    } else {
      out.push_back(e.name);
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Parsing

TEST(AnthropicParse, MinimalRequest) {
  const AnthropicRequest r = parse(R"({"model": "claude-x", "max_tokens": 100, )" + kUser + "}");
  EXPECT_EQ(r.model, "claude-x");
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_EQ(r.messages, json::parse(R"([{"role": "user", "content": "hi"}])"));
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_TRUE(r.tool_choice.is_null());
  EXPECT_FALSE(r.parallel_tool_calls.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop_sequences.empty());
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 1.0f);
  EXPECT_EQ(r.sampler.top_k, 0);
  // No thinking field: thinking off (Anthropic's default), whatever the template's.
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", false}}));
  EXPECT_FALSE(r.thinking_budget);
  EXPECT_TRUE(r.response_format.is_null());
  EXPECT_EQ(anthropic_template_extra(r), json({{"enable_thinking", false}}));
}

TEST(AnthropicParse, MaxTokensIsRequiredForMessagesOnly) {
  expect_400("{" + kUser + "}", "'max_tokens' is required", "max_tokens");
  expect_400(R"({"max_tokens": 0, )" + kUser + "}", "'max_tokens' must be between 1", "max_tokens");
  expect_400(R"({"max_tokens": 1.5, )" + kUser + "}", "'max_tokens' must be an integer, got 1.5",
             "max_tokens");
  expect_400(R"({"max_tokens": "9", )" + kUser + "}", "'max_tokens' must be an integer, got string",
             "max_tokens");
  const AnthropicRequest c =
      parse("{" + kUser + R"(, "temperature": 7})", AnthropicEndpoint::kCountTokens);
  EXPECT_EQ(c.max_tokens, 0);  // count_tokens ignores the sampling fields
  EXPECT_EQ(c.messages.size(), 1u);
}

TEST(AnthropicParse, SystemStringBlocksAndSystemMessagesFoldIntoOne) {
  AnthropicRequest r = parse(R"({"max_tokens": 5, "system": "Be brief.", )" + kUser + "}");
  EXPECT_EQ(r.messages[0], json::parse(R"({"role": "system", "content": "Be brief."})"));
  r = parse(
      R"({"max_tokens": 5, "system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "B"}],
               "messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "C"},
                            {"role": "assistant", "content": "a"},
                            {"role": "system", "content": [{"type": "text", "text": "D"}]},
                            {"role": "user", "content": "q2"}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0], json::parse(R"({"role": "system", "content": "A\nB\n\nC\n\nD"})"));
  EXPECT_EQ(r.messages[1]["role"], "user");
  EXPECT_EQ(r.messages[2], json::parse(R"({"role": "assistant", "content": "a"})"));
  expect_400(R"({"max_tokens": 5, "system": [{"type": "image"}], )" + kUser + "}",
             "images are not allowed in system content", "system[0].type");
  expect_400(R"({"max_tokens": 5, "system": 3, )" + kUser + "}",
             "'system' must be a string or an array of text", "system");
  expect_400(msgs(R"([{"role": "system", "content": "only a system message"}])"),
             "at least one user or assistant message", "messages");
}

TEST(AnthropicParse, UserBlocksToolResultsAndOrder) {
  const AnthropicRequest r = parse(msgs(R"([
    {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
       {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt", "n": 2}},
       {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}}]},
    {"role": "user", "content": [
       {"type": "tool_result", "tool_use_id": "toolu_1", "content": "file body"},
       {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
        "content": [{"type": "text", "text": "no such dir"}, {"type": "text", "text": "sorry"}]},
       {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]}])"));
  const json want = json::parse(R"([
    {"role": "user", "content": "one\ntwo"},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
      {"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": {"path": "a.txt", "n": 2}}},
      {"id": "toolu_2", "type": "function", "function": {"name": "ls", "arguments": {}}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "file body"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such dir\nsorry"},
    {"role": "user", "content": "go on"}])");
  EXPECT_EQ(r.messages, want) << r.messages.dump(1);
  // A tool_result without content, an error without content, an empty block list.
  const AnthropicRequest e = parse(msgs(R"([{"role": "user", "content": [
       {"type": "tool_result", "tool_use_id": "a"}, {"type": "tool_result", "tool_use_id": "b", "is_error": true}]},
       {"role": "user", "content": []}])"));
  EXPECT_EQ(e.messages, json::parse(R"([{"role": "tool", "tool_call_id": "a", "content": ""},
       {"role": "tool", "tool_call_id": "b", "content": "Error"}, {"role": "user", "content": ""}])"));
}

TEST(AnthropicParse, AssistantToolUseOnlyHasEmptyContentAndThinkingIsReasoning) {
  const AnthropicRequest r = parse(msgs(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "abc"},
       {"type": "redacted_thinking", "data": "xyz"},
       {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1, {"b": null}]}}]}])"));
  EXPECT_EQ(r.messages[1], json::parse(R"({"role": "assistant", "content": "", "tool_calls": [
      {"id": "t", "type": "function", "function": {"name": "f", "arguments": {"a": [1, {"b": null}]}}}],
      "reasoning_content": "hmm"})"));
}

TEST(AnthropicParse, LastAssistantTextIsAPrefill) {
  AnthropicRequest r = parse(msgs(R"([{"role": "user", "content": "JSON please"},
                                      {"role": "assistant", "content": [{"type": "text", "text": "{\"a\": "}]}])"));
  EXPECT_EQ(r.prefill, "{\"a\": ");
  EXPECT_EQ(r.messages, json::parse(R"([{"role": "user", "content": "JSON please"}])"));
  // Not a prefill: an assistant turn that is not last, one with a tool call, a lone assistant
  // message.
  r = parse(msgs(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                     {"role": "user", "content": "c"}])"));
  EXPECT_EQ(r.prefill, "");
  EXPECT_EQ(r.messages.size(), 3u);
  r = parse(msgs(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": [
                     {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}])"));
  EXPECT_EQ(r.prefill, "");
  EXPECT_EQ(r.messages.size(), 2u);
  r = parse(msgs(R"([{"role": "assistant", "content": "only"}])"));
  EXPECT_EQ(r.prefill, "");
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(AnthropicParse, ContentErrorsNameTheField) {
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA!A"}}]}])"),
             "invalid base64: byte 2 is '!'", "messages[0].content[1].source.data");
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
      "content": [{"type": "image", "source": {}}]}]}])"),
             "'messages[0].content[0].content[0].source.type' is required", "messages[0].content[0].content[0].source.type");
  expect_400(msgs(R"([{"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}])"),
             "images are not allowed in an assistant message", "messages[0].content[0].type");
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "document", "source": {}}]}])"),
             "documents are not supported yet", "messages[0].content[0].type");
  expect_400(
      msgs(
          R"([{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}])"),
      "'tool_use' is not supported in a user message (allowed: text, image, tool_result)",
      "messages[0].content[0].type");
  expect_400(
      msgs(R"([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}])"),
      "not supported in an assistant message", "messages[0].content[0].type");
  expect_400(msgs(R"([{"role": "user", "content": [{"text": "no type"}]}])"),
             "'messages[0].content[0].type' is required", "messages[0].content[0].type");
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "text"}]}])"),
             "'messages[0].content[0].text' is required", "messages[0].content[0].text");
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "text", "text": 5}]}])"),
             "'messages[0].content[0].text' must be a string, got number",
             "messages[0].content[0].text");
  expect_400(msgs(R"([{"role": "user", "content": [7]}])"),
             "must be a content block (an object), got number", "messages[0].content[0]");
  expect_400(msgs(R"([{"role": "user", "content": [{"type": "tool_result"}]}])"),
             "'messages[0].content[0].tool_use_id' is required",
             "messages[0].content[0].tool_use_id");
  expect_400(
      msgs(
          R"([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]}])"),
      "'messages[0].content[0].is_error' must be a boolean", "messages[0].content[0].is_error");
  expect_400(
      msgs(
          R"([{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": "{}"}]}])"),
      "'messages[0].content[0].input' must be an object, got string",
      "messages[0].content[0].input");
  expect_400(msgs(R"([{"role": "assistant", "content": [{"type": "tool_use", "name": "b"}]}])"),
             "'messages[0].content[0].id' is required", "messages[0].content[0].id");
  expect_400(msgs(R"([{"role": "bot", "content": "x"}])"),
             "'messages[0].role' must be 'user' or 'assistant'", "messages[0].role");
  expect_400(msgs(R"([{"role": "user"}])"), "'messages[0].content' is required",
             "messages[0].content");
  expect_400(msgs(R"([{"role": "user", "content": 1}])"),
             "'messages[0].content' must be a string or an array", "messages[0].content");
  expect_400(msgs(R"({})"), "'messages' must be an array, got object", "messages");
  expect_400(msgs(R"([])"), "at least one user or assistant message", "messages");
  expect_400(R"({"max_tokens": 3})", "'messages' is required", "messages");
}

TEST(AnthropicParse, ToolsBecomeOpenAITools) {
  const AnthropicRequest r = parse(with(R"("tools": [
    {"name": "get_weather", "description": "Weather now", "input_schema": {"type": "object",
       "properties": {"city": {"type": "string"}}, "required": ["city"]}, "cache_control": {"type": "ephemeral"}},
    {"type": "custom", "name": "noop", "input_schema": {"type": "object"}, "defer_loading": false}])"));
  const json want = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters":
       {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}])");
  EXPECT_EQ(r.tools, want);
  EXPECT_EQ(anthropic_template_extra(r), json({{"tools", want}, {"enable_thinking", false}}));
  expect_400(with(R"("tools": {})"), "'tools' must be an array", "tools");
  expect_400(with(R"("tools": [{"type": "web_search_20250305", "name": "web_search"}])"),
             "'tools[0].type' 'web_search_20250305' is one of Anthropic's server or client tools",
             "tools[0].type");
  expect_400(with(R"("tools": [{"name": "a"}])"), "'tools[0].input_schema' is required",
             "tools[0].input_schema");
  expect_400(with(R"("tools": [{"name": "a", "input_schema": []}])"),
             "'tools[0].input_schema' must be an object", "tools[0].input_schema");
  expect_400(with(R"("tools": [{"name": "a", "input_schema": {"type": "string"}}])"),
             "'tools[0].input_schema.type' must be 'object'", "tools[0].input_schema.type");
  expect_400(with(R"("tools": [{"input_schema": {}}])"), "'tools[0].name' is required",
             "tools[0].name");
  expect_400(with(R"("tools": [{"name": "", "input_schema": {}}])"),
             "'tools[0].name' must not be empty", "tools[0].name");
  expect_400(
      with(R"("tools": [{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}])"),
      "'tools[1].name' 'a' is used by an earlier tool", "tools[1].name");
  expect_400(with(R"("tools": [{"name": "a", "description": 3, "input_schema": {}}])"),
             "'tools[0].description' must be a string", "tools[0].description");
}

// defer_loading tools (Claude Code's DeferredToolPlaceholder) stay out of the prompt, the
// grammar and tool_choice; they are still checked.
TEST(AnthropicParse, DeferredToolsAreLeftOut) {
  const std::string tools =
      R"("tools": [{"name": "f", "input_schema": {}},
                   {"name": "DeferredToolPlaceholder", "input_schema": {}, "defer_loading": true},
                   {"name": "g", "input_schema": {}, "defer_loading": false}], )";
  AnthropicRequest r = parse(with(tools + R"("tool_choice": {"type": "any"})"));
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");
  EXPECT_EQ(r.tools[1]["function"]["name"], "g");
  EXPECT_EQ(r.tool_choice, "required");
  expect_400(with(tools + R"("tool_choice": {"type": "tool", "name": "DeferredToolPlaceholder"})"),
             "'tool_choice.name' 'DeferredToolPlaceholder' is a tool with defer_loading",
             "tool_choice.name");
  expect_400(with(R"("tools": [{"name": "d", "input_schema": {}, "defer_loading": true}],
                      "tool_choice": {"type": "any"})"),
             "needs 'tools' that are loaded", "tool_choice.type");
  expect_400(with(R"("tools": [{"name": "d", "input_schema": {}, "defer_loading": 1}])"),
             "'tools[0].defer_loading' must be a boolean", "tools[0].defer_loading");
  expect_400(with(R"("tools": [{"name": "d", "input_schema": {}, "defer_loading": true},
                               {"name": "d", "input_schema": {}}])"),
             "'tools[1].name' 'd' is used by an earlier tool", "tools[1].name");
  // All deferred: no tools at all.
  r = parse(with(R"("tools": [{"name": "d", "input_schema": {}, "defer_loading": true}])"));
  EXPECT_TRUE(r.tools.empty());
}

TEST(AnthropicParse, ToolChoice) {
  const std::string tools =
      R"("tools": [{"name": "f", "input_schema": {}}, {"name": "g", "input_schema": {}}], )";
  EXPECT_EQ(parse(with(tools + R"("tool_choice": {"type": "auto"})")).tool_choice, "auto");
  EXPECT_EQ(parse(with(tools + R"("tool_choice": {"type": "none"})")).tool_choice, "none");
  EXPECT_EQ(parse(with(R"("tool_choice": {"type": "none"})")).tool_choice, "none");
  AnthropicRequest r =
      parse(with(tools + R"("tool_choice": {"type": "any", "disable_parallel_tool_use": true})"));
  EXPECT_EQ(r.tool_choice, "required");
  EXPECT_EQ(r.parallel_tool_calls, false);
  r = parse(with(tools + R"("tool_choice": {"type": "tool", "name": "g"})"));
  EXPECT_EQ(r.tool_choice, json::parse(R"({"type": "function", "function": {"name": "g"}})"));
  EXPECT_FALSE(r.parallel_tool_calls.has_value());
  r = parse(with(tools + R"("tool_choice": {"type": "tool", "name": "g", "disable_parallel_tool_use": false})"));
  EXPECT_EQ(r.parallel_tool_calls, true);
  expect_400(with(tools + R"("tool_choice": {"type": "tool", "name": "h"})"),
             "'tool_choice.name' 'h' is not one of", "tool_choice.name");
  expect_400(with(tools + R"("tool_choice": {"type": "tool"})"), "'tool_choice.name' is required",
             "tool_choice.name");
  expect_400(with(R"("tool_choice": {"type": "any"})"), "'tool_choice.type' 'any' needs 'tools'",
             "tool_choice.type");
  expect_400(with(tools + R"("tool_choice": {"type": "required"})"),
             "must be one of auto, any, tool, none", "tool_choice.type");
  expect_400(with(tools + R"("tool_choice": "auto")"), "'tool_choice' must be an object",
             "tool_choice");
  expect_400(with(tools + R"("tool_choice": {"type": "auto", "disable_parallel_tool_use": 1})"),
             "'tool_choice.disable_parallel_tool_use' must be a boolean",
             "tool_choice.disable_parallel_tool_use");
}

TEST(AnthropicParse, SamplingAndStopSequences) {
  const AnthropicRequest r = parse(with(
      R"("temperature": 0.25, "top_p": 0.9, "top_k": 40, "stop_sequences": ["END", "\n\nHuman:"],
                    "stream": true)"));
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 0.9f);
  EXPECT_EQ(r.sampler.top_k, 40);
  EXPECT_EQ(r.stop_sequences, (std::vector<std::string>{"END", "\n\nHuman:"}));
  EXPECT_TRUE(r.stream);
  expect_400(with(R"("temperature": 1.5)"), "'temperature' must be between 0 and 1, got 1.5",
             "temperature");
  expect_400(with(R"("top_p": 0)"), "'top_p' must be > 0 and <= 1, got 0", "top_p");
  expect_400(with(R"("top_k": -1)"), "'top_k' must be between 0 and", "top_k");
  expect_400(with(R"("top_k": "5")"), "'top_k' must be an integer, got string", "top_k");
  expect_400(with(R"("stop_sequences": "END")"), "'stop_sequences' must be an array of strings",
             "stop_sequences");
  expect_400(with(R"("stop_sequences": ["a", 3])"), "'stop_sequences[1]' must be a string",
             "stop_sequences[1]");
  expect_400(with(R"("stop_sequences": ["a", ""])"), "'stop_sequences[1]' must not be empty",
             "stop_sequences[1]");
  expect_400(with(R"("stream": "yes")"), "'stream' must be a boolean", "stream");
  expect_400(with(R"("model": 5)"), "'model' must be a string", "model");
}

TEST(AnthropicParse, ThinkingMapsToEnableThinking) {
  AnthropicRequest r = parse(with(R"("thinking": {"type": "enabled", "budget_tokens": 2048})"));
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", true}}));
  EXPECT_EQ(r.thinking_budget, 2048);
  EXPECT_EQ(anthropic_template_extra(r), json({{"enable_thinking", true}}));
  r = parse(with(R"("thinking": {"type": "adaptive"}, "output_config": {"effort": "high"})"));
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", true}}));
  EXPECT_FALSE(r.thinking_budget);
  r = parse(with(R"("thinking": {"type": "disabled"})"));
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", false}}));
  // No thinking field: no thinking (Anthropic's default), even where the template thinks.
  r = parse(R"({"max_tokens": 16, )" + kUser + "}");
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", false}}));
  EXPECT_FALSE(r.thinking_budget);
  // count_tokens renders the same prompt, so it reads thinking too.
  r = parse("{" + kUser + R"(, "thinking": {"type": "disabled"}})",
            AnthropicEndpoint::kCountTokens);
  EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", false}}));
  expect_400(with(R"("thinking": {"type": "enabled"})"), "'thinking.budget_tokens' is required",
             "thinking.budget_tokens");
  expect_400(with(R"("thinking": {"type": "enabled", "budget_tokens": 0})"),
             "'thinking.budget_tokens' must be between 1", "thinking.budget_tokens");
  expect_400(with(R"("thinking": {"type": "on"})"),
             "'thinking.type' must be one of enabled, adaptive, disabled", "thinking.type");
  expect_400(with(R"("thinking": true)"), "'thinking' must be an object", "thinking");
}

TEST(AnthropicParse, IgnoredFieldsAndOutputFormat) {
  const AnthropicRequest r =
      parse(with(R"("metadata": {"user_id": "u"}, "context_management": {"edits": []},
      "cache_control": {"type": "ephemeral"}, "service_tier": "auto", "some_future_field": [1, 2],
      "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}})"));
  EXPECT_EQ(
      r.response_format,
      json::parse(
          R"({"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"}}})"));
  EXPECT_EQ(parse(with(R"("output_format": {"type": "json_schema", "schema": {}})"))
                .response_format["type"],
            "json_schema");
  EXPECT_TRUE(parse(with(R"("output_config": {"effort": "medium"}, "thinking": null)"))
                  .response_format.is_null());
  expect_400(with(R"("output_config": {"format": {"type": "text"}})"),
             "'output_config.format.type' must be 'json_schema', got 'text'",
             "output_config.format.type");
  expect_400(with(R"("output_config": {"format": {"type": "json_schema"}})"),
             "'output_config.format.schema' is required", "output_config.format.schema");
  expect_400(with(R"("output_config": 1)"), "'output_config' must be an object", "output_config");
}

TEST(AnthropicParse, MalformedBodies) {
  expect_400("", "the request body is empty", "");
  expect_400(R"({"max_tokens": 5,)", "the request body is not valid JSON (byte ", "");
  expect_400("[1]", "the request body must be a JSON object, got array", "");
  std::string deep = with(R"("metadata": )" + std::string(hearth::tmpl::kMaxJsonDepth + 2, '[') +
                          std::string(hearth::tmpl::kMaxJsonDepth + 2, ']'));
  expect_400(deep, "nests arrays/objects deeper than", "");
}

// ---------------------------------------------------------------------------
// Errors

TEST(AnthropicErrors, TypesFollowTheStatus) {
  struct Case {
    ApiError in;
    int status;
    const char* type;
  };
  const Case cases[] = {
      {invalid_request("bad"), 400, "invalid_request_error"},
      {authentication_failed("who"), 401, "authentication_error"},
      {ApiError{403, "no", "x", "", ""}, 403, "permission_error"},
      {model_not_found("m"), 404, "not_found_error"},
      {payload_too_large(10, 5), 413, "request_too_large"},
      {ApiError{429, "slow down", "rate_limit_error", "", ""}, 429, "rate_limit_error"},
      {server_overloaded("full"), 529, "overloaded_error"},
      {ApiError{503, "shutting down", "server_error", "", ""}, 529, "overloaded_error"},
      // A draining replica keeps 503, which a load balancer retries on another replica.
      {ApiError{503, "draining", "server_error", "", "server_draining"}, 503, "overloaded_error"},
      {server_error("boom"), 500, "api_error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.in.message);
    const ApiError a = anthropic_error(c.in);
    EXPECT_EQ(a.status, c.status);
    EXPECT_EQ(a.type, c.type);
    const json body = json::parse(anthropic_error_body(c.in));
    EXPECT_EQ(body,
              json({{"type", "error"}, {"error", {{"type", c.type}, {"message", c.in.message}}}}));
  }
  // Bad UTF-8 in a message never breaks the JSON.
  EXPECT_NO_THROW(json::parse(anthropic_error_body(invalid_request("bad \xff byte"))));
}

TEST(AnthropicErrors, PromptTooLongReadsAsClientsExpect) {
  const ApiError e = prompt_too_long(5000, 4095);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "prompt is too long: 5000 tokens > 4095 maximum");
  EXPECT_EQ(json::parse(anthropic_error_body(e))["error"]["type"], "invalid_request_error");
}

// ---------------------------------------------------------------------------
// Responses

TEST(AnthropicFormat, StopReasonsAndUsage) {
  EXPECT_EQ(anthropic_stop_reason(final_of("stop"), false), "end_turn");
  EXPECT_EQ(anthropic_stop_reason(final_of("stop"), true), "tool_use");
  EXPECT_EQ(anthropic_stop_reason(final_of("length"), false), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(final_of("length"), true), "max_tokens");
  Final s = final_of("stop");
  s.stop_sequence = "END";
  EXPECT_EQ(anthropic_stop_reason(s, false), "stop_sequence");
  EXPECT_FALSE(anthropic_stop_reason(final_of("cancelled"), false));
  EXPECT_FALSE(anthropic_stop_reason(final_of("error"), false));
  EXPECT_EQ(
      anthropic_usage(final_of("stop", 100, 64, 7)),
      json::parse(
          R"({"input_tokens": 36, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 64,
                            "output_tokens": 7})"));
  EXPECT_EQ(anthropic_tool_id("call_abc"), "toolu_abc");
  EXPECT_EQ(anthropic_tool_id("toolu_x"), "toolu_x");
}

TEST(AnthropicFormat, WholeMessageKeepsBlockOrder) {
  const std::vector<OutputEvent> events = {ev(Kind::kReasoning, "Let me "),
                                           ev(Kind::kReasoning, "think."),
                                           ev(Kind::kContent, ""),
                                           ev(Kind::kContent, "I'll check"),
                                           ev(Kind::kContent, " the weather."),
                                           tool_begin(0, "call_A1", "get_weather"),
                                           ev(Kind::kToolCallArgs, "{\"city\": ", 0),
                                           ev(Kind::kToolCallArgs, "\"Paris\"}", 0),
                                           ev(Kind::kToolCallEnd, "", 0),
                                           tool_begin(1, "call_B2", "noop"),
                                           ev(Kind::kToolCallEnd, "", 1)};
  const json m =
      json::parse(anthropic_message({"msg_1", "claude-x"}, events, final_of("stop", 20, 8, 30)));
  const json want =
      json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
    "content": [
      {"type": "thinking", "thinking": "Let me think.", "signature": "hearth-local-unsigned"},
      {"type": "text", "text": "I'll check the weather."},
      {"type": "tool_use", "id": "toolu_A1", "name": "get_weather", "input": {"city": "Paris"}},
      {"type": "tool_use", "id": "toolu_B2", "name": "noop", "input": {}}],
    "stop_reason": "tool_use", "stop_sequence": null,
    "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 8,
              "output_tokens": 30}})");
  EXPECT_EQ(m, want) << m.dump(1);
}

TEST(AnthropicFormat, WholeMessageStopSequenceEmptyAndBadBytes) {
  Final f = final_of("stop");
  f.stop_sequence = "END";
  json m = json::parse(anthropic_message({"msg_2", "m"}, {ev(Kind::kContent, "caf\xc3")}, f));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  EXPECT_EQ(m["content"][0]["text"], "caf\xef\xbf\xbd");
  m = json::parse(anthropic_message({"msg_3", "m"}, {}, final_of("length")));
  EXPECT_EQ(m["content"], json::array());
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["stop_sequence"], nullptr);
  // Arguments that are not a JSON object are kept as text, never dropped.
  m = json::parse(anthropic_message(
      {"msg_4", "m"}, {tool_begin(0, "call_x", "f"), ev(Kind::kToolCallArgs, "{not json", 0)},
      final_of("length")));
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "{not json"}])"));
  // A call cut by max_tokens is not a call: dropped, the complete one stays.
  OutputEvent cut = ev(Kind::kToolCallCut, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"", 1);
  cut.name = "f";
  m = json::parse(anthropic_message({"msg_5", "m"},
                                    {tool_begin(0, "call_x", "f"), ev(Kind::kToolCallArgs, "{\"a\":1}", 0),
                                     ev(Kind::kToolCallEnd, "", 0), cut},
                                    final_of("length")));
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}}])"));
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  m = json::parse(anthropic_message({"msg_6", "m"}, {cut}, final_of("length")));
  EXPECT_EQ(m["content"], json::array());
  // Arguments split inside a UTF-8 character are repaired, not turned into text.
  m = json::parse(anthropic_message({"msg_7", "m"},
                                    {tool_begin(0, "call_y", "f"), ev(Kind::kToolCallArgs, "{\"c\":\"Je\xec\xa0\"}", 0),
                                     ev(Kind::kToolCallEnd, "", 0)},
                                    final_of("stop")));
  EXPECT_EQ(m["content"][0]["type"], "tool_use");
  EXPECT_EQ(m["content"][0]["input"]["c"], "Je\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(m["stop_reason"], "tool_use");
}

TEST(AnthropicFormat, StreamEventOrder) {
  AnthropicStream s({"msg_s", "claude-x"});
  std::string text = s.start(20, 16);
  text += anthropic_ping();
  text += s.events({ev(Kind::kReasoning, "hmm")});
  text += s.events({ev(Kind::kReasoning, " ok"), ev(Kind::kContent, "Hi"), ev(Kind::kContent, "")});
  text += s.events({ev(Kind::kContent, " there"), tool_begin(0, "call_Z", "f"),
                    ev(Kind::kToolCallArgs, "{\"a\":", 0)});
  text += s.events({ev(Kind::kToolCallArgs, "1}", 0), ev(Kind::kToolCallEnd, "", 0)});
  EXPECT_TRUE(s.made_tool_call());
  text += s.finish(final_of("stop", 20, 16, 9));
  const auto events = split_events(text);
  const std::vector<std::string> want = {"message_start",
                                         "ping",
                                         "content_block_start",
                                         "content_block_delta:thinking_delta",
                                         "content_block_delta:thinking_delta",
                                         "content_block_delta:signature_delta",
                                         "content_block_stop",
                                         "content_block_start",
                                         "content_block_delta:text_delta",
                                         "content_block_delta:text_delta",
                                         "content_block_stop",
                                         "content_block_start",
                                         "content_block_delta:input_json_delta",
                                         "content_block_delta:input_json_delta",
                                         "content_block_stop",
                                         "message_delta",
                                         "message_stop"};
  ASSERT_EQ(names(events), want);
  const json start = events[0].data["message"];
  EXPECT_EQ(start["id"], "msg_s");
  EXPECT_EQ(start["model"], "claude-x");
  EXPECT_EQ(start["content"], json::array());
  EXPECT_EQ(start["stop_reason"], nullptr);
  // The prefix-cache split as message_delta has it.
  EXPECT_EQ(start["usage"]["input_tokens"], 4);
  EXPECT_EQ(start["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(events[2].data["content_block"],
            json::parse(R"({"type": "thinking", "thinking": "", "signature": ""})"));
  EXPECT_EQ(events[2].data["index"], 0);
  EXPECT_EQ(events[5].data["delta"]["signature"], "hearth-local-unsigned");
  EXPECT_EQ(events[7].data["content_block"], json::parse(R"({"type": "text", "text": ""})"));
  EXPECT_EQ(events[7].data["index"], 1);
  EXPECT_EQ(events[9].data["delta"]["text"], " there");
  EXPECT_EQ(events[11].data["content_block"],
            json::parse(R"({"type": "tool_use", "id": "toolu_Z", "name": "f", "input": {}})"));
  EXPECT_EQ(events[11].data["index"], 2);
  EXPECT_EQ(events[12].data["delta"],
            json::parse(R"({"type": "input_json_delta", "partial_json": "{\"a\":"})"));
  EXPECT_EQ(events[14].data["index"], 2);
  EXPECT_EQ(events[15].data["delta"],
            json::parse(R"({"stop_reason": "tool_use", "stop_sequence": null})"));
  EXPECT_EQ(events[15].data["usage"]["input_tokens"], 4);
  EXPECT_EQ(events[15].data["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(events[15].data["usage"]["output_tokens"], 9);
}

TEST(AnthropicFormat, StreamOpenTextBlockClosesAtFinishAndFailuresAreErrorEvents) {
  AnthropicStream s({"msg_t", "m"});
  std::string text = s.start(3, 0) + s.events({ev(Kind::kContent, "x")});
  Final f = final_of("stop");
  f.stop_sequence = "\n\n";
  text += s.finish(f);
  auto events = split_events(text);
  ASSERT_EQ(names(events),
            (std::vector<std::string>{"message_start", "content_block_start",
                                      "content_block_delta:text_delta", "content_block_stop",
                                      "message_delta", "message_stop"}));
  EXPECT_EQ(events[4].data["delta"],
            json::parse(R"({"stop_reason": "stop_sequence", "stop_sequence": "\n\n"})"));

  AnthropicStream failed({"msg_u", "m"});
  Final c = final_of("cancelled");
  c.error = "the engine failed";
  events = split_events(failed.events({ev(Kind::kContent, "x")}) + failed.finish(c));
  ASSERT_EQ(events.back().name, "error");
  EXPECT_EQ(events.back().data["error"],
            json::parse(R"({"type": "api_error", "message": "the engine failed"})"));
}

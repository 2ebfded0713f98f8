// The Responses API layer of `hearth serve` without a model: request parsing into
// conversation items and chat messages (every 400 names its field), the Response object and
// its SSE events formatted from output events, and the bounded response store.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/responses_protocol.h"
#include "server/responses_routes.h"
#include "server/responses_store.h"

using namespace hearth::server;
using hearth::engine::Final;
using json = nlohmann::ordered_json;
using Kind = OutputEvent::Kind;

namespace {

ResponsesRequest parse(const std::string& body) { return parse_responses_request(body); }

ApiError error_of(const std::string& body) {
  try {
    parse_responses_request(body);
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
  EXPECT_NE(e.message.find(want), std::string::npos) << e.message;
  EXPECT_EQ(e.param, param);
}

// A body with input "hi" plus `extra` fields.
std::string with(const std::string& extra) { return R"({"input": "hi", )" + extra + "}"; }

json messages_of(const std::string& body) {
  const ResponsesRequest r = parse(body);
  return conversation_messages(r.instructions, r.items);
}

OutputEvent ev(Kind kind, std::string text, int index = 0) {
  OutputEvent e;
  e.kind = kind;
  e.text = std::move(text);
  e.index = index;
  return e;
}

OutputEvent call_begin(int index, std::string id, std::string name) {
  OutputEvent e = ev(Kind::kToolCallBegin, "", index);
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}

Final final_of(const std::string& reason, int prompt = 10, int cached = 4, int completion = 3) {
  Final f;
  f.finish_reason = reason;
  f.prompt_tokens = prompt;
  f.cached_tokens = cached;
  f.completion_tokens = completion;
  return f;
}

ResponsesContext context(const std::string& body = R"({"input": "hi"})") {
  return ResponsesContext{"resp_test", 1700000000, "hearth-model", response_echo(parse(body))};
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
      ADD_FAILURE() << "unterminated event at " << pos;
      break;
    }
    const std::string one = text.substr(pos, end - pos);
    const size_t nl = one.find('\n');
    if (one.rfind("event: ", 0) != 0 || nl == std::string::npos || one.compare(nl + 1, 6, "data: ") != 0) {
      ADD_FAILURE() << "bad event framing: " << one;
      break;
    }
    SseEvent e{one.substr(7, nl - 7), json::parse(one.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.name) << one;
    out.push_back(std::move(e));
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> names(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.name);
  return out;
}

// Runs a whole stream: start, the events in `batches`, finish.
std::vector<SseEvent> run_stream(const std::vector<std::vector<OutputEvent>>& batches, const Final& f,
                                 ResponsesStream* keep = nullptr) {
  ResponsesStream local(context(), true);
  ResponsesStream& s = keep ? *keep : local;
  std::string text = s.start();
  for (const auto& b : batches) text += s.events(b);
  text += s.finish(f, 0);
  return split_events(text);
}

}  // namespace

// ---------------------------------------------------------------------------
// Parsing: input items -> chat messages

TEST(ResponsesParse, StringInputIsOneUserMessage) {
  const ResponsesRequest r = parse(R"({"model": "gpt-x", "input": "Hello"})");
  EXPECT_EQ(r.model, "gpt-x");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.store);  // stateless unless asked
  EXPECT_FALSE(r.parallel_tool_calls.has_value());
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_EQ(conversation_messages(r.instructions, r.items), json::parse(R"([{"role": "user", "content": "Hello"}])"));
}

TEST(ResponsesParse, InstructionsComeFirstAndPartsJoin) {
  const json m = messages_of(R"({"instructions": "Be brief.", "input": [
      {"role": "developer", "content": "dev"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]},
      {"role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
      {"role": "system", "content": "late system"}]})");
  EXPECT_EQ(m, json::parse(R"([{"role": "system", "content": "Be brief."},
      {"role": "developer", "content": "dev"}, {"role": "user", "content": "a\nb"},
      {"role": "assistant", "content": "ok"}, {"role": "system", "content": "late system"}])"));
}

TEST(ResponsesParse, FunctionCallsGroupIntoOneAssistantTurn) {
  const json m = messages_of(R"({"input": [
      {"role": "user", "content": "weather?"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_b", "name": "get", "arguments": "not json"},
      {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rain"}]},
      {"type": "function_call", "call_id": "call_c", "name": "get", "arguments": "{}"}]})");
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[1], json::parse(R"({"role": "assistant", "content": "Checking.", "reasoning_content": "think",
      "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get", "arguments": {"city": "Paris"}}},
        {"id": "call_b", "type": "function", "function": {"name": "get", "arguments": "not json"}}]})"));
  EXPECT_EQ(m[2], json::parse(R"({"role": "tool", "tool_call_id": "call_a", "content": "sunny"})"));
  EXPECT_EQ(m[3], json::parse(R"({"role": "tool", "tool_call_id": "call_b", "content": "rain"})"));
  // A call after tool output starts a new assistant turn.
  EXPECT_EQ(m[4], json::parse(R"({"role": "assistant", "content": "",
      "tool_calls": [{"id": "call_c", "type": "function", "function": {"name": "get", "arguments": {}}}]})"));
}

TEST(ResponsesParse, ReasoningItemsNeverFail) {
  // Summary text when there is no content; odd shapes are ignored; reasoning with no
  // assistant turn after it is dropped.
  const json m = messages_of(R"({"input": [
      {"role": "user", "content": "q"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}], "encrypted_content": "xyz"},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "r"},
      {"type": "reasoning", "summary": 5, "content": [7, {"nope": 1}]},
      {"role": "user", "content": "again"}]})");
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[1]["reasoning_content"], "sum");
  EXPECT_EQ(m[3], json::parse(R"({"role": "user", "content": "again"})"));
}

TEST(ResponsesParse, FunctionToolsTakeTheChatShape) {
  const ResponsesRequest r = parse(with(R"("tools": [{"type": "function", "name": "get_weather",
      "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
      "strict": true}], "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false)"));
  EXPECT_EQ(r.tools, json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])"));
  EXPECT_EQ(r.tools_echo[0]["name"], "get_weather");
  EXPECT_EQ(r.tools_echo[0]["strict"], true);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  EXPECT_EQ(r.tool_choice_echo, json::parse(R"({"type": "function", "name": "get_weather"})"));
  EXPECT_EQ(r.parallel_tool_calls, false);
  const std::string tool = R"("tools": [{"type": "function", "name": "f"}])";
  EXPECT_EQ(parse(with(tool + R"(, "tool_choice": "required")")).tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_EQ(parse(with(tool + R"(, "tool_choice": "none")")).tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(parse(with(R"("tools": [])")).tools.is_null());
}

TEST(ResponsesParse, SamplingFormatAndReasoning) {
  const ResponsesRequest r = parse(with(R"("max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "stream": true, "store": true, "previous_response_id": "resp_1", "metadata": {"k": "v"}, "user": "u",
      "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}},
      "reasoning": {"effort": "low", "summary": "auto"}, "unknown_field": [1, 2])"));
  EXPECT_EQ(r.max_output_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 0.9f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.previous_response_id, "resp_1");
  EXPECT_EQ(r.metadata, json::parse(R"({"k": "v"})"));
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_EQ(r.constraint->kind, hearth::grammar::ConstraintKind::kJsonSchema);
  EXPECT_EQ(r.text_echo["format"]["name"], "x");
  EXPECT_EQ(r.enable_thinking, true);
  EXPECT_EQ(r.reasoning_budget, kReasoningBudgetLow);
  EXPECT_EQ(r.reasoning_echo, json::parse(R"({"effort": "low", "summary": "auto"})"));

  EXPECT_EQ(parse(with(R"("reasoning": {"effort": "none"})")).enable_thinking, false);
  EXPECT_EQ(parse(with(R"("reasoning": {"effort": "minimal"})")).enable_thinking, false);
  EXPECT_EQ(parse(with(R"("reasoning": {"effort": "medium"})")).reasoning_budget, kReasoningBudgetMedium);
  const ResponsesRequest high = parse(with(R"("reasoning": {"effort": "high"})"));
  EXPECT_EQ(high.enable_thinking, true);
  EXPECT_EQ(high.reasoning_budget, -1);
  EXPECT_FALSE(parse(with(R"("reasoning": {})")).enable_thinking.has_value());
  EXPECT_EQ(parse(with(R"("text": {"format": {"type": "json_object"}})")).constraint->kind,
            hearth::grammar::ConstraintKind::kJsonObject);
  EXPECT_FALSE(parse(with(R"("text": {"format": {"type": "text"}, "verbosity": "low"})")).constraint.has_value());
  // No input, but a previous response: the new turn may be empty.
  EXPECT_TRUE(parse(R"({"previous_response_id": "resp_1"})").items.empty());
}

TEST(ResponsesParse, EveryErrorNamesItsField) {
  expect_400("", "empty", "");
  expect_400("[1]", "must be a JSON object", "");
  expect_400("{}", "'input' is required", "input");
  expect_400(R"({"input": []})", "at least one item", "input");
  expect_400(R"({"input": 5})", "'input' must be a string or an array", "input");
  expect_400(R"({"input": [7]})", "'input[0]' must be an input item", "input[0]");
  expect_400(R"({"input": [{"content": "x"}]})", "must have a 'type'", "input[0].type");
  expect_400(R"({"input": [{"role": "robot", "content": "x"}]})", "'input[0].role' must be one of", "input[0].role");
  expect_400(R"({"input": [{"role": "user"}]})", "'input[0].content' is required", "input[0].content");
  expect_400(R"({"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "x"}]}]})",
             "images are allowed in user input and function call outputs only", "input[0].content[0].type");
  expect_400(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
             "'input[0].content[0].image_url' is required", "input[0].content[0].image_url");
  expect_400(R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]})",
             "files are not supported", "input[0].content[0].type");
  expect_400(R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})",
             "'input[0].content[0].text' is required", "input[0].content[0].text");
  expect_400(R"({"input": [{"role": "user", "content": "a"}, {"type": "function_call", "name": "f", "arguments": "{}"}]})",
             "'input[1].call_id' is required", "input[1].call_id");
  expect_400(R"({"input": [{"type": "function_call", "call_id": "c", "name": "", "arguments": "{}"}]})",
             "must not be empty", "input[0].name");
  expect_400(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": 3}]})",
             "'input[0].arguments' must be a string", "input[0].arguments");
  expect_400(R"({"input": [{"type": "function_call_output", "call_id": 1, "output": "x"}]})",
             "'input[0].call_id' must be a string", "input[0].call_id");
  expect_400(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "'input[0].output' is required",
             "input[0].output");
  expect_400(R"({"input": [{"type": "item_reference", "id": "x"}]})", "item_reference", "input[0].type");
  expect_400(R"({"input": [{"type": "web_search_call"}]})", "'web_search_call' is not supported", "input[0].type");
  expect_400(with(R"("tools": [{"type": "function", "name": "f"}, {"type": "web_search"}])"),
             "'tools[1].type' 'web_search' is not supported", "tools[1].type");
  expect_400(with(R"("tools": [{"type": "function"}])"), "'tools[0].name' is required", "tools[0].name");
  expect_400(with(R"("tools": [{"type": "function", "name": "f", "parameters": []}])"), "a JSON schema",
             "tools[0].parameters");
  expect_400(with(R"("tools": {})"), "'tools' must be an array", "tools");
  expect_400(with(R"("tool_choice": "required")"), "needs a non-empty 'tools'", "tool_choice");
  expect_400(with(R"("tool_choice": "sometimes")"), "'tool_choice' must be", "tool_choice");
  expect_400(with(R"("tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"})"),
             "not in 'tools'", "tool_choice.name");
  expect_400(with(R"("tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"})"),
             "'file_search' is not supported", "tool_choice.type");
  expect_400(with(R"("parallel_tool_calls": "yes")"), "must be a boolean", "parallel_tool_calls");
  expect_400(with(R"("max_output_tokens": 0)"), "'max_output_tokens' must be >= 1", "max_output_tokens");
  expect_400(with(R"("max_output_tokens": 1.5)"), "must be an integer", "max_output_tokens");
  expect_400(with(R"("temperature": 3)"), "'temperature' must be between 0 and 2", "temperature");
  expect_400(with(R"("top_p": 0)"), "'top_p' must be > 0", "top_p");
  expect_400(with(R"("text": {"format": {"type": "yaml"}})"), "'text.format.type' must be one of", "text.format.type");
  expect_400(with(R"("text": {"format": {"type": "json_schema", "schema": 5}})"), "'text.format.schema' must be a JSON schema",
             "text.format.schema");
  expect_400(with(R"("text": {"format": {"type": "json_schema", "strict": "yes"}})"), "'text.format.strict'",
             "text.format.strict");
  expect_400(with(R"("text": "json")"), "'text' must be an object", "text");
  expect_400(with(R"("reasoning": {"effort": "extreme"})"), "'reasoning.effort' must be one of", "reasoning.effort");
  expect_400(with(R"("stream": 1)"), "'stream' must be a boolean", "stream");
  expect_400(with(R"("store": "no")"), "'store' must be a boolean", "store");
  expect_400(with(R"("metadata": {"k": 1})"), "'metadata.k' must be a string", "metadata.k");
  expect_400(with(R"("previous_response_id": "")"), "must not be empty", "previous_response_id");
  expect_400(with(R"("instructions": ["x"])"), "'instructions' must be a string", "instructions");
  expect_400(with(R"("background": true)"), "'background'", "background");
  expect_400(with(R"("conversation": "conv_1")"), "'conversation' is not supported", "conversation");
}

// ---------------------------------------------------------------------------
// Formatting

TEST(ResponsesFormat, CompletedResponseWithReasoningMessageAndCall) {
  ResponsesStream s(context(R"({"input": "hi", "metadata": {"a": "b"}, "max_output_tokens": 50,
      "tools": [{"type": "function", "name": "get"}], "tool_choice": "auto"})"), false);
  EXPECT_EQ(s.start(), "");  // no SSE text when not streaming
  s.events({ev(Kind::kReasoning, "let me "), ev(Kind::kReasoning, "think"), ev(Kind::kContent, "\n\n"),
            ev(Kind::kContent, "Sure."), call_begin(0, "call_abc", "get"), ev(Kind::kToolCallArgs, "{\"a\":", 0),
            ev(Kind::kToolCallArgs, "1}", 0), ev(Kind::kToolCallEnd, "", 0)});
  s.finish(final_of("stop", 10, 4, 7), 3);
  const json& r = s.response();
  EXPECT_EQ(r["id"], "resp_test");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "hearth-model");
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_TRUE(r["incomplete_details"].is_null());
  EXPECT_EQ(r["metadata"], json::parse(R"({"a": "b"})"));
  EXPECT_EQ(r["max_output_tokens"], 50);
  EXPECT_EQ(r["tool_choice"], "auto");
  EXPECT_EQ(r["tools"][0]["name"], "get");
  EXPECT_EQ(r["parallel_tool_calls"], true);
  EXPECT_EQ(r["store"], false);
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4,
      "cache_write_tokens": 0}, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3},
      "total_tokens": 17})"));
  const json& out = r["output"];
  ASSERT_EQ(out.size(), 3u) << out.dump();
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(out[0]["summary"], json::array());
  EXPECT_EQ(out[0]["content"], json::parse(R"([{"type": "reasoning_text", "text": "let me think"}])"));
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_EQ(out[1]["role"], "assistant");
  EXPECT_EQ(out[1]["content"],
            json::parse(R"([{"type": "output_text", "text": "\n\nSure.", "annotations": []}])"));
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(out[2]["call_id"], "call_abc");
  EXPECT_EQ(out[2]["name"], "get");
  EXPECT_EQ(out[2]["arguments"], "{\"a\":1}");
  EXPECT_EQ(out[2]["status"], "completed");
  EXPECT_EQ(s.reasoning_text(), "let me think");
  // The output, as the next turn's items.
  EXPECT_EQ(canonical_items(out), json::parse(R"([{"type": "reasoning", "text": "let me think"},
      {"type": "message", "role": "assistant", "content": "\n\nSure."},
      {"type": "function_call", "call_id": "call_abc", "name": "get", "arguments": "{\"a\":1}"}])"));
}

TEST(ResponsesFormat, WhitespaceAloneOpensNoMessage) {
  ResponsesStream s(context(), false);
  s.start();
  s.events({ev(Kind::kReasoning, "r"), ev(Kind::kContent, "\n\n"), call_begin(0, "call_1", "f"),
            ev(Kind::kToolCallArgs, "{}"), ev(Kind::kToolCallEnd, ""), ev(Kind::kContent, "\n")});
  s.finish(final_of("stop"), 0);
  const json& out = s.response()["output"];
  ASSERT_EQ(out.size(), 2u) << out.dump();
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[1]["type"], "function_call");
}

TEST(ResponsesFormat, LengthIsIncomplete) {
  ResponsesStream s(context(), false);
  s.start();
  s.events({ev(Kind::kContent, "{\"answer\": ")});
  s.finish(final_of("length", 10, 0, 3), 0);
  const json& r = s.response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], json::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "{\"answer\": ");
}

TEST(ResponsesFormat, CutCallIsNeverAnItem) {
  // Generation ended inside a second call: the first stays, the cut one is not in the
  // output (streamed or not), and the response is incomplete.
  OutputEvent cut = ev(Kind::kToolCallCut, "<tool_call>\n{\"name\": \"get\", \"argu", 1);
  cut.name = "get";
  for (bool sse : {false, true}) {
    ResponsesStream s(context(), sse);
    std::string text = s.start();
    text += s.events({call_begin(0, "call_1", "get"), ev(Kind::kToolCallArgs, "{}", 0), ev(Kind::kToolCallEnd, "", 0), cut});
    text += s.finish(final_of("length"), 0);
    const json& r = s.response();
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    ASSERT_EQ(r["output"].size(), 1u);
    EXPECT_EQ(r["output"][0]["call_id"], "call_1");
    EXPECT_EQ(r["output"][0]["status"], "completed");
    EXPECT_EQ(s.cut_calls(), 1);
    if (sse) {
      int added = 0;
      for (const auto& e : split_events(text)) added += e.name == "response.output_item.added";
      EXPECT_EQ(added, 1);
    }
  }
  // A call cut with no complete call before it: no output at all.
  ResponsesStream s(context(), false);
  s.start();
  s.events({ev(Kind::kContent, "Let me check."), cut});
  s.finish(final_of("length"), 0);
  ASSERT_EQ(s.response()["output"].size(), 1u);
  EXPECT_EQ(s.response()["output"][0]["type"], "message");
}

TEST(ResponsesFormat, ParallelToolCallsEcho) {
  const std::string tool = R"("tools": [{"type": "function", "name": "f"}])";
  EXPECT_EQ(response_echo(parse(with(tool)))["parallel_tool_calls"], true);
  // A forced choice is one call unless the client asked for parallel calls.
  EXPECT_EQ(response_echo(parse(with(tool + R"(, "tool_choice": "required")")))["parallel_tool_calls"], false);
  EXPECT_EQ(response_echo(parse(with(tool + R"(, "tool_choice": "required", "parallel_tool_calls": true)")))
                ["parallel_tool_calls"],
            true);
  EXPECT_EQ(response_echo(parse(with(tool + R"(, "parallel_tool_calls": false)")))["parallel_tool_calls"], false);
}

TEST(ResponsesFormat, NoOutputAtAll) {
  ResponsesStream s(context(), false);
  s.start();
  s.finish(final_of("stop", 5, 0, 1), 0);
  EXPECT_EQ(s.response()["status"], "completed");
  EXPECT_EQ(s.response()["output"], json::array());
}

TEST(ResponsesFormat, FailedCarriesTheError) {
  ResponsesStream s(context(), true);
  s.start();
  s.events({ev(Kind::kContent, "partial")});
  const auto events = split_events(s.failed(server_error("the engine stopped")));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "response.failed");
  const json& r = events.back().data["response"];
  EXPECT_EQ(r["status"], "failed");
  EXPECT_EQ(r["error"]["code"], "server_error");
  EXPECT_EQ(r["error"]["message"], "the engine stopped");
}

// ---------------------------------------------------------------------------
// Streaming

TEST(ResponsesStream, EventOrderIndicesAndSequenceNumbers) {
  ResponsesStream s(context(), true);
  const auto events = run_stream({{ev(Kind::kReasoning, "hm")},
                                  {ev(Kind::kReasoning, "m"), ev(Kind::kContent, "Hel")},
                                  {ev(Kind::kContent, "lo"), call_begin(0, "call_x", "f"), ev(Kind::kToolCallArgs, "{\"k\""),
                                   ev(Kind::kToolCallArgs, ":2}"), ev(Kind::kToolCallEnd, "")}},
                                 final_of("stop"), &s);
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      // reasoning, output_index 0
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      // message, output_index 1
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      // function call, output_index 2
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(names(events), want);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], i) << events[i].name;
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].data["response"]["output"], json::array());
  EXPECT_TRUE(events[0].data["response"]["usage"].is_null());

  // Every item event carries its output_index; item ids match the final items.
  const json& out = events.back().data["response"]["output"];
  ASSERT_EQ(out.size(), 3u);
  const std::vector<int> want_index = {-1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, -1};
  for (size_t i = 0; i < events.size(); ++i) {
    const json& d = events[i].data;
    if (want_index[i] < 0) {
      EXPECT_FALSE(d.contains("output_index")) << events[i].name;
      continue;
    }
    EXPECT_EQ(d["output_index"], want_index[i]) << i << " " << events[i].name;
    const json& item_id = d.contains("item") ? d["item"]["id"] : d["item_id"];
    EXPECT_EQ(item_id, out[want_index[i]]["id"]) << events[i].name;
    if (events[i].name.find("content_part") != std::string::npos || events[i].name.find("_text.") != std::string::npos) {
      EXPECT_EQ(d["content_index"], 0) << events[i].name;
    }
  }
  // Added items are in progress; done items match the final output.
  EXPECT_EQ(events[9].data["item"]["status"], "in_progress");
  EXPECT_EQ(events[9].data["item"]["content"], json::array());
  EXPECT_EQ(events[16].data["item"]["arguments"], "");
  EXPECT_EQ(events[8].data["item"], out[0]);
  EXPECT_EQ(events[15].data["item"], out[1]);
  EXPECT_EQ(events[20].data["item"], out[2]);
  // Deltas join to the done texts.
  EXPECT_EQ(events[4].data["delta"].get<std::string>() + events[5].data["delta"].get<std::string>(), "hmm");
  EXPECT_EQ(events[6].data["text"], "hmm");
  EXPECT_EQ(events[11].data["delta"].get<std::string>() + events[12].data["delta"].get<std::string>(), "Hello");
  EXPECT_EQ(events[13].data["text"], "Hello");
  EXPECT_EQ(events[14].data["part"], json::parse(R"({"type": "output_text", "text": "Hello", "annotations": []})"));
  EXPECT_EQ(events[19].data["arguments"], "{\"k\":2}");
  EXPECT_EQ(events[10].data["part"], json::parse(R"({"type": "output_text", "text": "", "annotations": []})"));
  EXPECT_EQ(events[3].data["part"], json::parse(R"({"type": "reasoning_text", "text": ""})"));
  EXPECT_EQ(events.back().data["response"], s.response());
}

TEST(ResponsesStream, IncompleteEndsWithResponseIncomplete) {
  const auto events = run_stream({{ev(Kind::kContent, "abc")}}, final_of("length"));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back().name, "response.incomplete");
  EXPECT_EQ(events.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(events[events.size() - 2].name, "response.output_item.done");
  EXPECT_EQ(events[events.size() - 2].data["item"]["status"], "incomplete");
}

TEST(ResponsesStream, TwoCallsAreTwoItems) {
  const auto events = run_stream({{call_begin(0, "call_1", "a"), ev(Kind::kToolCallArgs, "{}", 0), ev(Kind::kToolCallEnd, "", 0),
                                   call_begin(1, "call_2", "b"), ev(Kind::kToolCallArgs, "{\"x\":1}", 1),
                                   ev(Kind::kToolCallEnd, "", 1)}},
                                 final_of("stop"));
  const json& out = events.back().data["response"]["output"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["call_id"], "call_1");
  EXPECT_EQ(out[1]["call_id"], "call_2");
  EXPECT_EQ(out[1]["arguments"], "{\"x\":1}");
}

// ---------------------------------------------------------------------------
// The store

namespace {
StoredResponse entry(size_t response_bytes) {
  StoredResponse e;
  e.response = std::string(response_bytes, 'x');
  return e;
}
}  // namespace

TEST(ResponsesStore, EvictsTheLeastRecentlyUsedByCount) {
  ResponseStore store(3, 1 << 20);
  EXPECT_TRUE(store.put("a", entry(10)));
  EXPECT_TRUE(store.put("b", entry(10)));
  EXPECT_TRUE(store.put("c", entry(10)));
  ASSERT_NE(store.get("a"), nullptr);  // a is now the most recently used
  EXPECT_TRUE(store.put("d", entry(10)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.get("b"), nullptr);  // b went
  EXPECT_NE(store.get("a"), nullptr);
  EXPECT_NE(store.get("c"), nullptr);
  EXPECT_NE(store.get("d"), nullptr);
}

TEST(ResponsesStore, EvictsByBytes) {
  ResponseStore store(100, 1000);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(store.put(id, entry(300)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_TRUE(store.put("d", entry(300)));  // over 1000 bytes: a goes
  EXPECT_EQ(store.get("a"), nullptr);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_FALSE(store.put("huge", entry(2000)));  // larger than the whole bound: not kept
  EXPECT_EQ(store.get("huge"), nullptr);
  EXPECT_EQ(store.size(), 3u);
  // Replacing an id counts it once.
  EXPECT_TRUE(store.put("d", entry(10)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_TRUE(store.erase("d"));
  EXPECT_FALSE(store.erase("d"));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponsesStore, ManyThreads) {
  ResponseStore store(50, 1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string id = std::to_string(t * 100000 + i);
        store.put(id, entry(16));
        store.get(id);
        if (i % 3 == 0) store.erase(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(store.size(), 50u);
}

TEST(ResponsesStore, PreviousResponseRebuildsTheConversation) {
  // Turn 1: input and output kept together; turn 2 appends its input to them.
  const ResponsesRequest first = parse(R"({"instructions": "sys", "input": "What is 2+2?", "store": true})");
  ResponsesStream s(ResponsesContext{"resp_1", 0, "m", response_echo(first)}, false);
  s.start();
  s.events({ev(Kind::kContent, "4")});
  s.finish(final_of("stop"), 0);
  ResponseStore store(8, 1 << 20);
  StoredResponse kept;
  kept.response = s.response().dump();
  kept.conversation = first.items;
  for (auto& item : canonical_items(s.output())) kept.conversation.push_back(item);
  ASSERT_TRUE(store.put("resp_1", kept));

  const ResponsesRequest second = parse(R"({"previous_response_id": "resp_1", "input": "And 3+3?"})");
  const auto prev = store.get(*second.previous_response_id);
  ASSERT_NE(prev, nullptr);
  json conversation = prev->conversation;
  for (const auto& item : second.items) conversation.push_back(item);
  // Instructions are not carried over (OpenAI's rule): only the new request's apply.
  EXPECT_EQ(conversation_messages(second.instructions, conversation), json::parse(R"([
      {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
      {"role": "user", "content": "And 3+3?"}])"));
  EXPECT_EQ(json::parse(prev->response)["output"][0]["content"][0]["text"], "4");
  EXPECT_EQ(store.get("resp_unknown"), nullptr);
  const ApiError e = previous_response_not_found("resp_unknown");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_EQ(e.code, "previous_response_not_found");
  EXPECT_NE(e.message.find("'resp_unknown' not found"), std::string::npos);
  const json body = json::parse(error_body(e));
  EXPECT_EQ(body["error"]["code"], "previous_response_not_found");
}

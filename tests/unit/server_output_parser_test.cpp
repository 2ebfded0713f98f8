// The assistant-output parser (server/chat_output.h) on hand-written outputs in each
// published tool-call format, with malformed and truncated variants. No weights of those
// models are available here; the samples follow the formats' documentation:
//  - Hermes: NousResearch Hermes-2-Pro function-calling format and the Qwen2.5 / Qwen3
//    chat templates (<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>),
//    shared/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja.
//  - Qwen XML: the Qwen3-Coder / Qwen3.5 chat templates (Qwen3-Coder.jinja,
//    Qwen3.5-4B.jinja) and the qwen3_coder parsers of vLLM / SGLang as summarised in
//    shared/reference/agent-protocols.md (schema-typed values, missing </parameter>).
//  - Llama 3.x: Meta's Llama 3.1 / 3.2 model cards and templates ("Respond in the format
//    {"name": function name, "parameters": dictionary of argument name and its value}",
//    optional <|python_tag|>).
//  - Mistral: [TOOL_CALLS] + JSON array (v3 tokenizer, mistral-common docs) and
//    [TOOL_CALLS]NAME[ARGS]{...} (Mistral-Small-3.2 / Devstral templates).
// Every sample is also fed split at every byte boundary and byte by byte: the folded
// result must equal the whole-feed one, and every call's streamed arguments must be one
// valid JSON object.
#include <gtest/gtest.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/chat_output.h"

using namespace hearth::server;
using json = nlohmann::ordered_json;
using Kind = OutputEvent::Kind;

namespace {

OutputOptions opts(ToolFormat f, json tools = nullptr, bool starts_in_reasoning = false) {
  OutputOptions o;
  o.tool_format = f;
  o.tools = std::move(tools);
  o.starts_in_reasoning = starts_in_reasoning;
  return o;
}

std::vector<OutputEvent> run_pieces(const OutputOptions& o,
                                    const std::vector<std::string>& pieces) {
  auto p = make_output_parser(o);
  std::vector<OutputEvent> all;
  for (const auto& s : pieces) {
    auto ev = p->feed(s);
    all.insert(all.end(), ev.begin(), ev.end());
  }
  auto ev = p->finish();
  all.insert(all.end(), ev.begin(), ev.end());
  return all;
}

// Event-order invariants: Begin, then Args, then End for each index, indexes 0, 1, ...;
// the raw concatenated fragments of each call parse as a JSON object.
void check_events(const std::vector<OutputEvent>& events, const std::string& label) {
  std::vector<std::string> args;
  std::vector<int> state;  // 0 begun, 1 ended
  std::set<std::string> ids;
  for (const auto& e : events) {
    switch (e.kind) {
      case Kind::kToolCallBegin:
        ASSERT_EQ(e.index, static_cast<int>(state.size())) << label;
        ASSERT_EQ(e.id.rfind("call_", 0), 0u) << label;
        ASSERT_EQ(e.id.size(), 29u) << label;
        ASSERT_TRUE(ids.insert(e.id).second) << label;
        ASSERT_FALSE(e.name.empty()) << label;
        state.push_back(0);
        args.emplace_back();
        break;
      case Kind::kToolCallArgs:
        ASSERT_LT(e.index, static_cast<int>(state.size())) << label;
        ASSERT_EQ(state[e.index], 0) << label;
        args[e.index] += e.text;
        break;
      case Kind::kToolCallEnd:
        ASSERT_LT(e.index, static_cast<int>(state.size())) << label;
        ASSERT_EQ(state[e.index], 0) << label;
        state[e.index] = 1;
        break;
      default:
        ASSERT_FALSE(e.text.empty()) << label;
    }
  }
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i], 1) << label << ": call " << i << " never ended";
    json j;
    ASSERT_NO_THROW(j = json::parse(args[i])) << label << ": " << args[i];
    EXPECT_TRUE(j.is_object()) << label;
  }
}

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
  int cut = 0;  // calls cut by the end of generation (never returned as calls)
};

void expect_result(const ParsedOutput& got, const Expected& want, const std::string& label) {
  EXPECT_EQ(got.reasoning, want.reasoning) << label;
  EXPECT_EQ(got.content, want.content) << label;
  EXPECT_EQ(got.n_cut_calls, want.cut) << label;
  ASSERT_EQ(got.tool_calls.size(), want.calls.size()) << label;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, want.calls[i].first) << label;
    EXPECT_EQ(json::parse(got.tool_calls[i].arguments), want.calls[i].second)
        << label << ": " << got.tool_calls[i].arguments;
    EXPECT_EQ(got.tool_calls[i].arguments, want.calls[i].second.dump()) << label;  // compact
  }
}

// Whole, split at every byte, byte by byte, and in 3 pieces: the same fold every time.
void check(const OutputOptions& o, const std::string& text, const Expected& want) {
  const auto whole = run_pieces(o, {text});
  check_events(whole, "whole: " + text);
  expect_result(fold_events(whole), want, "whole: " + text);
  for (size_t k = 0; k <= text.size(); ++k) {
    const std::string label = "split at " + std::to_string(k) + ": " + text;
    const auto ev = run_pieces(o, {text.substr(0, k), text.substr(k)});
    check_events(ev, label);
    expect_result(fold_events(ev), want, label);
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const auto ev = run_pieces(o, bytes);
  check_events(ev, "bytes: " + text);
  expect_result(fold_events(ev), want, "bytes: " + text);
  for (size_t a = 1; a + 1 < text.size() && a < 40; a += 3) {
    const size_t b = (a + text.size()) / 2;
    const auto ev3 = run_pieces(o, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
    expect_result(fold_events(ev3), want, "3 pieces: " + text);
  }
}

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "days": {"type": "integer"}}, "required": ["city"]}}}])");
}

json coder_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "edit",
    "parameters": {"type": "object", "properties": {
      "path": {"type": "string"}, "line": {"type": "integer"}, "ratio": {"type": "number"},
      "force": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
      "note": {"type": ["string", "null"]}, "version": {"type": "string"},
      "mode": {"enum": ["a", "b"]}, "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}])");
}

// ---------------------------------------------------------------------------
// Plain text and reasoning

TEST(OutputParser, PlainTextIsContentAsWritten) {
  for (auto f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml,
                 ToolFormat::kLlama3Json, ToolFormat::kMistral}) {
    check(opts(f), "Hello,\n\n world! <b>x</b> [1] {\"a\"} \n",
          {"", "Hello,\n\n world! <b>x</b> [1] {\"a\"} \n", {}});
  }
  check(opts(ToolFormat::kNone), "caf\xc3\xa9 \xe2\x82\xac", {"", "caf\xc3\xa9 \xe2\x82\xac", {}});
}

TEST(OutputParser, ThinkBlockSplitsReasoning) {
  check(opts(ToolFormat::kNone), "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
        {"Let me think.", "The answer is 4.", {}});
  check(opts(ToolFormat::kNone), "\n<think>a<b</think>ok", {"a<b", "ok", {}});
  // Truncated inside the block: all reasoning.
  check(opts(ToolFormat::kNone), "<think>\nstill thinking", {"still thinking", "", {}});
  // <think> after the answer started is text.
  check(opts(ToolFormat::kNone), "Hi <think>x</think>", {"", "Hi <think>x</think>", {}});
}

TEST(OutputParser, StartsInReasoning) {
  // Qwen3.5's generation prompt ends with "<think>\n": the model writes only </think>.
  check(opts(ToolFormat::kNone, nullptr, true), "I compute 2+2.\n</think>\n\n4",
        {"I compute 2+2.", "4", {}});
  check(opts(ToolFormat::kNone, nullptr, true), "no end", {"no end", "", {}});
}

TEST(OutputParser, ReasoningFormatNoneKeepsTags) {
  OutputOptions o = opts(ToolFormat::kNone, nullptr, true);
  o.parse_reasoning = false;
  check(o, "<think>\nx\n</think>\n\ny", {"", "<think>\nx\n</think>\n\ny", {}});
}

// ---------------------------------------------------------------------------
// Hermes

TEST(OutputParser, HermesCall) {
  const auto o = opts(ToolFormat::kHermes, weather_tools());
  check(o,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
        "3}}\n</tool_call>",
        {"", "", {{"get_weather", {{"city", "Paris"}, {"days", 3}}}}});
  check(o,
        "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        {"", "Let me check.", {{"get_weather", {{"city", "Paris"}}}}});
  // Nested values, escapes, unicode, arguments before the name.
  check(o,
        "<tool_call>{\"arguments\": {\"q\": [1, {\"x\": null}], \"s\": \"a\\\"b\\u00e9\xc3\xa9\"}, "
        "\"name\": \"f\"}</tool_call>",
        {"", "", {{"f", json::parse(R"({"q": [1, {"x": null}], "s": "a\"b\u00e9\u00e9"})")}}});
  // No arguments at all; a raw newline inside a string value is escaped.
  check(o, "<tool_call>{\"name\": \"ping\"}</tool_call>", {"", "", {{"ping", json::object()}}});
  check(o, "<tool_call>{\"name\": \"w\", \"arguments\": {\"t\": \"a\nb\"}}</tool_call>",
        {"", "", {{"w", {{"t", "a\nb"}}}}});
  // Arguments double-encoded as a JSON string.
  check(o, "<tool_call>{\"name\": \"w\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
        {"", "", {{"w", {{"a", 1}}}}});
}

TEST(OutputParser, HermesParallelCalls) {
  const auto o = opts(ToolFormat::kHermes, weather_tools());
  check(
      o,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
      {"", "", {{"get_weather", {{"city", "Paris"}}}, {"get_weather", {{"city", "Oslo"}}}}});
}

TEST(OutputParser, HermesAfterReasoningAndInsideUnclosedThink) {
  const auto o = opts(ToolFormat::kHermes, weather_tools());
  check(o,
        "<think>\nI need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
        {"I need the weather.", "", {{"get_weather", {{"city", "Rome"}}}}});
  // The call starts inside a <think> that never closes: still a call; a stray </think>
  // after it is dropped.
  check(opts(ToolFormat::kHermes, weather_tools(), true),
        "Need weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Rome\"}}\n</tool_call>\n</think>\n\nDone.",
        {"Need weather.", "Done.", {{"get_weather", {{"city", "Rome"}}}}});
}

TEST(OutputParser, HermesMalformedIsContent) {
  const auto o = opts(ToolFormat::kHermes, weather_tools());
  for (const std::string text :
       {"<tool_call>\n{not json}\n</tool_call>", "See <tool_call> tags.",
        "<tool_call>\n{\"name\": 5}", "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n[1, 2]\n</tool_call>"}) {
    check(o, text, {"", text, {}});
  }
}

// Generation that ends inside a call (max_tokens, a stop string, EOS) never returns it as
// a call, whether its name was known or not, and its markup never leaks into the text.
TEST(OutputParser, HermesCutCallIsNotACall) {
  const auto o = opts(ToolFormat::kHermes, weather_tools());
  for (const std::string text :
       {"<", "<tool", "<tool_call", "<tool_call>", "<tool_call>\n{\"name\":", "<tool_call>\n{\"name\": \"get_wea",
        "<tool_call>\n{\"name\": \"write\"",
        "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"path\": ",
        "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"n\": [1, 2",
        "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"path\": \"a.txt\", \"text\": \"hel",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Jeju\", \"days\": 2}"}) {
    check(o, text, {"", "", {}, 1});
    check(o, "Sure. " + text, {"", "Sure.", {}, 1});
  }
  // One complete call, the next one cut: only the complete one is a call.
  check(o,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Je",
        {"", "", {{"get_weather", {{"city", "Paris"}}}}, 1});
  // Its arguments complete, only the closing tag missing: the call is whole.
  check(o, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1}}",
        {"", "", {{"w", {{"a", 1}}}}});
  // Garbage after the arguments: the call stands, the rest is content.
  check(o, "<tool_call>{\"name\": \"w\", \"arguments\": {\"a\": 1}} trailing",
        {"", "trailing", {{"w", {{"a", 1}}}}});
  // Inside reasoning (Qwen3.5 starts its answer in <think>): nothing leaks into reasoning.
  check(opts(ToolFormat::kHermes, weather_tools(), true), "<tool_call>\n{\"name\": \"get_",
        {"", "", {}, 1});
}

// A streaming client sees a call only once it is complete: nothing of a call that may
// still be cut goes out, and a cut call is reported by one kToolCallCut.
TEST(OutputParser, CallEventsWaitForTheCallsEnd) {
  auto p = make_output_parser(opts(ToolFormat::kHermes, weather_tools()));
  EXPECT_TRUE(p->feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci").empty());
  EXPECT_TRUE(p->feed("ty\": \"Paris\"}").empty());
  const auto ev = p->feed("}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, Kind::kToolCallBegin);
  EXPECT_EQ(ev[1].kind, Kind::kToolCallArgs);
  EXPECT_EQ(json::parse(ev[1].text), json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(ev[2].kind, Kind::kToolCallEnd);
  const auto fin = p->finish();
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].kind, Kind::kToolCallCut);
  EXPECT_EQ(fin[0].index, 1);
  EXPECT_EQ(fin[0].name, "get_weather");
  EXPECT_EQ(fin[0].text, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {");
}

TEST(OutputParser, ToolsOffLeavesCallsInContent) {
  OutputOptions o = opts(ToolFormat::kHermes, weather_tools());
  o.parse_tools = false;
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
  check(o, text, {"", text, {}});
}

// ---------------------------------------------------------------------------
// Qwen XML

TEST(OutputParser, QwenXmlTypedBySchema) {
  const auto o = opts(ToolFormat::kQwenXml, coder_tools());
  check(o,
        "<tool_call>\n<function=edit>\n<parameter=path>\n007\n</parameter>\n<parameter=line>\n42\n"
        "</parameter>\n<parameter=ratio>\n1.000001\n</parameter>\n<parameter=force>\ntrue\n"
        "</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=tags>\n[\"x\"]\n"
        "</parameter>\n<parameter=note>\nnull\n</parameter>\n<parameter=version>\n1.000001\n"
        "</parameter>\n<parameter=mode>\nb\n</parameter>\n<parameter=limit>\n5\n</parameter>\n"
        "</function>\n</tool_call>",
        {"",
         "",
         {{"edit", json::parse(R"({"path": "007", "line": 42, "ratio": 1.000001, "force": true,
            "opts": {"a": [1]}, "tags": ["x"], "note": null, "version": "1.000001", "mode": "b",
            "limit": 5})")}}});
  // Failed conversions and unknown parameters / tools stay strings.
  check(
      o,
      "<tool_call>\n<function=edit>\n<parameter=line>\nforty\n</parameter>\n<parameter=extra>\n7\n"
      "</parameter>\n</function>\n</tool_call>",
      {"", "", {{"edit", {{"line", "forty"}, {"extra", "7"}}}}});
  check(o,
        "<tool_call>\n<function=other>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>",
        {"", "", {{"other", {{"n", "1"}}}}});
  // A number beyond a double (nlohmann's out_of_range used to escape from here) stays text.
  check(o,
        "<tool_call>\n<function=edit>\n<parameter=ratio>\n1e999\n</parameter>\n</function>\n</tool_call>",
        {"", "", {{"edit", {{"ratio", "1e999"}}}}});
}

TEST(OutputParser, QwenXmlMultilineAndMissingCloseTags) {
  const auto o = opts(ToolFormat::kQwenXml, coder_tools());
  check(o,
        "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
        "<parameter=content>\ndef f():\n    return \"<x>\" < "
        "3\n\n</parameter>\n</function>\n</tool_call>",
        {"",
         "I'll write it.",
         {{"write_file", {{"path", "a.py"}, {"content", "def f():\n    return \"<x>\" < 3\n"}}}}});
  // Missing </parameter> before the next parameter and before </function>; missing
  // </tool_call> at the end.
  check(o, "<tool_call>\n<function=edit>\n<parameter=path>\nx.c\n<parameter=line>\n3\n</function>",
        {"", "", {{"edit", {{"path", "x.c"}, {"line", 3}}}}});
  // No parameters.
  check(o, "<tool_call>\n<function=edit>\n</function>\n</tool_call>",
        {"", "", {{"edit", json::object()}}});
}

TEST(OutputParser, QwenXmlParallelAndInsideThink) {
  const auto o = opts(ToolFormat::kQwenXml, coder_tools(), true);
  check(
      o,
      "Read both.\n<tool_call>\n<function=edit>\n<parameter=path>\na\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=edit>\n<parameter=path>\nb\n</parameter>\n</function>\n"
      "</tool_call>",
      {"Read both.", "", {{"edit", {{"path", "a"}}}, {"edit", {{"path", "b"}}}}});
  // Two functions inside one <tool_call>.
  check(
      opts(ToolFormat::kQwenXml, coder_tools()),
      "<tool_call>\n<function=edit>\n</function>\n<function=write_file>\n</function>\n</tool_call>",
      {"", "", {{"edit", json::object()}, {"write_file", json::object()}}});
}

TEST(OutputParser, QwenXmlWithoutToolCallTag) {
  // Seen from small Qwen-format models: the <tool_call> line left out.
  check(opts(ToolFormat::kQwenXml, coder_tools(), true),
        "Thinking.\n<function=edit>\n<parameter=line>\n7\n</parameter>\n</function>\n</tool_call>",
        {"Thinking.", "", {{"edit", {{"line", 7}}}}});
  check(opts(ToolFormat::kQwenXml, coder_tools()), "Use\n<function=edit>\n</function>",
        {"", "Use", {{"edit", json::object()}}});
  const std::string text = "A <function=x y";
  check(opts(ToolFormat::kQwenXml, coder_tools()), text, {"", text, {}});
}

TEST(OutputParser, QwenXmlMalformedAndTruncated) {
  const auto o = opts(ToolFormat::kQwenXml, coder_tools());
  for (const std::string text :
       {"<tool_call>\n<functio name=x>\n</tool_call>",
        "<tool_call>\n<function=a\nb>", "<tool_call> hello"}) {
    check(o, text, {"", text, {}});
  }
  // Cut before or after the name, inside a value: not a call.
  for (const std::string text :
       {"<tool_call>\n<function=", "<tool_call>\n<function=write_file>\n<parameter=content>\nhello wor",
        "<tool_call>\n<function=edit>\n<parameter=li", "<tool_call>\n<function=edit>\n<parameter=line>\n12",
        "<tool_call>\n<function=edit>\n<parameter=line>\n12\n</parameter>\n"}) {
    check(o, text, {"", "", {}, 1});
  }
  // Junk where a parameter should start: the call closes, the junk is content.
  check(o, "<tool_call>\n<function=edit>\n<parameter=line>\n1\n</parameter>\noops",
        {"", "oops", {{"edit", {{"line", 1}}}}});
}

TEST(OutputParser, QwenXmlLongStringParameterComesWithItsCall) {
  // A long write_file content is held while it is written and comes out whole with its
  // call's end: a client never receives a call that max_tokens may still cut.
  auto p = make_output_parser(opts(ToolFormat::kQwenXml, coder_tools()));
  EXPECT_TRUE(p->feed("<tool_call>\n<function=write_file>\n<parameter=content>\n").empty());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(p->feed("line " + std::to_string(i) + "\n").empty());
  const auto ev = p->feed("</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, Kind::kToolCallBegin);
  EXPECT_EQ(ev[0].name, "write_file");
  EXPECT_EQ(json::parse(ev[1].text),
            json::parse(R"({"content": "line 0\nline 1\nline 2\nline 3\nline 4"})"));
  EXPECT_EQ(ev[2].kind, Kind::kToolCallEnd);
  EXPECT_TRUE(p->finish().empty());
}

// ---------------------------------------------------------------------------
// Llama 3.x

TEST(OutputParser, Llama3Json) {
  const auto o = opts(ToolFormat::kLlama3Json, weather_tools());
  check(o, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2}}",
        {"", "", {{"get_weather", {{"city", "Paris"}, {"days", 2}}}}});
  check(o, "<|python_tag|>{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {}}",
        {"", "", {{"get_weather", json::object()}}});
  check(o, "\n{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}",
        {"", "", {{"a", json::object()}, {"b", {{"x", 1}}}}});
  // Not calls: JSON that is no call object, text first.
  check(o, "{\"answer\": 42}", {"", "{\"answer\": 42}", {}});
  check(o, "The JSON {\"name\": \"x\", \"parameters\": {}}",
        {"", "The JSON {\"name\": \"x\", \"parameters\": {}}", {}});
}

// ---------------------------------------------------------------------------
// Mistral

TEST(OutputParser, MistralArrayAndNameForms) {
  const auto o = opts(ToolFormat::kMistral, weather_tools());
  check(o,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
        "\"abc123def\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}]",
        {"", "", {{"get_weather", {{"city", "Paris"}}}, {"get_weather", {{"city", "Nice"}}}}});
  check(o,
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": "
        "\"Lyon\"}",
        {"", "", {{"get_weather", {{"city", "Paris"}}}, {"get_weather", {{"city", "Lyon"}}}}});
  check(o, "Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\"}",
        {"", "Sure.", {{"get_weather", {{"city", "Paris"}}}}});
  // Generation ended inside the call (after [TOOL_CALLS], the model's call token): not a call.
  check(o, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par", {"", "", {}, 1});
  check(o, "[TOOL_CALLS] oops", {"", "", {}, 1});
  check(o, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_wea",
        {"", "", {{"get_weather", {{"city", "Paris"}}}}, 1});
  for (const std::string text : {"[TOOL_CALLS][oops]", "[TOOL_CALLS]a b[ARGS]{}"}) {
    check(o, text, {"", text, {}});
  }
}

// ---------------------------------------------------------------------------
// Template detection

TEST(TemplateCaps, DetectsFromTemplateText) {
  auto caps = detect_template_caps("{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(caps.tool_format, ToolFormat::kNone);
  EXPECT_FALSE(caps.renders_tools);
  caps = detect_template_caps("{% if tools %}<tool_call>{{ tools }}{% endif %}<think>");
  EXPECT_EQ(caps.tool_format, ToolFormat::kHermes);
  EXPECT_TRUE(caps.renders_tools);
  EXPECT_TRUE(caps.knows_reasoning);
  EXPECT_EQ(detect_template_caps("{{ tools }}<tool_call><function=x><parameter=y>").tool_format,
            ToolFormat::kQwenXml);
  EXPECT_EQ(detect_template_caps("{{ tools }}[TOOL_CALLS]").tool_format, ToolFormat::kMistral);
  EXPECT_EQ(detect_template_caps("<|python_tag|>{{ tools }}").tool_format, ToolFormat::kLlama3Json);
}

TEST(TemplateCaps, RealTemplates) {
  const std::string dir = std::string(HEARTH_SHARED_DIR) + "/data/chat-templates/";
  auto read = [&](const std::string& name) {
    FILE* f = std::fopen((dir + name).c_str(), "rb");
    if (!f) return std::string();
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  const std::pair<const char*, ToolFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::kHermes},
      {"Qwen3.5-4B.jinja", ToolFormat::kQwenXml},
      {"Qwen3-Coder.jinja", ToolFormat::kQwenXml},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::kLlama3Json},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::kMistral},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolFormat::kHermes},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolFormat::kNone},
  };
  for (const auto& [name, want] : cases) {
    const std::string src = read(name);
    if (src.empty()) GTEST_SKIP() << "no " << dir << name;
    EXPECT_EQ(detect_template_caps(src).tool_format, want) << name;
  }
}

TEST(TemplateCaps, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

}  // namespace

namespace {

// Random outputs built from the formats' own pieces (fixed seed): whatever the mix, the
// parser never throws, events keep their order, every call's arguments are one JSON object,
// and feeding byte by byte or in random pieces folds to the whole-feed result.
TEST(OutputParser, RandomMixturesAreSplitInvariant) {
  static const char* kPieces[] = {
      "<tool_call>", "</tool_call>", "<function=edit>", "<function=", "</function>", "<parameter=path>",
      "<parameter=line>", "</parameter>", "{", "}", "[", "]", "\"name\"", "\"arguments\"", "\"parameters\"",
      ":", ",", "\"get_weather\"", "\"x\\\"y\"", "12", "true", "null", "\n", " ", "<think>", "</think>",
      "[TOOL_CALLS]", "[ARGS]", "get_weather", "<|python_tag|>", "text", "\xc3\xa9", "\xe2\x82", "<", "</"};
  std::mt19937 rng(1234);
  const ToolFormat formats[] = {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwenXml,
                                ToolFormat::kLlama3Json, ToolFormat::kMistral};
  int n_calls = 0, n_cut = 0, n_reasoning = 0;
  for (int n = 0; n < 400; ++n) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) text += kPieces[rng() % std::size(kPieces)];
    OutputOptions o = opts(formats[n % 5], coder_tools(), n % 3 == 0);
    o.parse_reasoning = n % 7 != 0;
    std::vector<OutputEvent> whole;
    ASSERT_NO_THROW(whole = run_pieces(o, {text})) << text;
    check_events(whole, text);
    const ParsedOutput want = fold_events(whole);
    n_calls += want.tool_calls.empty() ? 0 : 1;
    n_cut += want.n_cut_calls > 0 ? 1 : 0;
    n_reasoning += want.reasoning.empty() ? 0 : 1;
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    std::vector<std::vector<std::string>> splits = {bytes, {}};
    for (size_t i = 0; i < text.size();) {
      const size_t k = 1 + rng() % 9;
      splits[1].push_back(text.substr(i, k));
      i += k;
    }
    for (const auto& pieces : splits) {
      const auto ev = run_pieces(o, pieces);
      check_events(ev, text);
      const ParsedOutput got = fold_events(ev);
      ASSERT_EQ(got.reasoning, want.reasoning) << text;
      ASSERT_EQ(got.content, want.content) << text;
      ASSERT_EQ(got.n_cut_calls, want.n_cut_calls) << text;
      ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << text;
      for (size_t i = 0; i < got.tool_calls.size(); ++i) {
        ASSERT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << text;
        ASSERT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << text;
      }
    }
  }
  // The mixtures reach the interesting paths.
  EXPECT_GE(n_calls, 20);
  EXPECT_GT(n_cut, 8);
  EXPECT_GT(n_reasoning, 20);
}

// Under a tool grammar (strict_calls) a Qwen XML value ends only at </parameter>, as the
// grammar writes it: the grammar lets a string value hold "</function>" and more, which the
// lenient parser would take for the end of the call (a "complete" call missing fields).
TEST(OutputParser, QwenXmlStrictUnderAGrammar) {
  OutputOptions o = opts(ToolFormat::kQwenXml, weather_tools());
  o.strict_calls = true;
  const std::string value = "JEURUS</param>\n</function>\n</formation>\n2 + 3";
  check(o, "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + value +
               "\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
        {"", "", {{"get_weather", {{"city", value}, {"days", 2}}}}});
  // The one layout whitespace character the grammar allows around a value, of any kind.
  check(o, "<tool_call>\n<function=get_weather>\n<parameter=city>   My wife, \t</parameter>\n</function>\n</tool_call>",
        {"", "", {{"get_weather", {{"city", "  My wife, "}}}}});
  // Cut inside such a value: not a call (the lenient parser closed it at </function>).
  check(o, "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + value, {"", "", {}, 1});
  // An enum value after the one space the grammar's layout allows is the enum value.
  check(opts(ToolFormat::kQwenXml, coder_tools()),
        "<tool_call>\n<function=edit>\n<parameter=mode> b\n</parameter>\n</function>\n</tool_call>",
        {"", "", {{"edit", {{"mode", "b"}}}}});
  o.strict_calls = false;
  check(o, "<tool_call>\n<function=get_weather>\n<parameter=city>\nJEURUS</param>\n</function>\n</tool_call>",
        {"", "", {{"get_weather", {{"city", "JEURUS</param>"}}}}});
}

}  // namespace

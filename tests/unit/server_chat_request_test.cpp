// Chat requests with tools and reasoning: parsing and validation of tools / tool_choice /
// history calls, and prepare_chat on real templates (shared/data/chat-templates) with the
// default model's tokenizer: tools rendered by templates that know them, a Hermes tool
// list injected into those that do not (the default model's ChatML), system messages
// folded when a template refuses late ones, the output rules derived from the template.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/mapped_file.h"
#include "engine/chat_prompt.h"
#include "format/gguf.h"
#include "server/chat_request.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

using namespace hearth::server;
using json = nlohmann::ordered_json;

namespace {

const std::string kTools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object", "properties":
  {"city": {"type": "string"}}, "required": ["city"]}}}])";

ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(body);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

std::string body(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
}

TEST(ChatRequestParse, ToolsAndToolChoice) {
  ParsedRequest r = parse_chat_request(body(kTools));
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_FALSE(r.parallel_tool_calls.has_value());
  r = parse_chat_request(
      body(kTools + R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_EQ(r.parallel_tool_calls, false);
  r = parse_chat_request(body(
      kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"));
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  r = parse_chat_request(
      body(R"("tool_choice": "none", "chat_template_kwargs": {"enable_thinking": false})"));
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
}

TEST(ChatRequestParse, ErrorsNameTheField) {
  struct Case {
    std::string extra, want, param;
  } cases[] = {
      {R"("tools": {})", "must be an array", "tools"},
      {R"("tools": [{"type": "retrieval"}])", "must be 'function'", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "is required", "tools[0].function"},
      {R"("tools": [{"type": "function", "function": {"name": 3}}])", "must be a string",
       "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
       "JSON schema", "tools[0].function.parameters"},
      {R"("tool_choice": "always")", "must be 'auto'", "tool_choice"},
      {R"("tool_choice": "required")", "needs a non-empty 'tools'", "tool_choice"},
      {kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
       "not in 'tools'", "tool_choice.function.name"},
      {kTools + R"(, "tool_choice": {"type": "function"})", "must be an object",
       "tool_choice.function"},
      {R"("parallel_tool_calls": "yes")", "must be a boolean", "parallel_tool_calls"},
      {R"("chat_template_kwargs": [1])", "must be an object", "chat_template_kwargs"},
      {R"("reasoning_format": "fancy")", "must be 'none' or 'auto'", "reasoning_format"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra);
    const ApiError e = chat_error(body(c.extra));
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find(c.want), std::string::npos) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

TEST(ChatRequestParse, HistoryCallsAndReasoning) {
  const ParsedRequest r = parse_chat_request(R"({"messages": [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": null, "reasoning": "think A",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
                    {"id": "c2", "function": {"name": "g", "arguments": "not json"}},
                    {"id": "c3", "type": "function", "function": {"name": "h", "arguments": {"b": 2}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "assistant", "content": "done", "reasoning_content": "think B"}]})");
  const json m = messages_for_template(r);
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_EQ(m[1]["reasoning_content"], "think A");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], json({{"a", 1}}));
  EXPECT_EQ(m[1]["tool_calls"][1]["function"]["arguments"], "not json");  // kept, no 500
  EXPECT_EQ(m[1]["tool_calls"][1]["type"], "function");
  EXPECT_EQ(m[1]["tool_calls"][2]["function"]["arguments"], json({{"b", 2}}));
  EXPECT_EQ(m[3]["reasoning_content"], "think B");
  EXPECT_EQ(
      chat_error(
          R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}]})")
          .param,
      "messages[0].tool_calls[0].function");
}

// prepare_chat on real templates with the default model's tokenizer.
class PrepareChat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    file_ = std::make_unique<hearth::gguf::File>(hearth::gguf::File::open(p));
    tok_ = std::make_unique<hearth::tokenizer::Tokenizer>(
        hearth::tokenizer::Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    tok_.reset();
    file_.reset();
  }
  void SetUp() override {
    if (!file_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }
  // The ChatPrompt of the model's own template (name empty) or of a shared template.
  static std::unique_ptr<hearth::engine::ChatPrompt> prompt(const std::string& name) {
    std::optional<std::string> src;
    if (!name.empty())
      src = hearth::read_text_file(std::string(HEARTH_SHARED_DIR) + "/data/chat-templates/" + name);
    return std::make_unique<hearth::engine::ChatPrompt>(*file_, *tok_, src);
  }
  static PreparedChat prepare(const hearth::engine::ChatPrompt& chat, const std::string& body_text,
                              ChatSettings settings = {}) {
    settings.caps = detect_template_caps(chat.source());
    return prepare_chat(chat_inputs(parse_chat_request(body_text)), chat, settings);
  }
  static std::unique_ptr<hearth::gguf::File> file_;
  static std::unique_ptr<hearth::tokenizer::Tokenizer> tok_;
};
std::unique_ptr<hearth::gguf::File> PrepareChat::file_;
std::unique_ptr<hearth::tokenizer::Tokenizer> PrepareChat::tok_;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_F(PrepareChat, ChatMLGetsAHermesToolList) {
  const auto chat = prompt("");
  const PreparedChat p = prepare(*chat, body(kTools));
  EXPECT_TRUE(p.tools_injected);
  EXPECT_TRUE(has(p.prompt, "<tools>")) << p.prompt;
  EXPECT_TRUE(has(p.prompt, "\"name\":\"get_weather\"")) << p.prompt;
  EXPECT_TRUE(has(p.prompt, "<tool_call>")) << p.prompt;
  EXPECT_EQ(p.output.tool_format, ToolFormat::kHermes);
  EXPECT_TRUE(p.output.parse_tools);
  EXPECT_EQ(p.constraint.kind, ToolConstraint::Kind::kFree);
  // The injected list opens the system message (the first turn).
  EXPECT_LT(p.prompt.find("<tools>"), p.prompt.find("hi"));
  // No tools: nothing injected, nothing parsed.
  const PreparedChat plain = prepare(*chat, body(R"("temperature": 0)"));
  EXPECT_FALSE(has(plain.prompt, "<tools>"));
  EXPECT_FALSE(plain.output.parse_tools);
  // tool_choice none: tools left out.
  const PreparedChat none = prepare(*chat, body(kTools + R"(, "tool_choice": "none")"));
  EXPECT_FALSE(has(none.prompt, "<tools>"));
  EXPECT_FALSE(none.output.parse_tools);
}

TEST_F(PrepareChat, RequiredAndNamedReachThePromptAndTheConstraint) {
  const auto chat = prompt("");
  PreparedChat p = prepare(*chat, body(kTools + R"(, "tool_choice": "required")"));
  EXPECT_TRUE(has(p.prompt, "You must answer with a call to one of the functions.")) << p.prompt;
  EXPECT_EQ(p.constraint.kind, ToolConstraint::Kind::kRequired);
  EXPECT_EQ(p.constraint.format, ToolFormat::kHermes);
  p = prepare(
      *chat,
      body(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
      "parallel_tool_calls": false)"));
  EXPECT_TRUE(has(p.prompt, "call to the function \"get_weather\"")) << p.prompt;
  EXPECT_TRUE(has(p.prompt, "at most one function")) << p.prompt;
  EXPECT_EQ(p.constraint.kind, ToolConstraint::Kind::kNamed);
  EXPECT_EQ(p.constraint.name, "get_weather");
  EXPECT_FALSE(p.constraint.parallel);
}

// The parallel-call rule: a forced choice is one call unless the client asked for more;
// otherwise calls may come in parallel unless the client said no.
TEST_F(PrepareChat, ParallelCallsUnderForcedAndFreeChoices) {
  const auto chat = prompt("");
  struct Case {
    std::string extra;
    bool parallel;
  };
  for (const Case& c : std::vector<Case>{
           {R"(, "tool_choice": "required")", false},
           {R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})", false},
           {R"(, "tool_choice": "required", "parallel_tool_calls": true)", true},
           {R"(, "tool_choice": "required", "parallel_tool_calls": false)", false},
           {"", true},
           {R"(, "tool_choice": "auto")", true},
           {R"(, "parallel_tool_calls": false)", false}}) {
    const PreparedChat p = prepare(*chat, body(kTools + c.extra));
    EXPECT_EQ(p.constraint.parallel, c.parallel) << c.extra;
    EXPECT_EQ(has(p.prompt, "at most one function"), !c.parallel) << c.extra << "\n" << p.prompt;
  }
}

TEST_F(PrepareChat, HermesHistoryForChatML) {
  const auto chat = prompt("");
  const PreparedChat p = prepare(*chat, R"({"messages": [{"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], )" +
                                            kTools + "}");
  EXPECT_TRUE(has(
      p.prompt,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"))
      << p.prompt;
  EXPECT_TRUE(has(p.prompt, "<tool_response>\nsunny\n</tool_response>")) << p.prompt;
  // Without tools in this request, the history's calls are still written out.
  const PreparedChat q = prepare(*chat, R"({"messages": [{"role": "user", "content": "weather?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a"}, {"role": "tool", "tool_call_id": "c2", "content": "b"}]})");
  EXPECT_TRUE(has(q.prompt, "Checking.\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n</tool_call>"))
      << q.prompt;
  EXPECT_TRUE(has(q.prompt, "<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response>"))
      << q.prompt;
  EXPECT_FALSE(q.output.parse_tools);
}

TEST_F(PrepareChat, TemplatesThatKnowToolsRenderThem) {
  const auto chat = prompt("Qwen3.5-4B.jinja");
  const PreparedChat p = prepare(*chat, R"({"messages": [{"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], )" +
                                            kTools + "}");
  EXPECT_FALSE(p.tools_injected);
  EXPECT_EQ(p.output.tool_format, ToolFormat::kQwenXml);
  EXPECT_TRUE(has(p.prompt, "<function=get_weather>"))
      << p.prompt;  // arguments iterated as an object
  EXPECT_TRUE(has(p.prompt, "<parameter=city>")) << p.prompt;
  EXPECT_TRUE(p.output.starts_in_reasoning);  // Qwen3.5 opens <think>
  // enable_thinking false (per request, or as the server default) closes it.
  const std::string off = body(R"("chat_template_kwargs": {"enable_thinking": false})");
  EXPECT_FALSE(prepare(*chat, off).output.starts_in_reasoning);
  ChatSettings s;
  s.default_kwargs = json{{"enable_thinking", false}};
  EXPECT_FALSE(prepare(*chat, body(R"("temperature": 1)"), s).output.starts_in_reasoning);
  ChatSettings none;
  none.parse_reasoning = false;  // --reasoning-format none: the <think> text stays content
  EXPECT_FALSE(prepare(*chat, body(R"("temperature": 1)"), none).output.starts_in_reasoning);
  EXPECT_FALSE(prepare(*chat, body(R"("temperature": 1)"), none).output.parse_reasoning);
  // ... and per request (llama.cpp's reasoning_format), either way.
  EXPECT_TRUE(prepare(*chat, body(R"("reasoning_format": "auto")"), none).output.starts_in_reasoning);
  EXPECT_FALSE(prepare(*chat, body(R"("reasoning_format": "none")")).output.parse_reasoning);
}

TEST_F(PrepareChat, LateSystemMessagesAreFoldedWhenTheTemplateRefusesThem) {
  const auto chat = prompt("Qwen3.5-4B.jinja");
  const PreparedChat p = prepare(*chat, R"({"messages": [{"role": "system", "content": "Rule one."},
    {"role": "user", "content": "hi"}, {"role": "system", "content": "Rule two."},
    {"role": "user", "content": "again"}]})");
  EXPECT_TRUE(has(p.prompt, "Rule one.\n\nRule two.")) << p.prompt;
  EXPECT_LT(p.prompt.find("Rule two."), p.prompt.find("hi"));
}

TEST_F(PrepareChat, ReasoningLimitFromServerOrRequest) {
  const auto thinking = prompt("Qwen3.5-4B.jinja");
  ChatSettings s;
  s.caps = detect_template_caps(thinking->source());
  s.reasoning_budget = 5;
  ChatInputs in = chat_inputs(parse_chat_request(body(R"("temperature": 1)")));
  PreparedChat p = prepare_chat(in, *thinking, s);
  auto limit = reasoning_limit(p, s, *tok_);
  EXPECT_EQ(limit.budget, 5);
  EXPECT_TRUE(limit.starts_inside);
  EXPECT_EQ(tok_->decode(limit.close_tokens), "\n</think>\n\n");
  in.reasoning_budget = 2;  // e.g. Anthropic's thinking.budget_tokens
  EXPECT_EQ(reasoning_limit(prepare_chat(in, *thinking, s), s, *tok_).budget, 2);
  // No budget; reasoning not parsed; a template that knows no <think>: no cut.
  s.reasoning_budget = -1;
  in.reasoning_budget = -1;
  EXPECT_LT(reasoning_limit(prepare_chat(in, *thinking, s), s, *tok_).budget, 0);
  s.reasoning_budget = 5;
  s.parse_reasoning = false;
  EXPECT_LT(reasoning_limit(prepare_chat(in, *thinking, s), s, *tok_).budget, 0);
  const auto chatml = prompt("");
  ChatSettings plain;
  plain.caps = detect_template_caps(chatml->source());
  plain.reasoning_budget = 5;
  EXPECT_LT(reasoning_limit(prepare_chat(in, *chatml, plain), plain, *tok_).budget, 0);
}

TEST_F(PrepareChat, TemplateErrorsAre400) {
  const auto chat = prompt("Qwen3.5-4B.jinja");
  try {
    prepare(*chat, R"({"messages": [{"role": "assistant", "content": "only me"}]})");
    // (Some templates accept this; then there is nothing to check.)
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_EQ(e.error().param, "messages");
  }
}

}  // namespace

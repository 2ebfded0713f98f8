// The OpenAI protocol layer of `hearth serve`: request parsing (every error path names
// its field), error bodies, and every response / chunk shape parsed back as JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "template/chat_template.h"

using namespace hearth::server;
using hearth::engine::Delta;
using hearth::engine::Final;
using hearth::engine::TokenOut;
using json = nlohmann::ordered_json;

namespace {

// The ApiError a chat (or completion) body is rejected with; fails the test when accepted.
ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(body);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

ApiError completion_error(const std::string& body) {
  try {
    parse_completion_request(body);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

std::string chat_with(const std::string& extra) { return "{" + kMsgs + ", " + extra + "}"; }

// Expects a 400 whose message contains `want` and whose param is `param`.
void expect_chat_400(const std::string& extra, const std::string& want, const std::string& param) {
  SCOPED_TRACE(extra);
  const ApiError e = chat_error(chat_with(extra));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_TRUE(contains(e.message, want)) << e.message;
  EXPECT_EQ(e.param, param);
}

// ---------------------------------------------------------------------------
// Parsing

TEST(ServerProtocolParse, ChatDefaultsAreOpenAIs) {
  const ParsedRequest r = parse_chat_request("{" + kMsgs + "}");
  EXPECT_TRUE(r.chat);
  EXPECT_FALSE(r.model);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(*r.messages[0].content, "hi");
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 1.0f);
  EXPECT_EQ(r.sampler.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampler.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.sampler.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(r.sampler.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(r.sampler.frequency_penalty, 0.0f);
  EXPECT_FALSE(r.seed);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.engine_top_logprobs(), -1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_NO_THROW(hearth::engine::validate(r.sampler));
}

TEST(ServerProtocolParse, ChatAllFields) {
  const ParsedRequest r = parse_chat_request(R"({
    "model": "m", "user": "u", "unknown_field": {"x": [1]},
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "user", "content": "q", "name": "bob"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -3,
    "min_p": 0.1, "presence_penalty": -2, "frequency_penalty": 2, "repetition_penalty": 1.1,
    "seed": -1, "stop": ["a", "", "b"], "logprobs": true, "top_logprobs": 20, "stream": true,
    "stream_options": {"include_usage": true}, "n": 1})");
  EXPECT_EQ(*r.model, "m");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(*r.messages[1].content, "a\nb");
  EXPECT_EQ(*r.messages[2].name, "bob");
  EXPECT_FALSE(r.messages[3].content);
  EXPECT_EQ(r.messages[3].tool_calls[0]["id"], "c1");
  EXPECT_EQ(*r.messages[4].tool_call_id, "c1");
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(*r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 0.5f);
  EXPECT_EQ(r.sampler.top_k, 0);  // <= 0: off
  EXPECT_FLOAT_EQ(r.sampler.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampler.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(r.sampler.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampler.repeat_penalty, 1.1f);
  EXPECT_EQ(*r.seed, UINT64_MAX);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.engine_top_logprobs(), 20);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_NO_THROW(hearth::engine::validate(r.sampler));

  const json m = messages_for_template(r);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(m[1]["content"], "a\nb");
  EXPECT_EQ(m[2]["name"], "bob");
  EXPECT_EQ(m[3]["content"], "");  // null content renders as ""
  EXPECT_EQ(m[3]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m[3]["tool_calls"][0]["function"]["arguments"], json::object());  // parsed
  EXPECT_EQ(m[4]["tool_call_id"], "c1");
  EXPECT_FALSE(m[0].contains("name"));
}

TEST(ServerProtocolParse, NullMeansUnset) {
  const ParsedRequest r = parse_chat_request(chat_with(
      R"("model": null, "max_tokens": null, "temperature": null, "top_p": null, "seed": null,
         "stop": null, "logprobs": null, "top_logprobs": null, "stream": null, "n": null,
         "stream_options": null, "tools": null)"));
  EXPECT_FALSE(r.model);
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);
  EXPECT_FALSE(r.seed);
  EXPECT_FALSE(r.stream);
}

TEST(ServerProtocolParse, StopAsString) {
  EXPECT_EQ(parse_chat_request(chat_with(R"("stop": "\n\n")")).stop,
            (std::vector<std::string>{"\n\n"}));
  EXPECT_TRUE(parse_chat_request(chat_with(R"("stop": "")")).stop.empty());
}

TEST(ServerProtocolParse, IntegersAcceptIntegralFloatsAndSaturate) {
  EXPECT_EQ(*parse_chat_request(chat_with(R"("max_tokens": 16.0)")).max_tokens, 16);
  EXPECT_EQ(*parse_chat_request(chat_with(R"("max_tokens": 99999999999999)")).max_tokens,
            INT32_MAX);
  EXPECT_EQ(parse_chat_request(chat_with(R"("top_k": 1e12)")).sampler.top_k, INT32_MAX);
}

TEST(ServerProtocolParse, MalformedJsonSaysWhere) {
  for (const std::string body : {R"({"messages": [})", "{", "nope", R"({"a": 1,})"}) {
    SCOPED_TRACE(body);
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, "not valid JSON (byte ")) << e.message;
    EXPECT_FALSE(contains(e.message, "[json.exception")) << e.message;
  }
  EXPECT_TRUE(contains(chat_error(R"({"messages": [})").message, "byte 15"))
      << chat_error(R"({"messages": [})").message;
  EXPECT_TRUE(contains(chat_error("").message, "empty"));
}

TEST(ServerProtocolParse, BodyMustBeAnObject) {
  for (const std::string body : {"[]", "1", "\"x\"", "null", "true"}) {
    SCOPED_TRACE(body);
    const ApiError e = chat_error(body);
    EXPECT_TRUE(contains(e.message, "must be a JSON object, got ")) << e.message;
  }
  EXPECT_TRUE(contains(completion_error("[1, 2]").message, "got array"));
}

TEST(ServerProtocolParse, DeepNestingIsRejectedBeforeTheTemplate) {
  const int depth = hearth::tmpl::kMaxJsonDepth;
  // The body object is level 1: "x" at depth-1 nested arrays is exactly at the limit.
  const std::string ok =
      chat_with(R"("x": )" + std::string(depth - 1, '[') + std::string(depth - 1, ']'));
  EXPECT_NO_THROW(parse_chat_request(ok));
  const std::string deep =
      chat_with(R"("x": )" + std::string(depth, '[') + std::string(depth, ']'));
  EXPECT_TRUE(contains(chat_error(deep).message, "deeper than 128 levels"))
      << chat_error(deep).message;
  const std::string hostile = "{\"messages\": " + std::string(100000, '[');
  EXPECT_TRUE(contains(chat_error(hostile).message, "deeper than 128 levels"));
  EXPECT_TRUE(
      contains(completion_error("{\"prompt\": " + std::string(100000, '[')).message, "deeper"));
}

TEST(ServerProtocolParse, MessageErrorsNameTheField) {
  struct Case {
    std::string messages, want, param;
  };
  const std::vector<Case> cases = {
      {"", "'messages' is required", "messages"},
      {R"("messages": "hi")", "'messages' must be an array, got string", "messages"},
      {R"("messages": [])", "'messages' must contain at least one message", "messages"},
      {R"("messages": [1])", "'messages[0]' must be an object, got number", "messages[0]"},
      {R"("messages": [{"content": "x"}])", "'messages[0].role' is required", "messages[0].role"},
      {R"("messages": [{"role": 3, "content": "x"}])",
       "'messages[0].role' must be a string, got number", "messages[0].role"},
      {R"("messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}])",
       "'messages[1].role' must be one of system, user, assistant, tool, developer, got 'robot'",
       "messages[1].role"},
      {R"("messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                       {"role": "user", "content": 5}])",
       "'messages[2].content' must be a string or an array of content parts, got number",
       "messages[2].content"},
      {R"("messages": [{"role": "user"}])", "'messages[0].content' is required for role 'user'",
       "messages[0].content"},
      {R"("messages": [{"role": "user", "content": ["x"]}])",
       "'messages[0].content[0]' must be an object, got string", "messages[0].content[0]"},
      {R"("messages": [{"role": "user", "content": [{"text": "x"}]}])",
       "'messages[0].content[0].type' is required", "messages[0].content[0].type"},
      {R"("messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])",
       "'messages[0].content[0].image_url.url' is required", "messages[0].content[0].image_url.url"},
      {R"("messages": [{"role": "user", "content": [{"type": "text"}]}])",
       "'messages[0].content[0].text' is required", "messages[0].content[0].text"},
      {R"("messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}])",
       "'messages[0].content[0].text' must be a string, got number", "messages[0].content[0].text"},
      {R"("messages": [{"role": "user", "content": "x", "name": 1}])",
       "'messages[0].name' must be a string, got number", "messages[0].name"},
      {R"("messages": [{"role": "assistant", "content": "x", "tool_calls": {}}])",
       "'messages[0].tool_calls' must be an array, got object", "messages[0].tool_calls"},
      {R"("messages": [{"role": "tool", "content": "x", "tool_call_id": 7}])",
       "'messages[0].tool_call_id' must be a string, got number", "messages[0].tool_call_id"},
      {kMsgs + R"(, "tools": {})", "'tools' must be an array, got object", "tools"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.messages);
    const ApiError e = chat_error("{" + c.messages + "}");
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, c.want)) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

TEST(ServerProtocolParse, ParameterErrorsNameTheField) {
  expect_chat_400(R"("model": 1)", "'model' must be a string, got number", "model");
  expect_chat_400(R"("max_tokens": 0)", "'max_tokens' must be >= 1, got 0", "max_tokens");
  expect_chat_400(R"("max_completion_tokens": -5)", "'max_completion_tokens' must be >= 1, got -5",
                  "max_completion_tokens");
  expect_chat_400(R"("max_tokens": "10")", "'max_tokens' must be an integer, got string",
                  "max_tokens");
  expect_chat_400(R"("max_tokens": 1.5)", "'max_tokens' must be an integer, got 1.5", "max_tokens");
  expect_chat_400(R"("temperature": "hot")", "'temperature' must be a number, got string",
                  "temperature");
  expect_chat_400(R"("temperature": 2.5)", "'temperature' must be between 0 and 2, got 2.5",
                  "temperature");
  expect_chat_400(R"("temperature": -0.1)", "'temperature' must be between 0 and 2", "temperature");
  expect_chat_400(R"("top_p": 0)", "'top_p' must be > 0 and <= 1, got 0", "top_p");
  expect_chat_400(R"("top_p": 1.01)", "'top_p' must be > 0 and <= 1", "top_p");
  expect_chat_400(R"("top_p": true)", "'top_p' must be a number, got boolean", "top_p");
  expect_chat_400(R"("top_k": 2.5)", "'top_k' must be an integer", "top_k");
  expect_chat_400(R"("min_p": 1.5)", "'min_p' must be between 0 and 1", "min_p");
  expect_chat_400(R"("presence_penalty": -2.1)", "'presence_penalty' must be between -2 and 2",
                  "presence_penalty");
  expect_chat_400(R"("frequency_penalty": 3)", "'frequency_penalty' must be between -2 and 2",
                  "frequency_penalty");
  expect_chat_400(R"("repetition_penalty": 0)", "'repetition_penalty' must be > 0, got 0",
                  "repetition_penalty");
  expect_chat_400(R"("repetition_penalty": 1e300)", "'repetition_penalty' must be > 0",
                  "repetition_penalty");
  expect_chat_400(R"("seed": "x")", "'seed' must be an integer, got string", "seed");
  // Beyond a double: nlohmann's out_of_range used to escape as a 500.
  expect_chat_400(R"("temperature": 1e400)", "the number 1e400 in 'temperature' is out of range", "temperature");
  expect_chat_400(R"("seed": -1e400)", "(byte 59)", "seed");  // 1-based, like parse errors
  expect_chat_400(R"("seed": 1e30)", "'seed' is out of range: ", "seed");
  expect_chat_400(R"("stop": 5)", "'stop' must be a string or an array of strings, got number",
                  "stop");
  expect_chat_400(R"("stop": ["a", 1])", "'stop[1]' must be a string, got number", "stop[1]");
  expect_chat_400(R"("stop": ["a", "b", "c", "d", "e"])",
                  "'stop' may hold at most 4 strings, got 5", "stop");
  expect_chat_400(R"("n": 2)", "'n' must be 1", "n");
  expect_chat_400(R"("n": 0)", "'n' must be 1", "n");
  expect_chat_400(R"("n": "1")", "'n' must be an integer, got string", "n");
  expect_chat_400(R"("stream": "yes")", "'stream' must be a boolean, got string", "stream");
  expect_chat_400(R"("stream_options": true)", "'stream_options' must be an object, got boolean",
                  "stream_options");
  expect_chat_400(R"("stream_options": {"include_usage": 1})",
                  "'stream_options.include_usage' must be a boolean, got number",
                  "stream_options.include_usage");
  expect_chat_400(R"("logprobs": 3)", "'logprobs' must be a boolean, got number", "logprobs");
  expect_chat_400(R"("logprobs": true, "top_logprobs": 21)",
                  "'top_logprobs' must be between 0 and 20, got 21", "top_logprobs");
  expect_chat_400(R"("top_logprobs": 2)", "'top_logprobs' requires 'logprobs' to be true",
                  "top_logprobs");
  expect_chat_400(R"("logprobs": false, "top_logprobs": 2)", "requires 'logprobs'", "top_logprobs");
  expect_chat_400(R"("logit_bias": {"1": 5})", "'logit_bias' is not supported", "logit_bias");
  EXPECT_NO_THROW(parse_chat_request(chat_with(R"("logit_bias": {})")));
}

TEST(ServerProtocolParse, CompletionPromptShapes) {
  ParsedRequest r = parse_completion_request(R"({"prompt": "Once upon"})");
  EXPECT_FALSE(r.chat);
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_text, "Once upon");

  r = parse_completion_request(R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));

  r = parse_completion_request(R"({"prompt": ["only one"]})");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_text, "only one");

  r = parse_completion_request(R"({"prompt": [[7, 8]]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{7, 8}));
}

TEST(ServerProtocolParse, CompletionErrorsNameTheField) {
  struct Case {
    std::string body, want, param;
  };
  const std::vector<Case> cases = {
      {R"({})", "'prompt' is required", "prompt"},
      {R"({"prompt": 5})", "'prompt' must be a string or an array of token ids, got number",
       "prompt"},
      {R"({"prompt": {}})", "got object", "prompt"},
      {R"({"prompt": []})", "'prompt' must not be an empty array", "prompt"},
      {R"({"prompt": ["a", "b"]})", "'prompt' holds 2 prompts", "prompt"},
      {R"({"prompt": [[1], [2]]})", "'prompt' holds 2 prompts", "prompt"},
      {R"({"prompt": [[]]})", "'prompt[0]' must not be an empty array", "prompt[0]"},
      {R"({"prompt": [1, "a"]})", "'prompt[1]' must be a token id (an integer), got string",
       "prompt[1]"},
      {R"({"prompt": [1, 2.5]})", "'prompt[1]' must be a token id (an integer), got number",
       "prompt[1]"},
      {R"({"prompt": [1, -4]})", "'prompt[1]' must be a token id >= 0, got -4", "prompt[1]"},
      {R"({"prompt": [[1, 3000000000]]})", "'prompt[0][1]' must be a token id >= 0",
       "prompt[0][1]"},
      {R"({"prompt": "x", "logprobs": 21})", "'logprobs' must be between 0 and 20, got 21",
       "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "'logprobs' must be an integer, got boolean",
       "logprobs"},
      {R"({"prompt": "x", "echo": true})", "'echo' is not supported", "echo"},
      {R"({"prompt": "x", "suffix": "s"})", "'suffix' is not supported", "suffix"},
      {R"({"prompt": "x", "n": 3})", "'n' must be 1", "n"},
      {R"({"prompt": "x", "temperature": []})", "'temperature' must be a number, got array",
       "temperature"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = completion_error(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, c.want)) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

TEST(ServerProtocolParse, CompletionLogprobsIsTheTopCount) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x"})").engine_top_logprobs(), -1);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "logprobs": 0})").engine_top_logprobs(), 0);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "logprobs": 5})").engine_top_logprobs(), 5);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "logprobs": null})").engine_top_logprobs(),
            -1);
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt": "x", "echo": false, "suffix": ""})"));
}

// ---------------------------------------------------------------------------
// Errors

TEST(ServerProtocolErrors, BodyShape) {
  json j = json::parse(error_body(invalid_request("'n' must be 1", "n")));
  EXPECT_EQ(j,
            json::parse(R"({"error": {"message": "'n' must be 1", "type": "invalid_request_error",
                                          "param": "n", "code": null}})"));
  j = json::parse(error_body(server_error("boom")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(j["error"]["type"], "server_error");
  // Invalid UTF-8 in a message (echoed from a request) never throws.
  EXPECT_NO_THROW(json::parse(error_body(invalid_request("bad \xff byte"))));
}

TEST(ServerProtocolErrors, StatusTypesAndCodes) {
  ApiError e = model_not_found("gpt-9");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_TRUE(contains(e.message, "gpt-9"));
  e = context_length_exceeded(4000, 200, 4096);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_TRUE(contains(e.message, "4096")) << e.message;
  EXPECT_TRUE(contains(e.message, "4200 tokens (4000 in the prompt, 200 for the completion)"))
      << e.message;
  e = payload_too_large(2000000, 1048576);
  EXPECT_EQ(e.status, 413);
  EXPECT_TRUE(contains(e.message, "2000000") && contains(e.message, "1048576"));
  e = authentication_failed("bad key");
  EXPECT_EQ(e.status, 401);
  EXPECT_EQ(e.type, "authentication_error");
  e = server_overloaded("queue full");
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.type, "rate_limit_error");
  EXPECT_EQ(e.code, "server_overloaded");
  EXPECT_EQ(server_error("x").status, 500);
  ApiException ex(invalid_request("m"));
  EXPECT_STREQ(ex.what(), "m");
}

TEST(ServerProtocolErrors, FinalMapping) {
  Final f;
  f.finish_reason = "stop";
  EXPECT_EQ(*finish_reason(f), "stop");
  f.finish_reason = "length";
  EXPECT_EQ(*finish_reason(f), "length");
  f.finish_reason = "cancelled";
  EXPECT_FALSE(finish_reason(f));
  EXPECT_EQ(final_error(f).message, "request cancelled");
  f.finish_reason = "error";
  f.error = "out of KV blocks";
  EXPECT_FALSE(finish_reason(f));
  const json j = json::parse(error_body(final_error(f)));
  EXPECT_EQ(j["error"]["message"], "out of KV blocks");
  EXPECT_EQ(j["error"]["type"], "server_error");
}

}  // namespace

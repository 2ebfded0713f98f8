// Response formatting of the OpenAI protocol: chat / text completion bodies and their
// SSE chunk sequences, parsed back as JSON; log-probabilities; token bytes that are not
// valid UTF-8.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

using namespace hearth::server;
using hearth::engine::Delta;
using hearth::engine::Final;
using hearth::engine::TokenLogprob;
using hearth::engine::TokenOut;
using json = nlohmann::ordered_json;

namespace {

// Token 1 "Hel", 2 "lo", 3 "\xe2\x82" (half of "€"), 4 "\xac" (its end), 5 " world",
// 7 "\xff"; 6 (and any other id) throws.
const std::map<int32_t, std::string> kPieces = {{1, "Hel"},  {2, "lo"},     {3, "\xe2\x82"},
                                                {4, "\xac"}, {5, " world"}, {7, "\xff"}};

std::string piece(int32_t id) {
  auto it = kPieces.find(id);
  if (it == kPieces.end()) throw std::out_of_range("token id");
  return it->second;
}

ResponseContext context(bool logprobs = false, bool include_usage = false) {
  ResponseContext ctx;
  ctx.id = "chatcmpl-test";
  ctx.created = 1700000000;
  ctx.model = "tiny";
  ctx.logprobs = logprobs;
  ctx.include_usage = include_usage;
  ctx.token_text = piece;
  return ctx;
}

Final final_record(const std::string& reason = "stop") {
  Final f;
  f.finish_reason = reason;
  f.prompt_tokens = 10;
  f.completion_tokens = 3;
  f.cached_tokens = 4;
  f.timings.queue_ms = 1.5;
  f.timings.prefill_ms = 12.0;
  f.timings.ttft_ms = 14.0;
  f.timings.decode_ms = 20.0;
  f.timings.prompt_n = 10;
  f.timings.cached_n = 4;
  f.timings.disk_n = 3;
  f.timings.predicted_n = 3;
  return f;
}

TokenOut tok(int32_t id, float lp, std::vector<TokenLogprob> top = {}) {
  TokenOut t;
  t.token = id;
  t.logprob = lp;
  t.top = std::move(top);
  return t;
}

void expect_timings(const json& t) {
  ASSERT_TRUE(t.is_object()) << t.dump();
  EXPECT_DOUBLE_EQ(t["queue_ms"].get<double>(), 1.5);
  EXPECT_EQ(t["prompt_n"], 10);
  EXPECT_EQ(t["cached_n"], 4);
  EXPECT_EQ(t["cached_disk_n"], 3);  // of cached_n, read back from the KV disk tier
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 12.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 500.0);  // 6 tokens in 12 ms
  EXPECT_EQ(t["predicted_n"], 3);
  EXPECT_DOUBLE_EQ(t["predicted_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 100.0);  // 2 gaps in 20 ms
  EXPECT_DOUBLE_EQ(t["ttft_ms"].get<double>(), 14.0);
  EXPECT_EQ(t["drafted_n"], 0);  // speculative decoding (none here)
  EXPECT_EQ(t["accepted_n"], 0);
  EXPECT_EQ(t.size(), 12u);
}

void expect_usage(const json& u) {
  EXPECT_EQ(u, json::parse(R"({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                               "prompt_tokens_details": {"cached_tokens": 4}})"));
}

// Splits an SSE stream into its data payloads; checks the framing.
std::vector<std::string> sse_payloads(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    EXPECT_EQ(stream.compare(pos, 6, "data: "), 0) << stream.substr(pos);
    const size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event";
      break;
    }
    out.push_back(stream.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

TEST(ServerFormat, Sse) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(ServerFormat, ResponseIds) {
  const std::string a = make_response_id("chatcmpl-"), b = make_response_id("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, b);
  for (char c : a.substr(9)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  EXPECT_GT(unix_time_now(), 1700000000);
}

TEST(ServerFormat, SanitizeUtf8) {
  EXPECT_EQ(sanitize_utf8("plain"), "plain");
  EXPECT_EQ(sanitize_utf8("\xe2\x82\xac \xf0\x9f\x98\x80"), "\xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(sanitize_utf8("a\xe2\x82"), "a\xef\xbf\xbd\xef\xbf\xbd");  // truncated: one per byte
  EXPECT_EQ(sanitize_utf8("\xac"), "\xef\xbf\xbd");                    // lone continuation
  EXPECT_EQ(sanitize_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");    // overlong
  EXPECT_EQ(sanitize_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(sanitize_utf8("\xf4\x90\x80\x80x"),
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx");  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(sanitize_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(ServerFormat, ChatCompletion) {
  const Final f = final_record("length");
  const json j = json::parse(chat_completion(context(), "Hello", {}, f));
  EXPECT_EQ(j["id"], "chatcmpl-test");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"], (json{{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  expect_usage(j["usage"]);
  expect_timings(j["timings"]);
}

TEST(ServerFormat, ChatCompletionErrorFinalHasNullReason) {
  const json j = json::parse(chat_completion(context(), "", {}, final_record("cancelled")));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
}

TEST(ServerFormat, ChatLogprobs) {
  const std::vector<TokenOut> toks = {tok(1, -0.25f, {{1, -0.25f}, {5, -2.0f}}),
                                      tok(3, -1.0f, {{3, -1.0f}}), tok(4, -0.5f)};
  const json j =
      json::parse(chat_completion(context(true), "Hel\xe2\x82\xac", toks, final_record()));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["token"], "Hel");
  EXPECT_DOUBLE_EQ(content[0]["logprob"].get<double>(), -0.25);
  EXPECT_EQ(content[0]["bytes"], (json{72, 101, 108}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(
      content[0]["top_logprobs"][1],
      (json{{"token", " world"}, {"logprob", -2.0}, {"bytes", {32, 119, 111, 114, 108, 100}}}));
  // Half a character: the token string carries U+FFFD, the bytes are exact.
  EXPECT_EQ(content[1]["token"], "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(content[1]["bytes"], (json{0xe2, 0x82}));
  EXPECT_EQ(content[2]["bytes"], (json{0xac}));
  EXPECT_TRUE(content[2]["top_logprobs"].empty());
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hel\xe2\x82\xac");
}

TEST(ServerFormat, NeverThrowsOnBadBytesOrTokens) {
  ResponseContext ctx = context(true);
  const std::vector<TokenOut> toks = {tok(6, -1.0f, {{6, -1.0f}}),  // the callback throws
                                      tok(1, -std::numeric_limits<float>::infinity())};
  std::string body;
  ASSERT_NO_THROW(body = chat_completion(ctx, "bad \xff\xe2 content", toks, final_record()));
  json j = json::parse(body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "bad \xef\xbf\xbd\xef\xbf\xbd content");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "");
  EXPECT_DOUBLE_EQ(j["choices"][0]["logprobs"]["content"][1]["logprob"].get<double>(), -9999.0);
  Delta d;
  d.text = "\xe2\x82";
  d.tokens = {tok(3, -0.1f)};
  ASSERT_NO_THROW(json::parse(chat_chunk_delta(ctx, d)));
  size_t offset = 0;
  ASSERT_NO_THROW(json::parse(text_chunk_delta(ctx, d, offset)));
  ctx.token_text = nullptr;  // no callback: empty token text
  ASSERT_NO_THROW(json::parse(text_completion(ctx, "x", toks, final_record())));
}

// The whole stream of a chat completion, as OpenAI sends it.
TEST(ServerFormat, ChatStreamSequence) {
  const ResponseContext ctx = context(false, true);
  const Final f = final_record("stop");
  Delta d1, d2;
  d1.text = "Hel";
  d1.tokens = {tok(1, -0.1f)};
  d2.text = "lo";
  d2.tokens = {tok(2, -0.2f)};
  const std::string stream = sse_data(chat_chunk_role(ctx)) + sse_data(chat_chunk_delta(ctx, d1)) +
                             sse_data(chat_chunk_delta(ctx, d2)) +
                             sse_data(chat_chunk_finish(ctx, f)) +
                             sse_data(chat_chunk_usage(ctx, f)) + sse_done();
  const std::vector<std::string> events = sse_payloads(stream);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<json> chunks;
  for (size_t i = 0; i + 1 < events.size(); ++i) chunks.push_back(json::parse(events[i]));
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "chatcmpl-test");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["created"], 1700000000);
    EXPECT_EQ(c["model"], "tiny");
  }
  // First: the role; then content deltas; then the finish; then usage with no choices.
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  std::string text;
  for (int i = 1; i <= 2; ++i) {
    const json& choice = chunks[i]["choices"][0];
    EXPECT_EQ(choice["index"], 0);
    EXPECT_FALSE(choice["delta"].contains("role"));
    EXPECT_TRUE(choice["finish_reason"].is_null());
    EXPECT_TRUE(choice["logprobs"].is_null());
    EXPECT_TRUE(chunks[i]["usage"].is_null());  // include_usage: null until the last chunk
    text += choice["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunks[3]["choices"][0]["finish_reason"], "stop");
  expect_timings(chunks[3]["timings"]);
  EXPECT_TRUE(chunks[4]["choices"].is_array());
  EXPECT_TRUE(chunks[4]["choices"].empty());
  expect_usage(chunks[4]["usage"]);
  expect_timings(chunks[4]["timings"]);
}

TEST(ServerFormat, ChatChunksWithoutUsageOrWithLogprobs) {
  Delta d;
  d.text = "lo";
  d.tokens = {tok(2, -0.5f, {{2, -0.5f}})};
  json c = json::parse(chat_chunk_delta(context(false, false), d));
  EXPECT_FALSE(c.contains("usage"));
  c = json::parse(chat_chunk_delta(context(true, false), d));
  const json& lp = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 1u);
  EXPECT_EQ(lp[0]["token"], "lo");
  EXPECT_EQ(lp[0]["top_logprobs"][0]["token"], "lo");
  c = json::parse(chat_chunk_finish(context(), final_record("length")));
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
}

TEST(ServerFormat, TextCompletion) {
  ResponseContext ctx = context();
  ctx.id = "cmpl-test";
  json j = json::parse(text_completion(ctx, "Hello", {}, final_record("length")));
  EXPECT_EQ(j["id"], "cmpl-test");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  expect_usage(j["usage"]);
  expect_timings(j["timings"]);
}

TEST(ServerFormat, TextLogprobs) {
  const std::vector<TokenOut> toks = {tok(1, -0.25f, {{1, -0.25f}, {5, -2.0f}}), tok(2, -0.5f, {}),
                                      tok(3, -1.0f, {{4, -1.0f}, {7, -3.0f}})};
  const json j = json::parse(text_completion(context(true), "Hello", toks, final_record()));
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"Hel", "lo", "\xef\xbf\xbd\xef\xbf\xbd"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.25, -0.5, -1.0}));
  EXPECT_EQ(lp["text_offset"], (json{0, 3, 5}));
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0], (json{{"Hel", -0.25}, {" world", -2.0}}));
  EXPECT_EQ(lp["top_logprobs"][1], json::object());
  // Two different byte tokens that both sanitize to U+FFFD keep one key (the larger).
  EXPECT_EQ(lp["top_logprobs"][2].size(), 1u);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][2].begin().value().get<double>(), -1.0);
}

TEST(ServerFormat, TextStreamSequence) {
  ResponseContext ctx = context(true, true);
  ctx.id = "cmpl-s";
  const Final f = final_record("stop");
  Delta d1, d2;
  d1.text = "Hel";
  d1.tokens = {tok(1, -0.1f)};
  d2.text = "lo world";
  d2.tokens = {tok(2, -0.2f), tok(5, -0.3f)};
  size_t offset = 0;
  std::string stream = sse_data(text_chunk_delta(ctx, d1, offset));
  stream += sse_data(text_chunk_delta(ctx, d2, offset));
  stream += sse_data(text_chunk_finish(ctx, f)) + sse_data(text_chunk_usage(ctx, f)) + sse_done();
  EXPECT_EQ(offset, 11u);
  const std::vector<std::string> events = sse_payloads(stream);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<json> chunks;
  for (size_t i = 0; i + 1 < events.size(); ++i) chunks.push_back(json::parse(events[i]));
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "cmpl-s");
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["created"], 1700000000);
  }
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "Hel");
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["text_offset"], (json{0}));
  EXPECT_EQ(chunks[1]["choices"][0]["text"], "lo world");
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["text_offset"], (json{3, 5}));
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["tokens"], (json{"lo", " world"}));
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunks[1]["usage"].is_null());
  EXPECT_EQ(chunks[2]["choices"][0]["text"], "");
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "stop");
  expect_timings(chunks[2]["timings"]);
  EXPECT_TRUE(chunks[3]["choices"].empty());
  expect_usage(chunks[3]["usage"]);
}

TEST(ServerFormat, StreamErrorChunk) {
  Final f = final_record("error");
  f.error = "engine failed \xff";
  const std::vector<std::string> events = sse_payloads(sse_data(error_body(final_error(f))));
  ASSERT_EQ(events.size(), 1u);
  const json j = json::parse(events[0]);
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_EQ(j["error"]["message"], "engine failed \xef\xbf\xbd");
}

TEST(ServerFormat, TimingsWithoutDecode) {
  hearth::engine::Timings t;
  t.prompt_n = 5;
  t.predicted_n = 1;
  const json j = timings_json(t);
  EXPECT_EQ(j["prompt_per_second"], 0.0);
  EXPECT_EQ(j["predicted_per_second"], 0.0);
  EXPECT_EQ(dump_json(j).find("null"), std::string::npos);
}

}  // namespace

// text_offset counts characters, as OpenAI does: "€" split over tokens 3 and 4 is one
// character, counted where it starts.
TEST(ServerFormat, TextOffsetsCountCharacters) {
  const std::vector<TokenOut> toks = {tok(3, -0.1f, {}), tok(4, -0.2f, {}), tok(5, -0.3f, {}), tok(1, -0.4f, {})};
  const json j = json::parse(text_completion(context(true), "\xe2\x82\xac world Hel", toks, final_record()));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (json{0, 1, 1, 7}));
}

// ---------------------------------------------------------------------------
// Parsed turns: tool calls and reasoning

namespace {

ParsedOutput parsed_with_call() {
  ParsedOutput out;
  out.reasoning = "I need the weather.";
  out.tool_calls.push_back({"call_abc", "get_weather", R"({"city":"Paris"})"});
  out.tool_calls.push_back({"call_def", "get_time", "{}"});
  return out;
}

}  // namespace

TEST(ServerFormatTools, WholeCompletionWithCallsAndReasoning) {
  const json j = json::parse(chat_completion(context(), parsed_with_call(), {}, final_record()));
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& m = choice["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "I need the weather.");
  EXPECT_EQ(m["reasoning"], "I need the weather.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0],
            json::parse(R"({"id": "call_abc", "type": "function", "function": {"name": "get_weather",
              "arguments": "{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
  // Cut by max_tokens: "length" stays.
  const json cut = json::parse(chat_completion(context(), parsed_with_call(), {}, final_record("length")));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  // Plain content: no reasoning / tool_calls keys, finish "stop".
  ParsedOutput plain;
  plain.content = "Hi";
  const json p = json::parse(chat_completion(context(), plain, {}, final_record()));
  EXPECT_EQ(p["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "Hi"})"));
  EXPECT_EQ(p["choices"][0]["finish_reason"], "stop");
}

TEST(ServerFormatTools, StreamedEventsFoldLikeTheWholeResponse) {
  // The parser's events for reasoning, text and two calls, as chunks.
  OutputOptions o;
  o.tool_format = ToolFormat::kHermes;
  auto parser = make_output_parser(o);
  const std::string text =
      "<think>\nhmm\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
      "</tool_call>";
  std::vector<std::string> chunks;
  for (size_t i = 0; i < text.size(); i += 7) {
    auto ev = parser->feed(text.substr(i, 7));
    for (auto& c : chat_chunks_events(context(), ev, {})) chunks.push_back(c);
  }
  for (auto& c : chat_chunks_events(context(), parser->finish(), {})) chunks.push_back(c);
  chunks.push_back(chat_chunk_finish(context(), final_record(), true));

  std::string reasoning, reasoning2, content;
  std::map<int, json> calls;
  std::string finish;
  for (const auto& c : chunks) {
    const json j = json::parse(c);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    const json& ch = j["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    const json& d = ch["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("reasoning")) reasoning2 += d["reasoning"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& tc : d["tool_calls"]) {
        const int idx = tc["index"];
        if (tc.contains("id")) {
          EXPECT_FALSE(calls.count(idx)) << "second header for index " << idx;
          EXPECT_EQ(tc["type"], "function");
          EXPECT_EQ(tc["function"]["arguments"], "");
          calls[idx] = {{"name", tc["function"]["name"]}, {"arguments", ""}};
        } else {
          ASSERT_TRUE(calls.count(idx)) << "arguments before the header";
          EXPECT_FALSE(tc.contains("type"));
          calls[idx]["arguments"] = calls[idx]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(reasoning2, "hmm");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["name"], "get_time");
  EXPECT_EQ(json::parse(calls[1]["arguments"].get<std::string>()), json::object());
  EXPECT_EQ(finish, "tool_calls");
}

TEST(ServerFormatTools, LogprobsRideOnTheFirstChunkOrAnEmptyOne) {
  std::vector<TokenOut> toks(1);
  toks[0].token = 1;
  std::vector<OutputEvent> ev(2);
  ev[0].kind = OutputEvent::Kind::kReasoning;
  ev[0].text = "a";
  ev[1].kind = OutputEvent::Kind::kContent;
  ev[1].text = "b";
  auto chunks = chat_chunks_events(context(true), ev, toks);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(json::parse(chunks[0])["choices"][0]["logprobs"]["content"][0]["token"], "Hel");
  EXPECT_TRUE(json::parse(chunks[1])["choices"][0]["logprobs"].is_null());
  chunks = chat_chunks_events(context(true), {}, toks);  // text held back by the parser
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(json::parse(chunks[0])["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(chat_chunks_events(context(false), {}, toks).empty());
}

// hearth bench: SSE parsing, URLs, prompt generation and calibration, charts.
#include <gtest/gtest.h>

#include "bench/launcher.h"
#include "bench/prompts.h"
#include "bench/sse_client.h"
#include "bench/svg.h"
#include "core/error.h"

namespace hearth::bench {
namespace {

TEST(BenchSse, SplitsCompleteEventsAndKeepsTheRest) {
  std::string buf = "data: {\"a\":1}\n\ndata: [DONE]\r\n\r\ndata: {\"par";
  const auto ev = take_sse_events(buf);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], "{\"a\":1}");
  EXPECT_EQ(ev[1], "[DONE]");
  EXPECT_EQ(buf, "data: {\"par");
  buf += "tial\":2}\n\n: comment\n\n";
  const auto more = take_sse_events(buf);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0], "{\"partial\":2}");
  EXPECT_TRUE(buf.empty());
}

TEST(BenchSse, AppliesDeltasUsageAndErrors) {
  RequestResult r;
  EXPECT_FALSE(apply_event(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})", 1.0, r));
  EXPECT_EQ(r.chunks, 0);  // a role-only delta carries no token
  apply_event(R"({"choices":[{"delta":{"content":"Hel"}}],"usage":null})", 1.5, r);
  apply_event(R"({"choices":[{"delta":{"content":"lo"},"finish_reason":"length"}]})", 1.7, r);
  apply_event(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,)"
              R"("prompt_tokens_details":{"cached_tokens":4}}})", 1.8, r);
  EXPECT_TRUE(apply_event("[DONE]", 1.9, r));
  EXPECT_EQ(r.chunks, 2);
  EXPECT_EQ(r.chars, 5);
  EXPECT_EQ(r.t_first, 1.5);
  EXPECT_EQ(r.t_last, 1.7);
  EXPECT_TRUE(r.has_usage);
  EXPECT_EQ(r.prompt_tokens, 9);
  EXPECT_EQ(r.completion_tokens, 2);
  EXPECT_EQ(r.cached_tokens, 4);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_TRUE(r.error.empty());

  RequestResult e;
  apply_event(R"({"error":{"message":"engine stopped"}})", 2.0, e);
  EXPECT_EQ(e.error, "error in stream: engine stopped");
  RequestResult bad;
  apply_event("{not json", 2.0, bad);
  EXPECT_NE(bad.error.find("unparseable"), std::string::npos);
}

TEST(BenchSse, ReasoningAndLegacyTextCountAsTokens) {
  RequestResult r;
  apply_event(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})", 1.0, r);
  apply_event(R"({"choices":[{"text":"x"}]})", 1.1, r);
  EXPECT_EQ(r.chunks, 2);
}

TEST(BenchEndpoint, ParsesUrls) {
  Endpoint e = parse_endpoint("http://127.0.0.1:8080/v1/", "t");
  EXPECT_EQ(e.origin, "http://127.0.0.1:8080");
  EXPECT_EQ(e.prefix, "");
  e = parse_endpoint("https://example.com/api/v1", "t");
  EXPECT_EQ(e.origin, "https://example.com");
  EXPECT_EQ(e.prefix, "/api");
  EXPECT_THROW(parse_endpoint("localhost:8080", "t"), Error);
  EXPECT_THROW(parse_endpoint("ftp://h:1", "t"), Error);
  EXPECT_THROW(parse_endpoint("http://h:99999", "t"), Error);
  try {
    parse_endpoint("nope", "--target a");
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--target a"), std::string::npos);
  }
}

TEST(BenchLauncher, FindsTheUrlAServerPrints) {
  EXPECT_EQ(find_url("hearth: listening on http://127.0.0.1:4321 (OpenAI API at http://127.0.0.1:4321/v1)\n"),
            "http://127.0.0.1:4321");
  EXPECT_EQ(find_url("INFO: Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C)"), "http://127.0.0.1:8000");
  EXPECT_EQ(find_url("see http://example.com for help"), "");
  EXPECT_EQ(find_url(""), "");
}

TEST(BenchPrompts, DeterministicAndSized) {
  const std::string a = make_text(7, 100), b = make_text(7, 100), c = make_text(8, 100);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int words = 1;
  for (char ch : a) words += ch == ' ';
  EXPECT_EQ(words, 100);
  EXPECT_EQ(a.back(), '.');
  EXPECT_NE(mix_seed(1, 2, 3), mix_seed(1, 3, 2));
}

TEST(BenchPrompts, CalibrationFitsTwoPoints) {
  const Calibration c = fit_calibration(32, 80, 432, 600);  // 1.3 tokens per word + 38.4
  EXPECT_NEAR(c.tokens_per_word, 1.3, 1e-12);
  EXPECT_NEAR(c.overhead, 80 - 1.3 * 32, 1e-9);
  EXPECT_EQ(c.words_for(1338), static_cast<int64_t>(std::llround((1338 - c.overhead) / 1.3)));
  EXPECT_EQ(c.words_for(1), 1);  // never below one word
}

TEST(BenchPrompts, AgentConversationGrowsByAppending) {
  Calibration cal;
  const AgentScript s(5, 600, cal);
  const auto m0 = s.messages(0), m2 = s.messages(2);
  ASSERT_EQ(m0.size(), 2u);
  ASSERT_EQ(m2.size(), 2u + 2 * 3);
  EXPECT_EQ(m2[0], m0[0]);
  EXPECT_EQ(m2[1], m0[1]);  // earlier turns unchanged: a prefix cache can reuse them
  EXPECT_EQ(m2[2]["role"], "assistant");
  EXPECT_EQ(m2[3]["role"], "tool");
  EXPECT_NE(m0[0]["content"].get<std::string>().find("\"function\""), std::string::npos);
}

TEST(BenchSvg, RendersSeriesAndTicks) {
  EXPECT_EQ(nice_step(95, 5), 20);
  EXPECT_EQ(nice_step(1, 5), 0.2);
  Chart c{"T <1>", "x", "y", {{"a", {{1, 10}, {2, 30}}, false}, {"b", {{1, 5}}, true}}};
  const std::string svg = render_svg(c);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("T &lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("b (untrusted)"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_EQ(render_svg(Chart{"t", "x", "y", {}}), "");
}

}  // namespace
}  // namespace hearth::bench

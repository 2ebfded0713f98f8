// Constrained decoding's grammar layer on real vocabularies (the default model's
// SmolLM2 tokenizer and Qwen3's tokenizer.json): compiling and caching constraints,
// the token masks, the matcher walking token by token, refused schemas, and the
// tool-call constraints (Hermes JSON, Qwen XML, Llama 3 JSON).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/constraint.h"
#include "grammar/schema_check.h"
#include "grammar/tool_call_constraint.h"
#include "tokenizer/tokenizer.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::grammar::ConstraintCompiler;
using hearth::grammar::ConstraintKind;
using hearth::grammar::ConstraintMatcher;
using hearth::grammar::ConstraintSpec;
using hearth::grammar::ToolCallFormat;
using hearth::grammar::ToolSchema;
using hearth::tokenizer::Tokenizer;
using Json = nlohmann::json;

namespace {

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "role":{"enum":["admin","user"]},
  "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}
},"required":["name","age","role"]})";

ConstraintSpec schema_spec(std::string text) {
  ConstraintSpec s;
  s.kind = ConstraintKind::kJsonSchema;
  s.text = std::move(text);
  return s;
}

std::vector<int32_t> allowed(const std::vector<uint32_t>& mask, int32_t n_vocab) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n_vocab; ++i) {
    if ((mask[static_cast<size_t>(i) / 32] >> (i % 32)) & 1u) out.push_back(i);
  }
  return out;
}

// The default model's tokenizer (SmolLM2, byte-level BPE) and its end-of-text ids.
class GrammarTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    tok_ = std::make_unique<Tokenizer>(Tokenizer::load(p));
    stop_ = {tok_->vocab().eos};
    if (int32_t im_end = tok_->vocab().find("<|im_end|>"); im_end >= 0 && im_end != stop_[0])
      stop_.push_back(im_end);
    std::sort(stop_.begin(), stop_.end());
    compiler_ =
        std::make_unique<ConstraintCompiler>(*tok_, static_cast<int32_t>(tok_->n_tokens()), stop_);
  }
  static void TearDownTestSuite() {
    compiler_.reset();
    tok_.reset();
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }
  static std::vector<int32_t> encode(const std::string& text) {
    hearth::tokenizer::EncodeOptions o;
    o.add_special = false;
    return tok_->encode(text, o);
  }
  // Accepts every token of `text`; returns how many were accepted before one was refused.
  static size_t feed(ConstraintMatcher& m, const std::string& text) {
    const auto ids = encode(text);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!m.accept(ids[i])) return i;
    }
    return ids.size();
  }
  static inline std::unique_ptr<Tokenizer> tok_;
  static inline std::vector<int32_t> stop_;
  static inline std::unique_ptr<ConstraintCompiler> compiler_;
};

TEST_F(GrammarTest, CompiledConstraintsAreCachedBySpec) {
  const uint64_t before = compiler_->n_compiled();
  auto a = compiler_->compile(schema_spec(kPersonSchema));
  auto b = compiler_->compile(schema_spec(kPersonSchema));
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(compiler_->n_compiled(), before + 1);
  ConstraintSpec loose = schema_spec(kPersonSchema);
  loose.strict = false;
  EXPECT_NE(compiler_->compile(loose).get(), a.get());
  ConstraintSpec obj;
  obj.kind = ConstraintKind::kJsonObject;
  EXPECT_NE(compiler_->compile(obj).get(), a.get());
  EXPECT_EQ(compiler_->n_compiled(), before + 3);
}

TEST_F(GrammarTest, CacheKeepsTheMostRecentlyUsed) {
  ConstraintCompiler small(*tok_, static_cast<int32_t>(tok_->n_tokens()), stop_, 2);
  auto a = small.compile(schema_spec(R"({"type":"integer"})"));
  small.compile(schema_spec(R"({"type":"boolean"})"));
  small.compile(schema_spec(R"({"type":"integer"})"));  // a is now the most recent
  small.compile(schema_spec(R"({"type":"null"})"));     // evicts boolean
  EXPECT_EQ(small.n_cached(), 2u);
  EXPECT_EQ(small.n_compiled(), 3u);
  EXPECT_EQ(small.compile(schema_spec(R"({"type":"integer"})")).get(), a.get());
  small.compile(schema_spec(R"({"type":"boolean"})"));
  EXPECT_EQ(small.n_compiled(), 4u);
}

TEST_F(GrammarTest, FirstMaskAllowsOnlyAnObjectStartWithoutWhitespace) {
  ConstraintMatcher m(compiler_->compile(schema_spec(kPersonSchema)));
  std::vector<uint32_t> mask(static_cast<size_t>(hearth::grammar::mask_words(m.n_vocab())));
  m.fill_mask(mask);
  const auto ok = allowed(mask, m.n_vocab());
  ASSERT_FALSE(ok.empty());
  for (int32_t id : ok) {
    const std::string piece = tok_->token_to_piece(id);
    ASSERT_FALSE(piece.empty()) << id;
    EXPECT_EQ(piece[0], '{') << "token " << id << " '" << piece << "'";
  }
  for (int32_t s : stop_) EXPECT_EQ(std::count(ok.begin(), ok.end(), s), 0);
  // Compact: after {"name": the value starts at once.
  ASSERT_EQ(feed(m, R"({"name":)"), encode(R"({"name":)").size());
  m.fill_mask(mask);
  for (int32_t id : allowed(mask, m.n_vocab())) {
    const std::string piece = tok_->token_to_piece(id);
    EXPECT_EQ(piece[0], '"') << "token " << id << " '" << piece << "'";
  }
}

TEST_F(GrammarTest, MatcherAcceptsValidJsonAndEndsWithOnlyStopTokens) {
  ConstraintMatcher m(compiler_->compile(schema_spec(kPersonSchema)));
  const std::string text = R"({"name":"Ann","age":31,"role":"admin","tags":["x","yz"]})";
  EXPECT_EQ(feed(m, text), encode(text).size());
  EXPECT_TRUE(m.completed());
  EXPECT_FALSE(m.terminated());
  std::vector<uint32_t> mask(static_cast<size_t>(hearth::grammar::mask_words(m.n_vocab())));
  m.fill_mask(mask);
  EXPECT_TRUE(hearth::grammar::only_stop_allowed(mask, stop_, m.n_vocab()));
  EXPECT_TRUE(m.accept(stop_[0]));
  EXPECT_TRUE(m.terminated());
}

TEST_F(GrammarTest, MatcherRefusesWhatTheSchemaForbids) {
  auto c = compiler_->compile(schema_spec(kPersonSchema));
  {
    ConstraintMatcher m(c);  // leading whitespace
    EXPECT_FALSE(m.accept(encode(" ")[0]));
  }
  {
    ConstraintMatcher m(c);  // properties out of the schema's order (strict, ordered)
    EXPECT_LT(feed(m, R"({"age":3})"), encode(R"({"age":3})").size());
  }
  {
    ConstraintMatcher m(c);  // a value outside the enum
    const std::string text = R"({"name":"A","age":1,"role":"root"})";
    EXPECT_LT(feed(m, text), encode(text).size());
  }
  {
    ConstraintMatcher m(c);  // a required property missing: "}" refused
    const std::string text = R"({"name":"A","age":1})";
    EXPECT_LT(feed(m, text), encode(text).size());
    EXPECT_FALSE(m.completed());
  }
  {
    ConstraintMatcher m(c);  // an unknown property (strict)
    const std::string text = R"({"name":"A","age":1,"role":"user","extra":1})";
    EXPECT_LT(feed(m, text), encode(text).size());
  }
}

// Any path through the masks is valid JSON for the schema: random walks over the
// allowed tokens always end in output that parses and validates.
TEST_F(GrammarTest, RandomWalksThroughTheMaskGiveValidJson) {
  auto c = compiler_->compile(schema_spec(kPersonSchema));
  std::mt19937 rng(7);
  for (int walk = 0; walk < 20; ++walk) {
    ConstraintMatcher m(c);
    std::vector<uint32_t> mask(static_cast<size_t>(hearth::grammar::mask_words(m.n_vocab())));
    std::string text;
    bool finished = false;
    for (int step = 0; step < 400 && !finished; ++step) {
      m.fill_mask(mask);
      if (hearth::grammar::only_stop_allowed(mask, stop_, m.n_vocab())) {
        finished = true;
        break;
      }
      auto ok = allowed(mask, m.n_vocab());
      // Prefer non-stop tokens so the walk explores the structure.
      ok.erase(std::remove_if(
                   ok.begin(), ok.end(),
                   [](int32_t id) { return std::binary_search(stop_.begin(), stop_.end(), id); }),
               ok.end());
      ASSERT_FALSE(ok.empty());
      const int32_t id = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(id));
      text += tok_->token_to_piece(id);
    }
    ASSERT_TRUE(finished) << "walk " << walk << " did not finish: " << text;
    const Json j = Json::parse(text);  // throws (fails the test) on invalid JSON
    ASSERT_TRUE(j.is_object()) << text;
    ASSERT_TRUE(j.at("name").is_string()) << text;
    EXPECT_LE(j.at("name").get<std::string>().size(), 12u * 4) << text;  // 12 characters, UTF-8
    ASSERT_TRUE(j.at("age").is_number_integer()) << text;
    EXPECT_GE(j.at("age").get<int64_t>(), 0) << text;
    EXPECT_LE(j.at("age").get<int64_t>(), 150) << text;
    EXPECT_TRUE(j.at("role") == "admin" || j.at("role") == "user") << text;
    if (j.contains("tags")) {
      ASSERT_TRUE(j.at("tags").is_array()) << text;
      EXPECT_LE(j.at("tags").size(), 3u) << text;
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "role" ||
                  it.key() == "tags")
          << text;
    }
  }
}

// Length-bounded strings: characters that need no escape (raw control characters
// never; xgrammar has no escapes there), counted as characters, bounds kept.
TEST_F(GrammarTest, LengthBoundedStringsAreProperJsonStrings) {
  auto c = compiler_->compile(schema_spec(
      R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":4}},"required":["s"]})"));
  auto fits = [&](const std::string& text) {
    ConstraintMatcher m(c);
    return feed(m, text) == encode(text).size() && m.completed();
  };
  EXPECT_TRUE(fits(R"({"s":"ab"})"));
  EXPECT_TRUE(fits(R"({"s":"a b?"})"));
  EXPECT_TRUE(fits("{\"s\":\"\xc3\xa9t\xc3\xa9\"}"));  // 3 characters, 5 bytes
  EXPECT_FALSE(fits(R"({"s":"a"})"));                  // too short
  EXPECT_FALSE(fits(R"({"s":"abcde"})"));              // too long
  EXPECT_FALSE(fits("{\"s\":\"a\tb\"}"));              // a raw tab
  EXPECT_FALSE(
      fits("{\"s\":\"a\x07"
           "b\"}"));  // a raw BEL
}

TEST(GrammarSchemaRewrite, BoundsMoveIntoAPatternAndOrderIsKept) {
  const auto in = nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"z":{"type":"string","maxLength":3},"a":{"type":"array","items":{"type":"string","minLength":1}}, "p":{"type":"string","pattern":"^x+$"}}})");
  const auto out = hearth::grammar::enforceable_schema(in);
  std::vector<std::string> keys;
  for (auto it = out["properties"].begin(); it != out["properties"].end(); ++it)
    keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a", "p"}));
  EXPECT_FALSE(out["properties"]["z"].contains("maxLength"));
  EXPECT_NE(out["properties"]["z"]["pattern"].get<std::string>().find("{0,3}"), std::string::npos);
  EXPECT_NE(out["properties"]["a"]["items"]["pattern"].get<std::string>().find("{1,}"),
            std::string::npos);
  EXPECT_EQ(out["properties"]["p"], in["properties"]["p"]);
}

// What one mask costs on this vocabulary (49152 tokens), on the benchmark's schema
// (benchmarks/bench_structured.py): printed for docs/BENCHMARKS.md, bounded well under a
// decode step (tens of milliseconds at 8 streams on 2 threads) so it hides behind it.
TEST_F(GrammarTest, MaskCostPerToken) {
  auto c = compiler_->compile(schema_spec(
      R"({"type":"object","properties":{"words":{"type":"array","items":{"type":"string","maxLength":12},"minItems":200}},"required":["words"]})"));
  ConstraintMatcher m(c);
  std::vector<uint32_t> mask(static_cast<size_t>(hearth::grammar::mask_words(m.n_vocab())));
  std::mt19937 rng(3);
  std::vector<double> us;
  for (int step = 0; step < 128; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    m.fill_mask(mask);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    auto ok = allowed(mask, m.n_vocab());
    ASSERT_FALSE(ok.empty());
    ASSERT_TRUE(m.accept(ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)]));
  }
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  std::printf("fill_mask: median %.1f us, p90 %.1f us, max %.1f us over %zu tokens\n", median,
              us[us.size() * 9 / 10], us.back(), us.size());
  EXPECT_LT(median, 2000.0);
}

TEST_F(GrammarTest, JsonObjectAllowsAnyCompactObject) {
  ConstraintSpec obj;
  obj.kind = ConstraintKind::kJsonObject;
  ConstraintMatcher m(compiler_->compile(obj));
  const std::string text = R"({"a":[1,2.5,{"b":null}],"c":true,"d":"x"})";
  EXPECT_EQ(feed(m, text), encode(text).size());
  EXPECT_TRUE(m.completed());
  ConstraintMatcher spaced(compiler_->compile(obj));
  EXPECT_LT(feed(spaced, R"({"a": 1})"), encode(R"({"a": 1})").size());
  ConstraintMatcher array(compiler_->compile(obj));
  EXPECT_FALSE(array.accept(encode("[")[0]));
}

TEST_F(GrammarTest, EbnfAndRegexConstraints) {
  ConstraintSpec ebnf;
  ebnf.kind = ConstraintKind::kEbnf;
  ebnf.text = R"(root ::= "yes" | "no")";
  ConstraintMatcher m(compiler_->compile(ebnf));
  EXPECT_EQ(feed(m, "no"), encode("no").size());
  EXPECT_TRUE(m.completed());
  ConstraintSpec re;
  re.kind = ConstraintKind::kRegex;
  re.text = "[A-Z]{3}-[0-9]{2}";
  ConstraintMatcher r(compiler_->compile(re));
  EXPECT_EQ(feed(r, "ABC-12"), encode("ABC-12").size());
  EXPECT_TRUE(r.completed());
}

TEST_F(GrammarTest, UnsupportedSchemaFeaturesAreRefusedByName) {
  auto expect_error = [&](const std::string& schema, ErrorKind kind, const std::string& needle) {
    try {
      compiler_->compile(schema_spec(schema));
      ADD_FAILURE() << "no error for " << schema;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}})",
               ErrorKind::kUnsupported, "'uniqueItems' at /properties/tags");
  expect_error(R"({"type":"object","if":{"required":["a"]},"then":{"required":["b"]}})",
               ErrorKind::kUnsupported, "'if' at /");
  expect_error(R"({"allOf":[{"type":"object"},{"required":["a"]}]})", ErrorKind::kUnsupported,
               "'allOf'");
  expect_error(R"({"$defs":{"x":{"not":{"type":"string"}}},"$ref":"#/$defs/x"})",
               ErrorKind::kUnsupported, "'not' at /$defs/x");
  expect_error(R"({"$ref":"https://example.com/s.json"})", ErrorKind::kUnsupported, "'$ref'");
  expect_error(R"({"type":"number","multipleOf":0.5})", ErrorKind::kUnsupported, "'multipleOf'");
  expect_error(R"({"type":"string","pattern":"^a+$","maxLength":3})", ErrorKind::kUnsupported,
               "'maxLength'");
  expect_error(R"({"type":"object",)", ErrorKind::kInvalidInput, "not valid JSON");
  expect_error(R"(42)", ErrorKind::kInvalidInput, "must be an object or a boolean");
  // xgrammar's own refusals come through as invalid input, without its file:line prefix.
  try {
    compiler_->compile(schema_spec(R"({"type":"frobnicate"})"));
    ADD_FAILURE() << "no error for an unknown type";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("frobnicate"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(".cc:"), std::string::npos) << e.what();
  }
  ConstraintSpec bad_ebnf;
  bad_ebnf.kind = ConstraintKind::kEbnf;
  bad_ebnf.text = "root ::= (";
  EXPECT_THROW(compiler_->compile(bad_ebnf), Error);
  // Integer multipleOf and in-schema references are fine.
  EXPECT_NO_THROW(compiler_->compile(schema_spec(R"({"type":"integer","multipleOf":5})")));
  EXPECT_NO_THROW(compiler_->compile(schema_spec(
      R"({"$defs":{"p":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/p"}}})")));
}

TEST(GrammarSchemaCheck, DeepSchemasAreRefusedNotRecursed) {
  Json s = Json{{"type", "string"}};
  for (int i = 0; i < hearth::grammar::kMaxSchemaDepth + 5; ++i)
    s = Json{{"type", "array"}, {"items", s}};
  EXPECT_THROW(hearth::grammar::check_schema_supported(s), Error);
}

TEST(GrammarMask, ApplyMaskAndOnlyStopAllowed) {
  std::vector<float> logits(70, 1.0f);
  std::vector<uint32_t> mask(2, 0u);  // covers 64 ids: 64..69 always masked
  mask[0] = (1u << 3) | (1u << 31);
  mask[1] = 1u << 1;  // id 33
  hearth::grammar::apply_mask(logits, mask);
  for (int i = 0; i < 70; ++i) {
    const bool keep = i == 3 || i == 31 || i == 33;
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(i)]), !keep) << i;
  }
  const std::vector<int32_t> stop = {3, 31, 33};
  EXPECT_TRUE(hearth::grammar::only_stop_allowed(mask, stop, 70));
  const std::vector<int32_t> some = {3, 31};
  EXPECT_FALSE(hearth::grammar::only_stop_allowed(mask, some, 70));
  EXPECT_FALSE(hearth::grammar::only_stop_allowed(std::vector<uint32_t>(2, 0u), stop, 70));
}

// ---------------------------------------------------------------------------
// Tool calls, on Qwen3's vocabulary (where <tool_call> is a token of its own).

class ToolCallTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = std::make_unique<Tokenizer>(
        Tokenizer::load(HEARTH_SHARED_DIR "/data/tokenizers/qwen3/tokenizer.json"));
    stop_ = {tok_->vocab().find("<|im_end|>"), tok_->vocab().find("<|endoftext|>")};
    std::sort(stop_.begin(), stop_.end());
    compiler_ =
        std::make_unique<ConstraintCompiler>(*tok_, static_cast<int32_t>(tok_->n_tokens()), stop_);
  }
  static void TearDownTestSuite() {
    compiler_.reset();
    tok_.reset();
  }
  static std::vector<ToolSchema> tools() {
    return {
        {"get_weather",
         nlohmann::ordered_json::parse(
             R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},
                        "required":["city"]})")},
        {"list_files", nlohmann::ordered_json()},
    };
  }
  // The matcher after `text`; `n_ok` gets how many tokens were accepted of how many.
  static ConstraintMatcher walk(const ConstraintSpec& spec, const std::string& text, size_t* n_ok,
                                size_t* n_all) {
    ConstraintMatcher m(compiler_->compile(spec));
    const auto ids = tok_->encode(text);
    *n_all = ids.size();
    *n_ok = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!m.accept(ids[i])) {
        *n_ok = i;
        break;
      }
    }
    return m;
  }
  static bool finished(ConstraintMatcher& m) {
    std::vector<uint32_t> mask(static_cast<size_t>(hearth::grammar::mask_words(m.n_vocab())));
    m.fill_mask(mask);
    return hearth::grammar::only_stop_allowed(mask, stop_, m.n_vocab());
  }
  static inline std::unique_ptr<Tokenizer> tok_;
  static inline std::vector<int32_t> stop_;
  static inline std::unique_ptr<ConstraintCompiler> compiler_;
};

TEST_F(ToolCallTest, HermesJsonOneCall) {
  const auto t = tools();
  const ConstraintSpec spec =
      hearth::grammar::tool_call_constraint(t, ToolCallFormat::kHermesJson, false);
  size_t ok = 0, all = 0;
  {
    auto m = walk(spec,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                  "{\"city\":\"Paris\",\"days\":3}}\n</tool_call>",
                  &ok, &all);
    EXPECT_EQ(ok, all);
    EXPECT_TRUE(m.completed());
    EXPECT_TRUE(finished(m));  // one call only
  }
  {
    auto m = walk(spec, "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>",
                  &ok, &all);
    EXPECT_EQ(ok, all);
    EXPECT_TRUE(finished(m));
  }
  walk(spec, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>", &ok, &all);
  EXPECT_LT(ok, all) << "an unknown tool name";
  walk(spec, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\":3}}\n</tool_call>",
       &ok, &all);
  EXPECT_LT(ok, all) << "a required argument missing";
  walk(spec,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       &ok, &all);
  EXPECT_LT(ok, all) << "free whitespace inside the arguments";
  walk(spec, "Sure! <tool_call>", &ok, &all);
  EXPECT_EQ(ok, 0u) << "text before the call";
  const std::string two =
      "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>";
  walk(spec, two, &ok, &all);
  EXPECT_LT(ok, all) << "a second call without parallel";
}

TEST_F(ToolCallTest, HermesJsonParallelCalls) {
  const auto t = tools();
  const ConstraintSpec spec =
      hearth::grammar::tool_call_constraint(t, ToolCallFormat::kHermesJson, true);
  const std::string two =
      "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>";
  size_t ok = 0, all = 0;
  auto m = walk(spec, two, &ok, &all);
  EXPECT_EQ(ok, all);
  EXPECT_TRUE(m.completed());
  EXPECT_FALSE(finished(m)) << "another call may follow";
}

TEST_F(ToolCallTest, QwenXmlAndLlamaJson) {
  const auto t = tools();
  size_t ok = 0, all = 0;
  const ConstraintSpec xml =
      hearth::grammar::tool_call_constraint(t, ToolCallFormat::kQwenXml, false);
  auto m = walk(xml,
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
                &ok, &all);
  EXPECT_EQ(ok, all);
  EXPECT_TRUE(m.completed());
  walk(xml,
       "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</"
       "tool_call>",
       &ok, &all);
  EXPECT_LT(ok, all) << "a required parameter missing";
  const ConstraintSpec llama =
      hearth::grammar::tool_call_constraint(t, ToolCallFormat::kLlama3Json, true);
  auto l =
      walk(llama, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Rome\"}}", &ok, &all);
  EXPECT_EQ(ok, all);
  EXPECT_TRUE(finished(l));
}

TEST_F(ToolCallTest, BadToolsAreRefused) {
  EXPECT_THROW(hearth::grammar::tool_call_constraint({}, ToolCallFormat::kHermesJson, false),
               Error);
  std::vector<ToolSchema> unnamed = {{"", nlohmann::ordered_json()}};
  EXPECT_THROW(hearth::grammar::tool_call_constraint(unnamed, ToolCallFormat::kHermesJson, false),
               Error);
  std::vector<ToolSchema> unique = {
      {"f", nlohmann::ordered_json::parse(
                R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})")}};
  try {
    hearth::grammar::tool_call_constraint(unique, ToolCallFormat::kHermesJson, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uniqueItems"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tool 'f'"), std::string::npos) << e.what();
  }
}

}  // namespace

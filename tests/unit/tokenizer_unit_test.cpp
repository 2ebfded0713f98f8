// Unit tests of the tokenizer layer: streaming decoder, special-token parsing on/off,
// added-token matching rules, tokenizer.json variants, Unicode normalization, invalid
// UTF-8, errors, long inputs and concurrent use.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tk = hearth::tokenizer;
using tk::DecodeOptions;
using tk::StreamDecoder;
using tk::TokenId;
using tk::Tokenizer;

namespace {

const std::string kShared = std::string(HEARTH_SHARED_DIR) + "/data/";

const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(kShared + "tokenizers/qwen3/tokenizer.json");
  return t;
}
const Tokenizer& llama_spm() {
  static const Tokenizer t = Tokenizer::load(kShared + "tokenizer-test/ggml-vocab-llama-spm.gguf");
  return t;
}
const Tokenizer& smollm2() {
  static const Tokenizer t = [] {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (!p) throw std::runtime_error("HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)");
    return Tokenizer::load(p);
  }();
  return t;
}

// Pushes ids one by one; returns what each push produced, then the flush as last element.
std::vector<std::string> stream(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  StreamDecoder dec(tok);
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(dec.push(id));
  out.push_back(dec.flush());
  return out;
}

bool valid_utf8(const std::string& s) {
  return tk::unicode::incomplete_utf8_tail(s) == 0 &&
         tk::unicode::encode_utf8(tk::unicode::decode_utf8(s)) == s;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hearth::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- streaming decoder ------------------------------------------------------------------

TEST(StreamDecoder, HoldsSplitMultiByteCharacterOfByteLevelBpe) {
  // SmolLM2 splits " 🦙" into " \xF0\x9F", "\xA6", "\x99": nothing half-made may come out.
  const auto ids = smollm2().encode(" 🦙!", {.add_special = false});
  ASSERT_GE(ids.size(), 3u);
  const auto parts = stream(smollm2(), ids);
  std::string all;
  for (const auto& p : parts) {
    EXPECT_TRUE(valid_utf8(p)) << "emitted half a character";
    all += p;
  }
  EXPECT_EQ(all, " 🦙!");
  EXPECT_EQ(parts[0], " ");  // the space is complete, the emoji's first two bytes are held
}

TEST(StreamDecoder, ByteFallbackTokensOfSentencePiece) {
  const auto ids = llama_spm().encode("🦙é", {.add_special = false});
  // "▁" then the four <0xNN> bytes of the emoji, then "é"
  ASSERT_EQ(ids.size(), 6u);
  for (int i = 1; i <= 4; ++i) EXPECT_TRUE(llama_spm().vocab().tokens[ids[i]].attr & tk::kAttrByte);
  const auto parts = stream(llama_spm(), ids);
  EXPECT_EQ(parts[0], "");  // the prefix space is dropped
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "");
  EXPECT_EQ(parts[3], "");
  EXPECT_EQ(parts[4], "🦙");
  EXPECT_EQ(parts[5], "é");
  EXPECT_EQ(parts[6], "");
  EXPECT_EQ(llama_spm().decode(ids), "🦙é");
}

TEST(StreamDecoder, EmojiZwjSequenceAcrossManyTokens) {
  const std::string text = "family: 👨‍👩‍👧‍👦 done";
  for (const Tokenizer* tok : {&qwen(), &smollm2(), &llama_spm()}) {
    const auto ids = tok->encode(text, {.add_special = false});
    std::string all;
    for (const auto& p : stream(*tok, ids)) {
      EXPECT_TRUE(valid_utf8(p));
      all += p;
    }
    EXPECT_EQ(all, text) << tok->vocab().source;
  }
}

TEST(StreamDecoder, FlushReturnsIncompleteTailAndResets) {
  const auto ids = smollm2().encode(" 🦙", {.add_special = false});
  StreamDecoder dec(smollm2());
  std::string out = dec.push(ids[0]);
  const std::string tail = dec.flush();
  EXPECT_EQ(out + tail, smollm2().token_to_piece(ids[0]));
  EXPECT_FALSE(tail.empty());
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, LeadingBosDoesNotKeepThePrefixSpace) {
  const auto ids = llama_spm().encode("Hello", {.add_special = true});
  ASSERT_EQ(ids.front(), llama_spm().vocab().bos);
  std::string all;
  for (const auto& p : stream(llama_spm(), ids)) all += p;
  EXPECT_EQ(all, "<s>Hello");
  EXPECT_EQ(llama_spm().decode(ids, {.skip_special = true}), "Hello");
}

// ---- special tokens ---------------------------------------------------------------------

TEST(SpecialTokens, ParsedOnlyWhenAsked) {
  const TokenId im_end = smollm2().vocab().find("<|im_end|>");
  ASSERT_NE(im_end, tk::kNoToken);
  const auto on = smollm2().encode("hi<|im_end|>", {.parse_special = true});
  const auto off = smollm2().encode("hi<|im_end|>", {.parse_special = false});
  EXPECT_EQ(on.back(), im_end);
  EXPECT_EQ(std::count(off.begin(), off.end(), im_end), 0);
  EXPECT_GT(off.size(), on.size());
  EXPECT_EQ(smollm2().decode(off), "hi<|im_end|>");  // the text survives either way
  EXPECT_EQ(smollm2().decode(on), "hi<|im_end|>");
  EXPECT_EQ(smollm2().decode(on, {.skip_special = true}), "hi");
}

TEST(SpecialTokens, HfAddedNonSpecialTokensAreAlwaysParsed) {
  const TokenId think = qwen().vocab().find("<think>");
  const TokenId im_start = qwen().vocab().find("<|im_start|>");
  const auto off = qwen().encode("<|im_start|><think>", {.parse_special = false});
  EXPECT_EQ(off.back(), think);  // user-defined (special=false) tokens still match
  EXPECT_EQ(std::count(off.begin(), off.end(), im_start), 0);
  const auto on = qwen().encode("<|im_start|><think>", {.parse_special = true});
  EXPECT_EQ(on, (std::vector<TokenId>{im_start, think}));
}

TEST(SpecialTokens, SentencePieceAddsPrefixSpaceAfterSpecialToken) {
  const auto ids = llama_spm().encode("<s>Hello", {.add_special = false, .parse_special = true});
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], llama_spm().vocab().bos);
  EXPECT_EQ(llama_spm().token_text(ids[1]), "\xE2\x96\x81Hello");
}

// A tiny tokenizer.json: byte-level BPE over a handful of tokens, to check matching rules.
std::string tiny_json(const std::string& added, const std::string& post = "null") {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "ab": 4, "Ġ": 5, "Ġa": 6},
             "merges": ["a b", ["Ġ", "a"]]},
             "normalizer": null,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
             "decoder": {"type": "ByteLevel"},
             "post_processor": )" + post + R"(,
             "added_tokens": )" + added + "}";
}

TEST(SpecialTokens, HfLeftmostLongestAndStrip) {
  const auto tok = Tokenizer::from_hf_json(
      tiny_json(R"([{"id": 7, "content": "ab", "special": true},
                    {"id": 8, "content": "bcd", "special": true},
                    {"id": 9, "content": "<x>", "special": true, "lstrip": true, "rstrip": true}])"),
      "tiny.json");
  // leftmost wins over longest-first: "ab" then "c","d" (not "a" + "bcd")
  EXPECT_EQ(tok.encode("abcd"), (std::vector<TokenId>{7, 2, 3}));
  // lstrip/rstrip eat the white space around <x>
  EXPECT_EQ(tok.encode("a  <x>  a"), (std::vector<TokenId>{0, 9, 0}));
  // parse_special off: "<x>" is plain text again (byte-level: '<' 'x' '>' are not in this vocab)
  EXPECT_EQ(tok.encode("ab<x>", {.parse_special = false}), (std::vector<TokenId>{4}));
  EXPECT_EQ(tok.encode("ab"), (std::vector<TokenId>{7}));  // the added token wins over the vocab entry
}

TEST(SpecialTokens, GgufLongestTokenFirst) {
  // llama.cpp's rule, on a GGUF built here: "bcd" (longer) is matched before "ab".
  hearth::gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "c", "d", "ab", "bcd"});
  w.set_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 1, 1, 3, 3});
  w.set_array("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  const auto bytes = w.to_bytes();
  const auto file = hearth::gguf::File::parse(bytes.data(), bytes.size(), "tiny.gguf");
  const auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok.encode("abcd"), (std::vector<TokenId>{0, 5}));
  EXPECT_EQ(tok.encode("abcd", {.parse_special = false}), (std::vector<TokenId>{4, 2, 3}));
}

TEST(HfJson, TemplateProcessingAddsBos) {
  const auto tok = Tokenizer::from_hf_json(
      tiny_json(R"([{"id": 7, "content": "<s>", "special": true}])",
                R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}]})"),
      "tiny.json");
  EXPECT_EQ(tok.encode("ab"), (std::vector<TokenId>{7, 4}));
  EXPECT_EQ(tok.encode("ab", {.add_special = false}), (std::vector<TokenId>{4}));
}

// ---- normalization and odd input --------------------------------------------------------

TEST(Unicode, NfcComposesAndOrders) {
  EXPECT_EQ(tk::unicode::nfc(std::string_view("cafe\xCC\x81")), "caf\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ(tk::unicode::nfc(std::string_view("\xE1\x84\x80\xE1\x85\xA1")), "\xEA\xB0\x80");  // ᄀ+ᅡ -> 가
  // q + dot below (220) + dot above (230) in either order -> same canonical order
  EXPECT_EQ(tk::unicode::nfc(std::string_view("q\xCC\x87\xCC\xA3")), tk::unicode::nfc(std::string_view("q\xCC\xA3\xCC\x87")));
  EXPECT_EQ(qwen().encode("cafe\xCC\x81"), qwen().encode("caf\xC3\xA9"));
}

TEST(InvalidUtf8, NeverThrowsAndRoundTripsWhereTheVocabularyCan) {
  // Truncated sequences and stray continuation bytes are split off and byte-encoded.
  const std::string junk = std::string("ok half:\xE2\x82 end\xC3", 15) + "\x80\x80 x";
  EXPECT_EQ(smollm2().decode(smollm2().encode(junk, {.add_special = false})), junk);
  EXPECT_EQ(qwen().decode(qwen().encode(junk, {.add_special = false})), junk);
  // Bytes that never occur in UTF-8 (0xFF) may have no token at all: no crash, rest kept.
  const auto ids = smollm2().encode("a\xFF\xFE b", {.add_special = false});
  EXPECT_NE(smollm2().decode(ids).find(" b"), std::string::npos);
  // SentencePiece falls back to <0xNN> tokens.
  const std::string spm_junk = "x\xFF\xFE y\x80 z";
  EXPECT_EQ(llama_spm().decode(llama_spm().encode(spm_junk, {.add_special = false})), spm_junk);
}

TEST(EmptyInput, GivesOnlyAddedSpecials) {
  EXPECT_TRUE(smollm2().encode("", {.add_special = false}).empty());
  EXPECT_EQ(llama_spm().encode("", {.add_special = true}), std::vector<TokenId>{llama_spm().vocab().bos});
  EXPECT_EQ(qwen().decode(std::vector<TokenId>{}), "");
}

// ---- errors -----------------------------------------------------------------------------

TEST(Errors, OutOfRangeIdNamesTheId) {
  const std::vector<TokenId> ids = {5, 1000000};
  const std::string msg = error_of([&] { qwen().decode(ids); });
  EXPECT_NE(msg.find("[tokenizer]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 1000000 is out of range"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { qwen().token_to_piece(-1); }).find("token id -1"), std::string::npos);
  StreamDecoder dec(qwen());
  EXPECT_NE(error_of([&] { dec.push(999999999); }).find("out of range"), std::string::npos);
}

TEST(Errors, MissingAndMalformedFiles) {
  EXPECT_NE(error_of([] { Tokenizer::load("/no/such/tokenizer.json"); }).find("/no/such/tokenizer.json: no such file"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_hf_json("{\"model\": ", "bad.json"); }).find("bad.json: malformed tokenizer.json"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_hf_json("[1, 2]", "arr.json"); }).find("arr.json: not a tokenizer.json"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_hf_json(R"({"model": {"type": "Unigram", "vocab": []}})", "u.json"); })
                .find("model type 'Unigram' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_hf_json(tiny_json(R"([{"content": "x"}])"), "t.json"); })
                .find("added_tokens entry without a valid id"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_hf_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                         "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
                                                           "behavior": "Isolated", "invert": false}})",
                                      "re.json");
            }).find("cannot compile pre-tokenizer regex '(unclosed'"),
            std::string::npos);
}

TEST(Errors, UnsupportedGgufVocabularies) {
  auto build = [](const std::string& model, const std::string& pre) {
    hearth::gguf::Writer w;
    w.set_string("tokenizer.ggml.model", model);
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
    w.set_array("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
    return w.to_bytes();
  };
  const auto b1 = build("gpt2", "no-such-pre");
  const auto f1 = hearth::gguf::File::parse(b1.data(), b1.size(), "m.gguf");
  EXPECT_NE(error_of([&] { Tokenizer::from_gguf(f1); }).find("m.gguf: pre-tokenizer 'no-such-pre' is not supported"),
            std::string::npos);
  const auto b2 = build("rwkv", "");
  const auto f2 = hearth::gguf::File::parse(b2.data(), b2.size(), "r.gguf");
  EXPECT_NE(error_of([&] { Tokenizer::from_gguf(f2); }).find("tokenizer.ggml.model 'rwkv' is not supported"),
            std::string::npos);
  hearth::gguf::Writer w;
  w.set_string("general.architecture", "llama");
  const auto b3 = w.to_bytes();
  const auto f3 = hearth::gguf::File::parse(b3.data(), b3.size(), "novocab.gguf");
  EXPECT_NE(error_of([&] { Tokenizer::from_gguf(f3); }).find("novocab.gguf: no tokenizer.ggml.model"),
            std::string::npos);
}

// ---- scale and threads ------------------------------------------------------------------

TEST(Performance, LongInputsStayNearLinear) {
  std::string one_word(200000, 'x');  // a single 200 KB pre-token
  std::string prose;
  while (prose.size() < 400000) prose += "The quick brown fox, 42 jumps; 안녕하세요 世界 🦙\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto a = qwen().encode(one_word);
  const auto b = smollm2().encode(prose);
  const auto c = llama_spm().encode(prose.substr(0, 100000));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(a.empty() || b.empty() || c.empty());
  EXPECT_EQ(smollm2().decode(b), prose);
  EXPECT_LT(s, 30.0) << "encoding ~700 KB took " << s << " s";  // generous: sanitizer builds are slow
}

TEST(Threads, ConcurrentEncodeMatchesSerial) {
  const std::vector<std::string> texts = {"Hello world", "안녕하세요 <|im_start|>", "  code(x) { return 42; }",
                                          "🦙🦙 3333 ÀÉÎ", "<think>x</think>"};
  std::vector<std::vector<TokenId>> want;
  for (const auto& t : texts) want.push_back(qwen().encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        for (size_t k = 0; k < texts.size(); ++k) {
          if (qwen().encode(texts[k]) != want[k] || qwen().decode(want[k]) != qwen().decode(want[k])) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace

// The special-token index (Vocab::special_at): the longest special token at a position that
// the caller accepts, found among many (a vocabulary padded with 100,000 unused control
// tokens sharing one prefix), and nothing where no special token starts.
TEST(SpecialTokens, IndexFindsTheLongestAcceptedAmongMany) {
  tk::Vocab v;
  v.tokens.push_back({"a"});
  v.tokens.push_back({"<|im_start|>", 0.0f, tk::kAttrControl});
  v.tokens.push_back({"<|im", 0.0f, tk::kAttrUserDefined});
  v.tokens.push_back({"<think>", 0.0f, tk::kAttrUserDefined});
  for (int i = 0; i < 100000; ++i) v.tokens.push_back({"<|unused_" + std::to_string(i) + "|>", 0.0f, tk::kAttrControl});
  v.finalize();
  ASSERT_EQ(v.special_tokens.size(), 100003u);
  const std::string text = "a<|im_start|>b<|imx<think><|unused_777|>";
  auto id_at = [&](size_t pos, bool controls) {
    const int64_t k = v.special_at(text, pos, [&](uint32_t j) {
      return controls || !(v.tokens[static_cast<size_t>(v.special_tokens[j])].attr & tk::kAttrControl);
    });
    return k < 0 ? tk::kNoToken : v.special_tokens[static_cast<size_t>(k)];
  };
  EXPECT_EQ(id_at(0, true), tk::kNoToken);  // 'a' starts no special token
  EXPECT_EQ(id_at(1, true), 1);             // the longest: <|im_start|>
  EXPECT_EQ(id_at(1, false), 2);            // controls refused: <|im
  EXPECT_EQ(id_at(14, true), 2);            // "<|imx": only <|im
  EXPECT_EQ(id_at(19, true), 3);
  EXPECT_EQ(id_at(26, true), v.find("<|unused_777|>"));
  EXPECT_EQ(id_at(text.size() - 1, true), tk::kNoToken);
}

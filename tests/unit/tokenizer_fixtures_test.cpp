// Reference fixtures written by scripts/gen_tokenizer_fixtures.py (tests/data/tokenizer):
// the Qwen3 tokenizer.json through Hugging Face `tokenizers`, and the SmolLM2 GGUF (the
// default model) through llama.cpp. Encoding and decoding must equal the references for
// every case; the references themselves are never run here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

using hearth::tokenizer::DecodeOptions;
using hearth::tokenizer::EncodeOptions;
using hearth::tokenizer::StreamDecoder;
using hearth::tokenizer::TokenId;
using hearth::tokenizer::Tokenizer;
using nlohmann::json;

namespace {

const std::string kFixtureDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/tokenizer/";

json load_fixture(const std::string& name) {
  std::ifstream f(kFixtureDir + name);
  EXPECT_TRUE(f.good()) << "missing fixture " << kFixtureDir + name;
  json j = json::parse(f);
  EXPECT_GT(j.at("cases").size(), 50u);
  return j;
}

std::vector<TokenId> ids_of(const json& a) { return a.get<std::vector<TokenId>>(); }

std::string stream_decode(const Tokenizer& tok, const std::vector<TokenId>& ids, DecodeOptions opt) {
  StreamDecoder dec(tok, opt);
  std::string out;
  for (TokenId id : ids) out += dec.push(id);
  return out + dec.flush();
}

// Counts agreement per check and prints "fixtures matched: N / M (what)".
struct Tally {
  std::string name;
  size_t n = 0, ok = 0;
  void check(bool good, const std::string& text, const std::string& detail) {
    ++n;
    if (good) {
      ++ok;
    } else {
      ADD_FAILURE() << name << " differs for text '" << text << "': " << detail;
    }
  }
  ~Tally() {
    std::cout << "tokenizer fixtures matched: " << ok << " / " << n << " (" << name << ")" << std::endl;
  }
};

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(TokenizerFixtures, Qwen3TokenizerJsonMatchesHuggingFace) {
  const json fx = load_fixture("qwen3_hf.json");
  const Tokenizer tok = Tokenizer::load(std::string(HEARTH_SHARED_DIR) + "/data/tokenizers/qwen3/tokenizer.json");
  Tally enc{"qwen3 HF encode"}, enc_ns{"qwen3 HF encode, special text not parsed"}, dec{"qwen3 HF decode"};
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    const auto ids = ids_of(c["ids"]);
    const auto got = tok.encode(text, {.add_special = true, .parse_special = true});
    enc.check(got == ids, text, "expected " + show(ids) + " got " + show(got));
    const auto ids_ns = ids_of(c["ids_no_special"]);
    const auto got_ns = tok.encode(text, {.add_special = true, .parse_special = false});
    enc_ns.check(got_ns == ids_ns, text, "expected " + show(ids_ns) + " got " + show(got_ns));
    dec.check(tok.decode(ids) == c["decoded"], text, "decode: '" + tok.decode(ids) + "'");
    dec.check(tok.decode(ids, {.skip_special = true}) == c["decoded_skip_special"], text, "decode skip_special");
    dec.check(tok.decode(ids_ns) == c["decoded_no_special"], text, "decode of ids_no_special");
    dec.check(stream_decode(tok, ids, {}) == c["decoded"], text, "stream decode");
  }
}

TEST(TokenizerFixtures, SmolLM2GgufMatchesLlamaCpp) {
  const char* model = std::getenv("HEARTH_DEFAULT_MODEL");
  ASSERT_NE(model, nullptr) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  const json fx = load_fixture("smollm2_llama.json");
  const Tokenizer tok = Tokenizer::load(model);
  Tally enc{"smollm2 llama.cpp encode"}, dec{"smollm2 llama.cpp decode"};
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    const std::vector<std::pair<const char*, EncodeOptions>> variants = {
        {"ids", {.add_special = true, .parse_special = true}},
        {"ids_no_special", {.add_special = true, .parse_special = false}},
        {"ids_no_bos", {.add_special = false, .parse_special = true}},
    };
    for (const auto& [key, opt] : variants) {
      const auto want = ids_of(c[key]);
      const auto got = tok.encode(text, opt);
      enc.check(got == want, text, std::string(key) + ": expected " + show(want) + " got " + show(got));
    }
    const auto ids = ids_of(c["ids"]);
    dec.check(tok.decode(ids) == c["decoded"], text, "decode: '" + tok.decode(ids) + "'");
    dec.check(tok.decode(ids, {.skip_special = true}) == c["decoded_skip_special"], text, "decode skip_special");
    dec.check(stream_decode(tok, ids, {}) == c["decoded"], text, "stream decode");
  }
}

}  // namespace

// llama.cpp's tokenizer test vectors (shared data tokenizer-test/*.inp/.out, produced by the
// Hugging Face tokenizers) must match exactly. Like llama.cpp's test-tokenizer-0, every
// input is encoded with add_special = false and parse_special = false. The qwen2 vectors
// run against the Qwen3 tokenizer.json (same vocabulary and pre-tokenizer).
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

using hearth::tokenizer::EncodeOptions;
using hearth::tokenizer::TokenId;
using hearth::tokenizer::Tokenizer;

namespace {

const std::string kVectorDir = std::string(HEARTH_SHARED_DIR) + "/data/tokenizer-test/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

// The .inp/.out format of llama.cpp's test-tokenizer-0.
std::vector<Case> read_vectors(const std::string& stem) {
  const std::string inp = slurp(stem + ".inp");
  const std::string out = slurp(stem + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    Case c;
    c.text = i < texts.size() ? texts[i] : "";
    std::istringstream ids(line);
    for (long id; ids >> id;) c.ids.push_back(static_cast<TokenId>(id));
    cases.push_back(std::move(c));
    ++i;
  }
  EXPECT_EQ(texts.size(), cases.size()) << stem;
  return cases;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

size_t g_total = 0, g_matched = 0;

void run_vectors(const std::string& name, const Tokenizer& tok, const std::string& stem) {
  const auto cases = read_vectors(stem);
  ASSERT_FALSE(cases.empty()) << "no vectors in " << stem;
  size_t matched = 0;
  for (const auto& c : cases) {
    const auto got = tok.encode(c.text, EncodeOptions{.add_special = false, .parse_special = false});
    if (got == c.ids) {
      ++matched;
    } else {
      ADD_FAILURE() << name << ": text '" << c.text << "'\n  expected " << show(c.ids) << "\n  got      " << show(got);
    }
  }
  g_total += cases.size();
  g_matched += matched;
  std::cout << "tokenizer vectors matched: " << matched << " / " << cases.size() << " (" << name << ")"
            << std::endl;
  EXPECT_EQ(matched, cases.size()) << name;
}

class GgufVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVectors, MatchReference) {
  const std::string stem = kVectorDir + "ggml-vocab-" + GetParam() + ".gguf";
  const auto file = hearth::gguf::File::open(stem);
  const Tokenizer tok = Tokenizer::from_gguf(file);
  run_vectors(GetParam(), tok, stem);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GgufVectors,
                         ::testing::Values("bert-bge", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2",
                                           "llama-spm", "mpt", "phi-3", "refact", "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

TEST(HfVectors, Qwen2WithQwen3TokenizerJson) {
  const Tokenizer tok = Tokenizer::load(std::string(HEARTH_SHARED_DIR) + "/data/tokenizers/qwen3/tokenizer.json");
  run_vectors("qwen2 (qwen3 tokenizer.json)", tok, kVectorDir + "ggml-vocab-qwen2.gguf");
}

// Prints and checks the running total after every suite has run.
class TotalEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::cout << "tokenizer vectors matched: " << g_matched << " / " << g_total << " (total)" << std::endl;
    EXPECT_EQ(g_matched, g_total);
  }
};
const auto* const kTotalEnv = ::testing::AddGlobalTestEnvironment(new TotalEnvironment);

}  // namespace

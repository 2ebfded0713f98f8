// Deterministic prompts for `hearth bench`: English-like text drawn from a word
// list of our own with a seeded generator (no third-party text), sized in words
// and calibrated to token counts with the server's usage.prompt_tokens; and the
// agent conversation (tool definitions, then user / assistant / tool turns).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace hearth::bench {

// splitmix64: small, fast and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t s_;
};

// Mixes a base seed with up to three small numbers (scenario, length, rep, ...).
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

// `words` words of sentences (8 to 15 words, capitalized, ending in a period).
std::string make_text(uint64_t seed, int64_t words);

// The messages of a plain prompt of `words` words: one user message asking the
// model to continue the text.
nlohmann::json prompt_messages(uint64_t seed, int64_t words);

// The messages of the image scenario: one user message whose content is a question of
// about `words` words (first, so that a repeated image does not make the whole prompt a
// prefix-cache hit) and the image as an OpenAI image_url part with `image_url` (a
// data: URL).
nlohmann::json image_messages(uint64_t seed, int64_t words, const std::string& image_url);

// Prompt size model for one target: prompt_tokens = overhead + tokens_per_word * words.
struct Calibration {
  double tokens_per_word = 1.3;
  double overhead = 0;
  // Words for a prompt of about `tokens` prompt tokens (at least 1).
  int64_t words_for(int64_t tokens) const;
};
// Fits the model to two measurements (words, prompt_tokens).
Calibration fit_calibration(int64_t w0, int64_t p0, int64_t w1, int64_t p1);

// The agent conversation: a system prompt of about `system_tokens` tokens (an
// introduction, then tool definitions as JSON), then per turn a user message;
// between turns an assistant tool call and its tool result are appended.
class AgentScript {
 public:
  AgentScript(uint64_t seed, int64_t system_tokens, const Calibration& cal);
  // The conversation as sent at turn `turn` (0-based): everything before it plus
  // the turn's user message.
  nlohmann::json messages(int turn) const;

 private:
  uint64_t seed_;
  std::string system_;
};

}  // namespace hearth::bench

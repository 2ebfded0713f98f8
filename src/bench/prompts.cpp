#include "bench/prompts.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace hearth::bench {

using nlohmann::json;

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  Rng r(seed ^ (a * 0x100000001b3ULL) ^ (b * 0xc2b2ae3d27d4eb4fULL) ^ (c * 0x165667b19e3779f9ULL));
  r.next();
  return r.next();
}

namespace {

// Our own word list: common English words, grouped loosely so sentences read
// like notes about a workshop.
constexpr std::array kNouns = {
    "river",  "garden", "window",  "engine",  "market", "letter", "bridge", "forest", "kitchen", "harbor",
    "signal", "ladder", "valley",  "record",  "pocket", "candle", "mirror", "basket", "meadow",  "station",
    "wagon",  "planet", "teacher", "village", "summer", "winter", "number", "mountain", "island", "library",
    "table",  "stone",  "cloud",   "road",    "field",  "shadow", "clock",  "paper",  "horse",   "ocean",
    "circle", "button", "hammer",  "notebook", "lantern", "thread", "orchard", "tunnel", "painter", "farmer"};
constexpr std::array kVerbs = {
    "carries", "finds",  "builds",  "watches", "opens",   "follows", "paints", "counts",  "measures", "keeps",
    "moves",   "covers", "reaches", "leaves",  "repairs", "gathers", "sends",  "turns",   "holds",    "draws",
    "crosses", "lifts",  "teaches", "writes",  "answers", "changes", "marks",  "visits",  "lights",   "cleans"};
constexpr std::array kAdjectives = {
    "quiet",  "bright", "narrow", "heavy",   "gentle", "early",  "simple", "careful", "distant", "golden",
    "hollow", "steady", "rough",  "patient", "silver", "sudden", "warm",   "tidy",    "ancient", "plain",
    "green",  "small",  "broad",  "clever",  "silent", "rapid",  "modest", "curious", "honest",  "open"};
constexpr std::array kLinks = {"the", "a", "every", "one", "that", "this", "each", "another"};
constexpr std::array kPreps = {"near", "under", "across", "behind", "beside", "through", "toward", "past"};
constexpr std::array kAdverbs = {"slowly", "often", "again", "today", "later", "carefully", "together", "soon"};

template <size_t N>
const char* pick(Rng& r, const std::array<const char*, N>& a) {
  return a[r.below(N)];
}

}  // namespace

std::string make_text(uint64_t seed, int64_t words) {
  Rng r(seed);
  std::string out;
  int64_t written = 0;
  // Sentence shape: LINK ADJ NOUN VERB LINK NOUN PREP LINK ADJ NOUN [ADVERB] ...
  while (written < words) {
    const int64_t len = std::min<int64_t>(words - written, 8 + static_cast<int64_t>(r.below(8)));
    std::string sentence;
    for (int64_t i = 0; i < len; ++i) {
      const char* w = nullptr;
      switch (i % 8) {
        case 0: case 4: w = pick(r, kLinks); break;
        case 1: case 6: w = pick(r, kAdjectives); break;
        case 2: case 5: case 7: w = pick(r, kNouns); break;
        case 3: w = (i == 3 && r.below(4) == 0) ? pick(r, kAdverbs) : pick(r, kVerbs); break;
      }
      if (i % 8 == 5 && r.below(2) == 0) w = pick(r, kPreps);
      std::string word = w;
      if (i == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      if (!sentence.empty()) sentence += ' ';
      sentence += word;
    }
    if (!out.empty()) out += ' ';
    out += sentence + ".";
    written += len;
  }
  return out;
}

json prompt_messages(uint64_t seed, int64_t words) {
  const std::string text = make_text(seed, words);
  return json::array({json{{"role", "user"},
                           {"content", text + "\n\nContinue these notes in the same style, one long paragraph."}}});
}

json image_messages(uint64_t seed, int64_t words, const std::string& image_url) {
  const std::string question = "These notes go with the picture: " + make_text(seed, std::max<int64_t>(1, words - 20)) +
                               "\n\nWhat does the picture show, and which parts of it do the notes describe?";
  return json::array({json{{"role", "user"},
                           {"content", json::array({json{{"type", "text"}, {"text", question}},
                                                    json{{"type", "image_url"}, {"image_url", {{"url", image_url}}}}})}}});
}

int64_t Calibration::words_for(int64_t tokens) const {
  const double w = (static_cast<double>(tokens) - overhead) / std::max(0.05, tokens_per_word);
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(w)));
}

Calibration fit_calibration(int64_t w0, int64_t p0, int64_t w1, int64_t p1) {
  Calibration c;
  if (w1 != w0 && p1 > p0) c.tokens_per_word = static_cast<double>(p1 - p0) / static_cast<double>(w1 - w0);
  c.overhead = std::max(0.0, static_cast<double>(p0) - c.tokens_per_word * static_cast<double>(w0));
  return c;
}

namespace {

constexpr std::array kToolNames = {"search_files", "read_file", "write_file", "run_tests", "list_directory",
                                   "grep_code",    "git_diff",  "open_issue", "fetch_url", "format_code"};

std::string tool_definition(Rng& r, const char* name, uint64_t seed, int64_t words) {
  json t = {{"type", "function"},
            {"function",
             {{"name", name},
              {"description", make_text(seed, words)},
              {"parameters",
               {{"type", "object"},
                {"properties",
                 {{"path", {{"type", "string"}, {"description", make_text(seed + 1, 6 + r.below(6))}}},
                  {"limit", {{"type", "integer"}, {"description", make_text(seed + 2, 4 + r.below(6))}}}}},
                {"required", json::array({"path"})}}}}}};
  return t.dump();
}

}  // namespace

AgentScript::AgentScript(uint64_t seed, int64_t system_tokens, const Calibration& cal) : seed_(seed) {
  Rng r(seed);
  // A quarter introduction, the rest tools of about 150 tokens each; the JSON
  // skeleton of one tool definition is about 70 tokens.
  const double tpw = std::max(0.2, cal.tokens_per_word);
  const auto n_tools = static_cast<size_t>(std::clamp<int64_t>(system_tokens * 3 / 4 / 150, 2, kToolNames.size()));
  const auto intro_words = static_cast<int64_t>(static_cast<double>(system_tokens) / 4 / tpw);
  const double tool_tokens = static_cast<double>(system_tokens) * 3 / 4 / static_cast<double>(n_tools) - 70;
  const int64_t per_tool = std::max<int64_t>(6, static_cast<int64_t>(tool_tokens / tpw));
  system_ = "You are a coding agent. " + make_text(mix_seed(seed, 1), std::max<int64_t>(8, intro_words)) +
            "\n\nYou can call these tools; answer with one JSON tool call per turn.\n";
  for (size_t i = 0; i < n_tools; ++i)
    system_ += tool_definition(r, kToolNames[i], mix_seed(seed, 2, i), per_tool) + "\n";
}

json AgentScript::messages(int turn) const {
  json m = json::array({json{{"role", "system"}, {"content", system_}}});
  for (int t = 0; t <= turn; ++t) {
    const uint64_t s = mix_seed(seed_, 3, static_cast<uint64_t>(t));
    m.push_back({{"role", "user"},
                 {"content", (t == 0 ? "Task: " : "Next: ") + make_text(s, 24) + " Explain your next step in a few sentences."}});
    if (t == turn) break;
    // The assistant's tool call (scripted, so every target sees the same
    // conversation) and the tool's result. The call is also in the content, as
    // text, for chat templates that drop tool_calls.
    const char* tool = kToolNames[static_cast<size_t>(t) % kToolNames.size()];
    const std::string call_id = "call_" + std::to_string(t);
    json args = {{"path", "src/module_" + std::to_string(t) + ".cpp"}, {"limit", 40}};
    m.push_back({{"role", "assistant"},
                 {"content", json{{"name", tool}, {"arguments", args}}.dump()},
                 {"tool_calls", json::array({{{"id", call_id},
                                              {"type", "function"},
                                              {"function", {{"name", tool}, {"arguments", args.dump()}}}}})}});
    m.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", make_text(mix_seed(s, 4), 40)}});
  }
  return m;
}

}  // namespace hearth::bench

// Pre-tokenizer table and PCRE2 splitting. The regex strings per `tokenizer.ggml.pre`
// family are those llama.cpp uses (src/llama-vocab.cpp), written here with \x{...}
// escapes instead of literal non-ASCII characters.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <unordered_map>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace hearth::tokenizer {

const char* const kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

namespace {

const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
const char* const kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PresetRow {
  std::vector<std::string_view> names;
  PreTokenizerPreset preset;
};

// One row per family: the `tokenizer.ggml.pre` names that select it, then its regexes.
const std::vector<PresetRow>& preset_rows() {
  static const std::vector<PresetRow> rows = {
      {{"default"},
       {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2SplitRegex, R"(\p{N}+)", "[0-9][0-9][0-9]"}}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {{kLlama3}, true, true}},
      {{"dbrx", "smaug-bpe"}, {{kLlama3}}},
      {{"deepseek-llm"},
       {{R"([\r\n])", kDeepseekLetters,
         R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)", R"(\s+$)",
         kCjk, R"(\p{N}+)"}}},
      {{"deepseek-coder"}, {{R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}}},
      {{"deepseek-v3", "hunyuan-dense"},
       {{R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
         R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
      {{"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2SplitRegex, "[0-9][0-9][0-9]"}}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {{R"(\p{N})", kGpt2SplitRegex}}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en",
        "jina-v2-code", "roberta-bpe"},
       {{kGpt2SplitRegex}}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "megrez", "solar-open"},
       {{kQwen2}}},
      {{"qwen35"}, {{kQwen35}}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {{R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)"}}},
      {{"viking"},
       {{R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)", R"(\p{N})"}}},
      {{"glm4", "chatglm-bpe"},
       {{R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
      {{"tekken"},
       {{R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
        true, true}},
      {{"gpt-4o", "llama4", "kanana2"}, {{kGpt4o}}},
      {{"seed-coder"},
       {{R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {{R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}}},
      {{"grok-2"}, {{kQwen2}}},
  };
  return rows;
}

}  // namespace

const PreTokenizerPreset* find_pre_tokenizer_preset(std::string_view name) {
  static const auto index = [] {
    std::unordered_map<std::string_view, const PreTokenizerPreset*> m;
    for (const auto& row : preset_rows()) {
      for (auto n : row.names) m.emplace(n, &row.preset);
    }
    return m;
  }();
  const auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes, const std::string& source)
    : patterns_(regexes) {
  for (const auto& pattern : regexes) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto re = std::make_shared<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!re->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail(ErrorKind::kInvalidInput, "tokenizer",
           source + ": cannot compile pre-tokenizer regex '" + pattern + "' at offset " + std::to_string(err_off) +
               ": " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
    regexes_.push_back(std::move(re));
  }
}

namespace {

// Splits `text` into maximal valid-UTF-8 runs and single invalid bytes.
void split_invalid_utf8(std::string_view text, std::vector<std::string_view>& out) {
  size_t run = 0, i = 0;
  while (i < text.size()) {
    const size_t n = unicode::valid_utf8_len(text, i);
    if (n) {
      i += n;
      continue;
    }
    if (i > run) out.push_back(text.substr(run, i - run));
    out.push_back(text.substr(i, 1));
    ++i;
    run = i;
  }
  if (i > run) out.push_back(text.substr(run, i - run));
}

bool is_single_invalid_byte(std::string_view piece) {
  return piece.size() == 1 && static_cast<uint8_t>(piece[0]) >= 0x80;
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  split_invalid_utf8(text, pieces);
  if (regexes_.empty()) return pieces;
  std::vector<std::string_view> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (std::string_view piece : pieces) {
      if (is_single_invalid_byte(piece)) {
        next.push_back(piece);
        continue;
      }
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, gap_start = 0;
      while (pos <= piece.size()) {
        const int rc = pcre2_match(re->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (or a resource limit: keep the rest whole)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t start = ov[0], end = ov[1];
        if (end == start) {  // empty match: not a piece; move on by one character
          if (start >= piece.size()) break;
          size_t step = 1;
          while (start + step < piece.size() && (static_cast<uint8_t>(piece[start + step]) & 0xC0) == 0x80) ++step;
          pos = start + step;
          continue;
        }
        if (start > gap_start) next.push_back(piece.substr(gap_start, start - gap_start));
        next.push_back(piece.substr(start, end - start));
        gap_start = pos = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace hearth::tokenizer

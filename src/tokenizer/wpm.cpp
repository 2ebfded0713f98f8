#include "tokenizer/wpm.h"

#include <algorithm>
#include <string>

#include "tokenizer/unicode.h"

namespace hearth::tokenizer {

namespace {

bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<std::string> words_of(const Vocab& vocab, std::string_view text) {
  std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  if (vocab.wpm_strip_accents) cpts = unicode::nfd(cpts);
  std::vector<std::string> words(1);
  for (uint32_t c : cpts) {
    const uint32_t f = unicode::flags(c);
    if (f & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (c == 0 || c == 0xFFFD || (f & unicode::kControl)) continue;
    if (vocab.wpm_strip_accents && (f & unicode::kMark)) continue;
    std::string s;
    unicode::append_utf8(s, vocab.wpm_lowercase ? unicode::to_lower(c) : c);
    if ((f & unicode::kPunctuation) || (c < 0x7F && (f & unicode::kSymbol)) || is_chinese_char(c)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wpm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  for (const std::string& word : words_of(vocab, text)) {
    if (word.empty()) continue;
    const std::string w = "\xE2\x96\x81" + word;
    const size_t n = w.size();
    const size_t start_size = out.size();
    for (size_t i = 0; i < n; ++i) {
      bool matched = false;
      for (size_t j = std::min(n, i + vocab.max_token_len + 1); j > i; --j) {
        const TokenId id = vocab.find(std::string_view(w).substr(i, j - i));
        if (id != kNoToken) {
          out.push_back(id);
          matched = true;
          i = j - 1;
          break;
        }
      }
      if (!matched) {
        out.resize(start_size);
        break;
      }
    }
    if (out.size() == start_size && vocab.unk != kNoToken) out.push_back(vocab.unk);
  }
}

}  // namespace hearth::tokenizer

// Tokenizer facade: special-token partitioning, per-model dispatch, decoding.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wpm.h"

namespace hearth::tokenizer {

namespace {

// A piece of the input: raw text still to be tokenized, or an already-found token.
struct Fragment {
  TokenId id;  // kNoToken for raw text
  size_t offset;
  size_t length;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool eligible(const Vocab& v, TokenId id, bool parse_special) {
  return parse_special || !(v.tokens[id].attr & (kAttrControl | kAttrUnknown));
}

// llama.cpp: each special token, longest first, splits every raw fragment at its occurrences
// (only those the text holds: found in one pass over it).
std::vector<Fragment> partition_longest_first(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags{{kNoToken, 0, text.size()}};
  std::vector<Fragment> next;
  std::vector<uint32_t> present;  // indices into special_tokens
  for (size_t i = 0; i < text.size(); ++i) {
    if (!v.special_first_byte[static_cast<uint8_t>(text[i])]) continue;
    // Every special token starting at i, not only the longest.
    v.special_at(text, i, [&](uint32_t k) {
      present.push_back(k);
      return false;
    });
  }
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());
  for (uint32_t k : present) {
    const TokenId id = v.special_tokens[k];
    if (!eligible(v, id, parse_special)) continue;
    const std::string& tok = v.tokens[id].text;
    const uint32_t attr = v.tokens[id].attr;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset, len = f.length;
      while (len > 0) {
        const size_t m = text.substr(0, base + len).find(tok, base);
        if (m == std::string_view::npos) {
          next.push_back({kNoToken, base, len});
          break;
        }
        size_t left_len = m - base;
        if (attr & kAttrLstrip) {
          while (left_len > 0 && is_space(text[base + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({kNoToken, base, left_len});
        next.push_back({id, m, tok.size()});
        size_t right = m + tok.size();
        size_t right_len = base + len - right;
        if (attr & kAttrRstrip) {
          while (right_len > 0 && is_space(text[right])) ++right, --right_len;
        }
        base = right;
        len = right_len;
      }
    }
    frags.swap(next);
  }
  return frags;
}

// Hugging Face: scan left to right; at each position the longest eligible added token wins.
std::vector<Fragment> partition_leftmost_longest(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  size_t raw_start = 0, i = 0;
  while (i < text.size()) {
    // The longest eligible special token starting at i.
    const int64_t k = v.special_at(text, i, [&](uint32_t j) { return eligible(v, v.special_tokens[j], parse_special); });
    const TokenId found = k < 0 ? kNoToken : v.special_tokens[static_cast<size_t>(k)];
    if (found == kNoToken) {
      ++i;
      continue;
    }
    const uint32_t attr = v.tokens[found].attr;
    size_t left_end = i;
    if (attr & kAttrLstrip) {
      while (left_end > raw_start && is_space(text[left_end - 1])) --left_end;
    }
    if (left_end > raw_start) frags.push_back({kNoToken, raw_start, left_end - raw_start});
    frags.push_back({found, i, v.tokens[found].text.size()});
    i += v.tokens[found].text.size();
    if (attr & kAttrRstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    raw_start = i;
  }
  if (raw_start < text.size()) frags.push_back({kNoToken, raw_start, text.size() - raw_start});
  return frags;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t pos = 0;
  while (true) {
    const size_t m = s.find(from, pos);
    if (m == std::string::npos) break;
    out.append(s, pos, m - pos);
    out.append(to);
    pos = m + from.size();
  }
  out.append(s, pos);
  s.swap(out);
}

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

}  // namespace

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Vocab& v = *vocab_;
  std::vector<TokenId> out;
  std::vector<Fragment> frags;
  if (!text.empty()) {
    frags = v.special_match == SpecialMatch::kLeftmostLongest
                ? partition_leftmost_longest(v, text, options.parse_special)
                : partition_longest_first(v, text, options.parse_special);
  }
  const bool add_bos = options.add_special && v.add_bos && v.bos != kNoToken;
  const bool add_eos = options.add_special && v.add_eos && v.eos != kNoToken;
  switch (v.kind) {
    case ModelKind::kSpm: {
      if (add_bos) out.push_back(v.bos);
      bool prev_special = true;
      for (const Fragment& f : frags) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
          prev_special = true;
          continue;
        }
        std::string s;
        if (v.add_space_prefix && prev_special) s = " ";
        s.append(text.substr(f.offset, f.length));
        replace_all(s, " ", kSpaceMarker);
        spm_encode(v, s, out);
        prev_special = false;
      }
      if (add_eos) out.push_back(v.eos);
      break;
    }
    case ModelKind::kBpe: {
      if (add_bos) out.push_back(v.bos);
      for (const Fragment& f : frags) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
          continue;
        }
        std::string_view raw = text.substr(f.offset, f.length);
        std::string s;
        if (v.nfc) {
          s = unicode::nfc(raw);
          raw = s;
        }
        if (v.prefix_space && !raw.empty() && raw[0] != ' ') {
          s = " " + std::string(raw);
          raw = s;
        }
        bpe_encode(v, raw, out);
      }
      if (add_eos) out.push_back(v.eos);
      if (options.add_special && v.add_sep && v.sep != kNoToken) out.push_back(v.sep);
      break;
    }
    case ModelKind::kWpm: {
      if (options.add_special && v.bos != kNoToken) out.push_back(v.bos);
      for (const Fragment& f : frags) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
        } else {
          wpm_encode(v, text.substr(f.offset, f.length), out);
        }
      }
      if (options.add_special && v.sep != kNoToken) out.push_back(v.sep);
      break;
    }
  }
  return out;
}

void Tokenizer::check_id(TokenId id) const {
  if (!vocab_->valid(id)) {
    fail(ErrorKind::kInvalidInput, "tokenizer",
         vocab_->source + ": token id " + std::to_string(id) + " is out of range (vocabulary has " +
             std::to_string(vocab_->tokens.size()) + " tokens)");
  }
}

const std::string& Tokenizer::token_text(TokenId id) const {
  check_id(id);
  return vocab_->tokens[id].text;
}

std::string Tokenizer::piece(TokenId id, bool special) const {
  const Vocab& v = *vocab_;
  const TokenData& t = v.tokens[id];
  if (v.decode_style == DecodeStyle::kHf) {
    if (!special && (t.attr & kAttrControl)) return "";
    if (v.byte_level) {
      if (auto bytes = unicode_to_bytes(t.text)) return *bytes;
    }
    return t.text;
  }
  if (t.attr & (kAttrControl | kAttrUnknown)) return special ? t.text : "";
  if (t.attr & kAttrUserDefined) return t.text;
  if (t.attr & kAttrByte) {
    if (t.text.size() == 6 && t.text.compare(0, 3, "<0x") == 0) {
      return std::string(1, static_cast<char>(std::stoi(t.text.substr(3, 2), nullptr, 16)));
    }
    return t.text;
  }
  if (t.attr & kAttrNormal) {
    if (v.kind == ModelKind::kBpe && v.byte_level) {
      if (auto bytes = unicode_to_bytes(t.text)) return *bytes;
      return t.text;
    }
    std::string s = t.text;
    replace_all(s, kSpaceMarker, " ");
    return s;
  }
  return "";  // unused / undefined tokens render as nothing (llama.cpp)
}

std::string Tokenizer::token_to_piece(TokenId id, bool special) const {
  check_id(id);
  return piece(id, special);
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string out;
  // The space add_space_prefix put in front of the text sits on the first token after an
  // optional leading BOS.
  const size_t first_text = (!ids.empty() && ids[0] == vocab_->bos && vocab_->bos != kNoToken) ? 1 : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    check_id(ids[i]);
    std::string p = piece(ids[i], !options.skip_special);
    if (i == first_text && options.strip_space_prefix && vocab_->add_space_prefix && !p.empty() && p[0] == ' ') {
      p.erase(0, 1);
    }
    out += p;
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string StreamDecoder::push(TokenId id) {
  tokenizer_->check_id(id);
  std::string p = tokenizer_->piece(id, !options_.skip_special);
  if (first_ && options_.strip_space_prefix && tokenizer_->vocab().add_space_prefix && !p.empty() && p[0] == ' ') {
    p.erase(0, 1);
  }
  // A leading BOS does not count as the first token (see Tokenizer::decode).
  first_ = first_ && (id == tokenizer_->vocab().bos && !seen_any_);
  seen_any_ = true;
  pending_ += p;
  const size_t tail = unicode::incomplete_utf8_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - tail);
  pending_.erase(0, pending_.size() - tail);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  first_ = true;
  seen_any_ = false;
  return rest;
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail(ErrorKind::kNotFound, "tokenizer", path + ": no such file");
  }
  if (std::filesystem::is_directory(path, ec)) {
    fail(ErrorKind::kInvalidInput, "tokenizer", path + ": is a directory, not a GGUF or tokenizer.json file");
  }
  std::array<char, 4> magic{};
  {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(ErrorKind::kIo, "tokenizer", path + ": cannot open");
    f.read(magic.data(), magic.size());
  }
  if (std::string_view(magic.data(), 4) == "GGUF") {
    return from_gguf(gguf::File::open(path));
  }
  std::ifstream f(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return from_hf_json(text, path);
}

}  // namespace hearth::tokenizer

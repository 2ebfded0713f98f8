// The token table and settings shared by every tokenizer algorithm: token texts, scores,
// attributes, special ids, BPE merge ranks and the encode/decode flags. Built once by a
// loader (load_gguf.cpp / load_hf_json.cpp), immutable afterwards, safe to read from many
// threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"

namespace hearth::tokenizer {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class ModelKind { kBpe, kSpm, kWpm };

// Token attributes (bit set), following llama.cpp's meaning.
enum TokenAttr : uint32_t {
  kAttrNormal = 1u << 0,
  kAttrUnknown = 1u << 1,
  kAttrControl = 1u << 2,      // special: parsed from text only when parse_special
  kAttrUserDefined = 1u << 3,  // added token: always parsed from text
  kAttrUnused = 1u << 4,
  kAttrByte = 1u << 5,         // SentencePiece byte-fallback token <0xNN>
  kAttrLstrip = 1u << 6,       // eats white space on its left when matched
  kAttrRstrip = 1u << 7,       // eats white space on its right when matched
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// How special/added tokens are found in input text.
enum class SpecialMatch {
  kLongestTokenFirst,  // llama.cpp: each token in order of decreasing length splits the text
  kLeftmostLongest,    // Hugging Face: scan left to right, longest token at each position
};

// How token text turns back into bytes.
enum class DecodeStyle {
  kLlama,  // llama.cpp token_to_piece
  kHf,     // Hugging Face decoders (ByteLevel: per token, raw text if not byte-level)
};

struct Vocab {
  ModelKind kind = ModelKind::kBpe;
  std::string source;  // file the vocabulary came from (for messages)
  std::vector<TokenData> tokens;
  std::unordered_map<std::string, TokenId> token_to_id;
  std::unordered_map<std::string, int32_t> merge_ranks;  // key: left + '\0' + right
  size_t max_token_len = 0;

  TokenId bos = kNoToken, eos = kNoToken, unk = kNoToken, sep = kNoToken, pad = kNoToken;
  TokenId cls = kNoToken, mask = kNoToken, eot = kNoToken;
  bool add_bos = false, add_eos = false, add_sep = false;
  bool add_space_prefix = false;  // SPM: prepend ' ' to text at start / after a special token
  bool ignore_merges = false;     // BPE: a whole pre-token found in the vocab is one token
  bool byte_level = true;         // BPE: GPT-2 byte<->unicode mapping
  bool nfc = false;               // normalize text to NFC before pre-tokenizing (HF)
  bool prefix_space = false;      // HF ByteLevel add_prefix_space
  bool wpm_lowercase = true, wpm_strip_accents = true;
  SpecialMatch special_match = SpecialMatch::kLongestTokenFirst;
  DecodeStyle decode_style = DecodeStyle::kLlama;
  PreTokenizer pre;  // split regexes (BPE)

  // Ids of CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first (ties: lower id).
  std::vector<TokenId> special_tokens;
  // Finding them in a text without trying each at each position (a vocabulary may hold
  // hundreds of thousands: unused control tokens): whether a byte starts one, their
  // distinct lengths (longest first), and text -> the first index in special_tokens.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<uint8_t> special_first_byte;  // [256]
  std::vector<size_t> special_lengths;
  std::unordered_map<std::string, uint32_t, TextHash, std::equal_to<>> special_index;
  // The index in special_tokens of the longest special token whose text starts text at
  // pos and that `accept` takes (accept(index) -> bool), or -1. (Of special tokens sharing
  // one text, only the first in special_tokens is offered.)
  template <class Accept>
  int64_t special_at(std::string_view text, size_t pos, Accept&& accept) const {
    if (special_first_byte.empty() || !special_first_byte[static_cast<uint8_t>(text[pos])]) return -1;
    for (size_t len : special_lengths) {
      if (len > text.size() - pos) continue;
      const auto it = special_index.find(text.substr(pos, len));
      if (it != special_index.end() && accept(it->second)) return it->second;
    }
    return -1;
  }

  TokenId find(std::string_view text) const;  // kNoToken when absent
  int32_t merge_rank(std::string_view left, std::string_view right) const;  // -1 when absent
  bool valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens.size(); }
  // Fills token_to_id, max_token_len and special_tokens from `tokens`; checks the special
  // ids. Throws Error naming `source` on duplicate tokens or out-of-range special ids.
  void finalize();
};

}  // namespace hearth::tokenizer

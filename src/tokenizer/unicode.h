// UTF-8 helpers and the Unicode properties the tokenizers need: general-category flags,
// White_Space, simple lower-case, canonical decomposition (NFD) and composition (NFC).
// All functions are pure and thread-safe.
#pragma once

#include "core/utf8.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tokenizer::unicode {

enum Flag : uint32_t {
  kNumber = 0x01,       // \p{N}
  kLetter = 0x02,       // \p{L}
  kSeparator = 0x04,    // \p{Z}
  kMark = 0x08,         // \p{M}
  kPunctuation = 0x10,  // \p{P}
  kSymbol = 0x20,       // \p{S}
  kControl = 0x40,      // Cc Cf Co Cs
  kUndefined = 0x80,    // Cn
  kWhitespace = 0x100,  // White_Space property
};

// Length of the UTF-8 sequence introduced by lead byte `c` (1 for stray continuation bytes).
int utf8_len(uint8_t c);
// Decodes text into code points; invalid or truncated sequences decode as U+FFFD per byte.
std::vector<uint32_t> decode_utf8(std::string_view text);
// Appends the UTF-8 encoding of a code point (shared with the template engine).
using hearth::append_utf8;
std::string encode_utf8(const std::vector<uint32_t>& cpts);
// Length of the valid UTF-8 sequence at s[i] (no overlongs, surrogates, > U+10FFFF); 0 if invalid.
size_t valid_utf8_len(std::string_view s, size_t i);
// Number of bytes at the end of `text` that form an incomplete (but so far valid) sequence.
size_t incomplete_utf8_tail(std::string_view text);

uint32_t flags(uint32_t cpt);  // bit set of Flag
uint32_t to_lower(uint32_t cpt);
uint32_t combining_class(uint32_t cpt);

// Canonical decomposition with canonical ordering (NFD) and composition (NFC).
std::vector<uint32_t> nfd(const std::vector<uint32_t>& cpts);
std::vector<uint32_t> nfc(const std::vector<uint32_t>& cpts);
// NFC of each valid UTF-8 run of `text`; invalid bytes are kept as they are.
std::string nfc(std::string_view text);

}  // namespace hearth::tokenizer::unicode

// GPT-2 byte-level alphabet: every byte maps to one printable code point (printable
// Latin-1 bytes to themselves, the rest to U+0100.. in order), so byte strings can be
// stored as text in vocabularies. Thread-safe (tables are built once, immutable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hearth::tokenizer {

// UTF-8 of the code point that stands for byte `b`.
const std::string& byte_to_unicode(uint8_t b);
// Maps every byte of `bytes` to its code point (UTF-8 out).
std::string bytes_to_unicode(std::string_view bytes);
// Inverse map of one code point; nullopt when `cpt` is not in the alphabet.
std::optional<uint8_t> unicode_to_byte(uint32_t cpt);
// Inverse of bytes_to_unicode; nullopt when some code point is not in the alphabet.
std::optional<std::string> unicode_to_bytes(std::string_view text);

}  // namespace hearth::tokenizer

#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/unicode.h"

namespace hearth::tokenizer {

namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cpt{};
  std::array<std::string, 256> byte_to_utf8{};
  std::array<int16_t, 512> cpt_to_byte{};  // the alphabet lies below U+0200

  Tables() {
    cpt_to_byte.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cpt[b] = printable ? b : next++;
      unicode::append_utf8(byte_to_utf8[b], byte_to_cpt[b]);
      cpt_to_byte[byte_to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return tables().byte_to_utf8[b]; }

std::string bytes_to_unicode(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<uint8_t> unicode_to_byte(uint32_t cpt) {
  if (cpt >= 512) return std::nullopt;
  const int16_t b = tables().cpt_to_byte[cpt];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::optional<std::string> unicode_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<uint8_t>(text[i]);
    uint32_t cpt;
    if (c < 0x80) {
      cpt = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cpt = ((c & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte sequences are never in the alphabet
    }
    const auto b = unicode_to_byte(cpt);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace hearth::tokenizer

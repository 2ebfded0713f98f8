#include "engine/kv_disk_format.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace hearth::engine::kvdisk {
namespace {

constexpr char kMagic[8] = {'H', 'K', 'V', 'D', 'I', 'S', 'K', '\x01'};

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// zlib's crc32 takes a uInt length: large spans go in pieces.
uint32_t crc_more(uint32_t crc, std::span<const uint8_t> s) {
  constexpr size_t kPiece = 1u << 30;
  for (size_t off = 0; off < s.size(); off += kPiece) {
    const size_t n = std::min(kPiece, s.size() - off);
    crc = static_cast<uint32_t>(::crc32(crc, s.data() + off, static_cast<uInt>(n)));
  }
  return crc;
}

std::span<const uint8_t> token_bytes(std::span<const int32_t> tokens) {
  return {reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size() * 4};
}

}  // namespace

const char* kind_suffix(Kind kind) {
  return kind == Kind::kKv ? ".kv" : kind == Kind::kState ? ".st" : ".swap";
}

uint32_t crc32_of(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  uint32_t crc = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  return crc_more(crc_more(crc, a), b);
}

std::vector<uint8_t> encode_header(Header h, std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  static_assert(std::endian::native == std::endian::little, "the token bytes are written as they are in memory");
  std::vector<uint8_t> out(kHeaderBytes, 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 8);
  put32(p + 8, kFormatVersion);
  put32(p + 12, static_cast<uint32_t>(h.kind));
  put64(p + 16, h.fingerprint);
  put64(p + 24, h.hash);
  put64(p + 32, h.parent_hash);
  put32(p + 40, static_cast<uint32_t>(tokens.size()));
  put32(p + 44, 0);
  put64(p + 48, payload.size());
  put32(p + 56, crc32_of(token_bytes(tokens), payload));
  put32(p + 60, crc32_of({p, 60}));
  return out;
}

std::string check_file(std::span<const uint8_t> bytes, const Expect& want) {
  if (bytes.size() < kHeaderBytes) {
    return "torn: " + std::to_string(bytes.size()) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
           "-byte header";
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 8) != 0) return "not a Hearth KV disk file (bad magic)";
  if (get32(p + 60) != crc32_of({p, 60})) return "header checksum mismatch (corrupt)";
  if (get32(p + 8) != kFormatVersion) return "format version " + std::to_string(get32(p + 8)) + ", expected " +
                                             std::to_string(kFormatVersion);
  if (get64(p + 16) != want.fingerprint) return "foreign: fingerprint " + hex64(get64(p + 16)) + ", this server's is " +
                                                hex64(want.fingerprint);
  if (get32(p + 12) != static_cast<uint32_t>(want.kind)) return "kind " + std::to_string(get32(p + 12)) + ", expected " +
                                                                std::to_string(static_cast<uint32_t>(want.kind));
  const uint32_t n_tokens = get32(p + 40);
  const uint64_t payload = get64(p + 48);
  if (n_tokens != want.tokens.size()) return "holds " + std::to_string(n_tokens) + " tokens, expected " +
                                             std::to_string(want.tokens.size());
  if (payload != want.payload_bytes) return "payload of " + std::to_string(payload) + " bytes, expected " +
                                            std::to_string(want.payload_bytes);
  const uint64_t total = payload_offset(n_tokens) + payload;
  if (bytes.size() != total) {
    return "torn: " + std::to_string(bytes.size()) + " bytes, the header says " + std::to_string(total);
  }
  if (get64(p + 24) != want.hash) return "holds chain hash " + hex64(get64(p + 24)) + ", expected " + hex64(want.hash);
  if (get64(p + 32) != want.parent_hash) return "parent hash differs (a hash collision)";
  const std::span<const uint8_t> toks = bytes.subspan(kHeaderBytes, 4u * n_tokens);
  if (std::memcmp(toks.data(), want.tokens.data(), toks.size()) != 0) return "tokens differ (a hash collision)";
  if (get32(p + 56) != crc32_of(toks, bytes.subspan(payload_offset(n_tokens)))) return "checksum mismatch (corrupt)";
  return "";
}

std::string hex64(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}

std::string file_name(uint64_t hash, Kind kind) { return hex64(hash) + kind_suffix(kind); }

bool parse_name(const std::string& name, uint64_t& hash, Kind& kind) {
  if (name.size() != 19) return false;
  const std::string suffix = name.substr(16);
  if (suffix == ".kv") {
    kind = Kind::kKv;
  } else if (suffix == ".st") {
    kind = Kind::kState;
  } else {
    return false;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    int x;
    if (c >= '0' && c <= '9') {
      x = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      x = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(x);
  }
  hash = v;
  return true;
}

}  // namespace hearth::engine::kvdisk

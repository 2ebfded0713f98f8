// The file format of the KV disk tier (`hearth serve --kv-disk DIR`): one file per
// full KV block or per recurrent-state snapshot, named by the block's chain hash
// (engine/block_manager.h) inside a folder named by the server's fingerprint (the model
// file, the KV type, the block size; see kv_disk_fingerprint.h), so that two servers of
// different models can share DIR and never read each other's files.
//
// A file is a 64-byte header, the block's tokens and the payload:
//   0  magic "HKVDISK\x01" (8)        8  format version u32   12 kind u32 (1 KV, 2 state)
//   16 fingerprint u64                24 chain hash u64       32 parent chain hash u64
//   40 token count u32                44 reserved u32 (0)     48 payload bytes u64
//   56 crc32 of tokens + payload u32  60 crc32 of bytes 0..59 u32
// then token count int32 tokens and the payload, all little-endian. The payload of a KV
// block is, layer by layer, the block's K bytes then its V bytes exactly as the pool
// holds them (whatever the KV type); a state file holds one state slot (f32).
// A reader checks everything it can (sizes, magic, version, fingerprint, hash, parent,
// tokens, both checksums) before a byte is used: a torn, foreign or corrupt file is a
// miss, never a load.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hearth::engine::kvdisk {

constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 64;

// kSwap: a preempted sequence's swap file (engine/kv_disk.h): its tokens, then its KV
// blocks and (hybrid models) its live state; the hash field holds the sequence's id, the
// parent hash its position count. Never a prefix file (parse_name refuses the name).
enum class Kind : uint32_t { kKv = 1, kState = 2, kSwap = 3 };
const char* kind_suffix(Kind kind);  // ".kv" / ".st" / ".swap"

struct Header {
  Kind kind = Kind::kKv;
  uint64_t fingerprint = 0;
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
  uint32_t n_tokens = 0;
  uint64_t payload_bytes = 0;
  uint32_t data_crc = 0;
};

// The 64-byte header of a file holding `tokens` and `payload` (data_crc computed here).
std::vector<uint8_t> encode_header(Header h, std::span<const int32_t> tokens, std::span<const uint8_t> payload);

// What a reader expects of a file: the identity it asked for and the sizes it needs.
struct Expect {
  Kind kind = Kind::kKv;
  uint64_t fingerprint = 0;
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
  std::span<const int32_t> tokens;  // the block's tokens, compared one by one
  uint64_t payload_bytes = 0;
};

// Checks a whole file's bytes against `want`. Returns "" when it is the file asked for
// (then its payload is bytes[kHeaderBytes + 4 * n_tokens ..]), else why not, e.g.
// "torn: 1000 bytes, the header says 368704" or "checksum mismatch (corrupt)".
std::string check_file(std::span<const uint8_t> bytes, const Expect& want);
// Offset of the payload in a file of n_tokens tokens.
inline size_t payload_offset(uint32_t n_tokens) { return kHeaderBytes + 4u * n_tokens; }

// crc32 (zlib) over several pieces, as one.
uint32_t crc32_of(std::span<const uint8_t> a, std::span<const uint8_t> b = {});

// File names: "<16 hex digits of the hash><suffix>"; parse_name gives false for any
// other name (temporary files, strangers).
std::string file_name(uint64_t hash, Kind kind);
bool parse_name(const std::string& name, uint64_t& hash, Kind& kind);
std::string hex64(uint64_t v);

}  // namespace hearth::engine::kvdisk

// Test helper: builds GGUF bytes field by field (including invalid ones), and
// remembers where each field starts so tests can assert the offsets that error
// messages report.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"

namespace hearth::gguf::testutil {

class GgufBytes {
 public:
  std::vector<uint8_t> b;

  uint64_t size() const { return b.size(); }
  void raw(const void* p, size_t n) {
    size_t at = b.size();
    b.resize(at + n);
    if (n) std::memcpy(b.data() + at, p, n);
  }
  void u8(uint8_t v) { raw(&v, 1); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(std::string_view s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    u64(n_kv);
  }
  // A key and its value type; the caller writes the value. Returns the value's offset.
  uint64_t key(std::string_view k, ValueType t) {
    str(k);
    u32(static_cast<uint32_t>(t));
    return size();
  }
  void kv_u32(std::string_view k, uint32_t v) {
    key(k, ValueType::UINT32);
    u32(v);
  }
  void kv_string(std::string_view k, std::string_view v) {
    key(k, ValueType::STRING);
    str(v);
  }
  // A tensor info; returns the offset of its `offset` field.
  uint64_t tensor(std::string_view name, std::initializer_list<uint64_t> shape, uint32_t type,
                  uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(shape.size()));
    for (uint64_t d : shape) u64(d);
    u32(type);
    uint64_t at = size();
    u64(offset);
    return at;
  }
  void pad_to(uint64_t a) {
    while (b.size() % a) b.push_back(0);
  }
  void zeros(size_t n) { b.resize(b.size() + n, 0); }
};

inline File parse_bytes(const std::vector<uint8_t>& b, const std::string& name = "t.gguf") {
  return File::parse(b.data(), b.size(), name);
}

// Parses `b` expecting an Error of `kind` whose message contains every piece.
inline void expect_gguf_error(const std::vector<uint8_t>& b, ErrorKind kind,
                              std::initializer_list<std::string> pieces) {
  try {
    parse_bytes(b);
    ADD_FAILURE() << "parse succeeded; expected an error containing " << *pieces.begin();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << msg;
    EXPECT_EQ(msg.rfind("[gguf] t.gguf: ", 0), 0u) << msg;
    for (const auto& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

}  // namespace hearth::gguf::testutil

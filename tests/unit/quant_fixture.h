// Reader of the golden files in tests/data/quant/ written by
// scripts/gen_quant_fixtures.py from ggml itself (format described there).
// A missing or malformed fixture is a test failure, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/half.h"
#include "format/ggml_types.h"

namespace quant_test {

inline std::string fixture_path(const std::string& file) {
  return std::string(HEARTH_SOURCE_DIR) + "/tests/data/quant/" + file;
}

// Whole file; empty + a test failure when it cannot be read.
inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "missing fixture " << path << " (run scripts/gen_quant_fixtures.py)";
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline uint32_t u32_at(const std::vector<uint8_t>& d, size_t off) {
  uint32_t v;
  std::memcpy(&v, d.data() + off, 4);
  return v;  // the fixtures are little-endian, as is every host Hearth builds for
}

struct Fixture {
  bool ok = false;
  hearth::GgmlType type = hearth::GgmlType::F32;
  std::vector<uint8_t> blocks;
  std::vector<float> floats;
};

// Loads "<type name>.<kind>.bin" (kind "dequant" or "quant") and checks its header.
inline Fixture load_fixture(hearth::GgmlType type, const std::string& kind) {
  Fixture f;
  std::string name(hearth::ggml_type_name(type));  // file names are lower case: q4_k
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string lower = fixture_path(name + "." + kind + ".bin");
  const std::vector<uint8_t> d = read_file(lower);
  if (d.empty()) return f;
  if (d.size() < 20 || std::memcmp(d.data(), "HQF1", 4) != 0) {
    ADD_FAILURE() << lower << ": bad header";
    return f;
  }
  const uint32_t type_id = u32_at(d, 4), file_kind = u32_at(d, 8), n = u32_at(d, 12), n_bytes = u32_at(d, 16);
  const auto row_bytes = hearth::ggml_row_bytes(type, n);
  if (type_id != static_cast<uint32_t>(type) || file_kind != (kind == "dequant" ? 0u : 1u) || !row_bytes ||
      *row_bytes != n_bytes || d.size() != 20 + n_bytes + 4ull * n) {
    ADD_FAILURE() << lower << ": header does not match type " << hearth::ggml_type_name(type) << " / size";
    return f;
  }
  f.type = type;
  f.blocks.assign(d.begin() + 20, d.begin() + 20 + n_bytes);
  f.floats.resize(n);
  std::memcpy(f.floats.data(), d.data() + 20 + n_bytes, 4ull * n);
  f.ok = true;
  return f;
}

// Bit-exact float comparison where any NaN equals any NaN; returns the index
// of the first difference or -1.
inline int64_t first_float_diff(const std::vector<float>& want, const std::vector<float>& got) {
  if (want.size() != got.size()) return 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (hearth::f32_bits(want[i]) != hearth::f32_bits(got[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace quant_test

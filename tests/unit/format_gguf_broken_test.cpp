// Hand-made broken GGUF files: each must be rejected with a hearth::Error whose
// message names the field and the byte offset (never a crash, hang or huge
// allocation). Files are built field by field with GgufBytes.
#include <gtest/gtest.h>

#include <random>

#include "format/gguf_writer.h"
#include "format_gguf_bytes.h"

using hearth::ErrorKind;
using namespace hearth::gguf;
using namespace hearth::gguf::testutil;

namespace {

std::string off(uint64_t n) { return "(offset " + std::to_string(n) + ", file size "; }

}  // namespace

TEST(GgufBroken, EmptyFile) {
  expect_gguf_error({}, ErrorKind::kInvalidInput,
                    {"header: magic truncated: needs 4 bytes, 0 left", off(0) + "0)"});
}

TEST(GgufBroken, BadMagic) {
  GgufBytes b;
  b.raw("GGML", 4);
  b.u32(3);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput, {"header: bad magic 'GGML'", off(0)});
  GgufBytes bin;
  bin.raw(
      "\x7f"
      "ELF",
      4);
  expect_gguf_error(bin.b, ErrorKind::kInvalidInput, {"bad magic '\\x7fELF'"});
}

TEST(GgufBroken, TruncatedHeader) {
  GgufBytes b;
  b.raw("GGUF", 4);
  b.u32(3);
  b.u64(0);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"header: metadata count truncated: needs 8 bytes, 0 left", off(16) + "16)"});
}

TEST(GgufBroken, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    GgufBytes b;
    b.header(v, 0, 0);
    expect_gguf_error(b.b, ErrorKind::kUnsupported,
                      {"header: unsupported version " + std::to_string(v), off(4)});
  }
  GgufBytes v1;
  v1.header(1, 0, 0);
  expect_gguf_error(v1.b, ErrorKind::kUnsupported, {"GGUF v1 is obsolete"});
  GgufBytes be;
  be.header(0x03000000u, 0, 0);
  expect_gguf_error(be.b, ErrorKind::kUnsupported, {"big-endian"});
}

TEST(GgufBroken, HugeCounts) {
  GgufBytes t;
  t.header(3, uint64_t{1} << 62, 0);
  t.zeros(100);
  expect_gguf_error(
      t.b, ErrorKind::kInvalidInput,
      {"header: tensor count 4611686018427387904 cannot fit in the 100 bytes left", off(8)});
  GgufBytes k;
  k.header(3, 0, ~uint64_t{0});
  k.zeros(100);
  expect_gguf_error(k.b, ErrorKind::kInvalidInput,
                    {"header: metadata count 18446744073709551615 cannot fit", off(16)});
  // Each count fits alone, but not both together.
  GgufBytes both;
  both.header(3, 4, 1);
  both.zeros(4 * 24 + 12);
  expect_gguf_error(both.b, ErrorKind::kInvalidInput, {"metadata count 1 cannot fit"});
}

TEST(GgufBroken, KeyLengthPastEnd) {
  GgufBytes b;
  b.header(3, 0, 1);
  b.u64(99999999999);
  b.zeros(20);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"metadata key #0: key length 99999999999 runs past end of file", off(24)});
}

TEST(GgufBroken, StringValueLengthPastEnd) {
  GgufBytes b;
  b.header(3, 0, 2);
  b.kv_string("general.architecture", "llama");
  uint64_t at = b.key("general.name", ValueType::STRING);
  b.u64(99999999999);
  b.zeros(8);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"metadata key #1 'general.name': string length 99999999999 runs past end of "
                     "file",
                     off(at) + std::to_string(b.size()) + ")"});
}

TEST(GgufBroken, EmptyAndDuplicateKeys) {
  GgufBytes e;
  e.header(3, 0, 1);
  e.kv_u32("", 1);
  expect_gguf_error(e.b, ErrorKind::kInvalidInput, {"metadata key #0: empty key", off(24)});
  GgufBytes d;
  d.header(3, 0, 3);
  d.kv_u32("a.x", 1);
  d.kv_u32("a.y", 2);
  uint64_t at = d.size();
  d.kv_u32("a.x", 3);
  expect_gguf_error(d.b, ErrorKind::kInvalidInput,
                    {"metadata key #2 'a.x': duplicate key (first defined as key #0)", off(at)});
}

TEST(GgufBroken, UnknownValueType) {
  GgufBytes b;
  b.header(3, 0, 1);
  b.str("x.y");
  uint64_t at = b.size();
  b.u32(13);
  b.zeros(8);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"metadata key #0 'x.y': unknown value type 13", off(at)});
  GgufBytes a;
  a.header(3, 0, 1);
  a.key("x.arr", ValueType::ARRAY);
  uint64_t at2 = a.size();
  a.u32(0xffffffffu);
  a.u64(1);
  a.zeros(8);
  expect_gguf_error(a.b, ErrorKind::kInvalidInput,
                    {"metadata key #0 'x.arr': unknown array element type 4294967295", off(at2)});
}

TEST(GgufBroken, BadBool) {
  GgufBytes b;
  b.header(3, 0, 1);
  uint64_t at = b.key("x.flag", ValueType::BOOL);
  b.u8(7);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"'x.flag': bool value 7 is not 0 or 1", off(at)});
}

TEST(GgufBroken, ArrayCountHuge) {
  GgufBytes b;
  b.header(3, 0, 1);
  b.key("tokenizer.ggml.tokens", ValueType::ARRAY);
  b.u32(static_cast<uint32_t>(ValueType::STRING));
  uint64_t at = b.size();
  b.u64(uint64_t{1} << 40);
  b.zeros(64);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"metadata key #0 'tokenizer.ggml.tokens': array count 1099511627776 of string "
                     "cannot fit in the 64 bytes left",
                     off(at)});
  // 9 u32 in 32 bytes: fits the 1-byte floor of some types, not the 4 of u32.
  GgufBytes c;
  c.header(3, 0, 1);
  c.key("x.ints", ValueType::ARRAY);
  c.u32(static_cast<uint32_t>(ValueType::UINT32));
  c.u64(9);
  c.zeros(32);
  expect_gguf_error(c.b, ErrorKind::kInvalidInput, {"array count 9 of u32 cannot fit"});
}

TEST(GgufBroken, StringInsideArrayPastEnd) {
  GgufBytes b;
  b.header(3, 0, 1);
  b.key("tokenizer.ggml.tokens", ValueType::ARRAY);
  b.u32(static_cast<uint32_t>(ValueType::STRING));
  b.u64(3);
  b.str("a");
  b.str("b");
  uint64_t at = b.size();
  b.u64(1000);
  b.raw("xyz", 3);
  expect_gguf_error(
      b.b, ErrorKind::kInvalidInput,
      {"metadata key #0 'tokenizer.ggml.tokens'[2]: string length 1000 runs past end", off(at)});
}

namespace {

// A key holding `depth` nested arrays, the innermost an array of one u8.
std::vector<uint8_t> nested_arrays(int depth) {
  GgufBytes b;
  b.header(3, 0, 1);
  b.key("x.nested", ValueType::ARRAY);
  for (int i = 1; i < depth; ++i) {
    b.u32(static_cast<uint32_t>(ValueType::ARRAY));
    b.u64(1);
  }
  b.u32(static_cast<uint32_t>(ValueType::UINT8));
  b.u64(1);
  b.u8(42);
  return b.b;
}

}  // namespace

TEST(GgufBroken, NestedArraysTooDeep) {
  File ok = parse_bytes(nested_arrays(8));
  const Value* v = ok.find("x.nested");
  ASSERT_NE(v, nullptr);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(v->type, ValueType::ARRAY);
    ASSERT_EQ(v->arr.size(), 1u);
    v = &v->arr[0];
  }
  EXPECT_EQ(v->u64, 42u);
  // Depth 9: the 9th array header starts after the header, key and 8 (type, count) pairs.
  uint64_t at = 24 + 8 + 8 + 4 + 8 * 12;
  expect_gguf_error(
      nested_arrays(9), ErrorKind::kInvalidInput,
      {"'x.nested'[0][0][0][0][0][0][0][0]: arrays nested deeper than 8 levels", off(at)});
  // Very deep nesting is refused just as quickly (no recursion past the cap).
  expect_gguf_error(nested_arrays(100000), ErrorKind::kInvalidInput, {"nested deeper than 8"});
}

TEST(GgufBroken, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufBytes b;
    b.header(3, 0, 2);
    b.kv_string("general.architecture", "llama");
    uint64_t at = b.key("general.alignment", ValueType::UINT32);
    b.u32(a);
    expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                      {"metadata key #1 'general.alignment': alignment " + std::to_string(a) +
                           " is not a non-zero power of two",
                       off(at)});
  }
  GgufBytes s;
  s.header(3, 0, 1);
  uint64_t at = s.key("general.alignment", ValueType::STRING);
  s.str("32");
  expect_gguf_error(s.b, ErrorKind::kInvalidInput,
                    {"metadata key #0 'general.alignment': expected u32, got string", off(at)});
}

TEST(GgufBroken, TensorDims) {
  {
    GgufBytes b;
    b.header(3, 1, 0);
    b.str("blk.0.attn_q.weight");
    uint64_t at = b.size();
    b.u32(5);
    b.zeros(64);
    expect_gguf_error(
        b.b, ErrorKind::kInvalidInput,
        {"tensor #0 'blk.0.attn_q.weight': n_dims 5 exceeds the maximum of 4", off(at)});
  }
  {
    GgufBytes b;
    b.header(3, 1, 0);
    b.str("w");
    b.u32(2);
    b.u64(4);
    uint64_t at = b.size();
    b.u64(0);
    b.zeros(64);
    expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                      {"tensor #0 'w': dimension 1 is zero", off(at)});
  }
  {
    GgufBytes b;
    b.header(3, 1, 0);
    b.str("w");
    b.u32(3);
    b.u64(uint64_t{1} << 32);
    b.u64(uint64_t{1} << 30);
    uint64_t at = b.size();
    b.u64(4);
    b.zeros(64);
    expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                      {"tensor #0 'w': shape [4294967296, 1073741824, 4] has more elements than "
                       "int64 can count",
                       off(at)});
  }
  {
    // Element count fits in int64, but the byte size (f64: 8 bytes each) does not.
    GgufBytes b;
    b.header(3, 1, 0);
    uint64_t at = b.tensor("w", {uint64_t{1} << 31, uint64_t{1} << 31}, 28, 0) - 4;
    b.zeros(64);
    expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                      {"tensor #0 'w': byte size of shape", off(at)});
  }
}

TEST(GgufBroken, TensorTypes) {
  for (uint32_t type : {4u, 5u, 31u, 40u, 1000000u}) {
    GgufBytes b;
    b.header(3, 1, 0);
    uint64_t at = b.tensor("w", {32}, type, 0) - 4;
    b.zeros(256);
    expect_gguf_error(b.b, ErrorKind::kUnsupported,
                      {"tensor #0 'w': unknown tensor type " + std::to_string(type), off(at)});
  }
  GgufBytes b;
  b.header(3, 1, 0);
  uint64_t at = b.tensor("w", {33, 2}, static_cast<uint32_t>(hearth::GgmlType::Q4_0), 0) - 4;
  b.zeros(256);
  expect_gguf_error(
      b.b, ErrorKind::kInvalidInput,
      {"tensor #0 'w': row length 33 is not a multiple of the q4_0 block size 32", off(at)});
}

TEST(GgufBroken, TensorOffsets) {
  {
    GgufBytes b;
    b.header(3, 1, 0);
    uint64_t at = b.tensor("w", {8}, 0, 4);
    b.pad_to(32);
    b.zeros(64);
    expect_gguf_error(
        b.b, ErrorKind::kInvalidInput,
        {"tensor #0 'w': data offset 4 is not a multiple of the alignment 32", off(at)});
  }
  {
    GgufBytes b;  // 16 x f32 = 64 bytes at data offset 64, but the file has 96 data bytes
    b.header(3, 2, 0);
    b.tensor("a", {8}, 0, 0);
    b.tensor("blk.0.attn_q.weight", {16}, 0, 64);
    b.pad_to(32);
    uint64_t data = b.size();
    b.zeros(96);
    expect_gguf_error(
        b.b, ErrorKind::kInvalidInput,
        {"tensor #1 'blk.0.attn_q.weight': data (offset " + std::to_string(data + 64) +
         ", 64 bytes) extends past end of file (file size " + std::to_string(b.size()) + ")"});
  }
  {
    GgufBytes b;  // an offset so large that data_offset + offset wraps around
    b.header(3, 1, 0);
    b.tensor("w", {8}, 0, ~uint64_t{31});
    b.pad_to(32);
    b.zeros(64);
    expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                      {"tensor #0 'w': data (offset", "extends past end"});
  }
  {
    GgufBytes b;  // b's 64 bytes at 32 overlap a's 64 bytes at 0
    b.header(3, 2, 0);
    b.tensor("a", {16}, 0, 0);
    b.tensor("b", {16}, 0, 32);
    b.pad_to(32);
    uint64_t data = b.size();
    b.zeros(128);
    expect_gguf_error(
        b.b, ErrorKind::kInvalidInput,
        {"tensor #1 'b': data (offset " + std::to_string(data + 32) +
         ", 64 bytes) overlaps tensor #0 'a' (offset " + std::to_string(data) + ", 64 bytes)"});
  }
}

TEST(GgufBroken, TensorNames) {
  GgufBytes d;
  d.header(3, 2, 0);
  d.tensor("w", {8}, 0, 0);
  uint64_t at = d.size();
  d.tensor("w", {8}, 0, 32);
  d.pad_to(32);
  d.zeros(64);
  expect_gguf_error(d.b, ErrorKind::kInvalidInput,
                    {"tensor #1 'w': duplicate tensor name (first is tensor #0)", off(at)});
  GgufBytes e;
  e.header(3, 1, 0);
  e.tensor("", {8}, 0, 0);
  e.zeros(64);
  expect_gguf_error(e.b, ErrorKind::kInvalidInput, {"tensor #0: empty name", off(24)});
  GgufBytes n;  // a name with control bytes is quoted with escapes
  n.header(3, 1, 0);
  n.tensor(std::string("w\n\x01", 3), {8}, 0, 3);
  n.zeros(64);
  expect_gguf_error(n.b, ErrorKind::kInvalidInput, {"tensor #0 'w\\x0a\\x01': data offset 3"});
}

TEST(GgufBroken, TensorNameLengthPastEnd) {
  GgufBytes b;
  b.header(3, 1, 0);
  b.u64(1000);
  b.zeros(30);
  expect_gguf_error(b.b, ErrorKind::kInvalidInput,
                    {"tensor #0: name length 1000 runs past end of file", off(24)});
}

namespace {

// A small valid file with metadata of several types and three tensors.
std::vector<uint8_t> small_valid_file() {
  Writer w(3);
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "<s>"});
  w.set_array("tokenizer.ggml.scores", std::vector<float>{0.0f, -1.0f, -2.0f});
  w.set_value("x.nested",
              make_array(ValueType::ARRAY,
                         {make_array(ValueType::INT32, {make_int(ValueType::INT32, 5)})}));
  std::vector<float> v(8, 1.5f);
  w.add_tensor_f32("a", {8}, v);
  w.add_tensor("b", hearth::GgmlType::Q8_0, {32, 2}, std::vector<uint8_t>(68, 7));
  w.add_tensor_f32("c", {4, 2}, v);
  return w.to_bytes();
}

}  // namespace

TEST(GgufBroken, TruncatedAtEveryByte) {
  std::vector<uint8_t> full = small_valid_file();
  File f = parse_bytes(full);
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorInfo& last = f.tensors().back();
  uint64_t needed = f.data_offset() + last.offset + last.n_bytes;
  for (uint64_t n = 0; n < needed; ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      parse_bytes(cut);
      ADD_FAILURE() << "prefix of " << n << " bytes parsed";
    } catch (const hearth::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("file size " + std::to_string(n) + ")"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(GgufBroken, RandomMutationsNeverCrash) {
  // A deterministic mini-fuzz for the sanitizer build: flip bytes, overwrite
  // words with extreme values, cut the tail. Every outcome must be a File or an Error.
  std::vector<uint8_t> full = small_valid_file();
  std::mt19937_64 rng(1234);
  int n_ok = 0, n_err = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> m = full;
    int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_mut; ++k) {
      size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0:
          m[at] = static_cast<uint8_t>(rng());
          break;
        case 1:
          m[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 2: {
          static const uint64_t kExtreme[] = {
              0, 1, 0xff, 0xffffffffull, ~uint64_t{0}, uint64_t{1} << 63, 0x7fffffffffffffffull};
          uint64_t v = kExtreme[rng() % 7];
          for (size_t i = 0; i < 8 && at + i < m.size(); ++i)
            m[at + i] = static_cast<uint8_t>(v >> (8 * i));
          break;
        }
        default:
          m.resize(at);
          break;
      }
      if (m.empty()) break;
    }
    try {
      File f = parse_bytes(m);
      for (const auto& t : f.tensors()) {
        ASSERT_GE(t.data, m.data());
        ASSERT_LE(t.data + t.n_bytes, m.data() + m.size());
      }
      ++n_ok;
    } catch (const hearth::Error&) {
      ++n_err;
    }
  }
  EXPECT_GT(n_err, 0);
  EXPECT_EQ(n_ok + n_err, 4000);
}

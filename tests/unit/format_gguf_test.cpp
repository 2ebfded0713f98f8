// GGUF writer -> reader round trips, typed look-ups, and real files: the
// default model (HEARTH_DEFAULT_MODEL, required) and the shared vocab GGUFs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format_gguf_bytes.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::GgmlType;
using namespace hearth::gguf;
using hearth::gguf::testutil::parse_bytes;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

Writer full_writer(uint32_t version, uint32_t alignment) {
  Writer w(version);
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny \"test\"\nmodel");
  if (alignment != 32) w.set_alignment(alignment);
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 1e-5f);
  w.set_f64("t.f64", 3.141592653589793);
  w.set_bool("t.true", true);
  w.set_bool("t.false", false);
  w.set_string("t.empty", "");
  w.set_array("t.strings", std::vector<std::string>{"a", "", "ĠHello", std::string("\0x", 2)});
  w.set_array("t.ints", std::vector<int32_t>{1, -2, 3});
  w.set_array("t.uints", std::vector<uint32_t>{7, 8});
  w.set_array("t.floats", std::vector<float>{0.5f, -1.25f});
  w.set_array("t.none", std::vector<int32_t>{});
  w.set_value("t.nested",
              make_array(ValueType::ARRAY,
                         {make_array(ValueType::STRING, {make_string("x"), make_string("y")}),
                          make_array(ValueType::STRING, {})}));
  w.add_tensor("token_embd.weight", GgmlType::Q8_0, {64, 3}, pattern(2 * 34 * 3, 1));
  w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {64}, pattern(256, 2));
  w.add_tensor("blk.0.ffn_up.weight", GgmlType::Q4_K, {256, 2}, pattern(144 * 2, 3));
  w.add_tensor("blk.0.odd", GgmlType::F16, {3, 1, 1, 5}, pattern(30, 4));
  w.add_tensor("blk.0.q4_0", GgmlType::Q4_0, {32}, pattern(18, 5));
  return w;
}

void expect_same_metadata(const std::vector<KeyValue>& a, const std::vector<KeyValue>& b);

void expect_same_value(const Value& x, const Value& y, const std::string& key) {
  ASSERT_EQ(x.type, y.type) << key;
  EXPECT_EQ(x.u64, y.u64) << key;
  EXPECT_EQ(x.i64, y.i64) << key;
  EXPECT_EQ(x.f64, y.f64) << key;
  EXPECT_EQ(x.str, y.str) << key;
  if (x.type == ValueType::ARRAY) {
    EXPECT_EQ(x.elem_type, y.elem_type) << key;
    ASSERT_EQ(x.arr.size(), y.arr.size()) << key;
    for (size_t i = 0; i < x.arr.size(); ++i) expect_same_value(x.arr[i], y.arr[i], key);
  }
}

void expect_same_metadata(const std::vector<KeyValue>& a, const std::vector<KeyValue>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    expect_same_value(a[i].value, b[i].value, a[i].key);
  }
}

}  // namespace

class GgufRoundTrip : public testing::TestWithParam<std::pair<uint32_t, uint32_t>> {};

TEST_P(GgufRoundTrip, MetadataTensorsAndBytes) {
  auto [version, alignment] = GetParam();
  Writer w = full_writer(version, alignment);
  std::vector<uint8_t> bytes = w.to_bytes();
  File f = parse_bytes(bytes);
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  expect_same_metadata(w.metadata(), f.metadata());

  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.find("t.u64")->u64, 18000000000000000000ull);
  EXPECT_EQ(f.get_int("t.i64"), -9000000000000000000ll);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("t.f32")), 1e-5f);
  EXPECT_EQ(f.get_float("t.f64"), 3.141592653589793);
  EXPECT_TRUE(f.get_bool("t.true"));
  EXPECT_FALSE(f.get_bool("t.false"));
  EXPECT_EQ(f.get_string("general.name"), "tiny \"test\"\nmodel");
  EXPECT_EQ(f.get_string("t.empty"), "");
  const auto& strings = f.find("t.strings")->as_array("t.strings");
  ASSERT_EQ(strings.size(), 4u);
  EXPECT_EQ(strings[2].str, "ĠHello");
  EXPECT_EQ(strings[3].str, std::string("\0x", 2));
  EXPECT_EQ(f.find("t.ints")->arr[1].i64, -2);
  EXPECT_EQ(f.find("t.floats")->arr[1].f64, -1.25);
  EXPECT_TRUE(f.find("t.none")->arr.empty());
  EXPECT_EQ(f.find("t.nested")->arr[0].arr[1].str, "y");

  ASSERT_EQ(f.tensors().size(), 5u);
  struct Want {
    const char* name;
    GgmlType type;
    std::vector<uint64_t> shape;
    size_t n_bytes;
    uint8_t seed;
  };
  std::vector<Want> want = {
      {"token_embd.weight", GgmlType::Q8_0, {64, 3}, 204, 1},
      {"blk.0.attn_norm.weight", GgmlType::F32, {64}, 256, 2},
      {"blk.0.ffn_up.weight", GgmlType::Q4_K, {256, 2}, 288, 3},
      {"blk.0.odd", GgmlType::F16, {3, 1, 1, 5}, 30, 4},
      {"blk.0.q4_0", GgmlType::Q4_0, {32}, 18, 5},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, want[i].name);
    EXPECT_EQ(t.type, want[i].type);
    EXPECT_EQ(t.shape, want[i].shape);
    EXPECT_EQ(t.n_bytes, want[i].n_bytes);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(t.data, bytes.data() + f.data_offset() + t.offset);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes),
              pattern(want[i].n_bytes, want[i].seed))
        << t.name;
    EXPECT_EQ(f.find_tensor(want[i].name), &t);
  }
  EXPECT_EQ(f.tensors()[3].n_elements(), 15u);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, GgufRoundTrip,
                         testing::Values(std::pair{3u, 32u}, std::pair{2u, 32u}, std::pair{3u, 64u},
                                         std::pair{2u, 1u}, std::pair{3u, 4096u}));

TEST(GgufRoundTrip, EmptyFileAndFileOnDisk) {
  Writer w(3);
  File empty = parse_bytes(w.to_bytes());
  EXPECT_TRUE(empty.metadata().empty());
  EXPECT_TRUE(empty.tensors().empty());

  std::string path = testing::TempDir() + "/roundtrip.gguf";
  full_writer(3, 32).write_file(path);
  File f = File::open(path);
  EXPECT_EQ(f.name(), path);
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.file_size(), std::filesystem::file_size(path));
  std::filesystem::remove(path);
}

TEST(GgufWriter, RejectsBadInput) {
  EXPECT_THROW(Writer(1), Error);
  Writer w(3);
  EXPECT_THROW(w.set_alignment(0), Error);
  EXPECT_THROW(w.set_alignment(24), Error);
  EXPECT_THROW(w.set_u32("", 1), Error);
  EXPECT_THROW(make_array(ValueType::INT32, {make_string("x")}), Error);
  EXPECT_THROW(w.add_tensor("w", GgmlType::F32, {4}, std::vector<uint8_t>(15)), Error);
  EXPECT_THROW(w.add_tensor("w", GgmlType::Q4_0, {16}, std::vector<uint8_t>(9)), Error);
  EXPECT_THROW(w.add_tensor("w", GgmlType::F32, {}, std::vector<uint8_t>(4)), Error);
  EXPECT_THROW(w.add_tensor("w", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), Error);
  EXPECT_THROW(w.add_tensor("w", GgmlType::F32, {0}, std::vector<uint8_t>()), Error);
  w.add_tensor("w", GgmlType::F32, {1}, std::vector<uint8_t>(4));
  EXPECT_THROW(w.add_tensor("w", GgmlType::F32, {1}, std::vector<uint8_t>(4)), Error);
  // Setting a key again replaces it in place.
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  ASSERT_EQ(w.metadata().size(), 2u);
  EXPECT_EQ(w.metadata()[0].value.str, "x");
  w.remove("a");
  EXPECT_EQ(w.metadata().size(), 1u);
}

TEST(GgufLookup, NullBufferIsAnError) { EXPECT_THROW(File::parse(nullptr, 0, "x"), Error); }

TEST(GgufLookup, Errors) {
  Writer w(3);
  w.set_string("s", "text");
  w.set_u64("big", ~uint64_t{0});
  w.set_u32("n", 7);
  w.set_bool("flag", true);
  std::vector<uint8_t> bytes = w.to_bytes();
  File f = File::parse(bytes.data(), bytes.size(), "m.gguf");
  try {
    f.get_string("missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_STREQ(e.what(), "[gguf] m.gguf: key 'missing' not found");
  }
  try {
    f.get_int("s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_STREQ(e.what(), "[gguf] m.gguf: key 's': expected an integer, got string");
  }
  EXPECT_THROW(f.get_int("big"), Error);  // does not fit int64
  EXPECT_EQ(f.get_float("big"), 18446744073709551615.0);
  EXPECT_THROW(f.get_bool("n"), Error);
  EXPECT_EQ(f.get_int("flag"), 1);
  EXPECT_EQ(f.get_float("n"), 7.0);
  EXPECT_THROW(f.get_string("n"), Error);
  EXPECT_THROW(f.find("s")->as_array("s"), Error);
  EXPECT_EQ(f.find_int("missing"), std::nullopt);
  EXPECT_EQ(f.find_string("missing"), std::nullopt);
  EXPECT_EQ(f.find_float("missing"), std::nullopt);
  EXPECT_EQ(f.find_bool("missing"), std::nullopt);
  EXPECT_EQ(f.find_int("n"), 7);
  EXPECT_EQ(f.find_bool("flag"), true);
  EXPECT_EQ(f.find_string("s"), "text");
  EXPECT_THROW(f.find_string("n"), Error);  // present with the wrong type is an error
  EXPECT_EQ(value_type_name(ValueType::FLOAT64), "f64");
}

TEST(GgufOpen, MissingFileAndDirectory) {
  try {
    File::open("/nonexistent/dir/m.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/m.gguf"), std::string::npos);
  }
  EXPECT_THROW(File::open(testing::TempDir()), Error);
}

// The default model: SmolLM2-135M-Instruct, Q4_1 (facts read from the file itself).
TEST(GgufRealFiles, DefaultModel) {
  const char* path = std::getenv("HEARTH_DEFAULT_MODEL");
  ASSERT_NE(path, nullptr) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  File f = File::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.context_length"), 8192);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 64);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.rope.freq_base")), 100000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->as_array("tokens").size(), 49152u);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->arr[1].str, "<|im_start|>");
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->as_array("merges").size(), 48900u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);

  ASSERT_EQ(f.tensors().size(), 272u);  // 2 + 30 layers x 9
  uint64_t n_params = 0;
  for (const auto& t : f.tensors()) {
    n_params += t.n_elements();
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size()) << t.name;
  }
  EXPECT_EQ(n_params, 134515008u);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::Q8_0);
  EXPECT_EQ(emb->shape, (std::vector<uint64_t>{576, 49152}));
  const TensorInfo* q = f.find_tensor("blk.29.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q4_1);
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{576, 576}));
  EXPECT_EQ(q->n_bytes, 576u * 576u / 32u * 20u);
  const TensorInfo* norm = f.find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, GgmlType::F32);
}

TEST(GgufRealFiles, SharedVocabFiles) {
  std::filesystem::path dir = std::filesystem::path(HEARTH_SHARED_DIR) / "data" / "tokenizer-test";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    ++n_files;
    SCOPED_TRACE(entry.path().string());
    File f = File::open(entry.path().string());
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_FALSE(f.get_string("general.architecture").empty());
    EXPECT_FALSE(f.get_string("tokenizer.ggml.model").empty());
    const auto& tokens = f.find("tokenizer.ggml.tokens")->as_array("tokens");
    EXPECT_GT(tokens.size(), 1000u);
    EXPECT_EQ(f.find("tokenizer.ggml.tokens")->elem_type, ValueType::STRING);
  }
  EXPECT_GE(n_files, 10);
}

// The three ways out of a Writer give the same bytes: to_bytes, the streamed
// write_file, and the consuming take_bytes (which frees tensors as it goes).
TEST(GgufWriterOutputs, ToBytesWriteFileAndTakeBytesAgree) {
  Writer w;
  w.set_alignment(64);
  w.set_string("general.architecture", "llama");
  std::vector<float> a(37, 1.5f), b(5, -2.0f);
  w.add_tensor_f32("a", {37}, a);
  w.add_tensor_f32("b", {5}, b);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const auto path = std::filesystem::temp_directory_path() / "hearth_writer_outputs.gguf";
  w.write_file(path.string());
  std::vector<uint8_t> from_file(std::filesystem::file_size(path));
  FILE* f = std::fopen(path.string().c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fread(from_file.data(), 1, from_file.size(), f), from_file.size());
  std::fclose(f);
  std::filesystem::remove(path);
  EXPECT_EQ(from_file, bytes);
  const std::vector<uint8_t> taken = std::move(w).take_bytes();
  EXPECT_EQ(taken, bytes);
  const File parsed = File::parse(taken.data(), taken.size(), "taken");
  ASSERT_NE(parsed.find_tensor("b"), nullptr);
  EXPECT_EQ(reinterpret_cast<const float*>(parsed.find_tensor("b")->data)[4], -2.0f);
}

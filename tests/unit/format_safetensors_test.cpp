// safetensors reader: files built byte by byte here (F32 / F16 / BF16 values, metadata,
// a zero-size tensor), each malformation refused with an Error naming the problem, and
// the committed Qwen3.5 fixtures (written by transformers' save_pretrained) read back.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"

namespace {

namespace st = hearth::safetensors;

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (uint8_t b : data) out.push_back(b);
  return out;
}

void put_f32(std::vector<uint8_t>& d, float f) {
  uint8_t b[4];
  std::memcpy(b, &f, 4);  // little-endian host (x86-64, arm64)
  d.insert(d.end(), b, b + 4);
}
void put_u16(std::vector<uint8_t>& d, uint16_t v) {
  d.push_back(static_cast<uint8_t>(v));
  d.push_back(static_cast<uint8_t>(v >> 8));
}

std::string parse_error(const std::string& header, const std::vector<uint8_t>& data) {
  const auto bytes = make_file(header, data);
  try {
    st::File::parse(bytes.data(), bytes.size(), "t.safetensors");
  } catch (const hearth::Error& e) {
    EXPECT_EQ(e.kind(), hearth::ErrorKind::kInvalidInput);
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsTensorsOfEachFloatType) {
  std::vector<uint8_t> data;
  put_f32(data, 1.5f);
  put_f32(data, -2.0f);
  put_f32(data, 0.25f);
  put_f32(data, 3.0f);  // a: F32 [2, 2], bytes 0..16
  put_u16(data, 0x3C00);
  put_u16(data, 0xC000);  // b: F16 [2] = 1, -2, bytes 16..20
  put_u16(data, 0x3F80);
  put_u16(data, 0x4049);  // c: BF16 [2] = 1, 3.140625, bytes 20..24
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},)"
      R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[24,24]}})";
  const auto bytes = make_file(header, data);
  const auto f = st::File::parse(bytes.data(), bytes.size(), "t.safetensors");
  EXPECT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& a = f.get("a");
  EXPECT_EQ(a.dtype, st::DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.numel(), 4);
  EXPECT_EQ(f.to_f32(a), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(f.to_f64(f.get("b")), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f.to_f64(f.get("c")), (std::vector<double>{1.0, 3.140625}));
  EXPECT_EQ(f.get("e").numel(), 0);
  EXPECT_TRUE(f.to_f32(f.get("e")).empty());
  EXPECT_EQ(f.find("missing"), nullptr);
  try {
    f.get("missing");
    FAIL();
  } catch (const hearth::Error& e) {
    EXPECT_EQ(e.kind(), hearth::ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

TEST(Safetensors, NonFloatDtypeIsReadableButNotConvertible) {
  const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto bytes = make_file(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data);
  const auto f = st::File::parse(bytes.data(), bytes.size(), "t");
  EXPECT_EQ(f.get("i").nbytes(), 8u);
  EXPECT_THROW(f.to_f64(f.get("i")), hearth::Error);
}

TEST(Safetensors, RejectsMalformedFiles) {
  const std::vector<uint8_t> d16(16, 0);
  struct Case {
    std::string header;
    std::vector<uint8_t> data;
    std::string expect;  // substring of the message
  };
  const std::vector<Case> cases = {
      {"[1,2]", {}, "not a JSON object"},
      {"{\"a\":", {}, "not valid JSON"},
      {R"({"a":{"shape":[4],"data_offsets":[0,16]}})", d16, "dtype"},
      {R"({"a":{"dtype":"F8_E9","shape":[4],"data_offsets":[0,16]}})", d16, "unknown dtype"},
      {R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", d16, "shape"},
      {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", d16, "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", d16, "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", d16, "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,4]}})", d16, "> end"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", d16, "past the data region"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", d16, "need 12"},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})", d16,
       "too large"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       d16, "overlap"},
      {R"({"__metadata__":{"k":1}})", {}, "not a string"},
      {R"({"a":[1]})", {}, "not an object"},
  };
  for (const auto& c : cases) {
    const std::string msg = parse_error(c.header, c.data);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " -> '" << msg << "'";
    EXPECT_NE(msg.find("[safetensors] t.safetensors"), std::string::npos) << msg;
  }
}

TEST(Safetensors, RejectsBadHeaderLength) {
  const std::vector<uint8_t> short_file = {1, 0, 0};
  EXPECT_THROW(st::File::parse(short_file.data(), short_file.size(), "t"), hearth::Error);
  auto bytes = make_file("{}", {});
  bytes[0] = 200;  // header length 200 > file
  try {
    st::File::parse(bytes.data(), bytes.size(), "t");
    FAIL();
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
  bytes[7] = 0x80;  // 2^63 + 200: beyond the limit, refused before any allocation
  EXPECT_THROW(st::File::parse(bytes.data(), bytes.size(), "t"), hearth::Error);
  const auto empty = make_file("{}", {});
  EXPECT_TRUE(st::File::parse(empty.data(), empty.size(), "t").tensors().empty());
}

// The committed fixtures: f32 (dense), bf16 (MoE) and f16 (Qwen3-Next) written by
// transformers 5.17 save_pretrained.
TEST(Safetensors, ReadsCommittedQwen35Fixtures) {
  const std::string dir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";
  const auto dense = st::File::open(dir + "dense/model.safetensors");
  const auto& qkv = dense.get("model.layers.0.linear_attn.in_proj_qkv.weight");
  EXPECT_EQ(qkv.dtype, st::DType::kF32);
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{160, 64}));
  EXPECT_EQ(dense.get("model.layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{160, 1, 4}));
  EXPECT_EQ(dense.find("lm_head.weight"), nullptr);  // tied to the embeddings
  const auto moe = st::File::open(dir + "moe/model.safetensors");
  EXPECT_EQ(moe.get("model.layers.0.mlp.experts.7.gate_proj.weight").dtype, st::DType::kBF16);
  const auto next = st::File::open(dir + "next/model.safetensors");
  const auto& qkvz = next.get("model.layers.0.linear_attn.in_proj_qkvz.weight");
  EXPECT_EQ(qkvz.dtype, st::DType::kF16);
  EXPECT_EQ(qkvz.shape, (std::vector<int64_t>{256, 64}));
  for (const auto& t : next.tensors()) EXPECT_EQ(next.to_f32(t).size(), size_t(t.numel()));
}

}  // namespace

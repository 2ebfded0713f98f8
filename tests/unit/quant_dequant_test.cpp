// Reference dequantizers against golden outputs of ggml's own C code
// (tests/data/quant/*.dequant.bin, scripts/gen_quant_fixtures.py), bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/dequant_ref.h"
#include "quant_fixture.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::GgmlType;

namespace {

// Every type with a ggml golden file; a missing file fails the test.
const GgmlType kGoldenTypes[] = {
    GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,
    GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL, GgmlType::MXFP4,
};

TEST(Dequant, MatchesGgmlBitForBit) {
  int matched = 0;
  for (GgmlType type : kGoldenTypes) {
    SCOPED_TRACE(std::string(hearth::ggml_type_name(type)));
    const auto fx = quant_test::load_fixture(type, "dequant");
    if (!fx.ok) continue;
    ASSERT_TRUE(hearth::can_dequantize(type));
    std::vector<float> got(fx.floats.size(), -12345.0f);
    hearth::dequantize_row_ref(type, fx.blocks.data(), got.data(), static_cast<int64_t>(got.size()));
    const int64_t diff = quant_test::first_float_diff(fx.floats, got);
    if (diff < 0) {
      ++matched;
    } else {
      ADD_FAILURE() << "first difference at element " << diff << ": ggml " << fx.floats[diff] << " (0x" << std::hex
                    << hearth::f32_bits(fx.floats[diff]) << "), hearth " << got[diff] << " (0x"
                    << hearth::f32_bits(got[diff]) << ")";
    }
  }
  const int total = static_cast<int>(std::size(kGoldenTypes));
  std::printf("dequant types matched: %d / %d\n", matched, total);
  EXPECT_EQ(matched, total);
}

TEST(Dequant, GoldenBlocksAreNotTrivial) {
  // Guards against a generator bug producing all-zero data that any code would match.
  for (GgmlType type : kGoldenTypes) {
    const auto fx = quant_test::load_fixture(type, "dequant");
    if (!fx.ok) continue;
    int nonzero = 0;
    for (float v : fx.floats) nonzero += v != 0.0f;
    EXPECT_GT(nonzero, static_cast<int>(fx.floats.size() / 4)) << hearth::ggml_type_name(type);
  }
}

TEST(Dequant, UnalignedSourceGivesSameResult) {
  for (GgmlType type : kGoldenTypes) {
    const auto fx = quant_test::load_fixture(type, "dequant");
    if (!fx.ok) continue;
    std::vector<uint8_t> shifted(fx.blocks.size() + 1);
    std::memcpy(shifted.data() + 1, fx.blocks.data(), fx.blocks.size());
    std::vector<float> got(fx.floats.size());
    hearth::dequantize_row_ref(type, shifted.data() + 1, got.data(), static_cast<int64_t>(got.size()));
    EXPECT_EQ(quant_test::first_float_diff(fx.floats, got), -1) << hearth::ggml_type_name(type);
  }
}

TEST(Dequant, F32IsACopy) {
  const std::vector<float> src = {0.0f, -0.0f, 1.5f, -3.25e-30f, 6.5e30f};
  std::vector<float> dst(src.size());
  hearth::dequantize_row_ref(GgmlType::F32, src.data(), dst.data(), static_cast<int64_t>(src.size()));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size() * sizeof(float)), 0);
}

TEST(Dequant, Q8_1IsScaleTimesQuant) {
  // ggml has no to_float for Q8_1; its value is d * q like Q8_0 (s is only for dot products).
  std::mt19937 rng(7);
  std::vector<uint8_t> q81(36 * 3), q80(34 * 3);
  for (auto& b : q81) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < 3; ++i) {
    const uint16_t d = hearth::f32_to_f16(0.01f * static_cast<float>(i + 1) * (i == 1 ? -1.0f : 1.0f));
    std::memcpy(&q81[36 * i], &d, 2);
    std::memcpy(&q80[34 * i], &d, 2);
    std::memcpy(&q80[34 * i + 2], &q81[36 * i + 4], 32);
  }
  std::vector<float> a(96), b(96);
  hearth::dequantize_row_ref(GgmlType::Q8_1, q81.data(), a.data(), 96);
  hearth::dequantize_row_ref(GgmlType::Q8_0, q80.data(), b.data(), 96);
  EXPECT_EQ(quant_test::first_float_diff(a, b), -1);
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(static_cast<int8_t>(q81[4])) * hearth::f16_to_f32(hearth::f32_to_f16(0.01f)));
}

TEST(Dequant, SupportedSet) {
  for (GgmlType type : kGoldenTypes) EXPECT_TRUE(hearth::can_dequantize(type));
  EXPECT_TRUE(hearth::can_dequantize(GgmlType::F32));
  EXPECT_TRUE(hearth::can_dequantize(GgmlType::Q8_1));
  for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ4_XS, GgmlType::I32, GgmlType::F64, GgmlType::TQ2_0}) {
    EXPECT_FALSE(hearth::can_dequantize(type)) << hearth::ggml_type_name(type);
  }
}

TEST(Dequant, UnsupportedTypeThrowsNamingIt) {
  std::vector<uint8_t> src(1024);
  std::vector<float> dst(256);
  try {
    hearth::dequantize_row_ref(GgmlType::IQ2_XXS, src.data(), dst.data(), 256);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("iq2_xxs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[dequant]"), std::string::npos) << e.what();
  }
}

TEST(Dequant, PartialBlockThrows) {
  std::vector<uint8_t> src(1024);
  std::vector<float> dst(512);
  try {
    hearth::dequantize_row_ref(GgmlType::Q4_K, src.data(), dst.data(), 300);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hearth::dequantize_row_ref(GgmlType::Q8_0, src.data(), dst.data(), -32), Error);
  // zero elements is a whole number of blocks and writes nothing
  dst[0] = 42.0f;
  hearth::dequantize_row_ref(GgmlType::Q8_0, src.data(), dst.data(), 0);
  EXPECT_EQ(dst[0], 42.0f);
}

}  // namespace

// Reference quantizers against the bytes ggml's own quantizers wrote for the
// same inputs (tests/data/quant/*.quant.bin, scripts/gen_quant_fixtures.py),
// plus round-trip error bounds on fresh random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"
#include "quant_fixture.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::GgmlType;

namespace {

// Every type Hearth quantizes that has a ggml golden file; a missing file fails.
const GgmlType kGoldenTypes[] = {
    GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
    GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4, GgmlType::IQ4_NL,
};

std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
  const auto bytes = hearth::ggml_row_bytes(type, x.size());
  std::vector<uint8_t> out(bytes.value_or(0), 0xAB);  // poison: every byte must be written
  hearth::quantize_row_ref(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> out(n);
  hearth::dequantize_row_ref(type, q.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

TEST(Quant, MatchesGgmlBytes) {
  int matched = 0;
  for (GgmlType type : kGoldenTypes) {
    const std::string name(hearth::ggml_type_name(type));
    SCOPED_TRACE(name);
    const auto fx = quant_test::load_fixture(type, "quant");
    if (!fx.ok) continue;
    ASSERT_TRUE(hearth::can_quantize(type));
    const auto got = quantize(type, fx.floats);
    ASSERT_EQ(got.size(), fx.blocks.size());
    const auto mismatch = std::mismatch(got.begin(), got.end(), fx.blocks.begin());
    if (mismatch.first == got.end()) {
      ++matched;
    } else {
      const size_t off = static_cast<size_t>(mismatch.first - got.begin());
      const size_t block = hearth::ggml_traits(type).type_size;
      ADD_FAILURE() << "first differing byte " << off << " (block " << off / block << ", byte " << off % block
                    << "): ggml " << int(fx.blocks[off]) << ", hearth " << int(got[off]);
    }
  }
  const int total = static_cast<int>(std::size(kGoldenTypes));
  std::printf("quant types matched: %d / %d\n", matched, total);
  EXPECT_EQ(matched, total);
}

// Root-mean-square error of quantize -> dequantize relative to the RMS of the
// data, for Gaussian rows (several scales, some outliers). The bounds are
// about 1.5x what ggml's algorithms reach; a broken packing gives O(1).
TEST(Quant, RoundTripErrorIsBounded) {
  const struct {
    GgmlType type;
    double max_rel_rmse;
  } cases[] = {
      {GgmlType::F32, 0.0},     {GgmlType::F16, 5e-4},   {GgmlType::BF16, 3e-3},  {GgmlType::Q8_0, 0.013},
      {GgmlType::Q8_1, 0.013},  {GgmlType::Q8_K, 0.035}, {GgmlType::Q6_K, 0.04},  {GgmlType::Q5_0, 0.1},
      {GgmlType::Q5_1, 0.07},   {GgmlType::Q5_K, 0.065}, {GgmlType::Q4_0, 0.2},   {GgmlType::Q4_1, 0.14},
      {GgmlType::Q4_K, 0.14},   {GgmlType::MXFP4, 0.2},  {GgmlType::Q3_K, 0.3},   {GgmlType::Q2_K, 0.5},
      {GgmlType::IQ4_NL, 0.18},
  };
  std::mt19937 rng(1234);
  const size_t n = 256 * 16;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = std::pow(10.0f, static_cast<float>((i / 256) % 5) - 2.0f);  // 1e-2 .. 1e2 per row
    x[i] = std::normal_distribution<float>(0.0f, scale)(rng);
    if (i % 997 == 0) x[i] *= 8.0f;  // outliers
  }
  for (const auto& c : cases) {
    const std::string name(hearth::ggml_type_name(c.type));
    const auto y = dequantize(c.type, quantize(c.type, x), n);
    double worst = 0.0;
    for (size_t row = 0; row < n / 256; ++row) {
      double err2 = 0.0, sig2 = 0.0;
      for (size_t i = row * 256; i < (row + 1) * 256; ++i) {
        err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
        sig2 += double(x[i]) * x[i];
      }
      worst = std::max(worst, std::sqrt(err2 / sig2));
    }
    std::printf("  %-6s worst relative RMSE %.5f (bound %.3f)\n", name.c_str(), worst, c.max_rel_rmse);
    EXPECT_LE(worst, c.max_rel_rmse) << name;
  }
}

TEST(Quant, Q8_0ElementErrorWithinHalfStep) {
  std::mt19937 rng(99);
  std::vector<float> x(32 * 64);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
  const auto q = quantize(GgmlType::Q8_0, x);
  const auto y = dequantize(GgmlType::Q8_0, q, x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (size_t i = 32 * b; i < 32 * (b + 1); ++i) amax = std::max(amax, std::fabs(x[i]));
    const float step = amax / 127.0f;
    for (size_t i = 32 * b; i < 32 * (b + 1); ++i) {
      // half a step, plus the f16 rounding of d times the largest quant
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * step + 127.0f * step * 0x1p-11f) << "element " << i;
    }
  }
}

TEST(Quant, ZeroRowStaysZero) {
  const std::vector<float> x(512, 0.0f);
  for (GgmlType type : kGoldenTypes) {
    const auto y = dequantize(type, quantize(type, x), x.size());
    for (float v : y) ASSERT_EQ(v, 0.0f) << hearth::ggml_type_name(type);
  }
}

TEST(Quant, UnsupportedTypeThrowsNamingIt) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ4_XS, GgmlType::I8}) {
    EXPECT_FALSE(hearth::can_quantize(type));
    try {
      hearth::quantize_row_ref(type, x.data(), out.data(), 256);
      ADD_FAILURE() << "expected an error for " << hearth::ggml_type_name(type);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find(std::string(hearth::ggml_type_name(type))), std::string::npos) << e.what();
    }
  }
}

TEST(Quant, PartialBlockThrows) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> out(1024);
  try {
    hearth::quantize_row_ref(GgmlType::Q6_K, x.data(), out.data(), 300);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("q6_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hearth::quantize_row_ref(GgmlType::Q4_0, x.data(), out.data(), 33), Error);
}

}  // namespace

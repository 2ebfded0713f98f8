// f16 / bf16 <-> f32 conversions: exhaustive checks against independent
// oracles, and ggml's rounding of f32 edge cases (tests/data/quant/half.bin,
// written by scripts/gen_quant_fixtures.py from ggml's own conversions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <fstream>
#include <iterator>
#include <string>

#include "core/half.h"

using hearth::bf16_to_f32;
using hearth::f16_to_f32;
using hearth::f32_bits;
using hearth::f32_from_bits;
using hearth::f32_to_bf16;
using hearth::f32_to_f16;

namespace {

std::vector<uint8_t> read_fixture(const std::string& name) {
  const std::string path = std::string(HEARTH_SOURCE_DIR) + "/tests/data/quant/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "missing fixture " << path << " (run scripts/gen_quant_fixtures.py)";
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

uint32_t u32_at(const std::vector<uint8_t>& d, size_t off) {
  uint32_t v;
  std::memcpy(&v, d.data() + off, 4);
  return v;
}

// Value of an f16 from its definition, in double arithmetic.
double f16_value(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(double(mant), -24);
  if (exp == 31) return mant == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(double(1024 + mant), exp - 25);
}

TEST(Half, EveryF16ToF32IsExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    const double want = f16_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      // ggml: sign and payload kept, quiet bit set
      const uint32_t expect = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
      ASSERT_EQ(f32_bits(got), expect) << h;
    } else {
      ASSERT_EQ(double(got), want) << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_f16(f), (h & 0x8000u) | 0x7e00u) << h;  // ggml's canonical NaN, sign kept
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << h;
    }
  }
}

TEST(Half, F32ToF16IsNearestTiesToEven) {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    const float x = f32_from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    const uint16_t h = f32_to_f16(x);
    const double got = f16_value(h);
    const double ax = std::fabs(double(x));
    if (ax >= 65520.0) {
      ASSERT_TRUE(std::isinf(got) && std::signbit(got) == std::signbit(x)) << x;
      continue;
    }
    // neighbours of the result must not be closer; on a tie the result is even
    const uint16_t mag = h & 0x7fff;
    const double err = std::fabs(got - double(x));
    if (mag > 0) {
      const double lo = f16_value(static_cast<uint16_t>(h - 1));
      ASSERT_LE(err, std::fabs(lo - double(x))) << x;
      if (err == std::fabs(lo - double(x))) {
        ASSERT_EQ(h & 1, 0) << x;
      }
    }
    if (mag < 0x7bff) {
      const double hi = f16_value(static_cast<uint16_t>(h + 1));
      ASSERT_LE(err, std::fabs(hi - double(x))) << x;
      if (err == std::fabs(hi - double(x))) {
        ASSERT_EQ(h & 1, 0) << x;
      }
    }
  }
}

TEST(Half, EveryBf16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_bits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h) << h;
    }
  }
}

TEST(Half, MatchesGgmlRoundingOnEdgeCases) {
  const auto d = read_fixture("half.bin");
  ASSERT_GE(d.size(), 8u);
  ASSERT_EQ(std::memcmp(d.data(), "HQH1", 4), 0);
  const uint32_t n = u32_at(d, 4);
  ASSERT_EQ(d.size(), 8 + 8ull * n);
  ASSERT_GT(n, 1000u);
  int f16_ok = 0, bf16_ok = 0, nan_inputs = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t bits = u32_at(d, 8 + 4ull * i);
    uint16_t want16, wantb;
    std::memcpy(&want16, d.data() + 8 + 4ull * n + 2ull * i, 2);
    std::memcpy(&wantb, d.data() + 8 + 6ull * n + 2ull * i, 2);
    const float x = f32_from_bits(bits);
    nan_inputs += std::isnan(x);
    const uint16_t got16 = f32_to_f16(x), gotb = f32_to_bf16(x);
    if (got16 == want16) {
      ++f16_ok;
    } else {
      ADD_FAILURE() << std::hex << "f32 0x" << bits << " -> f16: ggml 0x" << want16 << ", hearth 0x" << got16;
    }
    if (gotb == wantb) {
      ++bf16_ok;
    } else {
      ADD_FAILURE() << std::hex << "f32 0x" << bits << " -> bf16: ggml 0x" << wantb << ", hearth 0x" << gotb;
    }
  }
  EXPECT_GT(nan_inputs, 0);  // the fixture must exercise NaN handling
  std::printf("half cases matched: f16 %d / %u, bf16 %d / %u\n", f16_ok, n, bf16_ok, n);
}

TEST(Half, RowsConvertEveryElement) {
  const std::vector<float> src = {1.0f, -2.5f, 65504.0f, 1e-8f, 3.0e38f};
  std::vector<uint16_t> h(src.size()), b(src.size());
  std::vector<float> back(src.size());
  hearth::f32_to_f16_row(src.data(), h.data(), static_cast<int64_t>(src.size()));
  hearth::f32_to_bf16_row(src.data(), b.data(), static_cast<int64_t>(src.size()));
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0xc100);
  EXPECT_EQ(h[2], 0x7bff);
  EXPECT_EQ(h[3], 0x0000);  // 1e-8 is below half the smallest subnormal (2^-25)
  EXPECT_EQ(h[4], 0x7c00);
  hearth::f16_to_f32_row(h.data(), back.data(), static_cast<int64_t>(h.size()));
  EXPECT_EQ(back[1], -2.5f);
  hearth::bf16_to_f32_row(b.data(), back.data(), static_cast<int64_t>(b.size()));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
}

}  // namespace

// The NEON quantized dot products (dot_neon.cpp: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), both
// builds (plain NEON and the dot-product extension), bit for bit against the order x86's
// AVX2 kernels compute: for Q4_K and Q6_K the reference kernels themselves (dot_ref.cpp),
// for the legacy types ggml's AVX2 lane order, re-computed in scalar code below
// (lane_order_dot; it agrees with the reference to float rounding, also checked). On
// quantized float data and on raw random bytes (every nibble, 6-bit value, scale and min;
// activations over the whole int8 range). aarch64 only: elsewhere the tests skip. scripts/test.sh runs them under qemu twice, on a CPU with the dot-product
// instructions (-cpu max) and on one without (cortex-a53), so both dispatch paths run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/quant_dot.h"
#include "format/ggml_types.h"
#include "quant/blocks.h"
#include "quant/quant_ref.h"

namespace {

using hearth::GgmlType;
namespace cpu = hearth::cpu;
namespace q = hearth::quant;

constexpr GgmlType kNeonTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};

bool is_legacy(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0; }

size_t row_bytes(GgmlType type, int64_t n) { return static_cast<size_t>(*hearth::ggml_row_bytes(type, n)); }
int64_t block_size(GgmlType type) { return type == GgmlType::Q4_K || type == GgmlType::Q6_K ? q::kQKK : q::kQK; }

void random_half(q::Half& h, std::mt19937& rng) {
  const float mag = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                               std::uniform_int_distribution<int>(-14, 0)(rng));
  q::store_f16(h, (rng() & 1) ? -mag : mag);
}

// A weight row: the reference quantizer on normal floats (with outliers), or random
// bytes with only the f16 scales kept finite.
std::vector<uint8_t> make_weight(GgmlType type, int64_t n, uint32_t seed, bool raw) {
  std::vector<uint8_t> w(row_bytes(type, n));
  std::mt19937 rng(seed);
  if (!raw) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) f[i] = i % 89 == 3 ? 40.0f : normal(rng);
    hearth::quantize_row_ref(type, f.data(), w.data(), n);
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < n / block_size(type); ++b) {
    switch (type) {
      case GgmlType::Q4_0: random_half(reinterpret_cast<q::BlockQ4_0*>(w.data())[b].d, rng); break;
      case GgmlType::Q4_1:
        random_half(reinterpret_cast<q::BlockQ4_1*>(w.data())[b].d, rng);
        random_half(reinterpret_cast<q::BlockQ4_1*>(w.data())[b].m, rng);
        break;
      case GgmlType::Q8_0: random_half(reinterpret_cast<q::BlockQ8_0*>(w.data())[b].d, rng); break;
      case GgmlType::Q4_K:
        random_half(reinterpret_cast<q::BlockQ4_K*>(w.data())[b].d, rng);
        random_half(reinterpret_cast<q::BlockQ4_K*>(w.data())[b].dmin, rng);
        break;
      default: random_half(reinterpret_cast<q::BlockQ6_K*>(w.data())[b].d, rng); break;
    }
  }
  return w;
}

// An activation row: the kernel's quantizer on normal floats, or random int8 values over
// the whole range (-128 too) with finite scales and consistent Q8_K block sums.
std::vector<uint8_t> make_act(const cpu::DotKernel& k, int64_t n, uint32_t seed, bool raw) {
  std::vector<uint8_t> x(row_bytes(k.act_type, n));
  std::mt19937 rng(seed);
  if (!raw) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) f[i] = normal(rng);
    k.quantize_act(f.data(), x.data(), n);
    return x;
  }
  std::uniform_int_distribution<int> val(-128, 127);
  if (k.act_type == GgmlType::Q8_K) {
    for (int64_t b = 0; b < n / q::kQKK; ++b) {
      auto& blk = reinterpret_cast<q::BlockQ8_K*>(x.data())[b];
      q::store_f32(blk.d, std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng), -7));
      for (int j = 0; j < q::kQKK / 16; ++j) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += blk.qs[16 * j + i] = static_cast<int8_t>(val(rng));
        blk.bsums[2 * j] = static_cast<uint8_t>(s & 0xff);
        blk.bsums[2 * j + 1] = static_cast<uint8_t>((s >> 8) & 0xff);
      }
    }
  } else if (k.act_type == GgmlType::Q8_1) {
    for (int64_t b = 0; b < n / q::kQK; ++b) {
      auto& blk = reinterpret_cast<q::BlockQ8_1*>(x.data())[b];
      random_half(blk.d, rng);
      random_half(blk.s, rng);
      for (auto& v : blk.qs) v = static_cast<int8_t>(val(rng));
    }
  } else {
    for (int64_t b = 0; b < n / q::kQK; ++b) {
      auto& blk = reinterpret_cast<q::BlockQ8_0*>(x.data())[b];
      random_half(blk.d, rng);
      for (auto& v : blk.qs) v = static_cast<int8_t>(val(rng));
    }
  }
  return x;
}

// ggml's AVX2 order for Q4_0 / Q4_1 / Q8_0 (dot_avx2.cpp) in scalar code: 8 float lanes,
// lane l += (dw * dx) * (exact sum of products 4l .. 4l + 3) by one fma, the products in
// the unpacked order (low nibbles with activations 0..15, high with 16..31); lanes summed
// l + l+4, then (0 + 2) + (1 + 3); Q4_1's min terms summed apart and added last.
float lane_order_dot(GgmlType type, int64_t n, const uint8_t* w, const uint8_t* x) {
  float acc[8] = {};
  float mins = 0.0f;
  for (int64_t b = 0; b < n / q::kQK; ++b) {
    int wq[q::kQK];
    float dw = 0.0f, dx = 0.0f;
    const int8_t* xq = nullptr;
    if (type == GgmlType::Q8_0) {
      const auto& blk = reinterpret_cast<const q::BlockQ8_0*>(w)[b];
      dw = q::load_f16(blk.d);
      for (int i = 0; i < q::kQK; ++i) wq[i] = blk.qs[i];
    } else {
      const uint8_t* qs = type == GgmlType::Q4_0 ? reinterpret_cast<const q::BlockQ4_0*>(w)[b].qs
                                                  : reinterpret_cast<const q::BlockQ4_1*>(w)[b].qs;
      const int offset = type == GgmlType::Q4_0 ? 8 : 0;
      dw = type == GgmlType::Q4_0 ? q::load_f16(reinterpret_cast<const q::BlockQ4_0*>(w)[b].d)
                                  : q::load_f16(reinterpret_cast<const q::BlockQ4_1*>(w)[b].d);
      for (int i = 0; i < q::kQK / 2; ++i) {
        wq[i] = (qs[i] & 0xf) - offset;
        wq[i + 16] = (qs[i] >> 4) - offset;
      }
    }
    if (type == GgmlType::Q4_1) {
      const auto& xb = reinterpret_cast<const q::BlockQ8_1*>(x)[b];
      dx = q::load_f16(xb.d), xq = xb.qs;
      mins += q::load_f16(reinterpret_cast<const q::BlockQ4_1*>(w)[b].m) * q::load_f16(xb.s);
    } else {
      const auto& xb = reinterpret_cast<const q::BlockQ8_0*>(x)[b];
      dx = q::load_f16(xb.d), xq = xb.qs;
    }
    const float d = dw * dx;
    for (int l = 0; l < 8; ++l) {
      int s = 0;
      for (int i = 4 * l; i < 4 * l + 4; ++i) s += wq[i] * xq[i];
      acc[l] = std::fma(d, static_cast<float>(s), acc[l]);
    }
  }
  float h[4];
  for (int i = 0; i < 4; ++i) h[i] = acc[i] + acc[i + 4];
  return ((h[0] + h[2]) + (h[1] + h[3])) + mins;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

#if defined(__aarch64__)

// The dispatch: NEON kernels on every aarch64 CPU, the dot-product build where the CPU has it.
TEST(QuantDotNeon, DispatchFollowsCpuFeatures) {
  const auto& f = cpu::cpu_features();
  ASSERT_TRUE(f.neon) << "aarch64 without Advanced SIMD";
  std::printf("cpu features: %s\n", cpu::cpu_features_string(f).c_str());
  for (const GgmlType t : kNeonTypes) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(t);
    ASSERT_NE(k, nullptr);
    EXPECT_STREQ(k->isa, f.dotprod ? "neon-dotprod" : "neon") << hearth::ggml_type_name(t);
    EXPECT_STREQ(cpu::find_dot_kernel(t, true)->isa, "ref");
    ASSERT_NE(cpu::neon::find_plain(t), nullptr);
  }
}

// Both builds against the reference, bit for bit.
TEST(QuantDotNeon, EqualsReferenceBitForBit) {
  int n_checked = 0, n_same = 0;
  for (const GgmlType t : kNeonTypes) {
    const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
    const cpu::DotKernel* best = cpu::find_dot_kernel(t);
    const cpu::DotKernel* plain = cpu::neon::find_plain(t);
    ASSERT_NE(plain, nullptr);
    ASSERT_EQ(best->act_type, ref->act_type);
    for (const int64_t n_blocks : {1, 2, 3, 8, 17}) {
      const int64_t n = n_blocks * block_size(t);
      for (int pattern = 0; pattern < 4; ++pattern) {
        const bool raw_w = pattern >= 2, raw_x = pattern == 3;
        const uint32_t seed = static_cast<uint32_t>(1000 * pattern + n) + static_cast<uint32_t>(t);
        const auto w = make_weight(t, n, seed, raw_w);
        const auto x = make_act(*ref, n, seed + 7, raw_x);
        const float want_ref = ref->vec_dot(n, w.data(), x.data());
        const float want = is_legacy(t) ? lane_order_dot(t, n, w.data(), x.data()) : want_ref;
        if (is_legacy(t) && !raw_w && !raw_x) {
          // The two orders round differently; both are close to the exact sum.
          EXPECT_NEAR(want, want_ref, 1e-4f * (1.0f + std::fabs(want_ref))) << hearth::ggml_type_name(t) << " n=" << n;
        }
        for (const cpu::DotKernel* k : {best, plain}) {
          const float got = k->vec_dot(n, w.data(), x.data());
          EXPECT_EQ(bits(got), bits(want)) << hearth::ggml_type_name(t) << " " << k->isa << " n=" << n
                                           << " pattern " << pattern << ": " << got << " vs " << want;
          ++n_checked;
          n_same += bits(got) == bits(want);
        }
      }
    }
  }
  std::printf("neon dot products (%s) vs x86's order, identical: %d / %d\n", cpu::find_dot_kernel(GgmlType::Q4_0)->isa, n_same, n_checked);
}

// The matrix product the back-end calls (find_matmul_kernel) equals vec_dot per output.
TEST(QuantDotNeon, MatmulEqualsVecDot) {
  for (const GgmlType t : kNeonTypes) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(t);
    const cpu::MatmulFn mm = cpu::find_matmul_kernel(t);
    ASSERT_NE(mm, nullptr) << hearth::ggml_type_name(t);
    const int64_t n = 3 * block_size(t), n_w = 5, n_x = 3;
    const size_t wb = row_bytes(t, n), xb = row_bytes(k->act_type, n);
    std::vector<uint8_t> w, x;
    for (int r = 0; r < n_w; ++r) {
      const auto row = make_weight(t, n, 50 + r, r % 2 == 1);
      w.insert(w.end(), row.begin(), row.end());
    }
    for (int i = 0; i < n_x; ++i) {
      const auto row = make_act(*k, n, 90 + i, false);
      x.insert(x.end(), row.begin(), row.end());
    }
    std::vector<float> y(static_cast<size_t>(n_x * n_w), -1.0f);
    mm(n, w.data(), wb, n_w, x.data(), xb, n_x, y.data(), n_w);
    for (int i = 0; i < n_x; ++i) {
      for (int r = 0; r < n_w; ++r) {
        EXPECT_EQ(bits(y[i * n_w + r]), bits(k->vec_dot(n, w.data() + r * wb, x.data() + i * xb)))
            << hearth::ggml_type_name(t) << " row " << r << " token " << i;
      }
    }
  }
}

#else

TEST(QuantDotNeon, DispatchFollowsCpuFeatures) { GTEST_SKIP() << "not an aarch64 build"; }
TEST(QuantDotNeon, EqualsReferenceBitForBit) {
  // Keeps the helpers used (and compiled) on every architecture.
  (void)&make_weight;
  (void)&make_act;
  (void)&bits;
  (void)&lane_order_dot;
  (void)&is_legacy;
  GTEST_SKIP() << "not an aarch64 build";
}
TEST(QuantDotNeon, MatmulEqualsVecDot) { GTEST_SKIP() << "not an aarch64 build"; }

#endif

}  // namespace

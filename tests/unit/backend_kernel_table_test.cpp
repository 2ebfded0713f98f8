// The kernel table of this CPU (kernel_table.h: AVX2 / AVX-512 on x86-64, NEON on aarch64)
// against the plain table, entry by entry where the entries are element-wise: SwiGLU and
// SiLU (ggml's exp_approx on vector lanes, the scalar code for lanes out of its range),
// f16 <-> f32 rows. Bit for bit, on random values and on the edge cases (exponents
// outside [-126, 127], infinities, NaN, zeros, subnormals, tails shorter than a vector).
// The other entries are compared through the back-end's operations (attention:
// backend_cpu_test, backend_attention_test, backend_kv_q8_test; the delta rule:
// backend_gdn_test). scripts/test.sh runs this under qemu for aarch64 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels_ref.h"
#include "core/tune.h"
#include "ops/backend.h"

namespace {

namespace cpu = hearth::cpu;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Values whose exp_approx(-x) leaves the vector range, and the IEEE edge cases, spread
// over the vectors (and one in the tail).
std::vector<float> with_edges(std::vector<float> v) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edges[] = {90.0f,   -90.0f, 87.5f,  -87.5f,  100.0f, -100.0f, 150.0f, -150.0f, 300.0f, -300.0f,
                         inf,     -inf,   nan,    0.0f,    -0.0f,  1e-30f,  -1e-30f, 1e-40f, -1e-40f, 88.72f,
                         -88.72f, 103.9f, -103.9f, 1e30f,  -1e30f};
  for (size_t i = 0; i < std::size(edges); ++i) v[(37 * i + 5) % (v.size() - 1)] = edges[i];
  v.back() = -95.0f;
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// The table this CPU gets is its architecture's (so the comparisons below do test it).
TEST(KernelTable, ThisCpuRunsItsArchitecturesTable) {
  const cpu::KernelTable& k = cpu::cpu_kernels(false);
  std::printf("kernel table: %s (cpu: %s)\n", k.isa, cpu::cpu_features_string(cpu::cpu_features()).c_str());
  EXPECT_STREQ(cpu::cpu_kernels(true).isa, "plain");
#if defined(__aarch64__)
  EXPECT_STREQ(k.isa, "neon");
#elif defined(__x86_64__)
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (f.avx2 && f.fma && f.f16c) {
    EXPECT_NE(std::string(k.isa), "plain");
  }
#endif
}

// The machine's table, and AVX2's too where the machine has more (cpu.isa=avx2).
TEST(KernelTable, SwigluAndSiluEqualPlainBitForBit) {
  for (const int isa : {0, 1}) {
    const hearth::tune::Override cap(hearth::tune::kCpuIsa, isa);
    const cpu::KernelTable &k = cpu::cpu_kernels(false), &p = cpu::plain_kernels();
    for (const int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 33, 1000, 4099}) {
      for (const float scale : {1.0f, 8.0f, 60.0f}) {
        const auto g = with_edges(random_floats(static_cast<size_t>(std::max<int64_t>(n, 2)), 11 + n, scale));
        const auto u = random_floats(g.size(), 12 + n, 2.0f);
        const auto m = static_cast<int64_t>(g.size());
        std::vector<float> a(g.size()), b(g.size());
        k.swiglu(g.data(), u.data(), m, a.data());
        p.swiglu(g.data(), u.data(), m, b.data());
        EXPECT_TRUE(same_bits(a, b)) << k.isa << " swiglu n " << m << " scale " << scale;
        auto s1 = g, s2 = g;
        k.silu_row(s1.data(), m);
        p.silu_row(s2.data(), m);
        EXPECT_TRUE(same_bits(s1, s2)) << k.isa << " silu n " << m << " scale " << scale;
      }
    }
  }
}

// Every f16 value to f32, and f32 values (random, the f16 rounding ties, overflow,
// subnormals) to f16.
TEST(KernelTable, F16RowsEqualPlainBitForBit) {
  const cpu::KernelTable &k = cpu::cpu_kernels(false), &p = cpu::plain_kernels();
  std::vector<uint16_t> h(65536 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> a(h.size()), b(h.size());
  k.f16_to_f32(h.data(), a.data(), static_cast<int64_t>(h.size()));
  p.f16_to_f32(h.data(), b.data(), static_cast<int64_t>(h.size()));
  EXPECT_TRUE(same_bits(a, b));
  auto x = random_floats(4099, 21, 70000.0f);
  const auto small = random_floats(500, 22, 1e-5f);
  for (size_t i = 0; i < small.size(); ++i) x[i * 3] = small[i];
  for (size_t i = 0; i < 64; ++i) x[i * 7 + 1] = 1.0f + std::ldexp(static_cast<float>(2 * i + 1), -11);  // ties
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edges[] = {nan,       -nan,           inf,     -inf,   65504.0f, 65519.0f, 65520.0f, -65520.0f,
                         0.0f,      -0.0f,          1e-8f,   -3e-8f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f, 0x1.ffcp-15f,
                         1e-40f,    std::ldexp(1.0f, -24), 6.1e-5f};
  for (size_t i = 0; i < std::size(edges); ++i) x[1000 + 13 * i] = edges[i];
  std::vector<uint16_t> c(x.size()), d(x.size());
  k.f32_to_f16(x.data(), c.data(), static_cast<int64_t>(x.size()));
  p.f32_to_f16(x.data(), d.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(c, d);
}

// Rotary embedding of a token's heads: NeoX and normal layouts, rotating all of a head or
// part of it, head dims the vectors do and do not cover, positions up to 40,000 (large
// angles), against the plain entry (ref::rope_rotate per head).
TEST(KernelTable, RopeHeadsEqualPlainBitForBit) {
  const cpu::KernelTable &k = cpu::cpu_kernels(false), &p = cpu::plain_kernels();
  for (const bool neox : {true, false}) {
    for (const auto& [head_dim, n_rot] : {std::pair<int64_t, int64_t>{128, 128}, {128, 64}, {64, 64}, {80, 80},
                                          {256, 64}, {96, 48}, {64, 32}, {72, 72}, {68, 68}}) {
      hearth::ops::RopeParams rp;
      rp.n_rot = n_rot;
      rp.freq_base = 1000000.0f;
      rp.neox = neox;
      const int64_t n_heads = 5;
      for (const int32_t pos : {0, 1, 17, 511, 40000}) {
        std::vector<float> cs(static_cast<size_t>(n_rot));
        cpu::ref::rope_angles(static_cast<float>(pos), rp, cs.data());
        auto a = with_edges(random_floats(static_cast<size_t>(n_heads * head_dim), 30 + pos, 50.0f));
        auto b = a;
        k.rope_heads(a.data(), n_heads, head_dim, cs.data(), rp);
        p.rope_heads(b.data(), n_heads, head_dim, cs.data(), rp);
        EXPECT_TRUE(same_bits(a, b)) << "neox " << neox << " head_dim " << head_dim << " n_rot " << n_rot << " pos "
                                     << pos;
      }
    }
  }
}

// RMS norm rows (eight at a time in the AVX-512 build, the rest one by one): row counts
// around multiples of eight, widths of the models' hidden sizes and head dims and odd ones,
// values up to 3e4 (outlier activations), against the plain entry (ref::rms_norm_row); 2,000
// rows so that a sum of exact squares (an fma) instead of rounded ones would show.
TEST(KernelTable, RmsNormRowsEqualPlainBitForBit) {
  const cpu::KernelTable &k = cpu::cpu_kernels(false), &p = cpu::plain_kernels();
  for (const int64_t n : {64, 100, 128, 576, 2048}) {
    const auto w = random_floats(static_cast<size_t>(n), 61, 2.0f);
    for (const int64_t rows : {1, 7, 8, 9, 16, 37, 2000}) {
      auto x = random_floats(static_cast<size_t>(rows * n), 62 + rows, 3.0f);
      for (size_t i = 0; i < x.size(); i += 97) x[i] = 3.0e4f;
      std::vector<float> a(x.size()), b(x.size());
      k.rms_norm_rows(x.data(), w.data(), rows, n, 1e-6f, a.data());
      p.rms_norm_rows(x.data(), w.data(), rows, n, 1e-6f, b.data());
      EXPECT_TRUE(same_bits(a, b)) << "n " << n << " rows " << rows;
    }
  }
}

}  // namespace

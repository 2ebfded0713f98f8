// The SIMD quantized dot products for Q5_0, Q5_1 and Q5_K (dot_avx2.cpp, dot_tile.inc)
// against plain scalar code, on random, edge-value and raw random-bit blocks.
//
// Two float orders exist among the SIMD kernels:
//  - Q5_K (like Q4_K and Q6_K) scales each super-block's exact integer sums with the
//    reference's own expression, so it equals ref::dot_q5_k_q8_k bit for bit;
//  - the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) keep ggml's AVX2 order: 8 float
//    lanes, each lane += (dw * dx) * (exact sum of 4 adjacent products) by FMA, then
//    one horizontal sum (and a separate scalar sum of the Q8_1 min terms). That is not
//    the reference's sequential order, so against ref they agree to float rounding;
//    lane_order_dot below re-computes that lane order in scalar code, and the kernels
//    must equal it bit for bit.
// The tiled kernels (4 rows x 4 tokens, AVX2 and AVX-512 VNNI) must equal vec_dot bit
// for bit for every (row, token) and every partial tile.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/quant_dot.h"
#include "format/ggml_types.h"
#include "quant/blocks.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"

namespace {

using hearth::GgmlType;
namespace cpu = hearth::cpu;
namespace q = hearth::quant;

bool have_avx2() {
  const auto& f = cpu::cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

size_t row_bytes(GgmlType type, int64_t n) { return static_cast<size_t>(*hearth::ggml_row_bytes(type, n)); }
int64_t block_size(GgmlType type) { return type == GgmlType::Q5_K ? q::kQKK : q::kQK; }

// Float data with the shapes that stress quantizers and kernels: normal, zero blocks,
// constant blocks, large outliers, tiny values, all one sign.
std::vector<float> pattern_floats(size_t n, uint32_t seed, int pattern) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float g = normal(rng);
    switch (pattern % 6) {
      case 0: v[i] = g; break;
      case 1: v[i] = (i / 32) % 3 == 1 ? 0.0f : g; break;             // some all-zero blocks
      case 2: v[i] = (i / 32) % 2 == 0 ? 0.75f : -3.0f; break;         // constant blocks
      case 3: v[i] = i % 97 == 5 ? 2.0e4f : g; break;                  // outliers
      case 4: v[i] = 1e-5f * g; break;                                 // tiny
      default: v[i] = std::fabs(g) + (i % 7 == 0 ? 8.0f : 0.0f); break;  // one sign, bumps
    }
  }
  return v;
}

// A random finite f16 scale in about [2^-14, 2^1] (sign random where allowed).
void random_half(q::Half& h, std::mt19937& rng, bool allow_negative) {
  const float mag = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                               std::uniform_int_distribution<int>(-14, 0)(rng));
  q::store_f16(h, allow_negative && (rng() & 1) ? -mag : mag);
}

// Weight rows: from float patterns through the reference quantizer, or (raw) random bits
// in every byte with only the f16 scales kept finite, so all scale/min/fifth-bit
// combinations occur.
std::vector<uint8_t> make_weights(GgmlType type, int64_t n_rows, int64_t n, uint32_t seed, int pattern, bool raw) {
  const size_t rb = row_bytes(type, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(n_rows));
  if (!raw) {
    const auto f = pattern_floats(static_cast<size_t>(n_rows * n), seed, pattern);
    for (int64_t r = 0; r < n_rows; ++r) hearth::quantize_row_ref(type, f.data() + r * n, w.data() + r * rb, n);
    return w;
  }
  std::mt19937 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t nb = n / block_size(type);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = w.data() + r * rb;
      if (type == GgmlType::Q5_0) {
        random_half(reinterpret_cast<q::BlockQ5_0*>(p)[b].d, rng, true);
      } else if (type == GgmlType::Q5_1) {
        random_half(reinterpret_cast<q::BlockQ5_1*>(p)[b].d, rng, true);
        random_half(reinterpret_cast<q::BlockQ5_1*>(p)[b].m, rng, true);
      } else {
        random_half(reinterpret_cast<q::BlockQ5_K*>(p)[b].d, rng, false);
        random_half(reinterpret_cast<q::BlockQ5_K*>(p)[b].dmin, rng, false);
      }
    }
  }
  return w;
}

// Activation rows: the kernel's own quantizer on float patterns, or (raw) random int8
// values over the whole range the quantizers produce ([-127, 127]; Q8_K also -128,
// whose products the unsigned x signed kernels handle) with consistent Q8_K bsums.
std::vector<uint8_t> make_acts(const cpu::DotKernel& k, int64_t n_tok, int64_t n, uint32_t seed, int pattern,
                               bool raw) {
  const size_t rb = row_bytes(k.act_type, n);
  std::vector<uint8_t> x(rb * static_cast<size_t>(n_tok));
  if (!raw) {
    const auto f = pattern_floats(static_cast<size_t>(n_tok * n), seed, pattern);
    for (int64_t t = 0; t < n_tok; ++t) k.quantize_act(f.data() + t * n, x.data() + t * rb, n);
    return x;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> val(k.act_type == GgmlType::Q8_K ? -128 : -127, 127);
  for (int64_t t = 0; t < n_tok; ++t) {
    uint8_t* row = x.data() + t * rb;
    if (k.act_type == GgmlType::Q8_K) {
      for (int64_t b = 0; b < n / q::kQKK; ++b) {
        auto& blk = reinterpret_cast<q::BlockQ8_K*>(row)[b];
        q::store_f32(blk.d, std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng), -7));
        for (int j = 0; j < q::kQKK / 16; ++j) {
          int s = 0;
          for (int i = 0; i < 16; ++i) s += blk.qs[16 * j + i] = static_cast<int8_t>(val(rng));
          blk.bsums[2 * j] = static_cast<uint8_t>(s & 0xff);
          blk.bsums[2 * j + 1] = static_cast<uint8_t>((s >> 8) & 0xff);
        }
      }
    } else {
      for (int64_t b = 0; b < n / q::kQK; ++b) {
        int8_t* qs = nullptr;
        if (k.act_type == GgmlType::Q8_0) {
          auto& blk = reinterpret_cast<q::BlockQ8_0*>(row)[b];
          random_half(blk.d, rng, false);
          qs = blk.qs;
        } else {
          auto& blk = reinterpret_cast<q::BlockQ8_1*>(row)[b];
          random_half(blk.d, rng, false);
          random_half(blk.s, rng, true);
          qs = blk.qs;
        }
        for (int i = 0; i < q::kQK; ++i) qs[i] = static_cast<int8_t>(val(rng));
      }
    }
  }
  return x;
}

// ggml's AVX2 order for the legacy types, in scalar code: lane l of block b holds the
// exact sum of weight x activation products of elements 4l..4l+3; acc[l] = fma(dw * dx,
// lane, acc[l]); then _mm256 halves, pairs, and the last pair; plus sum of mw * sx.
float lane_order_dot(GgmlType type, int64_t n, const uint8_t* w, const uint8_t* x) {
  float acc[8] = {};
  float mins = 0.0f;
  for (int64_t b = 0; b < n / q::kQK; ++b) {
    int wq[q::kQK];
    float dw = 0.0f, mw = 0.0f;
    const uint8_t* qs = nullptr;
    uint32_t qh = 0;
    int offset = 0;
    if (type == GgmlType::Q5_0) {
      const auto& blk = reinterpret_cast<const q::BlockQ5_0*>(w)[b];
      dw = q::load_f16(blk.d), qs = blk.qs, qh = q::load_u32(blk.qh), offset = 16;
    } else {
      const auto& blk = reinterpret_cast<const q::BlockQ5_1*>(w)[b];
      dw = q::load_f16(blk.d), mw = q::load_f16(blk.m), qs = blk.qs, qh = q::load_u32(blk.qh);
    }
    for (int i = 0; i < q::kQK / 2; ++i) {
      wq[i] = ((qs[i] & 0xf) | (((qh >> i) & 1) << 4)) - offset;
      wq[i + 16] = ((qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - offset;
    }
    const int8_t* xq = nullptr;
    float dx = 0.0f, sx = 0.0f;
    if (type == GgmlType::Q5_0) {
      const auto& blk = reinterpret_cast<const q::BlockQ8_0*>(x)[b];
      dx = q::load_f16(blk.d), xq = blk.qs;
    } else {
      const auto& blk = reinterpret_cast<const q::BlockQ8_1*>(x)[b];
      dx = q::load_f16(blk.d), sx = q::load_f16(blk.s), xq = blk.qs;
    }
    const float d = dw * dx;
    for (int l = 0; l < 8; ++l) {
      int s = 0;
      for (int i = 4 * l; i < 4 * l + 4; ++i) s += wq[i] * xq[i];
      acc[l] = std::fma(d, static_cast<float>(s), acc[l]);
    }
    if (type == GgmlType::Q5_1) mins += mw * sx;
  }
  float h[4];
  for (int i = 0; i < 4; ++i) h[i] = acc[i] + acc[i + 4];
  return ((h[0] + h[2]) + (h[1] + h[3])) + mins;
}

// sum |w_i x_i| of the dequantized operands: the scale of the float rounding error.
double magnitude(const cpu::DotKernel& ref, int64_t n, const uint8_t* w, const uint8_t* x) {
  std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
  hearth::dequantize_row_ref(ref.weight_type, w, wf.data(), n);
  hearth::dequantize_row_ref(ref.act_type, x, xf.data(), n);
  double mag = 0.0;
  for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(wf[i]) * xf[i]);
  return mag;
}

constexpr GgmlType kQ5Types[] = {GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q5_K};

TEST(QuantDotQ5, Avx2KernelsExist) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  for (const GgmlType t : kQ5Types) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(t);
    ASSERT_NE(k, nullptr);
    EXPECT_STREQ(k->isa, "avx2") << hearth::ggml_type_name(t);
    EXPECT_EQ(k->act_type, cpu::find_dot_kernel(t, true)->act_type);
  }
}

// One weight row x one activation row, over many sizes and data shapes.
TEST(QuantDotQ5, Avx2RowDotEqualsScalarOrder) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  int n_checked = 0;
  for (const GgmlType t : kQ5Types) {
    const cpu::DotKernel* fast = cpu::find_dot_kernel(t);  // avx2 (checked above)
    const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
    ASSERT_NE(fast, nullptr);
    for (const int64_t n_blocks : {1, 2, 3, 5, 8, 13, 24}) {
      const int64_t n = n_blocks * block_size(t);
      for (int pattern = 0; pattern < 8; ++pattern) {
        const bool raw_w = pattern >= 6, raw_x = pattern == 7;
        const uint32_t seed = static_cast<uint32_t>(1000 * pattern + n);
        const auto w = make_weights(t, 1, n, seed, pattern, raw_w);
        const auto x = make_acts(*ref, 1, n, seed + 1, pattern + 3, raw_x);
        const float want_ref = ref->vec_dot(n, w.data(), x.data());
        const float got = fast->vec_dot(n, w.data(), x.data());
        const std::string where = std::string(hearth::ggml_type_name(t)) + " n=" + std::to_string(n) +
                                  " pattern=" + std::to_string(pattern);
        ASSERT_TRUE(std::isfinite(got)) << where;
        if (t == GgmlType::Q5_K) {
          EXPECT_EQ(got, want_ref) << where;
        } else {
          EXPECT_EQ(got, lane_order_dot(t, n, w.data(), x.data())) << where;
          EXPECT_NEAR(got, want_ref, 1e-5 * magnitude(*ref, n, w.data(), x.data()) + 1e-30) << where;
        }
        ++n_checked;
      }
    }
  }
  EXPECT_EQ(n_checked, 3 * 7 * 8);
}

// Tiles: every (row, token) output equals vec_dot of that pair, for 1..9 tokens and row
// counts that leave partial tiles, with an output stride wider than the rows; nothing
// outside the rows is written.
TEST(QuantDotQ5, TiledMatmulEqualsVecDotBitForBit) {
  int n_run = 0;
  for (const auto isa : {cpu::MatmulIsa::kAvx2, cpu::MatmulIsa::kVnni}) {
    for (const GgmlType t : kQ5Types) {
      const cpu::MatmulFn mm = cpu::find_matmul_kernel(t, isa);
      if (mm == nullptr) continue;  // this CPU lacks the instruction set
      ++n_run;
      const cpu::DotKernel* k = cpu::find_dot_kernel(t);
      ASSERT_STREQ(k->isa, "avx2");
      const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
      for (const int64_t n_blocks : {1, 3, 6}) {
        const int64_t n = n_blocks * block_size(t);
        for (const int64_t n_rows : {1, 3, 4, 5, 9}) {
          for (int64_t n_tok = 1; n_tok <= 9; ++n_tok) {
            const int pattern = static_cast<int>((n_rows + n_tok + n_blocks) % 8);
            const auto seed = static_cast<uint32_t>(n_rows * 131 + n_tok * 7 + n_blocks);
            const auto w = make_weights(t, n_rows, n, seed, pattern, pattern >= 6);
            const auto x = make_acts(*k, n_tok, n, seed + 5, pattern + 1, pattern == 7);
            const size_t wrb = row_bytes(t, n), xrb = row_bytes(k->act_type, n);
            const int64_t ys = n_rows + 2;
            std::vector<float> y(static_cast<size_t>(n_tok * ys), -1.0f);
            mm(n, w.data(), wrb, n_rows, x.data(), xrb, n_tok, y.data(), ys);
            for (int64_t tok = 0; tok < n_tok; ++tok) {
              for (int64_t r = 0; r < ys; ++r) {
                const float got = y[tok * ys + r];
                if (r >= n_rows) {
                  EXPECT_EQ(got, -1.0f) << "wrote outside the rows";
                  continue;
                }
                const uint8_t* wr = w.data() + r * wrb;
                const uint8_t* xr = x.data() + tok * xrb;
                const float want = k->vec_dot(n, wr, xr);
                EXPECT_EQ(got, want) << hearth::ggml_type_name(t) << " isa " << static_cast<int>(isa) << " n=" << n
                                     << " row " << r << " token " << tok << " of " << n_rows << "x" << n_tok;
                if (t == GgmlType::Q5_K) {
                  EXPECT_EQ(got, ref->vec_dot(n, wr, xr));
                }
              }
            }
          }
        }
      }
    }
  }
  if (n_run == 0) GTEST_SKIP() << "no tiled kernel runs on this CPU";
}

// Timing, not a check: run with --gtest_also_run_disabled_tests --gtest_filter='*Benchmark*'.
// ns per weight row (n = 1536 columns) for the reference kernel, the AVX2 vec_dot and the
// tiled kernels (per row and token).
TEST(QuantDotQ5, DISABLED_Benchmark) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  const int64_t n = 1536, n_rows = 256, n_tok = 8;
  for (const GgmlType t : kQ5Types) {
    const cpu::DotKernel* fast = cpu::find_dot_kernel(t);
    const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
    const auto w = make_weights(t, n_rows, n, 1, 0, false);
    const auto x = make_acts(*ref, n_tok, n, 2, 0, false);
    const size_t wrb = row_bytes(t, n), xrb = row_bytes(ref->act_type, n);
    volatile float sink = 0.0f;
    const auto time_rows = [&](const cpu::DotKernel& k) {
      double best = 1e30;
      for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        float s = 0.0f;
        for (int64_t r = 0; r < n_rows; ++r) s += k.vec_dot(n, w.data() + r * wrb, x.data());
        sink = sink + s;
        best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
      }
      return best / static_cast<double>(n_rows);
    };
    const double ns_ref = time_rows(*ref), ns_fast = time_rows(*fast);
    std::printf("%-5s n=%lld  ref %8.1f ns/row  avx2 %7.1f ns/row  (%.1fx)", std::string(hearth::ggml_type_name(t)).c_str(),
                static_cast<long long>(n), ns_ref, ns_fast, ns_ref / ns_fast);
    for (const auto isa : {cpu::MatmulIsa::kAvx2, cpu::MatmulIsa::kVnni}) {
      const cpu::MatmulFn mm = cpu::find_matmul_kernel(t, isa);
      if (mm == nullptr) continue;
      std::vector<float> y(static_cast<size_t>(n_rows * n_tok));
      double best = 1e30;
      for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        mm(n, w.data(), wrb, n_rows, x.data(), xrb, n_tok, y.data(), n_rows);
        best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("  tile%s %6.1f ns/row/token", isa == cpu::MatmulIsa::kAvx2 ? "-avx2" : "-vnni",
                  best / static_cast<double>(n_rows * n_tok));
    }
    std::printf("\n");
  }
}

}  // namespace

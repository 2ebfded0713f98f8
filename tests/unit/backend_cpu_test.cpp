// CPU back-end parity: every CpuBackend operation against the plain reference
// (kernels_ref / dot_ref), and every quantized dot product against a float dot of the
// dequantized operands, on random data, odd sizes and several threads.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "core/half.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/matmul_f32.h"
#include "backends/cpu/quant_dot.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"

namespace {

using hearth::GgmlType;
using hearth::ops::WeightView;
namespace cpu = hearth::cpu;

using hearth::test::QuantWeight;
using hearth::test::random_floats;

// The x86 SIMD (AVX2) kernel for type t where this CPU runs one, else nullptr (the
// reference is used). Through find_dot_kernel, so the test links on every architecture.
const cpu::DotKernel* avx2_kernel(GgmlType t) {
  const cpu::DotKernel* k = cpu::find_dot_kernel(t);
  return k != nullptr && std::string(k->isa) == "avx2" ? k : nullptr;
}

// The attention / store_kv operations on a contiguous f32 cache (block table 0, 1, 2, ...).
hearth::ops::KvLayer contiguous_layer(const float* kc, const float* vc, int64_t n_kv_dim) {
  return {const_cast<float*>(kc), const_cast<float*>(vc), hearth::ops::KvType::F32, 16, n_kv_dim};
}
std::vector<int32_t> identity_table(int64_t n_positions) {
  std::vector<int32_t> t(static_cast<size_t>((n_positions + 15) / 16));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
  return t;
}
void store_contig(cpu::CpuBackend& be, const float* k, const float* v, int64_t n_tokens, int64_t n, int64_t pos0,
                  float* kc, float* vc) {
  std::vector<int32_t> slots(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) slots[i] = static_cast<int32_t>(pos0 + i);
  be.store_kv(k, v, n_tokens, n, slots.data(), contiguous_layer(kc, vc, n));
}
void fast_attention(cpu::CpuBackend& be, const float* q, const float* kc, const float* vc, int64_t n_tokens,
                    int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  const auto table = identity_table(pos0 + n_tokens);
  const hearth::ops::AttentionSeq seq{0, n_tokens, pos0, table.data()};
  be.attention(q, contiguous_layer(kc, vc, n_head_kv * head_dim), &seq, 1, n_head, n_head_kv, head_dim, scale, out);
}
void ref_attention(const float* q, const float* kc, const float* vc, int64_t n_tokens, int64_t pos0, int64_t n_head,
                   int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  const auto table = identity_table(pos0 + n_tokens);
  const hearth::ops::AttentionSeq seq{0, n_tokens, pos0, table.data()};
  cpu::ref::attention(q, contiguous_layer(kc, vc, n_head_kv * head_dim), &seq, 1, n_head, n_head_kv, head_dim, scale,
                      out);
}

size_t row_bytes(GgmlType type, int64_t n) { return static_cast<size_t>(*hearth::ggml_row_bytes(type, n)); }

// A weight matrix of normal values quantized to `type`, with its storage.
QuantWeight make_weight(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  return hearth::test::quantize_weight(type, random_floats(static_cast<size_t>(n_rows * n_cols), seed), n_rows, n_cols);
}

WeightView f32_view(const std::vector<float>& v, int64_t n_cols, int64_t n_rows = 1) {
  return WeightView{"f32", GgmlType::F32, v.data(), n_cols, n_rows, static_cast<uint64_t>(n_cols) * 4};
}

struct DotCase {
  GgmlType type;
  int64_t block;
};

const DotCase kDotCases[] = {
    {GgmlType::Q4_0, 32}, {GgmlType::Q4_1, 32}, {GgmlType::Q5_0, 32}, {GgmlType::Q5_1, 32},
    {GgmlType::Q8_0, 32}, {GgmlType::Q4_K, 256}, {GgmlType::Q5_K, 256}, {GgmlType::Q6_K, 256},
};

// Allowed |kernel - float dot| relative to sum |w_i x_i|. The legacy "_1" types pair
// with Q8_1 activations whose block sum d * sum(q) is stored in f16 (as ggml stores it),
// an error of up to 2^-11 of that term; every other kernel sums exact integer block
// products and only rounds the float scaling and accumulation.
double dot_tolerance(GgmlType type) {
  return (type == GgmlType::Q4_1 || type == GgmlType::Q5_1) ? 1e-3 : 2e-5;
}

// Float dot of the dequantized weight row and the dequantized activation row, plus
// the magnitude sum |w_i x_i| the tolerance scales with.
std::pair<double, double> float_dot(const cpu::DotKernel& k, const uint8_t* w, const uint8_t* xq, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
  hearth::dequantize_row_ref(k.weight_type, w, wf.data(), n);
  hearth::dequantize_row_ref(k.act_type, xq, xf.data(), n);
  double dot = 0.0, mag = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    dot += static_cast<double>(wf[i]) * xf[i];
    mag += std::fabs(static_cast<double>(wf[i]) * xf[i]);
  }
  return {dot, mag};
}

void check_kernel_against_float(const cpu::DotKernel& k, int64_t block) {
  for (const int64_t n_blocks : {1, 3, 7, 11}) {
    const int64_t n = n_blocks * block;
    const auto w = make_weight(k.weight_type, 1, n, static_cast<uint32_t>(n));
    const auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n + 1), 3.0f);
    std::vector<uint8_t> xq(row_bytes(k.act_type, n));
    k.quantize_act(x.data(), xq.data(), n);
    const auto [want, mag] = float_dot(k, w.data.data(), xq.data(), n);
    const float got = k.vec_dot(n, w.data.data(), xq.data());
    EXPECT_NEAR(got, want, dot_tolerance(k.weight_type) * mag + 1e-6)
        << k.isa << " " << hearth::ggml_type_name(k.weight_type) << " n=" << n;
  }
}

TEST(QuantDot, ReferenceKernelsMatchFloatDotOfDequantized) {
  for (const auto& c : kDotCases) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(c.type, /*reference_only=*/true);
    ASSERT_NE(k, nullptr) << hearth::ggml_type_name(c.type);
    EXPECT_STREQ(k->isa, "ref");
    check_kernel_against_float(*k, c.block);
  }
}

TEST(QuantDot, ActivationQuantizersRoundTrip) {
  // Each activation block quantizer loses at most half a step (d / 2) per element.
  for (const GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(t == GgmlType::Q8_K ? GgmlType::Q4_K
                                                   : t == GgmlType::Q8_1 ? GgmlType::Q4_1
                                                                          : GgmlType::Q4_0,
                                                   true);
    ASSERT_EQ(k->act_type, t);
    const int64_t n = 512;
    const auto x = random_floats(n, 7, 2.0f);
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> back(n);
    k->quantize_act(x.data(), q.data(), n);
    hearth::dequantize_row_ref(t, q.data(), back.data(), n);
    const int64_t blk = t == GgmlType::Q8_K ? 256 : 32;
    for (int64_t b = 0; b < n / blk; ++b) {
      float amax = 0.0f;
      for (int64_t i = 0; i < blk; ++i) amax = std::max(amax, std::fabs(x[b * blk + i]));
      for (int64_t i = 0; i < blk; ++i) {
        // f16 scale (Q8_0/Q8_1) adds up to 2^-11 relative.
        EXPECT_NEAR(back[b * blk + i], x[b * blk + i], amax / 127.0f * 0.5f + amax * 1e-3f)
            << hearth::ggml_type_name(t) << " element " << b * blk + i;
      }
    }
  }
}

TEST(QuantDot, Avx2KernelsMatchReference) {
  const auto& f = cpu::cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "this CPU lacks AVX2+FMA+F16C; the AVX2 kernels cannot run here";
  int n_found = 0;
  for (const auto& c : kDotCases) {
    const cpu::DotKernel* fast = avx2_kernel(c.type);
    if (fast == nullptr) continue;  // no AVX2 kernel for this type yet: the ref one is used
    ++n_found;
    const cpu::DotKernel* ref = cpu::find_dot_kernel(c.type, true);
    ASSERT_EQ(fast->act_type, ref->act_type);
    check_kernel_against_float(*fast, c.block);
    for (const int64_t n_blocks : {1, 2, 5, 13}) {
      const int64_t n = n_blocks * c.block;
      const auto w = make_weight(c.type, 1, n, static_cast<uint32_t>(3 * n));
      const auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(5 * n));
      std::vector<uint8_t> xq(row_bytes(ref->act_type, n)), xq_fast(xq.size());
      ref->quantize_act(x.data(), xq.data(), n);
      fast->quantize_act(x.data(), xq_fast.data(), n);
      EXPECT_EQ(xq, xq_fast) << "activation quantizers differ for " << hearth::ggml_type_name(c.type);
      const float want = ref->vec_dot(n, w.data.data(), xq.data());
      const float got = fast->vec_dot(n, w.data.data(), xq.data());
      const auto [unused, mag] = float_dot(*ref, w.data.data(), xq.data(), n);
      if (c.block == 256) {
        // K-quants: exact integer sums, then the reference's float expression per block.
        EXPECT_EQ(got, want) << hearth::ggml_type_name(c.type) << " n=" << n;
      } else {
        // Integer block sums are exact in both; only the float accumulation order differs
        // (ggml's 8 AVX2 lanes; backend_cpu_dot_q5_test checks that order bit for bit).
        EXPECT_NEAR(got, want, 1e-5 * mag + 1e-6) << hearth::ggml_type_name(c.type) << " n=" << n;
      }
    }
  }
  EXPECT_GE(n_found, 8) << "AVX2 kernels expected for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";
}

// The tiled matrix kernels (AVX2 and AVX-512 VNNI builds) against the one-pair SIMD
// vec_dot: bit-identical for every (row, token), on every tile shape and edge.
TEST(QuantDot, TiledMatmulEqualsVecDotBitForBit) {
  int n_run = 0;
  for (const auto isa : {cpu::MatmulIsa::kAvx2, cpu::MatmulIsa::kVnni}) {
    for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      const cpu::MatmulFn mm = cpu::find_matmul_kernel(type, isa);
      if (mm == nullptr) continue;  // this CPU lacks the instruction set
      ++n_run;
      const cpu::DotKernel* k = cpu::find_dot_kernel(type);
      ASSERT_STRNE(k->isa, "ref");
      for (const int64_t n_rows : {1, 3, 4, 9}) {
        for (const int64_t n_tok : {1, 2, 5, 8}) {
          const bool k_type = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
          const int64_t n = k_type ? 3 * 256 : 7 * 32;
          const auto w = make_weight(type, n_rows, n, static_cast<uint32_t>(n_rows * 31 + n_tok));
          const auto x = random_floats(static_cast<size_t>(n_tok * n), static_cast<uint32_t>(n_tok), 4.0f);
          const size_t xrb = row_bytes(k->act_type, n);
          std::vector<uint8_t> xq(xrb * static_cast<size_t>(n_tok));
          for (int64_t t = 0; t < n_tok; ++t) k->quantize_act(x.data() + t * n, xq.data() + t * xrb, n);
          const int64_t ys = n_rows + 2;  // a row stride wider than the tile
          std::vector<float> y(static_cast<size_t>(n_tok * ys), -1.0f);
          mm(n, w.data.data(), w.view.row_bytes, n_rows, xq.data(), xrb, n_tok, y.data(), ys);
          for (int64_t t = 0; t < n_tok; ++t) {
            for (int64_t r = 0; r < ys; ++r) {
              const float got = y[t * ys + r];
              if (r >= n_rows) {
                EXPECT_EQ(got, -1.0f) << "wrote outside the rows";
                continue;
              }
              const float want = k->vec_dot(n, w.data.data() + r * w.view.row_bytes, xq.data() + t * xrb);
              EXPECT_EQ(got, want) << hearth::ggml_type_name(type) << " isa " << static_cast<int>(isa) << " row "
                                   << r << " token " << t << " of " << n_rows << "x" << n_tok;
            }
          }
        }
      }
    }
  }
  if (n_run == 0) GTEST_SKIP() << "no tiled kernel runs on this CPU";
}

// y = W x through CpuBackend (threads, best kernel) against a single-threaded loop over
// the same kernel, and against ref::matmul (float, no activation quantization).
TEST(CpuBackendOps, MatmulMatchesReferenceOnAllTypes) {
  cpu::CpuBackend fast(3);
  cpu::CpuBackend plain(1, /*reference_kernels=*/true);
  for (const auto& c : kDotCases) {
    const int64_t n_cols = 3 * c.block, n_rows = 37, n_tokens = 5;
    const auto w = make_weight(c.type, n_rows, n_cols, 11);
    const auto x = random_floats(static_cast<size_t>(n_tokens * n_cols), 12);
    std::vector<float> y_fast(n_tokens * n_rows), y_plain(y_fast.size()), y_ref(y_fast.size());
    fast.matmul(w.view, x.data(), n_tokens, y_fast.data());
    plain.matmul(w.view, x.data(), n_tokens, y_plain.data());
    cpu::ref::matmul(w.view, x.data(), n_tokens, y_ref.data());
    const cpu::DotKernel* k = cpu::find_dot_kernel(c.type, true);
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<uint8_t> xq(row_bytes(k->act_type, n_cols));
      k->quantize_act(x.data() + t * n_cols, xq.data(), n_cols);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* wr = w.data.data() + r * w.view.row_bytes;
        const auto [want, mag] = float_dot(*k, wr, xq.data(), n_cols);
        const float y_p = y_plain[t * n_rows + r], y_f = y_fast[t * n_rows + r];
        EXPECT_FLOAT_EQ(y_p, k->vec_dot(n_cols, wr, xq.data())) << "reference backend, row " << r;
        EXPECT_NEAR(y_f, want, dot_tolerance(c.type) * mag + 1e-5) << hearth::ggml_type_name(c.type);
        // Against the all-float product: the 8-bit activations cost up to half a step
        // (amax / 254) per element, so allow 2% of the magnitude.
        EXPECT_NEAR(y_f, y_ref[t * n_rows + r], 0.02 * mag + 1e-3) << hearth::ggml_type_name(c.type);
      }
    }
  }
}

// Weights sharing their input in one call (q/k/v, gate/up) give exactly what one matmul
// each gives, for row counts that do not line up with the 16-row chunks; mixed types
// fall back to one matmul each.
TEST(CpuBackendOps, MatmulMultiEqualsSeparateMatmulsBitForBit) {
  cpu::CpuBackend be(3);
  for (const auto& c : kDotCases) {
    const int64_t n_cols = 2 * c.block;
    for (int64_t n_tokens : {1, 4, 7}) {
      const auto a = make_weight(c.type, 37, n_cols, 1), b = make_weight(c.type, 5, n_cols, 2),
                 d = make_weight(c.type, 70, n_cols, 3);
      const auto x = random_floats(static_cast<size_t>(n_tokens * n_cols), 4);
      std::vector<float> ya(n_tokens * 37), yb(n_tokens * 5), yd(n_tokens * 70);
      std::vector<float> za(ya.size()), zb(yb.size()), zd(yd.size());
      const WeightView* ws[] = {&a.view, &b.view, &d.view};
      float* ys[] = {ya.data(), yb.data(), yd.data()};
      be.matmul_multi(ws, 3, x.data(), n_tokens, ys);
      be.matmul(a.view, x.data(), n_tokens, za.data());
      be.matmul(b.view, x.data(), n_tokens, zb.data());
      be.matmul(d.view, x.data(), n_tokens, zd.data());
      EXPECT_EQ(ya, za) << hearth::ggml_type_name(c.type) << " tokens " << n_tokens;
      EXPECT_EQ(yb, zb) << hearth::ggml_type_name(c.type) << " tokens " << n_tokens;
      EXPECT_EQ(yd, zd) << hearth::ggml_type_name(c.type) << " tokens " << n_tokens;
    }
  }
  // Mixed types: one matmul each, same results.
  const auto q = make_weight(GgmlType::Q4_1, 9, 64, 5), r = make_weight(GgmlType::Q8_0, 11, 64, 6);
  const auto x = random_floats(3 * 64, 7);
  std::vector<float> yq(3 * 9), yr(3 * 11), zq(yq.size()), zr(yr.size());
  const WeightView* ws[] = {&q.view, &r.view};
  float* ys[] = {yq.data(), yr.data()};
  be.matmul_multi(ws, 2, x.data(), 3, ys);
  be.matmul(q.view, x.data(), 3, zq.data());
  be.matmul(r.view, x.data(), 3, zr.data());
  EXPECT_EQ(yq, zq);
  EXPECT_EQ(yr, zr);
  // Two kinds among three weights (two Q4_1 and one Q8_0): one call per kind, same bits.
  const auto q2 = make_weight(GgmlType::Q4_1, 21, 64, 8);
  std::vector<float> yq2(3 * 21), zq2(yq2.size());
  const WeightView* ws3[] = {&q.view, &r.view, &q2.view};
  float* ys3[] = {yq.data(), yr.data(), yq2.data()};
  be.matmul_multi(ws3, 3, x.data(), 3, ys3);
  be.matmul(q2.view, x.data(), 3, zq2.data());
  EXPECT_EQ(yq, zq);
  EXPECT_EQ(yr, zr);
  EXPECT_EQ(yq2, zq2);
}

TEST(CpuBackendOps, MatmulFloatWeights) {
  cpu::CpuBackend fast(3);
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    const int64_t n_cols = 77, n_rows = 45, n_tokens = 3;
    const auto w = make_weight(type, n_rows, n_cols, 21);
    const auto x = random_floats(static_cast<size_t>(n_tokens * n_cols), 22);
    std::vector<float> y(n_tokens * n_rows), y_ref(y.size());
    fast.matmul(w.view, x.data(), n_tokens, y.data());
    cpu::ref::matmul(w.view, x.data(), n_tokens, y_ref.data());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], y_ref[i], 1e-4f) << hearth::ggml_type_name(type);
  }
  // Each output is ref::dot16 of the dequantized row and the token, bit for bit (the
  // AVX-512 tiles of 4 rows x 6 tokens and the AVX2 ones of 2 x 2, odd tails of rows,
  // tokens and columns included; 1 token as well as 70).
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    for (const int64_t n_cols : {64, 77, 2, 1152, 16, 31}) {
      const int64_t n_rows = 45, n_tokens = n_cols == 16 ? 1 : n_cols == 31 ? 600 : 70;  // 600: three token blocks
      const auto w = make_weight(type, n_rows, n_cols, 25);
      const auto x = random_floats(static_cast<size_t>(n_tokens * n_cols), 26);
      std::vector<float> y(n_tokens * n_rows), row(n_cols);
      fast.matmul(w.view, x.data(), n_tokens, y.data());
      for (int64_t r = 0; r < n_rows; ++r) {
        cpu::ref::dequantize_row(w.view, r, row.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
          ASSERT_EQ(y[t * n_rows + r], cpu::ref::dot16(row.data(), x.data() + t * n_cols, n_cols))
              << hearth::ggml_type_name(type) << " cols " << n_cols << " row " << r << " token " << t;
        }
      }
    }
  }
}

// Each vector build of the float tiles against ref::dot16 (the plain build), whichever
// the back-end would pick on this CPU: every tile shape and tail of rows, tokens and
// columns (zero-padded last step), with extreme magnitudes so an order change would show.
TEST(CpuBackendOps, FloatTilesEqualDot16) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  struct Build {
    const char* name;
    bool ok;
    void (*fn)(const float* const*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
  };
  const Build builds[] = {
#if defined(__x86_64__)
                          {"avx512", f.avx512f && f.avx512vl && f.avx512bw && f.fma, cpu::dot_rows_f32_avx512},
                          {"avx2", f.avx2 && f.fma, cpu::dot_rows_f32_avx2},
#endif
#if defined(__aarch64__)
                          {"neon", f.neon, cpu::dot_rows_f32_neon},
#endif
                          {"plain", true, cpu::dot_rows_f32_plain}};
  for (const Build& b : builds) {
    if (!b.ok) continue;
    for (const int64_t n : {1, 15, 16, 17, 72, 1152, 4304 + 3}) {
      for (const int64_t n_tokens : {1, 5, 6, 7, 13}) {
        const int64_t n_rows = 11;
        auto w = random_floats(static_cast<size_t>(n_rows * n), 31 + n);
        auto x = random_floats(static_cast<size_t>(n_tokens * n), 32 + n);
        for (size_t i = 0; i < w.size(); i += 7) w[i] *= 1e4f;
        for (size_t i = 3; i < x.size(); i += 11) x[i] *= -1e-4f;
        std::vector<const float*> rows(n_rows);
        for (int64_t r = 0; r < n_rows; ++r) rows[r] = w.data() + r * n;
        const int64_t stride = n_rows + 2;
        std::vector<float> y(static_cast<size_t>(n_tokens * stride), -7.0f);
        b.fn(rows.data(), n_rows, x.data(), n_tokens, n, y.data(), stride);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            ASSERT_EQ(y[t * stride + r], cpu::ref::dot16(rows[r], x.data() + t * n, n))
                << b.name << " n " << n << " tokens " << n_tokens << " row " << r << " token " << t;
          }
          EXPECT_EQ(y[t * stride + n_rows], -7.0f) << b.name;  // nothing written past the rows
        }
      }
    }
  }
  // dot16 is ggml_order::dot_order_b (tinyBLAS's order) where n is a multiple of 16.
  const auto a = random_floats(64, 41), c = random_floats(64, 42);
  EXPECT_EQ(cpu::ref::dot16(a.data(), c.data(), 64), cpu::ggml_order::dot_order_b(a.data(), c.data(), 64));
}

TEST(CpuBackendOps, ElementwiseOpsEqualReference) {
  cpu::CpuBackend be(3);
  const int64_t n_tokens = 7, n = 93;
  const auto x = random_floats(n_tokens * n, 31);
  const auto wv = random_floats(n, 32);
  // rms_norm, add_bias: the same reference math, so bit-equal.
  std::vector<float> y(x.size()), y_ref(x.size());
  be.rms_norm(x.data(), f32_view(wv, n), n_tokens, n, 1e-5f, y.data());
  cpu::ref::rms_norm(x.data(), f32_view(wv, n), n_tokens, n, 1e-5f, y_ref.data());
  EXPECT_EQ(y, y_ref);
  for (int64_t t = 0; t < n_tokens; ++t) {  // and against the formula, in double
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[t * n + i]) * x[t * n + i];
    const double s = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[t * n + i], x[t * n + i] * s * wv[i], 1e-5);
  }
  auto b1 = x, b2 = x;
  be.add_bias(b1.data(), f32_view(wv, n), n_tokens);
  cpu::ref::add_bias(b2.data(), f32_view(wv, n), n_tokens);
  EXPECT_EQ(b1, b2);
  // swiglu: the AVX2 build of the same scalar math must not change a rounding.
  const int64_t m = 5000;  // several thread chunks and an odd tail
  auto g = random_floats(m, 33, 4.0f);
  const auto u = random_floats(m, 34);
  // Gates whose exp leaves the vector kernels' range (p * 2^n with n in [-126, 127]):
  // the subnormal / overflow scaling and the +-inf / 0 cut-offs of the scalar code.
  const float extremes[] = {90.0f, -90.0f, 100.0f, -100.0f, 150.0f, -150.0f, 300.0f, -300.0f, 0.0f, -0.0f, 1e-30f};
  for (size_t i = 0; i < std::size(extremes); ++i) g[7 * i + 3] = extremes[i];
  std::vector<float> s1(m), s2(m);
  be.swiglu(g.data(), u.data(), m, s1.data());
  cpu::ref::swiglu(g.data(), u.data(), m, s2.data());
  EXPECT_EQ(s1, s2);
  for (int64_t i = 0; i < m; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(s1[i], want, 1e-6 * std::fabs(want) + 1e-30) << "g = " << g[i];
  }
  auto a1 = x;
  be.add(a1.data(), y.data(), n_tokens * n);
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_EQ(a1[i], x[i] + y[i]);
  std::vector<float> c(x.size());
  be.copy(x.data(), n_tokens * n, c.data());
  EXPECT_EQ(c, x);
}

// Large batches split rms_norm / rope / store_kv / add over the pool: still the reference
// results, bit for bit.
TEST(CpuBackendOps, ParallelElementwiseOpsEqualReference) {
  cpu::CpuBackend be(3);
  const int64_t n_tokens = 301, n = 192, heads = 3, head_dim = 64;
  const auto x = random_floats(n_tokens * n, 41, 8.0f);
  const auto wv = random_floats(n, 42);
  std::vector<float> y(x.size()), y_ref(x.size());
  be.rms_norm(x.data(), f32_view(wv, n), n_tokens, n, 1e-5f, y.data());
  cpu::ref::rms_norm(x.data(), f32_view(wv, n), n_tokens, n, 1e-5f, y_ref.data());
  EXPECT_EQ(y, y_ref);
  std::vector<int32_t> pos(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) pos[t] = static_cast<int32_t>(17 + t);
  for (const bool neox : {false, true}) {
    const hearth::ops::RopeParams rp{head_dim, 10000.0f, 1.0f, neox};
    auto r1 = x, r2 = x;
    be.rope(r1.data(), n_tokens, heads, head_dim, pos.data(), rp);
    cpu::ref::rope(r2.data(), n_tokens, heads, head_dim, pos.data(), rp);
    EXPECT_EQ(r1, r2) << "neox=" << neox;
  }
  std::vector<float> kc((n_tokens + 5) * n, -1.0f), vc(kc.size(), -1.0f);
  store_contig(be, x.data(), y.data(), n_tokens, n, 5, kc.data(), vc.data());
  for (int64_t i = 0; i < n_tokens * n; ++i) {
    ASSERT_EQ(kc[5 * n + i], x[i]);
    ASSERT_EQ(vc[5 * n + i], y[i]);
  }
  EXPECT_EQ(kc[5 * n - 1], -1.0f);
  auto a1 = x;
  be.add(a1.data(), y.data(), n_tokens * n);
  for (size_t i = 0; i < a1.size(); ++i) ASSERT_EQ(a1[i], x[i] + y[i]);
}

// An f16 KV cache written by the back-end (F16C where the CPU has it) holds the bits of
// the scalar conversion: ties to even, f16 subnormals, values rounding to infinity,
// infinities, NaNs (canonical quiet NaN, sign kept), in groups of 8 and in the tail.
TEST(CpuBackendOps, F16CacheRowsEqualScalarConversion) {
  cpu::CpuBackend be(2);
  const int64_t n_tokens = 5, n = 44;  // 5 groups of 8 and a tail of 4
  auto k = random_floats(n_tokens * n, 51, 3.0f);
  auto v = random_floats(n_tokens * n, 52, 1.0e-5f);  // many f16 subnormals
  const float hard[] = {65504.0f, 65519.0f, 65520.0f, -70000.0f, INFINITY, -INFINITY, 1.0f + 0x1p-11f,
                        1.0f + 3 * 0x1p-11f, 0x1p-25f, 0x1.8p-25f, -0x1p-24f, 0x1p-26f, -0.0f, 1e-45f};
  for (size_t i = 0; i < std::size(hard); ++i) k[3 * i + 1] = hard[i];
  k[100] = std::nanf("");
  k[n_tokens * n - 2] = -std::nanf("7");  // in the tail
  v[60] = std::nanf("");
  const std::vector<int32_t> slots = {7, 2, 0, 5, 3};
  std::vector<uint16_t> kc(8 * n, 0xAAAA), vc(8 * n, 0xAAAA);
  be.store_kv(k.data(), v.data(), n_tokens, n, slots.data(),
              hearth::ops::KvLayer{kc.data(), vc.data(), hearth::ops::KvType::F16, 16, n});
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(kc[slots[t] * n + i], hearth::f32_to_f16(k[t * n + i])) << "k " << t << "," << i << " = " << k[t * n + i];
      ASSERT_EQ(vc[slots[t] * n + i], hearth::f32_to_f16(v[t * n + i])) << "v " << t << "," << i;
    }
  }
  EXPECT_EQ(kc[1 * n], 0xAAAA);  // slot 1 untouched
}

// The AVX2 activation quantizers on hard inputs: exact halves (ties to even), zero
// blocks, outliers, negative zeros; byte-identical to the reference ones.
TEST(QuantDot, Avx2ActivationQuantizersEqualReferenceOnTies) {
  const auto& f = cpu::cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2+FMA+F16C";
  const int64_t n = 32 * 6;
  std::vector<float> x(n);
  for (int64_t i = 0; i < 32; ++i) x[i] = 127.0f * static_cast<float>(i - 16) / 127.0f + 0.5f;  // ties
  for (int64_t i = 32; i < 64; ++i) x[i] = (i % 2 ? -0.0f : 0.0f);                               // zero block
  for (int64_t i = 64; i < 96; ++i) x[i] = (i == 70 ? 2.0e4f : static_cast<float>(i) * 0.37f);  // outlier
  for (int64_t i = 96; i < 128; ++i) x[i] = static_cast<float>(i - 112) * 0.5f;                  // halves
  const auto r = random_floats(64, 77, 100.0f);
  for (int64_t i = 0; i < 64; ++i) x[128 + i] = r[i];
  for (const GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    const cpu::DotKernel* fast = avx2_kernel(t);
    const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
    ASSERT_NE(fast, nullptr);
    std::vector<uint8_t> a(row_bytes(ref->act_type, n)), b(a.size());
    ref->quantize_act(x.data(), a.data(), n);
    fast->quantize_act(x.data(), b.data(), n);
    EXPECT_EQ(a, b) << hearth::ggml_type_name(t);
  }
  // Q8_K (256-value blocks): the same rows, then blocks of the extreme's sign ties (the
  // first of equal |x| sets the scale), non-finite values, a lone negative extreme.
  const int64_t nk = 256 * 7;
  std::vector<float> xk(nk);
  const auto rk = random_floats(nk, 91, 3.0f);
  for (int64_t i = 0; i < nk; ++i) xk[i] = rk[i];
  for (int64_t i = 0; i < n; ++i) xk[i] = x[i];                                  // block 0 and most of 1
  for (int64_t i = 256; i < 512; ++i) xk[i] = (i % 2 ? -0.0f : 0.0f);           // zero block
  for (int64_t i = 512; i < 768; ++i) xk[i] = static_cast<float>(i % 33 - 16) * 0.25f;
  xk[600] = 9.0f;
  xk[601] = -9.0f;                                                                // sign tie: 9 first
  xk[800] = -7.5f;
  xk[801] = 7.5f;                                                                 // sign tie: -7.5 first
  xk[1024 + 5] = std::numeric_limits<float>::quiet_NaN();                         // a NaN is skipped
  xk[1280 + 9] = std::numeric_limits<float>::infinity();                          // scale of an infinity
  for (int64_t i = 1536; i < 1792; ++i) xk[i] = static_cast<float>(i % 7) * 0.01f;
  xk[1700] = -50.0f;
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const cpu::DotKernel* fast = avx2_kernel(t);
    const cpu::DotKernel* ref = cpu::find_dot_kernel(t, true);
    ASSERT_NE(fast, nullptr);
    ASSERT_EQ(ref->act_type, GgmlType::Q8_K);
    std::vector<uint8_t> a(row_bytes(ref->act_type, nk)), b(a.size(), 0xAA);
    ref->quantize_act(xk.data(), a.data(), nk);
    fast->quantize_act(xk.data(), b.data(), nk);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << hearth::ggml_type_name(t) << " byte " << i;
  }
}

TEST(CpuBackendOps, GetRowsAndStoreKv) {
  cpu::CpuBackend be(2);
  const auto w = make_weight(GgmlType::Q8_0, 50, 64, 41);
  const std::vector<int32_t> ids = {3, 49, 0, 3};
  std::vector<float> out(ids.size() * 64), want(64);
  be.get_rows(w.view, ids.data(), 4, out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    cpu::ref::dequantize_row(w.view, ids[i], want.data());
    EXPECT_EQ(std::vector<float>(out.begin() + i * 64, out.begin() + (i + 1) * 64), want);
  }
  const std::vector<int32_t> bad = {50};
  EXPECT_THROW(be.get_rows(w.view, bad.data(), 1, out.data()), hearth::Error);
  const auto k = random_floats(3 * 12, 42), v = random_floats(3 * 12, 43);
  std::vector<float> kc(10 * 12, -1.0f), vc(10 * 12, -1.0f);
  store_contig(be, k.data(), v.data(), 3, 12, 4, kc.data(), vc.data());
  for (int64_t i = 0; i < 10 * 12; ++i) {
    const bool inside = i >= 4 * 12 && i < 7 * 12;
    EXPECT_EQ(kc[i], inside ? k[i - 48] : -1.0f);
    EXPECT_EQ(vc[i], inside ? v[i - 48] : -1.0f);
  }
}

TEST(CpuBackendOps, RopeMatchesFormula) {
  cpu::CpuBackend be(2);
  for (const bool neox : {false, true}) {
    const int64_t n_tokens = 5, n_heads = 3, head_dim = 24;
    const hearth::ops::RopeParams p{16, 10000.0f, 0.5f, neox};  // partial rotation, linear scaling
    const std::vector<int32_t> pos = {0, 1, 7, 100, 2047};
    const auto x = random_floats(n_tokens * n_heads * head_dim, 51);
    auto y = x, y_ref = x;
    be.rope(y.data(), n_tokens, n_heads, head_dim, pos.data(), p);
    cpu::ref::rope(y_ref.data(), n_tokens, n_heads, head_dim, pos.data(), p);
    EXPECT_EQ(y, y_ref);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* a = x.data() + (t * n_heads + h) * head_dim;
        const float* b = y.data() + (t * n_heads + h) * head_dim;
        for (int64_t i = 0; i < p.n_rot / 2; ++i) {
          const double theta = pos[t] * 0.5 * std::pow(10000.0, -2.0 * i / p.n_rot);
          const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + p.n_rot / 2 : 2 * i + 1;
          // Angles built by repeated float multiplication drift by a few ulp of theta.
          const double tol = 1e-6 * (1.0 + std::fabs(theta)) * (std::fabs(a[i0]) + std::fabs(a[i1]));
          EXPECT_NEAR(b[i0], a[i0] * std::cos(theta) - a[i1] * std::sin(theta), tol);
          EXPECT_NEAR(b[i1], a[i0] * std::sin(theta) + a[i1] * std::cos(theta), tol);
        }
        for (int64_t i = p.n_rot; i < head_dim; ++i) EXPECT_EQ(b[i], a[i]);  // not rotated
      }
    }
  }
}

// Attention with head_dim a multiple of 64 (the AVX-512 register path where the CPU has
// it): bit-equal to the reference for prompt batches and single queries, with more keys
// than the 16 / 64 accumulator lanes and group sizes of 3 (SmolLM2's shape).
TEST(CpuBackendOps, AttentionHeadDim64And128EqualsReference) {
  cpu::CpuBackend be(2);
  for (const int64_t head_dim : {64, 128}) {
    const int64_t n_head = 9, n_head_kv = 3, n_ctx = 200;
    const int64_t kv = n_head_kv * head_dim;
    const auto kc = random_floats(n_ctx * kv, 71, 2.0f), vc = random_floats(n_ctx * kv, 72);
    for (const auto& [n_tokens, pos0] :
         {std::pair<int64_t, int64_t>{1, 0}, {1, 63}, {1, 150}, {37, 0}, {29, 130}, {2, 5}}) {
      const auto q = random_floats(n_tokens * n_head * head_dim, 73, 0.7f);
      std::vector<float> out(q.size()), out_ref(q.size());
      fast_attention(be, q.data(), kc.data(), vc.data(), n_tokens, pos0, n_head, n_head_kv, head_dim, 0.125f, out.data());
      ref_attention(q.data(), kc.data(), vc.data(), n_tokens, pos0, n_head, n_head_kv, head_dim, 0.125f,
                          out_ref.data());
      EXPECT_EQ(out, out_ref) << "head_dim " << head_dim << " n_tokens " << n_tokens << " pos0 " << pos0;
    }
  }
}

// Attention: the threaded AVX2 build equals the reference bit for bit (same scalar
// math); both agree with a plain double-precision softmax attention to 1e-5.
TEST(CpuBackendOps, AttentionMatchesReferenceAndFormula) {
  cpu::CpuBackend be(3);
  const int64_t n_head = 6, n_head_kv = 2, head_dim = 32, n_ctx = 90;
  const int64_t kv = n_head_kv * head_dim;
  const auto kc = random_floats(n_ctx * kv, 61), vc = random_floats(n_ctx * kv, 62);
  for (const auto& [n_tokens, pos0] : {std::pair<int64_t, int64_t>{1, 0}, {1, 70}, {9, 0}, {17, 40}}) {
    const auto q = random_floats(n_tokens * n_head * head_dim, 63, 0.5f);
    std::vector<float> out(q.size()), out_ref(q.size());
    fast_attention(be, q.data(), kc.data(), vc.data(), n_tokens, pos0, n_head, n_head_kv, head_dim, 0.17f, out.data());
    ref_attention(q.data(), kc.data(), vc.data(), n_tokens, pos0, n_head, n_head_kv, head_dim, 0.17f,
                        out_ref.data());
    EXPECT_EQ(out, out_ref) << "n_tokens " << n_tokens << " pos0 " << pos0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t h = 0; h < n_head; ++h) {
        const float* qh = q.data() + (t * n_head + h) * head_dim;
        const int64_t kvh = h / (n_head / n_head_kv), n_keys = pos0 + t + 1;
        std::vector<double> s(n_keys);
        double mx = -1e300, den = 0;
        for (int64_t j = 0; j < n_keys; ++j) {
          double d = 0;
          for (int64_t i = 0; i < head_dim; ++i) d += double(qh[i]) * kc[j * kv + kvh * head_dim + i];
          s[j] = d * 0.17;
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) den += (e = std::exp(e - mx));
        for (int64_t i = 0; i < head_dim; ++i) {
          double o = 0;
          for (int64_t j = 0; j < n_keys; ++j) o += s[j] / den * vc[j * kv + kvh * head_dim + i];
          EXPECT_NEAR(out[(t * n_head + h) * head_dim + i], o, 1e-5);
        }
      }
    }
  }
}

TEST(GgmlOrder, ExpApproximationIsWithinTwoUlp) {
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double want = std::exp(double(x));
    EXPECT_NEAR(cpu::ggml_order::exp_approx(x), want, want * 2.5e-7) << x;
  }
  EXPECT_EQ(cpu::ggml_order::exp_approx(0.0f), 1.0f);
  EXPECT_EQ(cpu::ggml_order::exp_approx(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::ggml_order::exp_approx(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isinf(cpu::ggml_order::exp_approx(1000.0f)));
}

}  // namespace

// The spinning / sleeping hand-off of the thread pool the CPU kernels run on: many
// short jobs back to back, jobs after an idle pause (workers asleep), and exceptions.
TEST(ThreadPool, ShortJobsSleepsAndExceptions) {
  hearth::ThreadPool pool(3);
  std::vector<int64_t> hits(1000);
  for (int round = 0; round < 2000; ++round) {
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    });
    if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers go to sleep
  }
  for (const int64_t h : hits) ASSERT_EQ(h, 2000);
  EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t, int) {
                 if (b > 0) throw std::runtime_error("worker");
               }),
               std::runtime_error);
  int64_t sum = 0;
  std::mutex m;
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e, int) {
    std::lock_guard<std::mutex> lock(m);
    sum += e - b;
  });
  EXPECT_EQ(sum, 10);
}

// Op timing (cpu.op_timing): each operation counted once under its name, those
// run inside another under that one; the results are those of timing off, bit for bit;
// a table never printed is printed when the back-end goes away.
TEST(CpuBackendOps, OpTimingCountsCallsAndChangesNoResult) {
  const auto calls = [](const std::vector<cpu::OpTimeRow>& rows, const std::string& prefix, bool top) {
    int64_t n = 0;
    for (const auto& r : rows) {
      if (r.op.rfind(prefix, 0) == 0 && r.within.empty() == top) n += r.calls;
    }
    return n;
  };
  const int64_t n_tokens = 9, n = 128, n_head = 4, n_head_kv = 2, head_dim = 32, kv = n_head_kv * head_dim;
  const auto w = make_weight(GgmlType::Q8_0, 40, n, 81), w2 = make_weight(GgmlType::Q8_0, 24, n, 82);
  const auto w3 = make_weight(GgmlType::Q4_1, 16, n, 83);
  const auto x = random_floats(n_tokens * n, 84), wv = random_floats(n, 85);
  const auto kc = random_floats(n_tokens * kv, 86), vc = random_floats(n_tokens * kv, 87);
  std::vector<int32_t> pos(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) pos[t] = static_cast<int32_t>(t);
  // Everything the sequence writes, one vector per output.
  const auto run = [&](cpu::CpuBackend& be) {
    std::vector<std::vector<float>> out(8);
    out[0].resize(n_tokens * 40);
    be.matmul(w.view, x.data(), n_tokens, out[0].data());
    out[1].resize(n_tokens * 24);
    be.matmul(w2.view, x.data(), n_tokens, out[1].data());
    out[2].resize(n_tokens * 40);
    out[3].resize(n_tokens * 24);
    const WeightView* same[] = {&w.view, &w2.view};
    float* ys_same[] = {out[2].data(), out[3].data()};
    be.matmul_multi(same, 2, x.data(), n_tokens, ys_same);
    out[4].resize(n_tokens * 40);
    out[5].resize(n_tokens * 16);
    const WeightView* mixed[] = {&w.view, &w3.view};  // two types: one matmul each, inside matmul_multi
    float* ys_mixed[] = {out[4].data(), out[5].data()};
    be.matmul_multi(mixed, 2, x.data(), n_tokens, ys_mixed);
    out[6].resize(x.size());
    for (int i = 0; i < 3; ++i) {
      be.rms_norm(i == 0 ? x.data() : out[6].data(), f32_view(wv, n), n_tokens, n, 1e-5f, out[6].data());
    }
    const hearth::ops::RopeParams rp{head_dim, 10000.0f, 1.0f, true};
    be.rope(out[6].data(), n_tokens, n_head, head_dim, pos.data(), rp);
    be.swiglu(out[6].data(), x.data(), n_tokens * n, out[6].data());
    out[7].resize(n_tokens * n_head * head_dim);
    fast_attention(be, out[6].data(), kc.data(), vc.data(), n_tokens, 0, n_head, n_head_kv, head_dim, 0.2f,
                   out[7].data());
    return out;
  };
  cpu::CpuBackend off(2);
  off.set_op_timing(false);
  cpu::CpuBackend on(2);
  on.set_op_timing(true);
  EXPECT_FALSE(off.op_timing());
  EXPECT_TRUE(on.op_timing());
  EXPECT_EQ(run(off), run(on));
  EXPECT_TRUE(off.op_timing_rows().empty());
  const auto rows = on.op_timing_rows();
  EXPECT_EQ(calls(rows, "matmul ", true), 2);
  EXPECT_EQ(calls(rows, "matmul_multi ", true), 2);
  EXPECT_EQ(calls(rows, "matmul_multi one by one", true), 1);
  EXPECT_EQ(calls(rows, "matmul ", false), 2);  // the mixed pair's two matmuls, nested
  for (const auto& r : rows) {
    if (!r.within.empty()) {
      EXPECT_EQ(calls(rows, r.within, true) > 0, true) << r.op << " inside " << r.within << ", not a top-level op";
    }
    EXPECT_GE(r.ns, 0) << r.op;
  }
  EXPECT_EQ(calls(rows, "rms_norm", true), 3);
  EXPECT_EQ(calls(rows, "rope", true), 1);
  EXPECT_EQ(calls(rows, "swiglu", true), 1);
  EXPECT_EQ(calls(rows, "attention", true), 1);
  EXPECT_EQ(calls(rows, "add", true), 0);
  testing::internal::CaptureStderr();
  on.print_op_timing("test", 1000.0);
  const std::string table = testing::internal::GetCapturedStderr();
  EXPECT_NE(table.find("CPU op timing - test"), std::string::npos) << table;
  EXPECT_NE(table.find("rms_norm"), std::string::npos) << table;
  EXPECT_NE(table.find("(outside the back-end)"), std::string::npos) << table;
  on.reset_op_timing();
  EXPECT_TRUE(on.op_timing_rows().empty());
  // Printed or reset: nothing at destruction; otherwise the table.
  testing::internal::CaptureStderr();
  {
    cpu::CpuBackend quiet(1);
    quiet.set_op_timing(true);
    std::vector<float> y(n_tokens * 40);
    quiet.matmul(w.view, x.data(), n_tokens, y.data());
    quiet.reset_op_timing();
    cpu::CpuBackend loud(1);
    loud.set_op_timing(true);
    loud.matmul(w.view, x.data(), n_tokens, y.data());
  }
  const std::string at_exit = testing::internal::GetCapturedStderr();
  EXPECT_EQ(at_exit.find("CPU op timing"), at_exit.rfind("CPU op timing")) << at_exit;
  EXPECT_NE(at_exit.find("matmul"), std::string::npos) << at_exit;
}

// The vision-tower operations of the CPU back-end (layer_norm, gelu, attention_full,
// multi-axis RoPE): the reference kernels against independent double-precision
// computations written here from backend.h's formulas (so a wrong reference cannot
// pass), and the back-end's threaded / tiled kernels against the reference over odd
// shapes, several segments and one row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels_ref.h"
#include "core/error.h"
#include "core/tune.h"

namespace {

namespace cpu = hearth::cpu;
namespace ops = hearth::ops;

using hearth::test::random_floats;

ops::WeightView f32_row(const std::vector<float>& v) {
  return ops::WeightView{"w", hearth::GgmlType::F32, v.data(), static_cast<int64_t>(v.size()), 1,
                         sizeof(float) * v.size()};
}

// Largest |a - b| / (atol + rtol |b|) over the values; <= 1 passes.
double worst(const std::vector<float>& a, const std::vector<double>& b, double atol, double rtol) {
  double w = 0.0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i])));
  return w;
}
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---- layer_norm ----

std::vector<double> layer_norm_f64(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& b, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  }
  return y;
}

TEST(VisionOps, LayerNormMatchesDoubleAndReference) {
  cpu::CpuBackend be(3);
  for (const auto& [n_rows, n] : {std::pair<int64_t, int64_t>{1, 32}, {7, 1152}, {33, 13}, {300, 64}}) {
    // An offset mean and a spread of scales: the mean must really be subtracted.
    auto x = random_floats(n_rows * n, 11, 3.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 5.0f + static_cast<float>(i % 7);
    const auto w = random_floats(n, 12), b = random_floats(n, 13);
    const float eps = 1e-6f;
    std::vector<float> ref(x.size()), fast(x.size());
    cpu::ref::layer_norm(x.data(), f32_row(w), f32_row(b), n_rows, n, eps, ref.data());
    EXPECT_LE(worst(ref, layer_norm_f64(x, w, b, n, eps), 1e-5, 1e-5), 1.0) << n_rows << " x " << n;
    be.layer_norm(x.data(), f32_row(w), f32_row(b), n_rows, n, eps, fast.data());
    EXPECT_EQ(fast, ref) << n_rows << " x " << n;
    std::vector<float> inplace = x;  // y may alias x
    be.layer_norm(inplace.data(), f32_row(w), f32_row(b), n_rows, n, eps, inplace.data());
    EXPECT_EQ(inplace, ref);
  }
}

// ---- gelu ----

TEST(VisionOps, GeluBothFormsMatchDoubleAndReference) {
  cpu::CpuBackend be(2);
  for (const bool tanh_approx : {false, true}) {
    for (const int64_t n : {1, 17, 5000, 70001}) {
      auto x = random_floats(n, 21, 2.5f);
      if (n > 4) x[0] = 0.0f, x[1] = -9.0f, x[2] = 9.0f, x[3] = -0.5f;
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        want[i] = tanh_approx ? 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)))
                              : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      }
      std::vector<float> ref = x, fast = x;
      cpu::ref::gelu(ref.data(), n, tanh_approx);
      EXPECT_LE(worst(ref, want, 1e-6, 1e-5), 1.0) << (tanh_approx ? "tanh" : "erf") << " n " << n;
      // The vector kernel (its own erfc / sigmoid approximations): within 2e-7 |x| + 1e-7
      // of the reference on every value.
      be.gelu(fast.data(), n, tanh_approx);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(fast[i] - ref[i]), 2e-7 * std::fabs(x[i]) + 1e-7)
            << (tanh_approx ? "tanh" : "erf") << " n " << n << " x " << x[i];
      }
      EXPECT_LE(worst(fast, want, 1e-6, 1e-5), 1.0) << (tanh_approx ? "tanh" : "erf") << " n " << n;
      // The reference kernels give the reference's bits.
      std::vector<float> plain = x;
      cpu::CpuBackend(1, /*reference_kernels=*/true).gelu(plain.data(), n, tanh_approx);
      EXPECT_EQ(plain, ref) << (tanh_approx ? "tanh" : "erf") << " n " << n;
    }
  }
  // The two forms differ (by up to ~1e-3 near |x| ~ 2): each is its own formula.
  float a = 2.0f, b = 2.0f;
  cpu::ref::gelu(&a, 1, false);
  cpu::ref::gelu(&b, 1, true);
  EXPECT_GT(std::fabs(a - b), 1e-5f);
}

// ---- attention_full ----

std::vector<double> attention_full_f64(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<ops::FullAttentionSeg>& segs,
                                       int64_t n_head, int64_t hd, double scale) {
  std::vector<double> out(q.size(), 0.0);
  const int64_t stride = n_head * hd;
  for (const auto& sg : segs) {
    for (int64_t r = sg.first_row; r < sg.first_row + sg.n_rows; ++r) {
      for (int64_t h = 0; h < n_head; ++h) {
        std::vector<double> s(static_cast<size_t>(sg.n_rows));
        double mx = -INFINITY, total = 0.0;
        for (int64_t j = 0; j < sg.n_rows; ++j) {
          double d = 0.0;
          for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(q[r * stride + h * hd + i]) * k[(sg.first_row + j) * stride + h * hd + i];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) total += (e = std::exp(e - mx));
        for (int64_t j = 0; j < sg.n_rows; ++j) {
          for (int64_t i = 0; i < hd; ++i) {
            out[r * stride + h * hd + i] += s[j] / total * v[(sg.first_row + j) * stride + h * hd + i];
          }
        }
      }
    }
  }
  return out;
}

struct FullCase {
  int64_t n_head, head_dim;
  std::vector<int64_t> seg_rows;
};

std::vector<ops::FullAttentionSeg> make_segs(const std::vector<int64_t>& rows, int64_t* total) {
  std::vector<ops::FullAttentionSeg> segs;
  int64_t r0 = 0;
  for (const int64_t n : rows) {
    segs.push_back({r0, n});
    r0 += n;
  }
  *total = r0;
  return segs;
}

TEST(VisionOps, AttentionFullMatchesDoubleAndReference) {
  cpu::CpuBackend be(3), plain(2, /*reference_kernels=*/true);
  const std::vector<FullCase> cases = {
      {2, 16, {1}},                 // one row: attends to itself only
      {2, 16, {5, 70, 33, 129}},    // segments of odd lengths (partial key tiles and query blocks)
      {16, 72, {64, 1, 97}},        // the vision tower's head size
      {3, 72, {200}},
      {2, 20, {17, 40}},            // a head size without a compiled-in kernel
      {1, 128, {65}},
  };
  for (const auto& c : cases) {
    int64_t n_rows = 0;
    const auto segs = make_segs(c.seg_rows, &n_rows);
    const int64_t n = n_rows * c.n_head * c.head_dim;
    const auto q = random_floats(n, 31, 1.5f), k = random_floats(n, 32, 1.5f), v = random_floats(n, 33);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> ref(n), fast(n, NAN), fast_plain(n, NAN);
    cpu::ref::attention_full(q.data(), k.data(), v.data(), segs.data(), static_cast<int64_t>(segs.size()), c.n_head,
                             c.head_dim, scale, ref.data());
    const auto want = attention_full_f64(q, k, v, segs, c.n_head, c.head_dim, scale);
    const std::string what = "heads " + std::to_string(c.n_head) + " dim " + std::to_string(c.head_dim) +
                             " rows " + std::to_string(n_rows) + " segments " + std::to_string(segs.size());
    EXPECT_LE(worst(ref, want, 2e-6, 1e-5), 1.0) << what;
    be.attention_full(q.data(), k.data(), v.data(), segs.data(), static_cast<int64_t>(segs.size()), c.n_head,
                      c.head_dim, scale, fast.data());
    EXPECT_LE(worst(fast, to_double(ref), 1e-5, 1e-4), 1.0) << what;
    plain.attention_full(q.data(), k.data(), v.data(), segs.data(), static_cast<int64_t>(segs.size()), c.n_head,
                         c.head_dim, scale, fast_plain.data());
    EXPECT_LE(worst(fast_plain, to_double(ref), 1e-5, 1e-4), 1.0) << what << " (plain kernel)";
  }
}

// The AVX-512 kernel's 16-lane score and p v loops sum every lane in the AVX2 kernel's
// order with the same fused multiply-adds: the same bits, for every compiled head size.
TEST(VisionOps, AttentionFullAvx512EqualsAvx2) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86 kernels";
#else
  const cpu::CpuFeatures& hw = cpu::detected_cpu_features();
  if (!(hw.avx512f && hw.avx512vl && hw.avx512bw && hw.avx2 && hw.fma)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const std::vector<FullCase> cases = {
      {16, 72, {64, 1, 97, 300}}, {3, 16, {50, 7}}, {2, 32, {33}}, {2, 64, {70, 129}}, {2, 80, {45}}, {2, 128, {65, 3}},
  };
  for (const auto& c : cases) {
    int64_t n_rows = 0;
    const auto segs = make_segs(c.seg_rows, &n_rows);
    const int64_t n = n_rows * c.n_head * c.head_dim;
    const auto q = random_floats(n, 51, 1.5f), k = random_floats(n, 52, 1.5f), v = random_floats(n, 53);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> wide(n, NAN), narrow(n, NAN);
    cpu::CpuBackend be512(2);
    ASSERT_STREQ(cpu::cpu_kernels(false).isa, "avx512");
    be512.attention_full(q.data(), k.data(), v.data(), segs.data(), static_cast<int64_t>(segs.size()), c.n_head,
                         c.head_dim, scale, wide.data());
    {
      const hearth::tune::Override isa(hearth::tune::kCpuIsa, 1);
      ASSERT_STREQ(cpu::cpu_kernels(false).isa, "avx2");
      cpu::CpuBackend be2(2);
      be2.attention_full(q.data(), k.data(), v.data(), segs.data(), static_cast<int64_t>(segs.size()), c.n_head,
                         c.head_dim, scale, narrow.data());
    }
    EXPECT_EQ(0, std::memcmp(wide.data(), narrow.data(), sizeof(float) * static_cast<size_t>(n)))
        << "heads " << c.n_head << " dim " << c.head_dim << " rows " << n_rows;
  }
#endif
}

// Each segment sees only its own rows: a segment computed alone (its rows copied out)
// gives the same bits as in the batch; and one row alone returns its own value row.
TEST(VisionOps, AttentionFullSegmentsAreIndependent) {
  cpu::CpuBackend be(3);
  const int64_t n_head = 4, hd = 72, stride = n_head * hd;
  int64_t n_rows = 0;
  const auto segs = make_segs({40, 1, 77}, &n_rows);
  const auto q = random_floats(n_rows * stride, 41, 2.0f), k = random_floats(n_rows * stride, 42, 2.0f),
             v = random_floats(n_rows * stride, 43);
  std::vector<float> all(q.size());
  be.attention_full(q.data(), k.data(), v.data(), segs.data(), 3, n_head, hd, 0.1f, all.data());
  for (const auto& sg : segs) {
    const auto part = [&](const std::vector<float>& x) {
      return std::vector<float>(x.begin() + sg.first_row * stride, x.begin() + (sg.first_row + sg.n_rows) * stride);
    };
    const auto qs = part(q), ks = part(k), vs = part(v);
    std::vector<float> alone(qs.size());
    const ops::FullAttentionSeg one{0, sg.n_rows};
    be.attention_full(qs.data(), ks.data(), vs.data(), &one, 1, n_head, hd, 0.1f, alone.data());
    EXPECT_EQ(alone, part(all)) << "segment at row " << sg.first_row;
    if (sg.n_rows == 1) {
      EXPECT_EQ(part(all), vs);  // softmax over one key is exactly 1
    }
  }
}

// ---- multi-axis RoPE ----

// Expected rotation from backend.h's formulas, in double, angles by pow.
std::vector<double> rope_multi_f64(const std::vector<float>& x, int64_t n_tokens, int64_t n_heads, int64_t hd,
                                   const std::vector<int32_t>& pos3, const ops::RopeParams& p) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = p.n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double angle;
      if (p.multi == ops::RopeMulti::kInterleaved) {
        int axis = 0;
        if (i % 3 == 1 && i < 3 * p.sections[1]) axis = 1;
        if (i % 3 == 2 && i < 3 * p.sections[2]) axis = 2;
        angle = pos3[3 * t + axis] * static_cast<double>(p.freq_scale) *
                std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
      } else {
        const bool row = i < p.sections[0];
        const int64_t j = row ? i : i - p.sections[0], s = row ? p.sections[0] : p.sections[1];
        angle = pos3[3 * t + (row ? 1 : 2)] *
                std::pow(static_cast<double>(p.freq_base), -static_cast<double>(j) / static_cast<double>(s));
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t base = (t * n_heads + h) * hd;
        const double x0 = x[base + i], x1 = x[base + i + half];
        y[base + i] = x0 * std::cos(angle) - x1 * std::sin(angle);
        y[base + i + half] = x0 * std::sin(angle) + x1 * std::cos(angle);
      }
    }
  }
  return y;
}

ops::RopeParams multi_params(ops::RopeMulti m, int64_t n_rot, float base, int32_t s0, int32_t s1, int32_t s2,
                             const std::vector<int32_t>& pos3) {
  ops::RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = base;
  p.neox = true;
  p.multi = m;
  p.sections[0] = s0;
  p.sections[1] = s1;
  p.sections[2] = s2;
  p.pos3 = pos3.data();
  return p;
}

std::vector<int32_t> random_pos3(int64_t n_tokens, uint32_t seed, int32_t max_pos) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, max_pos);
  std::vector<int32_t> p(static_cast<size_t>(3 * n_tokens));
  for (auto& e : p) e = d(rng);
  return p;
}

// Interleaved mRoPE with the three positions of each token equal is plain NeoX RoPE,
// value for value (the text positions of a Qwen3.5 prompt).
TEST(VisionOps, RopeInterleavedWithEqualPositionsIsNeox) {
  cpu::CpuBackend be(3);
  struct Shape {
    int64_t n_tokens, n_heads, head_dim, n_rot;
    int32_t s0, s1, s2;
  };
  for (const Shape& s : {Shape{37, 3, 32, 16, 3, 3, 2}, Shape{9, 2, 256, 64, 11, 11, 10}, Shape{1, 4, 256, 64, 11, 11, 10}}) {
    std::vector<int32_t> pos(static_cast<size_t>(s.n_tokens)), pos3(static_cast<size_t>(3 * s.n_tokens));
    for (int64_t t = 0; t < s.n_tokens; ++t) pos[t] = pos3[3 * t] = pos3[3 * t + 1] = pos3[3 * t + 2] = static_cast<int32_t>(t * 37 + 5);
    const auto x = random_floats(s.n_tokens * s.n_heads * s.head_dim, 51);
    ops::RopeParams plain;
    plain.n_rot = s.n_rot;
    plain.freq_base = 1e7f;
    plain.neox = true;
    const auto multi = multi_params(ops::RopeMulti::kInterleaved, s.n_rot, 1e7f, s.s0, s.s1, s.s2, pos3);
    std::vector<float> a = x, b = x, c = x;
    be.rope(a.data(), s.n_tokens, s.n_heads, s.head_dim, pos.data(), plain);
    be.rope(b.data(), s.n_tokens, s.n_heads, s.head_dim, nullptr, multi);
    cpu::ref::rope(c.data(), s.n_tokens, s.n_heads, s.head_dim, nullptr, multi);
    EXPECT_EQ(a, b) << "head_dim " << s.head_dim;
    EXPECT_EQ(a, c) << "head_dim " << s.head_dim;
    EXPECT_NE(a, x);
  }
}

TEST(VisionOps, RopeInterleavedMatchesFormula) {
  cpu::CpuBackend be(2);
  for (const auto& [hd, n_rot, s0, s1, s2] : {std::tuple<int64_t, int64_t, int32_t, int32_t, int32_t>{32, 16, 3, 3, 2},
                                             {256, 64, 11, 11, 10}, {64, 64, 16, 8, 8}}) {
    const int64_t n_tokens = 23, n_heads = 3;
    const auto pos3 = random_pos3(n_tokens, 61, 60);
    const auto x = random_floats(n_tokens * n_heads * hd, 62);
    const auto p = multi_params(ops::RopeMulti::kInterleaved, n_rot, 10000.0f, s0, s1, s2, pos3);
    std::vector<float> ref = x, fast = x;
    cpu::ref::rope(ref.data(), n_tokens, n_heads, hd, nullptr, p);
    EXPECT_LE(worst(ref, rope_multi_f64(x, n_tokens, n_heads, hd, pos3, p), 2e-4, 2e-4), 1.0) << "head_dim " << hd;
    be.rope(fast.data(), n_tokens, n_heads, hd, nullptr, p);
    EXPECT_EQ(fast, ref);
    // Dimensions past n_rot are untouched.
    for (int64_t t = 0; t < n_tokens * n_heads; ++t) {
      for (int64_t d = n_rot; d < hd; ++d) ASSERT_EQ(fast[t * hd + d], x[t * hd + d]);
    }
  }
}

TEST(VisionOps, RopeVisionMatchesFormula) {
  cpu::CpuBackend be(3);
  // The vision tower's head (72: 18 + 18 pairs) and the tiny model's (16: 4 + 4 pairs).
  for (const auto& [hd, n_heads] : {std::pair<int64_t, int64_t>{72, 16}, {16, 2}}) {
    const int64_t n_tokens = 45;
    auto pos3 = random_pos3(n_tokens, 71, 63);
    for (int64_t t = 0; t < n_tokens; ++t) pos3[3 * t] = 999;  // the time axis is not used
    const auto x = random_floats(n_tokens * n_heads * hd, 72);
    const auto half = static_cast<int32_t>(hd / 4);
    const auto p = multi_params(ops::RopeMulti::kVision, hd, 10000.0f, half, half, 0, pos3);
    std::vector<float> ref = x, fast = x;
    cpu::ref::rope(ref.data(), n_tokens, n_heads, hd, nullptr, p);
    EXPECT_LE(worst(ref, rope_multi_f64(x, n_tokens, n_heads, hd, pos3, p), 2e-4, 2e-4), 1.0) << "head_dim " << hd;
    be.rope(fast.data(), n_tokens, n_heads, hd, nullptr, p);
    EXPECT_EQ(fast, ref);
  }
}

// rope_store_kv (the CPU back-end's: rope, rope, store_kv) with multi-axis positions:
// q and the stored keys rotated as rope rotates them.
TEST(VisionOps, RopeStoreKvTakesMultiAxisPositions) {
  cpu::CpuBackend be(2);
  const int64_t n_tokens = 13, n_head = 4, n_head_kv = 2, hd = 32, dim = n_head_kv * hd;
  const auto pos3 = random_pos3(n_tokens, 81, 40);
  const auto p = multi_params(ops::RopeMulti::kInterleaved, 16, 10000.0f, 3, 3, 2, pos3);
  const auto q = random_floats(n_tokens * n_head * hd, 82), k = random_floats(n_tokens * dim, 83),
             v = random_floats(n_tokens * dim, 84);
  std::vector<float> kc(static_cast<size_t>(32 * dim), 0.0f), vc = kc;
  std::vector<int32_t> slots(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) slots[t] = static_cast<int32_t>(31 - 2 * t);
  const ops::KvLayer cache{kc.data(), vc.data(), ops::KvType::F32, 16, dim};
  std::vector<float> qa = q, ka = k, qr = q, kr = k;
  be.rope_store_kv(qa.data(), ka.data(), v.data(), n_tokens, n_head, n_head_kv, hd, nullptr, p, slots.data(), cache);
  cpu::ref::rope(qr.data(), n_tokens, n_head, hd, nullptr, p);
  cpu::ref::rope(kr.data(), n_tokens, n_head_kv, hd, nullptr, p);
  EXPECT_EQ(qa, qr);
  EXPECT_EQ(ka, kr);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_EQ(kc[slots[t] * dim + i], kr[t * dim + i]);
      ASSERT_EQ(vc[slots[t] * dim + i], v[t * dim + i]);
    }
  }
}

TEST(VisionOps, RopeMultiRejectsWhatBackendHDoesNotDefine) {
  cpu::CpuBackend be(1);
  const std::vector<int32_t> pos3 = {1, 2, 3};
  std::vector<float> x(72, 1.0f);
  auto p = multi_params(ops::RopeMulti::kVision, 72, 10000.0f, 18, 17, 0, pos3);  // 35 pairs of 36
  EXPECT_THROW(be.rope(x.data(), 1, 1, 72, nullptr, p), hearth::Error);
  p.sections[1] = 18;
  p.neox = false;
  EXPECT_THROW(be.rope(x.data(), 1, 1, 72, nullptr, p), hearth::Error);
  p.neox = true;
  p.pos3 = nullptr;
  EXPECT_THROW(be.rope(x.data(), 1, 1, 72, nullptr, p), hearth::Error);
  p.pos3 = pos3.data();
  EXPECT_NO_THROW(be.rope(x.data(), 1, 1, 72, nullptr, p));
}

}  // namespace

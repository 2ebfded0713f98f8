// Packed Q4_K / Q5_K / Q6_K weights and their AVX-512 VNNI kernels: bit for bit equal to
// the plain reference of the same arithmetic (ref::packed_order_matmul) and to the
// AVX2 vec_dot; through CpuBackend, prepared (packed) matmul and matmul_multi equal
// vec_dot and every token of a batch gets the bits it gets alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/quant_dot.h"
#include "quant/quant_ref.h"

namespace {

using hearth::GgmlType;
using hearth::ops::WeightView;
namespace cpu = hearth::cpu;

constexpr GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct QuantWeight {
  std::vector<uint8_t> data;
  WeightView view;
};

QuantWeight make_weight(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  QuantWeight w;
  auto f = random_floats(static_cast<size_t>(n_rows * n_cols), seed);
  // Sub-blocks with an offset (the mins), a wide range, and whole super-blocks of zeros.
  for (size_t i = 0; i < f.size(); ++i) {
    if ((i / 32) % 7 == 3) f[i] += 2.5f;
    if ((i / 16) % 13 == 6) f[i] *= 40.0f;
    if ((i / 256) % 5 == 2) f[i] = 0.0f;
  }
  const size_t rb = static_cast<size_t>(*hearth::ggml_row_bytes(type, static_cast<uint64_t>(n_cols)));
  w.data.resize(rb * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    hearth::quantize_row_ref(type, f.data() + r * n_cols, w.data.data() + r * rb, n_cols);
  }
  w.view = WeightView{"w", type, w.data.data(), n_cols, n_rows, rb};
  return w;
}

// Activations: normal, with some large values and some all-zero super-blocks.
std::vector<float> make_x(int64_t n_tok, int64_t n, uint32_t seed) {
  auto x = random_floats(static_cast<size_t>(n_tok * n), seed, 3.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 97 == 5) x[i] = 3.0e4f;
    if (i % 89 == 7) x[i] = -5.0e4f;
    if ((i / 256) % 7 == 4) x[i] = 0.0f;
  }
  return x;
}

// Quantized activations and their scales, as CpuBackend prepares them.
struct Acts {
  std::vector<uint8_t> xq;
  std::vector<float> d, s;
  std::vector<int32_t> corr;
  cpu::PackedAct a;
};

Acts make_acts(GgmlType wtype, int64_t n_tok, int64_t n, uint32_t seed) {
  Acts r;
  const auto x = make_x(n_tok, n, seed);
  const GgmlType at = cpu::packed_act_type(wtype);
  EXPECT_EQ(at, GgmlType::Q8_K);
  const auto rb = static_cast<int64_t>(*hearth::ggml_row_bytes(at, static_cast<uint64_t>(n)));
  const int64_t nb = n / 256;
  r.xq.resize(static_cast<size_t>(rb * n_tok));
  r.d.resize(static_cast<size_t>(nb * n_tok));
  r.s.resize(r.d.size());
  r.corr.resize(r.d.size() * 8);
  const cpu::DotKernel* k = cpu::find_dot_kernel(wtype);
  EXPECT_EQ(k->act_type, at);
  for (int64_t t = 0; t < n_tok; ++t) {
    k->quantize_act(x.data() + t * n, r.xq.data() + t * rb, n);
    cpu::packed_act_scales(wtype, r.xq.data() + t * rb, nb, r.d.data() + t * nb, r.s.data() + t * nb,
                           r.corr.data() + t * nb * 8);
  }
  r.a = cpu::PackedAct{r.xq.data(), rb, nb, r.d.data(), r.s.data(), r.corr.data()};
  return r;
}

TEST(PackedKQuant, PackableAndSizes) {
  for (const GgmlType type : kTypes) {
    EXPECT_TRUE(cpu::packable(type, 256));
    EXPECT_TRUE(cpu::packable(type, 1536));
    EXPECT_FALSE(cpu::packable(type, 128));
    EXPECT_FALSE(cpu::packable(type, 288));
    const auto w = make_weight(type, 17, 512, 1);
    const auto p = cpu::pack_weight(w.view);
    EXPECT_EQ(p->n_groups, 2);
    EXPECT_EQ(p->nb, 2);
    // Within a few percent of the original type's bytes for 16 rows.
    const double ratio = static_cast<double>(p->block_bytes) / (16.0 * static_cast<double>(w.view.row_bytes / 2));
    EXPECT_GE(ratio, 1.0);
    EXPECT_LT(ratio, 1.03) << hearth::ggml_type_name(type);
    EXPECT_EQ(p->block_bytes % 64, 0);
  }
}

TEST(PackedKQuant, KernelEqualsReferenceBitForBit) {
  int n_run = 0;
  for (const GgmlType type : kTypes) {
    const cpu::PackedMatmulFn mm = cpu::find_packed_kernel(type);
    if (mm == nullptr) continue;  // no AVX-512 VNNI here
    ++n_run;
    for (const int64_t n_rows : {1, 15, 16, 17, 40}) {
      for (const int64_t n : {256, 512, 1536}) {
        for (int64_t n_tok = 1; n_tok <= 9; ++n_tok) {
          const auto seed = static_cast<uint32_t>(n_rows * 131 + n * 7 + n_tok);
          const auto w = make_weight(type, n_rows, n, seed);
          const auto p = cpu::pack_weight(w.view);
          const auto acts = make_acts(type, n_tok, n, seed + 1);
          const int64_t ys = n_rows + 3;
          std::vector<float> got(static_cast<size_t>(n_tok * ys), -7.0f), want(got.size(), -7.0f);
          mm(*p, 0, p->n_groups, acts.a, n_tok, got.data(), ys);
          cpu::ref::packed_order_matmul(w.view, 0, n_rows, acts.a, n_tok, want.data(), ys);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << hearth::ggml_type_name(type) << " rows " << n_rows << " n " << n
                                       << " tokens " << n_tok << " at " << i;
          }
        }
      }
    }
  }
  if (n_run == 0) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
}

// The reference keeps vec_dot's float expression: equal to the SIMD vec_dot
// (dot_avx2.cpp) bit for bit, and on all-zero rows / activations too.
TEST(PackedKQuant, ReferenceEqualsVecDotBitForBit) {
  for (const GgmlType type : kTypes) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(type);
    if (std::string(k->isa) == "ref") GTEST_SKIP() << "no AVX2 vec_dot on this CPU";
    for (const int64_t n_rows : {1, 15, 16, 17, 40}) {
      for (const int64_t n : {256, 512, 1536}) {
        const int64_t n_tok = 9;
        const auto w = make_weight(type, n_rows, n, static_cast<uint32_t>(n + n_rows));
        const auto acts = make_acts(type, n_tok, n, static_cast<uint32_t>(12 + n_rows));
        std::vector<float> y(static_cast<size_t>(n_tok * n_rows));
        cpu::ref::packed_order_matmul(w.view, 0, n_rows, acts.a, n_tok, y.data(), n_rows);
        for (int64_t t = 0; t < n_tok; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want =
                k->vec_dot(n, w.data.data() + r * w.view.row_bytes, acts.xq.data() + t * acts.a.row_bytes);
            ASSERT_EQ(y[t * n_rows + r], want)
                << hearth::ggml_type_name(type) << " n " << n << " row " << r << " token " << t;
          }
        }
      }
    }
  }
}

TEST(PackedKQuant, BackendMatmulPackedEqualsVecDotAndBatchEqualsAlone) {
  cpu::CpuBackend be(2);
  if (!be.repack()) GTEST_SKIP() << "no packed kernels on this CPU (or HEARTH_REPACK=0)";
  for (const GgmlType type : kTypes) {
    const int64_t n = 768;
    auto wa = make_weight(type, 48, n, 21), wb = make_weight(type, 33, n, 22), wc = make_weight(type, 16, n, 23);
    const int64_t bytes_before = be.packed_bytes();
    const WeightView pa = be.prepare_weight(wa.view), pb = be.prepare_weight(wb.view), pc = be.prepare_weight(wc.view);
    ASSERT_NE(pa.backend_data, nullptr) << hearth::ggml_type_name(type);
    ASSERT_NE(pb.backend_data, nullptr);
    ASSERT_NE(pc.backend_data, nullptr);
    ASSERT_EQ(pa.data, wa.view.data);  // the original rows stay readable (get_rows)
    const auto* pw = static_cast<const cpu::PackedWeight*>(pa.backend_data);
    EXPECT_EQ(be.packed_bytes() - bytes_before, (3 + 3 + 1) * 3 * pw->block_bytes);  // groups x super-blocks
    const int64_t n_tok = 7;
    const auto x = make_x(n_tok, n, 5);
    std::vector<float> ya(n_tok * 48), yb(n_tok * 33), yc(n_tok * 16);
    const WeightView* ws[3] = {&pa, &pb, &pc};
    float* ys[3] = {ya.data(), yb.data(), yc.data()};
    be.matmul_multi(ws, 3, x.data(), n_tok, ys);
    const cpu::DotKernel* k = cpu::find_dot_kernel(type);
    const auto rb = static_cast<int64_t>(*hearth::ggml_row_bytes(k->act_type, n));
    std::vector<uint8_t> xq(static_cast<size_t>(rb * n_tok));
    for (int64_t t = 0; t < n_tok; ++t) k->quantize_act(x.data() + t * n, xq.data() + t * rb, n);
    for (int i = 0; i < 3; ++i) {
      const WeightView& orig = i == 0 ? wa.view : i == 1 ? wb.view : wc.view;
      std::vector<float> one(static_cast<size_t>(n_tok * orig.n_rows));
      be.matmul(*ws[i], x.data(), n_tok, one.data());
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < orig.n_rows; ++r) {
          const float want =
              k->vec_dot(n, static_cast<const uint8_t*>(orig.data) + r * orig.row_bytes, xq.data() + t * rb);
          const size_t j = static_cast<size_t>(t * orig.n_rows + r);
          ASSERT_EQ(one[j], want) << hearth::ggml_type_name(type) << " weight " << i << " row " << r << " token " << t;
          ASSERT_EQ(ys[i][j], want) << "matmul_multi " << hearth::ggml_type_name(type) << " weight " << i;
        }
      }
      // Each token alone gives the bits it got in the batch.
      for (int64_t t = 0; t < n_tok; ++t) {
        std::vector<float> alone(static_cast<size_t>(orig.n_rows));
        be.matmul(*ws[i], x.data() + t * n, 1, alone.data());
        for (int64_t j = 0; j < orig.n_rows; ++j) ASSERT_EQ(alone[j], one[t * orig.n_rows + j]);
      }
    }
  }
}

}  // namespace

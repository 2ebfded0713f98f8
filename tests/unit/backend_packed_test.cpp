// Packed (16-row interleaved) weights and their AVX-512 VNNI and AVX2 kernels, for every packed
// type (Q4_0, Q4_1, Q8_0 and the K-quants Q4_K, Q5_K, Q6_K): bit for bit equal to the
// plain reference of the same arithmetic (ref::packed_order_matmul) and to the AVX2
// vec_dot (ggml's order); through CpuBackend, prepared (packed) matmul and matmul_multi
// equal vec_dot and every token of a batch gets the bits it gets alone. The tests marked
// PackedBlocks run twice: with the default token blocks and with small ones (tuning keys
// cpu.token_block=16, cpu.prefill_blocks=8), so the blocked forms meet the bit-for-bit
// checks on short inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/packed_kquant.h"
#include "backends/cpu/quant_dot.h"
#include "core/tune.h"

namespace hearth::cpu::packed_avx2 {
PackedMatmulFn find_packed(GgmlType type);  // packed_avx2.cpp
}

namespace {

using hearth::GgmlType;
using hearth::ops::WeightView;
using hearth::test::QuantWeight;
using hearth::test::random_floats;
namespace cpu = hearth::cpu;

constexpr GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

int64_t block_of(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K ? 256 : 32; }
const char* name(GgmlType t) { return hearth::ggml_type_name(t).data(); }

QuantWeight make_weight(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  auto f = random_floats(static_cast<size_t>(n_rows * n_cols), seed);
  // Blocks with an offset (the mins), a wide range, and whole super-blocks of zeros.
  for (size_t i = 0; i < f.size(); ++i) {
    if ((i / 32) % 7 == 3) f[i] += 2.5f;
    if ((i / 16) % 13 == 6) f[i] *= 40.0f;
    if ((i / 256) % 5 == 2) f[i] = 0.0f;
  }
  return hearth::test::quantize_weight(type, f, n_rows, n_cols);
}

// Activations: normal, with some large values and some all-zero stretches.
std::vector<float> make_x(int64_t n_tok, int64_t n, uint32_t seed) {
  auto x = random_floats(static_cast<size_t>(n_tok * n), seed, 3.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 97 == 5) x[i] = 3.0e4f;
    if (i % 89 == 7) x[i] = -5.0e4f;
    if ((i / 256) % 7 == 4) x[i] = 0.0f;
  }
  return x;
}

// The token blocks of the packed products (cpu.token_block, cpu.prefill_blocks) and the
// instruction sets (cpu.isa: auto, or 1 = avx2, which runs the AVX2 kernels on an AVX-512
// machine) for the scope of a test.
struct Blocks {
  int64_t token_block, prefill_blocks, isa;
};
class PackedBlocks : public ::testing::TestWithParam<Blocks> {
 protected:
  hearth::tune::Override token_block_{hearth::tune::kCpuTokenBlock, GetParam().token_block};
  hearth::tune::Override prefill_blocks_{hearth::tune::kCpuPrefillBlocks, GetParam().prefill_blocks};
  hearth::tune::Override isa_{hearth::tune::kCpuIsa, GetParam().isa};
};
INSTANTIATE_TEST_SUITE_P(TokenBlocks, PackedBlocks,
                         ::testing::Values(Blocks{128, 0, 0}, Blocks{16, 8, 0}, Blocks{128, 0, 1}, Blocks{16, 8, 1}),
                         [](const ::testing::TestParamInfo<Blocks>& i) {
                           return "tokens" + std::to_string(i.param.token_block) + "_prefill" +
                                  std::to_string(i.param.prefill_blocks) + (i.param.isa == 1 ? "_avx2" : "");
                         });

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
  const auto rb = static_cast<int64_t>(*hearth::ggml_row_bytes(at, static_cast<uint64_t>(n)));
  const int64_t nb = n / block_of(wtype);
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

TEST(Packed, PackableAndSizes) {
  for (const GgmlType type : kTypes) {
    const int64_t blk = block_of(type);
    EXPECT_TRUE(cpu::packable(type, blk));
    EXPECT_TRUE(cpu::packable(type, 6 * blk));
    EXPECT_FALSE(cpu::packable(type, blk / 2));
    EXPECT_FALSE(cpu::packable(type, blk + blk / 2));
    const auto w = make_weight(type, 17, 2 * blk, 1);
    const auto p = cpu::pack_weight(w.view);
    EXPECT_EQ(p->n_groups, 2);
    EXPECT_EQ(p->nb, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p->group(0)) % 64, 0u);
    // Within a few percent of the original type's bytes for 16 rows.
    const double ratio = static_cast<double>(p->block_bytes) / (16.0 * static_cast<double>(w.view.row_bytes / 2));
    EXPECT_GE(ratio, 1.0) << name(type);
    EXPECT_LT(ratio, 1.03) << name(type);
  }
}

TEST_P(PackedBlocks, KernelEqualsReferenceBitForBit) {
  int n_run = 0;
  for (const GgmlType type : kTypes) {
    const cpu::PackedMatmulFn mm = cpu::find_packed_kernel(type);
    if (mm == nullptr) continue;  // no AVX2 here
    ++n_run;
    const int64_t blk = block_of(type);
    for (const int64_t n_rows : {1, 15, 16, 17, 40}) {
      for (const int64_t n : {blk, 3 * blk, 6 * blk}) {
        for (int64_t n_tok = 1; n_tok <= 13; ++n_tok) {  // tiles of 8 and 4 and the rest
          const auto seed = static_cast<uint32_t>(n_rows * 131 + n * 7 + n_tok);
          const auto w = make_weight(type, n_rows, n, seed);
          const auto p = cpu::pack_weight(w.view);
          const auto acts = make_acts(type, n_tok, n, seed + 1);
          const int64_t ys = n_rows + 3;
          std::vector<float> got(static_cast<size_t>(n_tok * ys), -7.0f), want(got.size(), -7.0f);
          mm(*p, 0, p->n_groups, acts.a, n_tok, got.data(), ys);
          cpu::ref::packed_order_matmul(w.view, 0, n_rows, acts.a, n_tok, want.data(), ys);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << name(type) << " rows " << n_rows << " n " << n << " tokens " << n_tok
                                       << " at " << i;
          }
        }
      }
    }
  }
  if (n_run == 0) GTEST_SKIP() << "no packed kernels for this CPU (AVX2 or AVX-512 VNNI)";
}

// Prompts longer than a token block (cpu.token_block, 128 by default): the kernel
// takes the tokens in blocks across a range of groups, the tails of a block and of the
// prompt in the smaller tiles; same bits as the reference, for sub-ranges of groups too.
TEST_P(PackedBlocks, LongPromptsInTokenBlocksEqualReference) {
  int n_run = 0;
  for (const GgmlType type : kTypes) {
    const cpu::PackedMatmulFn mm = cpu::find_packed_kernel(type);
    if (mm == nullptr) continue;
    ++n_run;
    const int64_t n_rows = 70, n = 2 * block_of(type);
    for (const int64_t n_tok : {129, 263, 301}) {
      const auto seed = static_cast<uint32_t>(n_tok * 17 + static_cast<int>(type));
      const auto w = make_weight(type, n_rows, n, seed);
      const auto p = cpu::pack_weight(w.view);
      const auto acts = make_acts(type, n_tok, n, seed + 1);
      std::vector<float> want(static_cast<size_t>(n_tok * n_rows), -7.0f), got(want.size(), -7.0f);
      cpu::ref::packed_order_matmul(w.view, 0, n_rows, acts.a, n_tok, want.data(), n_rows);
      mm(*p, 0, 2, acts.a, n_tok, got.data(), n_rows);  // groups split 2 + 3
      mm(*p, 2, p->n_groups, acts.a, n_tok, got.data(), n_rows);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << name(type) << " tokens " << n_tok << " at " << i;
      }
    }
  }
  if (n_run == 0) GTEST_SKIP() << "no packed kernels for this CPU (AVX2 or AVX-512 VNNI)";
}

// The reference keeps vec_dot's order: equal to the SIMD vec_dot (dot_avx2.cpp, the kernel
// llama.cpp's numbers were matched with) bit for bit, on zero rows and activations too.
TEST(Packed, ReferenceEqualsVecDotBitForBit) {
  for (const GgmlType type : kTypes) {
    const cpu::DotKernel* k = cpu::find_dot_kernel(type);
    if (std::string(k->isa) == "ref") GTEST_SKIP() << "no AVX2 vec_dot on this CPU";
    const int64_t blk = block_of(type);
    for (const int64_t n_rows : {1, 17, 40}) {
      for (const int64_t n : {blk, 2 * blk, 6 * blk}) {
        const int64_t n_tok = 9;
        const auto w = make_weight(type, n_rows, n, static_cast<uint32_t>(n + n_rows));
        const auto acts = make_acts(type, n_tok, n, static_cast<uint32_t>(12 + n_rows));
        std::vector<float> y(static_cast<size_t>(n_tok * n_rows));
        cpu::ref::packed_order_matmul(w.view, 0, n_rows, acts.a, n_tok, y.data(), n_rows);
        for (int64_t t = 0; t < n_tok; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want =
                k->vec_dot(n, w.data.data() + r * w.view.row_bytes, acts.xq.data() + t * acts.a.row_bytes);
            ASSERT_EQ(y[t * n_rows + r], want) << name(type) << " n " << n << " row " << r << " token " << t;
          }
        }
      }
    }
  }
}

// Packed K-type weights of different types and one width in one matmul_multi (the Q4_K
// q / k and Q6_K v of a Q4_K_M model): one pass over all of them, activations quantized
// once; every output has the bits of that weight's own matmul (= vec_dot, above).
TEST_P(PackedBlocks, MixedKTypesInOneMatmulMultiEqualEachAlone) {
  cpu::CpuBackend be(2);
  if (!be.repack()) GTEST_SKIP() << "no packed kernels on this CPU (or cpu.repack=0)";
  const int64_t n = 2 * 256;
  const GgmlType types[4] = {GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q4_K};  // Q6_K first: its scales alone would not do
  const int64_t rows[4] = {48, 24, 17, 32};
  std::vector<decltype(make_weight(GgmlType::Q4_K, 1, n, 1))> w;
  std::vector<WeightView> p;
  for (int i = 0; i < 4; ++i) w.push_back(make_weight(types[i], rows[i], n, 40 + static_cast<uint32_t>(i)));
  for (int i = 0; i < 4; ++i) {
    p.push_back(be.prepare_weight(w[static_cast<size_t>(i)].view));
    ASSERT_NE(p.back().backend_data, nullptr) << name(types[i]);
  }
  for (const int64_t n_tok : {1, 9, 37}) {
    const auto x = make_x(n_tok, n, 8);
    std::vector<std::vector<float>> ys(4);
    const WeightView* ws[4];
    float* yp[4];
    for (int i = 0; i < 4; ++i) {
      ys[static_cast<size_t>(i)].resize(static_cast<size_t>(n_tok * rows[i]));
      ws[i] = &p[static_cast<size_t>(i)];
      yp[i] = ys[static_cast<size_t>(i)].data();
    }
    be.matmul_multi(ws, 4, x.data(), n_tok, yp);
    for (int i = 0; i < 4; ++i) {
      std::vector<float> one(static_cast<size_t>(n_tok * rows[i]));
      be.matmul(*ws[i], x.data(), n_tok, one.data());
      ASSERT_EQ(ys[static_cast<size_t>(i)], one) << name(types[i]) << " weight " << i << " tokens " << n_tok;
    }
  }
}

TEST_P(PackedBlocks, BackendMatmulPackedEqualsVecDotAndBatchEqualsAlone) {
  cpu::CpuBackend be(2);
  if (!be.repack()) GTEST_SKIP() << "no packed kernels on this CPU (or cpu.repack=0)";
  for (const GgmlType type : kTypes) {
    const int64_t n = 3 * block_of(type);
    auto wa = make_weight(type, 48, n, 21), wb = make_weight(type, 33, n, 22), wc = make_weight(type, 16, n, 23);
    const int64_t bytes_before = be.packed_bytes();
    const WeightView pa = be.prepare_weight(wa.view), pb = be.prepare_weight(wb.view), pc = be.prepare_weight(wc.view);
    ASSERT_NE(pa.backend_data, nullptr) << name(type);
    ASSERT_NE(pb.backend_data, nullptr);
    ASSERT_NE(pc.backend_data, nullptr);
    ASSERT_EQ(pa.data, wa.view.data);  // the original rows stay readable (get_rows)
    const auto* pw = static_cast<const cpu::PackedWeight*>(pa.backend_data);
    EXPECT_EQ(be.packed_bytes() - bytes_before, (3 + 3 + 1) * 3 * pw->block_bytes);  // groups x blocks
    for (const int64_t n_tok : {7, 37}) {  // 37: several token blocks where they are set small
      const auto x = make_x(n_tok, n, 5);
      // matmul_multi of three packed weights = one matmul each = vec_dot.
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
            const float want = k->vec_dot(
                n, static_cast<const uint8_t*>(orig.data) + r * orig.row_bytes, xq.data() + t * rb);
            const size_t j = static_cast<size_t>(t * orig.n_rows + r);
            ASSERT_EQ(one[j], want)
                << name(type) << " weight " << i << " row " << r << " token " << t;
            ASSERT_EQ(ys[i][j], want) << "matmul_multi " << name(type) << " weight " << i;
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
}

// cpu.isa caps what the kernels see: with avx2 the packed, tiled and one-pair products
// are the AVX2 ones (on an AVX-512 machine too), with plain none of them.
TEST(Packed, IsaKeyPicksTheKernels) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86 instruction sets (the AVX2 / VNNI kernels are built on x86 only)";
#else
  const cpu::CpuFeatures& hw = cpu::detected_cpu_features();
  if (!(hw.avx2 && hw.fma && hw.f16c)) GTEST_SKIP() << "no AVX2 on this CPU";
  {
    const hearth::tune::Override isa(hearth::tune::kCpuIsa, 1);
    EXPECT_FALSE(cpu::cpu_features().avx512f);
    EXPECT_FALSE(cpu::cpu_features().avx512vnni);
    EXPECT_TRUE(cpu::cpu_features().avx2);
    for (const GgmlType type : kTypes) {
      const bool k = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
      EXPECT_EQ(cpu::find_packed_kernel(type), k ? cpu::kquant::find_avx2(type) : cpu::packed_avx2::find_packed(type))
          << name(type);
      EXPECT_NE(cpu::find_packed_kernel(type), nullptr);
      EXPECT_EQ(cpu::find_matmul_kernel(type, cpu::MatmulIsa::kBest), cpu::find_matmul_kernel(type, cpu::MatmulIsa::kAvx2));
      EXPECT_EQ(std::string(cpu::find_dot_kernel(type)->isa), "avx2");
    }
    cpu::CpuBackend be(1);
    EXPECT_EQ(be.repack(), hearth::tune::on(hearth::tune::kCpuRepack));
  }
  {
    const hearth::tune::Override isa(hearth::tune::kCpuIsa, 2);
    EXPECT_FALSE(cpu::cpu_features().avx2);
    for (const GgmlType type : kTypes) {
      EXPECT_EQ(cpu::find_packed_kernel(type), nullptr);
      EXPECT_EQ(cpu::find_matmul_kernel(type, cpu::MatmulIsa::kBest), nullptr);
      EXPECT_EQ(std::string(cpu::find_dot_kernel(type)->isa), "ref");
    }
    cpu::CpuBackend be(1);
    EXPECT_FALSE(be.repack());
  }
  EXPECT_EQ(cpu::cpu_features().avx512f, hw.avx512f);  // auto again
  if (hw.avx512f && hw.avx512bw && hw.avx512vl && hw.avx512vnni) {
    EXPECT_EQ(cpu::find_packed_kernel(GgmlType::Q4_K), cpu::kquant::find_vnni(GgmlType::Q4_K));
  }
#endif
}

TEST(Packed, ReferenceBackendDoesNotPackAndSourcesAreNotReused) {
  cpu::CpuBackend be(1);
  cpu::CpuBackend ref_be(1, true);
  EXPECT_FALSE(ref_be.repack());
  auto w = make_weight(GgmlType::Q8_0, 32, 64, 3);
  EXPECT_EQ(ref_be.prepare_weight(w.view).backend_data, nullptr);
  if (!be.repack()) GTEST_SKIP() << "no packed kernels on this CPU";
  const WeightView a = be.prepare_weight(w.view);
  EXPECT_EQ(be.packed_bytes(), 2 * 2 * (32 + 512));  // 2 groups x 2 blocks
  // Other weights at the same address (a freed source's memory reused) get their own copy.
  const auto w2 = make_weight(GgmlType::Q8_0, 32, 64, 4);
  std::copy(w2.data.begin(), w2.data.end(), w.data.begin());
  const WeightView b = be.prepare_weight(w.view);
  EXPECT_NE(a.backend_data, b.backend_data);
  const auto x = random_floats(64, 9);
  std::vector<float> ya(32), yb(32);
  be.matmul(a, x.data(), 1, ya.data());
  be.matmul(b, x.data(), 1, yb.data());
  EXPECT_NE(ya, yb);
  // Non-packable widths and types are left as they are.
  const auto odd = make_weight(GgmlType::Q2_K, 4, 256, 4);
  EXPECT_EQ(be.prepare_weight(odd.view).backend_data, nullptr);
}

}  // namespace

// Not a check: one thread's speed of the packed kernels on 1, 4, 8 and 64 tokens, 4,096 x 2,048
// weights (from L3; PACKED_SPEED_ROWS=32768 for weights from memory; PACKED_SPEED_ISA=avx2), by
// backend_packed_test --gtest_also_run_disabled_tests --gtest_filter=*PackedSpeed*.
TEST(Packed, DISABLED_PackedSpeed) {
  // PACKED_SPEED_ISA=avx2 times the AVX2 kernels on an AVX-512 machine; beside each packed
  // product, the tiled kernel of that instruction set on the unpacked rows (the path
  // without cpu.repack), alternated rep by rep, best of the reps.
  if (const char* isa = std::getenv("PACKED_SPEED_ISA")) hearth::tune::set("cpu.isa", isa);
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1}) {
    const cpu::PackedMatmulFn mm = cpu::find_packed_kernel(type);
    if (mm == nullptr) GTEST_SKIP() << "no packed kernels (run with cpu.isa as set)";
    const cpu::MatmulFn tiled = cpu::find_matmul_kernel(type);
    const int64_t n_rows = std::getenv("PACKED_SPEED_ROWS") ? std::atoll(std::getenv("PACKED_SPEED_ROWS")) : 4096, n = 2048;
    const auto w = make_weight(type, n_rows, n, 5);
    const auto p = cpu::pack_weight(w.view);
    for (const int64_t n_tok : {1, 4, 8, 64}) {
      const auto acts = make_acts(type, n_tok, n, 6);
      std::vector<float> y(static_cast<size_t>(n_tok * n_rows));
      const int reps = n_tok == 1 ? 200 : 50;
      double best_p = 1e9, best_t = 1e9;
      for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        mm(*p, 0, p->n_groups, acts.a, n_tok, y.data(), n_rows);
        auto t1 = std::chrono::steady_clock::now();
        best_p = std::min(best_p, std::chrono::duration<double>(t1 - t0).count());
        if (tiled != nullptr) {
          t0 = std::chrono::steady_clock::now();
          tiled(n, w.view.data, w.view.row_bytes, n_rows, acts.xq.data(), acts.a.row_bytes, n_tok, y.data(), n_rows);
          t1 = std::chrono::steady_clock::now();
          best_t = std::min(best_t, std::chrono::duration<double>(t1 - t0).count());
        }
      }
      const double bytes = static_cast<double>(n_rows) * static_cast<double>(w.view.row_bytes);
      std::printf("%s %lld token(s): packed %.1f us (%.1f GB/s of weights), tiled %.1f us: x%.2f\n", name(type),
                  static_cast<long long>(n_tok), best_p * 1e6, bytes / best_p / 1e9, best_t * 1e6, best_t / best_p);
    }
  }
}

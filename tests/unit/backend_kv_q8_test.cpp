// The q8_0 KV cache on the CPU back-end (ops::KvType::Q8_0, backends/cpu/kv_q8.h):
// store_kv writes llama.cpp's q8_0 blocks row by row; every attention kernel reading
// them (the plain reference, the per-query AVX2 / AVX-512 kernels, the blocked AVX-512
// one) gives the bits of f32 attention over the dequantized values, so all of them
// equal each other and the reference bit for bit. (The pool's sizes and head_dim
// check: model_kv_q8_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/kv_q8.h"
#include "core/half.h"
#include "quant/quant_ref.h"

namespace {

namespace cpu = hearth::cpu;
namespace ops = hearth::ops;

using hearth::test::random_floats;

using Pool = hearth::test::KvTestPool;

std::vector<int32_t> slots_of(const std::vector<int32_t>& table, int64_t bs, int64_t n) {
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[i] = table[i / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(i % bs);
  return slots;
}

std::vector<int32_t> shuffled_table(int64_t n_blocks, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n_blocks));
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), std::mt19937(seed));
  return t;
}

// Row `row` of a q8_0 pool's K (or V) storage, dequantized.
std::vector<float> dequant_row(const std::vector<float>& store, int64_t row, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim));
  const int64_t rb = ops::kv_row_bytes(ops::KvType::Q8_0, dim);
  cpu::dequantize_row_q8_0(reinterpret_cast<const uint8_t*>(store.data()) + row * rb, out.data(), dim);
  return out;
}

TEST(KvQ8, RowBytesAndNames) {
  EXPECT_EQ(ops::kv_row_bytes(ops::KvType::Q8_0, 64), 68);
  EXPECT_EQ(ops::kv_row_bytes(ops::KvType::Q8_0, 192), 204);
  EXPECT_EQ(ops::kv_row_bytes(ops::KvType::F16, 192), 384);
  EXPECT_EQ(ops::kv_row_bytes(ops::KvType::F32, 192), 768);
  EXPECT_STREQ(ops::kv_type_name(ops::KvType::Q8_0), "q8_0");
}

// store_kv (the back-end's threaded one and the reference) writes each row as the q8_0
// weight quantizer (llama.cpp's quantize_row_q8_0_ref) writes it, at the slot's row;
// rows no slot names are untouched; each value comes back within half a step (d / 2).
TEST(KvQ8, StoreWritesQ8_0Rows) {
  cpu::CpuBackend be(2);
  const int64_t dim = 3 * 64, bs = 16, n_blocks = 6, n = 70;
  auto ks = random_floats(n * dim, 1, 2.0f), vs = random_floats(n * dim, 2);
  for (int64_t d = 0; d < 32; ++d) ks[5 * dim + 32 + d] = 0.0f;  // an all-zero block: d = 0, q = 0
  ks[9 * dim + 7] = 1e4f;                                        // one outlier in a block
  const auto table = shuffled_table(n_blocks, 3);
  const auto slots = slots_of(table, bs, n);
  Pool a(ops::KvType::Q8_0, bs, n_blocks, dim), b(ops::KvType::Q8_0, bs, n_blocks, dim);
  be.store_kv(ks.data(), vs.data(), n, dim, slots.data(), a.layer());
  cpu::ref::store_kv(ks.data(), vs.data(), n, dim, slots.data(), b.layer());
  ASSERT_EQ(0, std::memcmp(a.k.data(), b.k.data(), a.k.size() * sizeof(float)));
  ASSERT_EQ(0, std::memcmp(a.v.data(), b.v.data(), a.v.size() * sizeof(float)));
  const int64_t rb = a.row_bytes();
  std::vector<uint8_t> want(static_cast<size_t>(rb));
  for (int64_t t = 0; t < n; ++t) {
    for (const auto& [src, store] : {std::pair{&ks, &a.k}, std::pair{&vs, &a.v}}) {
      hearth::quantize_row_ref(hearth::GgmlType::Q8_0, src->data() + t * dim, want.data(), dim);
      ASSERT_EQ(0, std::memcmp(reinterpret_cast<const uint8_t*>(store->data()) + slots[t] * rb, want.data(),
                               static_cast<size_t>(rb)))
          << "token " << t;
      const auto back = dequant_row(*store, slots[t], dim);
      for (int64_t blk = 0; blk < dim / 32; ++blk) {
        float amax = 0.0f;
        for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs((*src)[t * dim + blk * 32 + j]));
        for (int64_t j = 0; j < 32; ++j) {
          const int64_t i = blk * 32 + j;
          ASSERT_NEAR(back[i], (*src)[t * dim + i], amax / 127 * 0.5f + amax * 1e-3f) << t << " " << i;
        }
      }
    }
  }
  // Slot 0 .. n-1 cover all but the last 26 rows of the 96: those keep their bytes.
  std::vector<bool> used(static_cast<size_t>(n_blocks * bs), false);
  for (const int32_t s : slots) used[s] = true;
  const auto* raw = reinterpret_cast<const uint8_t*>(a.k.data());
  float filler = -7.0f;
  for (int64_t r = 0; r < n_blocks * bs; ++r) {
    if (used[r]) continue;
    // Untouched rows still hold the -7.0f filler pattern (rows are 4-byte aligned here: 204 % 4 == 0).
    ASSERT_EQ(0, std::memcmp(raw + r * rb, &filler, sizeof filler)) << "row " << r;
  }
}

// Plain and AVX2 dequantization give the same bits (the AVX-512 loads are compared
// through the kernels below).
TEST(KvQ8, DequantizeAvx2EqualsPlain) {
  if (!cpu::cpu_features().avx2 || !cpu::cpu_features().f16c) GTEST_SKIP() << "no AVX2 / F16C";
  const int64_t dim = 256;
  const auto x = random_floats(dim, 5, 3.0f);
  std::vector<uint8_t> q(static_cast<size_t>(ops::kv_row_bytes(ops::KvType::Q8_0, dim)));
  cpu::quantize_row_q8_0(x.data(), q.data(), dim);
  std::vector<float> a(dim), b(dim);
  cpu::dequantize_row_q8_0(q.data(), a.data(), dim);
#if defined(__x86_64__)
  cpu::dequantize_row_q8_0_avx2(q.data(), b.data(), dim);
#else
  b = a;
#endif
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * dim));
}

// Every kernel over a q8_0 cache gives exactly the f32 kernel's result over an f32
// cache holding the dequantized values: the blocked AVX-512 kernel, the per-query ones
// (AVX-512 for head_dim % 64 == 0, else the AVX2 one with AVX2 dequantization), the
// plain kernels (reference_kernels), one thread, and the scalar reference. Prompts that
// span value chunks, decode rows, GQA ratios 1, 2, 4, shuffled tables.
TEST(KvQ8, AttentionEqualsF32OverDequantizedValues) {
  cpu::CpuBackend blocked(3), per_query(3), one_thread(1), plain(2, /*reference_kernels=*/true);
  per_query.set_attention_blocks(false);
  for (const int64_t head_dim : {32, 64, 96, 128, 256}) {
    for (const int64_t ratio : {1, 2, 4}) {
      const int64_t n_head_kv = 2, n_head = n_head_kv * ratio, dim = n_head_kv * head_dim, bs = 16;
      const std::vector<std::pair<int64_t, int64_t>> shape = {{0, 150}, {300, 20}, {400, 1}, {37, 1}, {90, 3}};
      int64_t n_blocks = 0;
      for (const auto& [p0, n] : shape) n_blocks += (p0 + n + bs - 1) / bs;
      Pool q8(ops::KvType::Q8_0, bs, n_blocks, dim), f32(ops::KvType::F32, bs, n_blocks, dim);
      const auto perm = shuffled_table(n_blocks, 11 + static_cast<uint32_t>(head_dim + ratio));
      std::vector<std::vector<int32_t>> tables;
      std::vector<ops::AttentionSeq> seqs;
      int64_t used = 0, rows = 0;
      for (size_t s = 0; s < shape.size(); ++s) {
        const auto [p0, n] = shape[s];
        const int64_t nb = (p0 + n + bs - 1) / bs;
        tables.emplace_back(perm.begin() + used, perm.begin() + used + nb);
        used += nb;
        const auto slots = slots_of(tables.back(), bs, p0 + n);
        const auto ks = random_floats((p0 + n) * dim, 50 + s, 1.5f), vs = random_floats((p0 + n) * dim, 60 + s);
        blocked.store_kv(ks.data(), vs.data(), p0 + n, dim, slots.data(), q8.layer());
        // The f32 cache: the same rows, dequantized.
        std::vector<float> kd, vd;
        for (int64_t t = 0; t < p0 + n; ++t) {
          const auto kr = dequant_row(q8.k, slots[t], dim), vr = dequant_row(q8.v, slots[t], dim);
          kd.insert(kd.end(), kr.begin(), kr.end());
          vd.insert(vd.end(), vr.begin(), vr.end());
        }
        blocked.store_kv(kd.data(), vd.data(), p0 + n, dim, slots.data(), f32.layer());
      }
      for (size_t s = 0; s < shape.size(); ++s) {
        seqs.push_back({rows, shape[s].second, shape[s].first, tables[s].data()});
        rows += shape[s].second;
      }
      const auto q = random_floats(rows * n_head * head_dim, 70, ratio == 4 ? 12.0f : 0.3f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const auto n_seqs = static_cast<int64_t>(seqs.size());
      const std::string what = "head_dim " + std::to_string(head_dim) + " ratio " + std::to_string(ratio);
      std::vector<float> want(q.size());
      blocked.attention(q.data(), f32.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, want.data());
      for (cpu::CpuBackend* be : {&blocked, &per_query, &one_thread, &plain}) {
        std::vector<float> got(q.size(), -1.0f);
        be->attention(q.data(), q8.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, got.data());
        ASSERT_EQ(got, want) << what << " back-end " << be->name();
      }
      if (head_dim <= 64) {  // the scalar reference is slow
        std::vector<float> r(q.size());
        cpu::ref::attention(q.data(), q8.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, r.data());
        ASSERT_EQ(r, want) << what << " reference";
      }
    }
  }
}

}  // namespace

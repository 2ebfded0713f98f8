// Paged attention on the CPU back-end: a cache scattered over shuffled blocks gives
// the same bits as a contiguous one; several sequences in one call give the same bits
// as each alone; the f16 cache's fast path equals its reference and stays close to f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels_ref.h"
#include "core/half.h"
#include "core/tune.h"

namespace {

namespace cpu = hearth::cpu;
namespace ops = hearth::ops;

using hearth::test::random_floats;

using Pool = hearth::test::KvTestPool;

// Writes positions [0, n) of one sequence with keys/values from kv_src rows through its table.
void fill(cpu::CpuBackend& be, Pool& p, const std::vector<int32_t>& table, const std::vector<float>& ks,
          const std::vector<float>& vs, int64_t n) {
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[i] = table[i / p.block_size] * static_cast<int32_t>(p.block_size) + i % p.block_size;
  be.store_kv(ks.data(), vs.data(), n, p.n_kv_dim, slots.data(), p.layer());
}

std::vector<int32_t> shuffled_table(int64_t n_blocks, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n_blocks));
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), std::mt19937(seed));
  return t;
}

TEST(PagedAttention, ShuffledBlocksEqualContiguous) {
  cpu::CpuBackend be(2);
  for (const int64_t head_dim : {32, 64}) {
    const int64_t n_head = 6, n_head_kv = 2, dim = n_head_kv * head_dim, bs = 16, n_blocks = 12, n_pos = 170;
    const auto ks = random_floats(n_pos * dim, 1, 2.0f), vs = random_floats(n_pos * dim, 2);
    Pool contiguous(ops::KvType::F32, bs, n_blocks, dim), paged(ops::KvType::F32, bs, n_blocks, dim);
    std::vector<int32_t> ident(n_blocks);
    std::iota(ident.begin(), ident.end(), 0);
    const auto table = shuffled_table(n_blocks, 3);
    fill(be, contiguous, ident, ks, vs, n_pos);
    fill(be, paged, table, ks, vs, n_pos);
    for (const auto& [n_tokens, pos0] : {std::pair<int64_t, int64_t>{1, 0}, {1, 100}, {30, 0}, {20, 150}}) {
      const auto q = random_floats(n_tokens * n_head * head_dim, 4, 0.6f);
      std::vector<float> a(q.size()), b(q.size()), c(q.size());
      const ops::AttentionSeq s1{0, n_tokens, pos0, ident.data()}, s2{0, n_tokens, pos0, table.data()};
      be.attention(q.data(), contiguous.layer(), &s1, 1, n_head, n_head_kv, head_dim, 0.2f, a.data());
      be.attention(q.data(), paged.layer(), &s2, 1, n_head, n_head_kv, head_dim, 0.2f, b.data());
      cpu::ref::attention(q.data(), paged.layer(), &s2, 1, n_head, n_head_kv, head_dim, 0.2f, c.data());
      EXPECT_EQ(a, b) << "head_dim " << head_dim << " n_tokens " << n_tokens << " pos0 " << pos0;
      EXPECT_EQ(a, c) << "head_dim " << head_dim << " n_tokens " << n_tokens << " pos0 " << pos0;
    }
  }
}

// Three sequences with their own tables, positions and query counts in one call: each
// gets exactly what it gets alone.
TEST(PagedAttention, BatchOfSequencesEqualsEachAlone) {
  cpu::CpuBackend be(3);
  for (const ops::KvType type : {ops::KvType::F32, ops::KvType::F16}) {
    const int64_t n_head = 9, n_head_kv = 3, head_dim = 64, dim = n_head_kv * head_dim, bs = 16;
    Pool pool(type, bs, 40, dim);
    const std::vector<std::vector<int32_t>> tables = {{5, 1, 9, 30, 2}, {7, 8}, {39, 0, 12, 13, 14, 3, 4}};
    const std::vector<int64_t> pos0 = {61, 0, 90}, n_tok = {1, 25, 7};
    for (size_t s = 0; s < tables.size(); ++s) {
      const int64_t n = pos0[s] + n_tok[s];
      fill(be, pool, tables[s], random_floats(n * dim, 10 + s, 1.5f), random_floats(n * dim, 20 + s), n);
    }
    int64_t rows = 0;
    std::vector<ops::AttentionSeq> seqs;
    for (size_t s = 0; s < tables.size(); ++s) {
      seqs.push_back({rows, n_tok[s], pos0[s], tables[s].data()});
      rows += n_tok[s];
    }
    const auto q = random_floats(rows * n_head * head_dim, 30, 0.5f);
    std::vector<float> batched(q.size()), ref(q.size());
    be.attention(q.data(), pool.layer(), seqs.data(), 3, n_head, n_head_kv, head_dim, 0.125f, batched.data());
    cpu::ref::attention(q.data(), pool.layer(), seqs.data(), 3, n_head, n_head_kv, head_dim, 0.125f, ref.data());
    EXPECT_EQ(batched, ref) << ops::kv_type_name(type);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t off = seqs[s].first_row * n_head * head_dim, len = n_tok[s] * n_head * head_dim;
      ops::AttentionSeq alone = seqs[s];
      alone.first_row = 0;
      std::vector<float> one(static_cast<size_t>(len));
      be.attention(q.data() + off, pool.layer(), &alone, 1, n_head, n_head_kv, head_dim, 0.125f, one.data());
      EXPECT_EQ(one, std::vector<float>(batched.begin() + off, batched.begin() + off + len))
          << ops::kv_type_name(type) << " sequence " << s;
    }
  }
}

// An f16 cache holds the rounded values, and attention over it stays within f16 rounding
// of the f32 result.
TEST(PagedAttention, F16CacheRoundsAndStaysClose) {
  cpu::CpuBackend be(2);
  const int64_t n_head = 4, n_head_kv = 2, head_dim = 64, dim = n_head_kv * head_dim, bs = 16, n_pos = 80;
  const auto ks = random_floats(n_pos * dim, 41), vs = random_floats(n_pos * dim, 42);
  Pool p32(ops::KvType::F32, bs, 5, dim), p16(ops::KvType::F16, bs, 5, dim);
  const auto table = shuffled_table(5, 43);
  fill(be, p32, table, ks, vs, n_pos);
  fill(be, p16, table, ks, vs, n_pos);
  const auto* k16 = reinterpret_cast<const uint16_t*>(p16.k.data());
  for (int64_t i = 0; i < n_pos; ++i) {
    const int64_t row = table[i / bs] * bs + i % bs;
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(k16[row * dim + d], hearth::f32_to_f16(ks[i * dim + d]));
    }
  }
  const auto q = random_floats(3 * n_head * head_dim, 44);
  const ops::AttentionSeq seq{0, 3, n_pos - 3, table.data()};
  std::vector<float> a(q.size()), b(q.size()), c(q.size());
  be.attention(q.data(), p32.layer(), &seq, 1, n_head, n_head_kv, head_dim, 0.125f, a.data());
  be.attention(q.data(), p16.layer(), &seq, 1, n_head, n_head_kv, head_dim, 0.125f, b.data());
  cpu::ref::attention(q.data(), p16.layer(), &seq, 1, n_head, n_head_kv, head_dim, 0.125f, c.data());
  EXPECT_EQ(b, c);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-3) << i;
}

// The blocked kernel of the kernel table in use (queries of one KV head over a few rows
// share each key and value chunk) gives every query the bits of the per-query kernel and
// of the reference (head dims up to 128; the scalar reference is slow): prompts spanning
// several value chunks (256 keys) and row blocks, decode rows next to prefill rows, the
// caches, head dims and GQA ratios given, shuffled block tables, scores near the max and far below it. And a sequence's result
// does not depend on what else runs with it (alone, the blocks are split differently)
// or on the thread count.
void check_blocked_kernel(const std::vector<ops::KvType>& types, const std::vector<int64_t>& head_dims,
                          const std::vector<int64_t>& ratios) {
  cpu::CpuBackend blocked(3), per_query(3), one_thread(1);
  per_query.set_attention_blocks(false);
  for (const ops::KvType type : types) {
    for (const int64_t head_dim : head_dims) {
      for (const int64_t ratio : ratios) {
        const int64_t n_head_kv = 2, n_head = n_head_kv * ratio, dim = n_head_kv * head_dim, bs = 32;
        // (pos0, n_tokens): long prefill from 0, prefill after a long prefix, decode rows, a short prefill
        const std::vector<std::pair<int64_t, int64_t>> shape = {{0, 290}, {537, 45}, {700, 1}, {130, 1}, {261, 3}};
        int64_t n_blocks = 0;
        for (const auto& [p0, n] : shape) n_blocks += (p0 + n + bs - 1) / bs;
        Pool pool(type, bs, n_blocks, dim);
        const auto perm = shuffled_table(n_blocks, 7 + static_cast<uint32_t>(ratio));
        std::vector<std::vector<int32_t>> tables;
        std::vector<ops::AttentionSeq> seqs;
        int64_t used = 0, rows = 0;
        for (size_t s = 0; s < shape.size(); ++s) {
          const auto [p0, n] = shape[s];
          const int64_t nb = (p0 + n + bs - 1) / bs;
          tables.emplace_back(perm.begin() + used, perm.begin() + used + nb);
          used += nb;
          fill(blocked, pool, tables.back(), random_floats((p0 + n) * dim, 50 + s, 1.5f),
               random_floats((p0 + n) * dim, 60 + s), p0 + n);
        }
        for (size_t s = 0; s < shape.size(); ++s) {
          seqs.push_back({rows, shape[s].second, shape[s].first, tables[s].data()});
          rows += shape[s].second;
        }
        // ratio 4: large queries, so that score gaps pass 87 (softmax terms under 2^-126:
        // the kernel's scalar exp fallback)
        const auto q = random_floats(rows * n_head * head_dim, 70, ratio == 4 ? 12.0f : 0.3f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> a(q.size()), b(q.size()), c(q.size()), r(q.size());
        const auto n_seqs = static_cast<int64_t>(seqs.size());
        blocked.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, a.data());
        per_query.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, b.data());
        one_thread.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, c.data());
        const std::string what = std::string(ops::kv_type_name(type)) + " head_dim " + std::to_string(head_dim) +
                                 " ratio " + std::to_string(ratio);
        ASSERT_EQ(a, b) << what;
        ASSERT_EQ(a, c) << what;
        if (head_dim <= 128) {  // the scalar reference is slow
          cpu::ref::attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, r.data());
          ASSERT_EQ(a, r) << what;
        }
        for (size_t s = 0; s < seqs.size(); ++s) {
          const int64_t off = seqs[s].first_row * n_head * head_dim, len = seqs[s].n_tokens * n_head * head_dim;
          ops::AttentionSeq alone = seqs[s];
          alone.first_row = 0;
          std::vector<float> one(static_cast<size_t>(len));
          blocked.attention(q.data() + off, pool.layer(), &alone, 1, n_head, n_head_kv, head_dim, scale, one.data());
          ASSERT_EQ(one, std::vector<float>(a.begin() + off, a.begin() + off + len)) << what << " sequence " << s;
        }
      }
    }
  }
}

// The AVX-512 kernel where the machine has it.
TEST(PagedAttention, BlockedKernelEqualsPerQuery) {
  check_blocked_kernel({ops::KvType::F32, ops::KvType::F16}, {64, 256}, {1, 2, 4});
}

// The blocked AVX2 kernel (attention_avx2.cpp; cpu.isa=avx2, so also on AVX-512 machines)
// under the same checks: the bits of the per-query AVX2 kernel and of the reference, on
// f32, f16 and q8_0 caches, head dims 64, 128 (the 8B shape's) and 192 (no unrolled
// form), GQA ratios 1, 3 and 4 (four and three queries per pass over a key row, and a
// remainder of the value passes' six).
TEST(PagedAttention, Avx2BlockedKernelEqualsPerQuery) {
  const hearth::tune::Override isa(hearth::tune::kCpuIsa, 1);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2";
  ASSERT_STREQ(cpu::cpu_kernels(false).isa, "avx2");
  check_blocked_kernel({ops::KvType::F32, ops::KvType::F16, ops::KvType::Q8_0}, {64, 128, 192}, {1, 3, 4});
}

// A speculative verification's rows (BatchSeq::decode_rows): one-token sequences at
// consecutive rows and positions over one block table, a decode run. The blocked kernel
// takes a run's rows into shared blocks; every row must still give the bits of its own
// one-token step (the sequence alone at that position), of the per-query kernel and of the
// plain reference, on 1 and 3 threads, among other sequences: a decode row of another
// sequence, a prompt, and a run whose rows are not consecutive in position (no run).
TEST(PagedAttention, DecodeRunsEqualOneTokenSteps) {
  cpu::CpuBackend blocked(3), per_query(3), one_thread(1);
  per_query.set_attention_blocks(false);
  for (const ops::KvType type : {ops::KvType::F32, ops::KvType::F16, ops::KvType::Q8_0}) {
    for (const int64_t run_len : {2, 5, 9, 17}) {
      const int64_t head_dim = 64, n_head_kv = 3, n_head = 9, dim = n_head_kv * head_dim, bs = 16;
      const int64_t p0 = 411;  // the run's first position: rows see 412 .. 411 + run_len keys
      const int64_t n_pos = p0 + run_len, other = 300, prompt0 = 37, prompt_n = 6;
      const int64_t nb_run = (n_pos + bs - 1) / bs, nb_other = (other + 1 + bs - 1) / bs,
                    nb_prompt = (prompt0 + prompt_n + bs - 1) / bs;
      Pool pool(type, bs, nb_run + nb_other + nb_prompt, dim);
      const auto perm = shuffled_table(nb_run + nb_other + nb_prompt, 11 + static_cast<uint32_t>(run_len));
      const std::vector<int32_t> t_run(perm.begin(), perm.begin() + nb_run),
          t_other(perm.begin() + nb_run, perm.begin() + nb_run + nb_other),
          t_prompt(perm.begin() + nb_run + nb_other, perm.end());
      fill(blocked, pool, t_run, random_floats(n_pos * dim, 80, 1.5f), random_floats(n_pos * dim, 81), n_pos);
      fill(blocked, pool, t_other, random_floats((other + 1) * dim, 82, 1.5f), random_floats((other + 1) * dim, 83),
           other + 1);
      fill(blocked, pool, t_prompt, random_floats((prompt0 + prompt_n) * dim, 84, 1.5f),
           random_floats((prompt0 + prompt_n) * dim, 85), prompt0 + prompt_n);
      // Rows: another sequence's decode row, the run, a prompt, then two one-token rows of
      // the run's table at positions 3 apart (not a run).
      std::vector<ops::AttentionSeq> seqs;
      int64_t rows = 0;
      seqs.push_back({rows++, 1, other, t_other.data()});
      for (int64_t i = 0; i < run_len; ++i) seqs.push_back({rows++, 1, p0 + i, t_run.data()});
      seqs.push_back({rows, prompt_n, prompt0, t_prompt.data()});
      rows += prompt_n;
      seqs.push_back({rows++, 1, 100, t_run.data()});
      seqs.push_back({rows++, 1, 103, t_run.data()});
      const auto n_seqs = static_cast<int64_t>(seqs.size());
      std::vector<int32_t> run;
      cpu::decode_runs(seqs.data(), n_seqs, run);
      ASSERT_EQ(run[0], 1);
      ASSERT_EQ(run[1], run_len);
      for (int64_t i = 2; i <= run_len; ++i) ASSERT_EQ(run[static_cast<size_t>(i)], 0);
      ASSERT_EQ(run[static_cast<size_t>(run_len + 1)], 1);
      ASSERT_EQ(run[static_cast<size_t>(run_len + 2)], 1);
      ASSERT_EQ(run[static_cast<size_t>(run_len + 3)], 1);

      const auto q = random_floats(rows * n_head * head_dim, 86, 0.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      std::vector<float> a(q.size()), b(q.size()), c(q.size()), r(q.size());
      blocked.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, a.data());
      per_query.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, b.data());
      one_thread.attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, c.data());
      cpu::ref::attention(q.data(), pool.layer(), seqs.data(), n_seqs, n_head, n_head_kv, head_dim, scale, r.data());
      const std::string what = std::string(ops::kv_type_name(type)) + " run of " + std::to_string(run_len);
      ASSERT_EQ(a, b) << what;
      ASSERT_EQ(a, c) << what;
      ASSERT_EQ(a, r) << what;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t off = seqs[s].first_row * n_head * head_dim, len = seqs[s].n_tokens * n_head * head_dim;
        ops::AttentionSeq alone = seqs[s];
        alone.first_row = 0;
        std::vector<float> one(static_cast<size_t>(len));
        blocked.attention(q.data() + off, pool.layer(), &alone, 1, n_head, n_head_kv, head_dim, scale, one.data());
        ASSERT_EQ(one, std::vector<float>(a.begin() + off, a.begin() + off + len)) << what << " sequence " << s;
      }
    }
  }
}

// The AVX2 kernel table (cpu.isa=avx2, so also on AVX-512 machines): its per-query kernel
// reads f16 and q8_0 rows in its loads for head dims that are multiples of 64 (decode),
// and attends f32 rows (prompts over a converted cache); every output equals the plain
// reference bit for bit. Decode rows of several sequences, a prompt after a prefix, GQA
// ratios 1 and 3, head dims 64, 128, 256 and 32 (the generic path), shuffled tables,
// large queries (softmax terms far below the max).
TEST(PagedAttention, Avx2KernelEqualsReference) {
  const hearth::tune::Override isa(hearth::tune::kCpuIsa, 1);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2";
  cpu::CpuBackend be(2);
  ASSERT_STREQ(cpu::cpu_kernels(false).isa, "avx2");
  for (const ops::KvType type : {ops::KvType::F32, ops::KvType::F16, ops::KvType::Q8_0}) {
    for (const int64_t head_dim : {32, 64, 128, 256}) {
      for (const int64_t ratio : {1, 3}) {
        const int64_t n_head_kv = 2, n_head = n_head_kv * ratio, dim = n_head_kv * head_dim, bs = 16;
        // decode rows of three sequences (one of them alone below), then a prompt after a prefix
        const std::vector<std::pair<int64_t, int64_t>> shape = {{300, 1}, {0, 1}, {77, 1}, {40, 37}};
        int64_t n_blocks = 0;
        for (const auto& [p0, n] : shape) n_blocks += (p0 + n + bs - 1) / bs;
        Pool pool(type, bs, n_blocks, dim);
        const auto perm = shuffled_table(n_blocks, 90 + static_cast<uint32_t>(head_dim + ratio));
        std::vector<std::vector<int32_t>> tables;
        int64_t used = 0;
        for (size_t s = 0; s < shape.size(); ++s) {
          const auto [p0, n] = shape[s];
          const int64_t nb = (p0 + n + bs - 1) / bs;
          tables.emplace_back(perm.begin() + used, perm.begin() + used + nb);
          used += nb;
          fill(be, pool, tables.back(), random_floats((p0 + n) * dim, 80 + s, 1.5f), random_floats((p0 + n) * dim, 85 + s),
               p0 + n);
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const std::string what = std::string(ops::kv_type_name(type)) + " head_dim " + std::to_string(head_dim) +
                                 " ratio " + std::to_string(ratio);
        // the decode rows together, then the prompt alone
        std::vector<ops::AttentionSeq> dec;
        for (int64_t s = 0; s < 3; ++s) dec.push_back({s, 1, shape[s].first, tables[s].data()});
        for (const float qs : {0.3f, 12.0f}) {
          const auto q = random_floats(3 * n_head * head_dim, 95, qs);
          std::vector<float> a(q.size()), r(q.size());
          be.attention(q.data(), pool.layer(), dec.data(), 3, n_head, n_head_kv, head_dim, scale, a.data());
          cpu::ref::attention(q.data(), pool.layer(), dec.data(), 3, n_head, n_head_kv, head_dim, scale, r.data());
          ASSERT_EQ(a, r) << what << " decode, query scale " << qs;
          const ops::AttentionSeq prompt{0, shape[3].second, shape[3].first, tables[3].data()};
          const auto qp = random_floats(shape[3].second * n_head * head_dim, 96, qs);
          std::vector<float> b(qp.size()), rb(qp.size());
          be.attention(qp.data(), pool.layer(), &prompt, 1, n_head, n_head_kv, head_dim, scale, b.data());
          cpu::ref::attention(qp.data(), pool.layer(), &prompt, 1, n_head, n_head_kv, head_dim, scale, rb.data());
          ASSERT_EQ(b, rb) << what << " prompt, query scale " << qs;
        }
      }
    }
  }
}

}  // namespace

// Not a check: the time of one prompt's attention (the 1.7B shape's layer: 16 query heads,
// 8 KV heads, head_dim 128, f16 cache, 512 tokens from position 0) on 1 and 2 threads, best
// of 5, blocked and per query, by backend_attention_test --gtest_also_run_disabled_tests
// --gtest_filter=*AttentionSpeed* (ATTENTION_SPEED_ISA=avx2: the AVX2 kernels on an
// AVX-512 machine; ATTENTION_SPEED_HEADS=32: the 8B shape's 32 query heads).
TEST(PagedAttention, DISABLED_AttentionSpeed) {
  if (const char* isa = std::getenv("ATTENTION_SPEED_ISA")) hearth::tune::set("cpu.isa", isa);
  const char* heads = std::getenv("ATTENTION_SPEED_HEADS");
  const int64_t n_head = heads != nullptr ? std::atoi(heads) : 16, n_head_kv = 8, head_dim = 128, dim = n_head_kv * head_dim,
                bs = 32, n = 512;
  cpu::CpuBackend be1(1), be2(2), pq1(1);
  pq1.set_attention_blocks(false);
  std::printf("kernels: %s\n", cpu::cpu_kernels(false).isa);
  Pool pool(ops::KvType::F16, bs, n / bs, dim);
  std::vector<int32_t> table(static_cast<size_t>(n / bs));
  std::iota(table.begin(), table.end(), 0);
  fill(be1, pool, table, random_floats(n * dim, 1, 1.5f), random_floats(n * dim, 2), n);
  const auto q = random_floats(n * n_head * head_dim, 3, 0.5f);
  std::vector<float> out(q.size());
  const ops::AttentionSeq seq{0, n, 0, table.data()};
  for (cpu::CpuBackend* be : {&pq1, &be1, &be2}) {
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      be->attention(q.data(), pool.layer(), &seq, 1, n_head, n_head_kv, head_dim, 0.088f, out.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double macs = 2.0 * n_head * head_dim * (n * (n + 1) / 2.0);
    std::printf("%s, %d thread(s): %.2f ms, %.1f GMAC/s\n", be == &pq1 ? "per query" : "blocked", be->n_threads(),
                best * 1e3, macs / best / 1e9);
  }
  // One decode row after the 511 keys (the time of a decode step's attention in this layer).
  const ops::AttentionSeq dec{0, 1, n - 1, table.data()};
  for (cpu::CpuBackend* be : {&pq1, &be1}) {
    double best = 1e9;
    for (int r = 0; r < 200; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      be->attention(q.data(), pool.layer(), &dec, 1, n_head, n_head_kv, head_dim, 0.088f, out.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("decode row at %lld keys, %s, 1 thread: %.1f us\n", static_cast<long long>(n),
                be == &pq1 ? "per query" : "blocked", best * 1e6);
  }
}

// Decode runs (speculative verification) on the default model's shape (9 heads, 3 KV heads
// of 64, f16 cache, 400 keys): a run of R rows against R one-token steps, best of 50.
TEST(PagedAttention, DISABLED_DecodeRunSpeed) {
  const int64_t n_head = 9, n_head_kv = 3, head_dim = 64, dim = n_head_kv * head_dim, bs = 16, p0 = 400;
  for (const int threads : {1, 2}) {
    cpu::CpuBackend be(threads);
    Pool pool(ops::KvType::F16, bs, (p0 + 16) / bs + 1, dim);
    std::vector<int32_t> table(static_cast<size_t>((p0 + 16) / bs + 1));
    std::iota(table.begin(), table.end(), 0);
    fill(be, pool, table, random_floats((p0 + 16) * dim, 1, 1.5f), random_floats((p0 + 16) * dim, 2), p0 + 16);
    const auto q = random_floats(16 * n_head * head_dim, 3, 0.5f);
    std::vector<float> out(q.size());
    for (const int64_t rows : {1, 2, 3, 5, 9}) {
      std::vector<ops::AttentionSeq> seqs;
      for (int64_t i = 0; i < rows; ++i) seqs.push_back({i, 1, p0 + i, table.data()});
      double best_run = 1e9, best_steps = 1e9;
      for (int r = 0; r < 50; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        be.attention(q.data(), pool.layer(), seqs.data(), rows, n_head, n_head_kv, head_dim, 0.125f, out.data());
        best_run = std::min(best_run, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < rows; ++i) {
          ops::AttentionSeq one = seqs[static_cast<size_t>(i)];
          one.first_row = 0;
          be.attention(q.data() + i * n_head * head_dim, pool.layer(), &one, 1, n_head, n_head_kv, head_dim, 0.125f,
                       out.data());
        }
        best_steps = std::min(best_steps, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%d thread(s), %2lld rows: run %.1f us, %lld one-token steps %.1f us\n", threads,
                  static_cast<long long>(rows), best_run * 1e6, static_cast<long long>(rows), best_steps * 1e6);
    }
  }
}

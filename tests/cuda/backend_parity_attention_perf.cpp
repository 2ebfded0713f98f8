// Decode attention on the GPU at long contexts and in batches, timed (HEARTH_PARITY_PERF=1;
// skipped otherwise): the models' head layouts over f16 paged caches, one row 32,768 keys
// deep and 64 rows of 640 keys, each checked once against the CPU back-end, then the mean
// of 50 back-to-back calls and the KV bytes they read a call, as a rate.
#include <chrono>

#include "parity_common.h"

namespace parity {
namespace {

struct PerfCase {
  const char* name;
  int64_t n_head, n_head_kv, head_dim;
};

void time_decode(const PerfCase& pc, int64_t n_rows, int64_t depth) {
  const int64_t bs = 16, kvd = pc.n_head_kv * pc.head_dim;
  const int64_t per_seq = (depth + 1 + bs - 1) / bs;
  const int64_t n_blocks = per_seq * n_rows;
  const int64_t floats = (n_blocks * bs * kvd * ops::kv_type_size(ops::KvType::F16) + 3) / 4;
  Both K(floats, true), V(floats, true);
  const ops::KvLayer kc{K.c->data(), V.c->data(), ops::KvType::F16, bs, kvd};
  const ops::KvLayer kg{K.g->data(), V.g->data(), ops::KvType::F16, bs, kvd};
  // Each sequence its own blocks of a shuffled pool (as after a while of serving).
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  std::vector<ops::AttentionSeq> seqs;
  for (int64_t s = 0; s < n_rows; ++s) {
    seqs.push_back({s, 1, depth, pool.data() + s * per_seq});
    // The cache of every position the row sees, in pieces of at most 4,096 keys.
    for (int64_t p0 = 0; p0 <= depth; p0 += 4096) {
      const int64_t n = std::min<int64_t>(4096, depth + 1 - p0);
      std::vector<int32_t> slots(static_cast<size_t>(n));
      for (int64_t p = 0; p < n; ++p) {
        slots[p] = pool[s * per_seq + (p0 + p) / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>((p0 + p) % bs);
      }
      const auto seed = static_cast<uint32_t>(s * 1000 + p0 / 4096);
      Both k(randn(static_cast<size_t>(n * kvd), 30 + seed)), v(randn(static_cast<size_t>(n * kvd), 60 + seed));
      cpu().store_kv(k.c->data(), v.c->data(), n, kvd, slots.data(), kc);
      gpu().store_kv(k.g->data(), v.g->data(), n, kvd, slots.data(), kg);
    }
  }
  Both q(randn(static_cast<size_t>(n_rows * pc.n_head * pc.head_dim), 99, 2.0f)), out(n_rows * pc.n_head * pc.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(pc.head_dim));
  const auto ns = static_cast<int64_t>(seqs.size());
  cpu().attention(q.c->data(), kc, seqs.data(), ns, pc.n_head, pc.n_head_kv, pc.head_dim, scale, out.c->data());
  gpu().attention(q.g->data(), kg, seqs.data(), ns, pc.n_head, pc.n_head_kv, pc.head_dim, scale, out.g->data());
  const double e = out.err();
  EXPECT_LE(e, 2e-5) << pc.name;
  float sink = 0.0f;
  const int reps = 50;
  for (int w = 0; w < 5; ++w) {
    gpu().attention(q.g->data(), kg, seqs.data(), ns, pc.n_head, pc.n_head_kv, pc.head_dim, scale, out.g->data());
  }
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    gpu().attention(q.g->data(), kg, seqs.data(), ns, pc.n_head, pc.n_head_kv, pc.head_dim, scale, out.g->data());
  }
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  const double bytes = 2.0 * static_cast<double>(n_rows) * static_cast<double>(depth + 1) * static_cast<double>(kvd) * 2.0;
  std::printf("attention perf %-10s %2lld rows x %6lld keys: %8.1f us a call, %6.1f MB of KV, %5.2f TB/s (err %.2g)\n",
              pc.name, static_cast<long long>(n_rows), static_cast<long long>(depth + 1), us, bytes / 1e6,
              bytes / us / 1e6, e);
}

TEST(CudaPerf, AttentionDecode) {
  NEED_GPU();
  const char* on = std::getenv("HEARTH_PARITY_PERF");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "HEARTH_PARITY_PERF=1 times decode attention";
  for (const PerfCase& pc : {PerfCase{"llama3-8b", 32, 8, 128}, PerfCase{"qwen35-9b", 16, 4, 256},
                             PerfCase{"qwen35-35b", 16, 2, 256}}) {
    time_decode(pc, 1, 32767);
    time_decode(pc, 1, 4095);
    time_decode(pc, 64, 639);
  }
}

}  // namespace
}  // namespace parity

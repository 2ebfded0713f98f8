// The CUDA back-end's deterministic mode (`--deterministic`, Backend::set_deterministic):
// a row's results must be the same bits whatever else the call holds — one token alone,
// in a batch of 5, 9, 64, 260 or 300, a decode row beside prompts, the last row of a prompt chunk
// instead of a decode step, a token of a prompt-sized MoE batch. Each test also reports
// whether the default (fast) mode differs for the same rows, which it may.
#include <tuple>

#include "parity_common.h"

namespace {

using namespace parity;

// The GPU's batch-invariant kernels, on for one test.
struct DeterministicOn {
  DeterministicOn() { EXPECT_TRUE(gpu().set_deterministic(true)); }
  ~DeterministicOn() { gpu().set_deterministic(false); }
};

std::vector<uint32_t> bits(const std::vector<float>& f, size_t off, size_t n) {
  std::vector<uint32_t> u(n);
  std::memcpy(u.data(), f.data() + off, 4 * n);
  return u;
}

std::vector<float> slice(const std::vector<float>& v, int64_t off, int64_t n) {
  return {v.begin() + off, v.begin() + off + n};
}

// Rows t0 .. t0 + n - 1 of an 80- or 300-token product, computed again as their own batch.
struct SubBatch {
  int64_t t0, n;
};
constexpr SubBatch kSubs[] = {{0, 1}, {37, 1}, {69, 1}, {3, 5}, {10, 8}, {20, 9}, {5, 64}};
constexpr SubBatch kLongSubs[] = {{0, 1}, {299, 1}, {3, 5}, {20, 9}, {5, 64}, {40, 260}};

// Every type at two shapes; Q4_K also at shapes whose q8_gemm column splits are 1, 2 and 4
// (8 at 1088 x 4096).
TEST(CudaDeterministic, MatmulRowsAreTheSameInAnyBatch) {
  NEED_GPU();
  const int64_t N = 300;
  std::vector<std::tuple<GgmlType, int64_t, int64_t>> cases;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1088, 4096}, {384, 1024}}) {
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q8_0, GgmlType::Q4_0,
                          GgmlType::Q3_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
      cases.emplace_back(type, rows, cols);
    }
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8192, 512}, {16384, 1024}, {4096, 2048}}) {
    cases.emplace_back(GgmlType::Q4_K, rows, cols);
  }
  for (const auto& [type, rows, cols] : cases) {
    const auto w = make_weight(type, randn(static_cast<size_t>(rows * cols), 11, 0.5f), rows, cols);
    const auto x = randn(static_cast<size_t>(N * cols), 7);
    int differ_default = 0;
    for (bool det : {false, true}) {
      const std::unique_ptr<DeterministicOn> on = det ? std::make_unique<DeterministicOn>() : nullptr;
      Both xb(x), yb(N * rows);
      gpu().matmul(w->g, xb.g->data(), N, yb.g->data());
      const std::vector<float> all = yb.gv();
      for (const SubBatch& sb : kLongSubs) {
        Both xs(slice(x, sb.t0 * cols, sb.n * cols)), ys(sb.n * rows);
        gpu().matmul(w->g, xs.g->data(), sb.n, ys.g->data());
        const bool same = bits(ys.gv(), 0, static_cast<size_t>(sb.n * rows)) ==
                          bits(all, static_cast<size_t>(sb.t0 * rows), static_cast<size_t>(sb.n * rows));
        if (det) {
          EXPECT_TRUE(same) << hearth::ggml_type_name(type) << " [" << rows << "x" << cols << "] tokens " << sb.t0
                            << ".." << sb.t0 + sb.n - 1 << " alone differ from the same rows of " << N;
        } else {
          differ_default += same ? 0 : 1;
        }
      }
    }
    std::cout << "deterministic matmul " << hearth::ggml_type_name(type) << " [" << rows << "x" << cols
              << "]: default mode differs in " << differ_default << " of " << std::size(kLongSubs) << " sub-batches\n";
  }
}

// One KV layer on the GPU holding random keys and values for positions 0 .. 5,100 of
// three sequences (blocks of 16, shuffled).
struct GpuCache {
  static constexpr int64_t kBs = 16, kLen = 5104, kSeqs = 3;
  int64_t kvd;
  ops::KvType type;
  std::unique_ptr<ops::Buffer> k, v;
  std::vector<std::vector<int32_t>> tables;
  GpuCache(int64_t kv_dim, ops::KvType t) : kvd(kv_dim), type(t) {
    const int64_t per = kLen / kBs, n_blocks = per * kSeqs;
    const int64_t floats = (n_blocks * kBs * kvd * ops::kv_type_size(t) + 3) / 4;
    k = gpu().alloc(floats);
    v = gpu().alloc(floats);
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(9));
    for (int64_t s = 0; s < kSeqs; ++s) {
      tables.emplace_back(pool.begin() + s * per, pool.begin() + (s + 1) * per);
      std::vector<int32_t> slots(static_cast<size_t>(kLen));
      for (int64_t p = 0; p < kLen; ++p) {
        slots[p] = tables[s][p / kBs] * static_cast<int32_t>(kBs) + static_cast<int32_t>(p % kBs);
      }
      const auto kv = randn(static_cast<size_t>(kLen * kvd), 30 + static_cast<uint32_t>(s));
      const auto vv = randn(static_cast<size_t>(kLen * kvd), 60 + static_cast<uint32_t>(s));
      auto kb = gpu().alloc(kLen * kvd), vb = gpu().alloc(kLen * kvd);
      gpu().copy_from_host(kv.data(), kLen * kvd, *kb, 0);
      gpu().copy_from_host(vv.data(), kLen * kvd, *vb, 0);
      gpu().store_kv(kb->data(), vb->data(), kLen, kvd, slots.data(), layer());
    }
  }
  ops::KvLayer layer() const { return ops::KvLayer{k->data(), v->data(), type, kBs, kvd}; }
};

// A query row: sequence `seq` at position `pos`, its values drawn from (seq, pos).
std::vector<float> query_row(int64_t seq, int64_t pos, int64_t width) {
  return randn(static_cast<size_t>(width), 1000 + static_cast<uint32_t>(seq * 10007 + pos), 2.0f);
}

// Runs attention for `seqs` (block tables from the cache; rows' queries from query_row)
// and returns the output rows.
std::vector<float> attend(const GpuCache& c, std::vector<ops::AttentionSeq> seqs, const std::vector<int64_t>& seq_ids,
                          int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
  const int64_t width = n_head * head_dim;
  int64_t rows = 0;
  for (const auto& s : seqs) rows = std::max(rows, s.first_row + s.n_tokens);
  std::vector<float> q(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].block_table = c.tables[static_cast<size_t>(seq_ids[i])].data();
    for (int64_t t = 0; t < seqs[i].n_tokens; ++t) {
      const auto r = query_row(seq_ids[i], seqs[i].pos0 + t, width);
      std::copy(r.begin(), r.end(), q.begin() + (seqs[i].first_row + t) * width);
    }
  }
  auto qb = gpu().alloc(rows * width), ob = gpu().alloc(rows * width);
  gpu().copy_from_host(q.data(), rows * width, *qb, 0);
  gpu().attention(qb->data(), c.layer(), seqs.data(), static_cast<int64_t>(seqs.size()), n_head, n_head_kv, head_dim,
                  1.0f / std::sqrt(static_cast<float>(head_dim)), ob->data());
  std::vector<float> out(static_cast<size_t>(rows * width));
  gpu().copy_to_host(*ob, 0, rows * width, out.data());
  return out;
}

TEST(CudaDeterministic, AttentionRowsAreTheSameInAnyBatch) {
  NEED_GPU();
  struct Case {
    int64_t n_head, n_head_kv, head_dim;
    ops::KvType type;
  };
  for (const Case& ac : {Case{32, 8, 128, ops::KvType::F16}, Case{16, 2, 256, ops::KvType::F16},
                         Case{9, 3, 64, ops::KvType::F16}, Case{8, 8, 80, ops::KvType::F32}}) {
    const GpuCache cache(ac.n_head_kv * ac.head_dim, ac.type);
    const int64_t width = ac.n_head * ac.head_dim;
    int differ_default = 0, checks = 0;
    for (bool det : {false, true}) {
      const std::unique_ptr<DeterministicOn> on = det ? std::make_unique<DeterministicOn>() : nullptr;
      auto run = [&](std::vector<ops::AttentionSeq> seqs, std::vector<int64_t> ids) {
        return attend(cache, std::move(seqs), ids, ac.n_head, ac.n_head_kv, ac.head_dim);
      };
      // Sequence 0 decoding at position 300 and sequence 1 at 5,000, each alone.
      const auto a = run({{0, 1, 300, nullptr}}, {0});
      const auto c = run({{0, 1, 5000, nullptr}}, {1});
      // Together, beside a 50-row prompt of sequence 2 and after it.
      const auto mixed = run({{0, 50, 0, nullptr}, {50, 1, 300, nullptr}, {51, 1, 5000, nullptr}}, {2, 0, 1});
      // Position 300 as the last row of an 11-row chunk (a prompt whose first 290 tokens
      // came from the prefix cache), and 5,000 as row 3 of a 6-row chunk.
      const auto chunk = run({{0, 11, 290, nullptr}, {11, 6, 4997, nullptr}}, {0, 1});
      const std::pair<std::vector<float>, int64_t> alone[] = {{a, 0}, {a, 0}, {c, 0}, {c, 0}};
      const std::pair<const std::vector<float>*, int64_t> in_batch[] = {{&mixed, 50}, {&chunk, 10}, {&mixed, 51}, {&chunk, 14}};
      for (int i = 0; i < 4; ++i) {
        const bool same = bits(alone[i].first, 0, static_cast<size_t>(width)) ==
                          bits(*in_batch[i].first, static_cast<size_t>(in_batch[i].second * width),
                               static_cast<size_t>(width));
        if (det) {
          EXPECT_TRUE(same) << "attention " << ac.n_head << "/" << ac.n_head_kv << "x" << ac.head_dim << " "
                            << ops::kv_type_name(ac.type) << " check " << i;
          ++checks;
        } else {
          differ_default += same ? 0 : 1;
        }
      }
    }
    std::cout << "deterministic attention " << ac.n_head << "/" << ac.n_head_kv << "x" << ac.head_dim << " "
              << ops::kv_type_name(ac.type) << ": " << checks << " rows checked; default mode differs in "
              << differ_default << "\n";
  }
}

TEST(CudaDeterministic, MoeRowsAreTheSameInAnyBatch) {
  NEED_GPU();
  const int64_t X = 16, K = 4, E = 512, F = 256, N = 80;
  const auto router = make_weight(GgmlType::F32, randn(static_cast<size_t>(X * E), 71, 0.05f), X, E);
  const auto gate = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(X * F * E), 72, 0.5f), X * F, E);
  const auto up = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(X * F * E), 73, 0.5f), X * F, E);
  const auto down = make_weight(GgmlType::Q6_K, randn(static_cast<size_t>(X * E * F), 74, 0.5f), X * E, F);
  const ops::MoeLayer L = gpu_moe_layer(*router, *gate, *up, *down, X, K, E, F);
  const auto x = randn(static_cast<size_t>(N * E), 81);
  int differ_default = 0;
  for (bool det : {false, true}) {
    const std::unique_ptr<DeterministicOn> on = det ? std::make_unique<DeterministicOn>() : nullptr;
    Both xb(x), out(N * E);
    gpu().moe_ffn(L, xb.g->data(), N, out.g->data());
    const std::vector<float> all = out.gv();
    for (const SubBatch& sb : kSubs) {
      Both xs(slice(x, sb.t0 * E, sb.n * E)), ys(sb.n * E);
      gpu().moe_ffn(L, xs.g->data(), sb.n, ys.g->data());
      const bool same = bits(ys.gv(), 0, static_cast<size_t>(sb.n * E)) ==
                        bits(all, static_cast<size_t>(sb.t0 * E), static_cast<size_t>(sb.n * E));
      if (det) {
        EXPECT_TRUE(same) << "moe_ffn tokens " << sb.t0 << ".." << sb.t0 + sb.n - 1;
      } else {
        differ_default += same ? 0 : 1;
      }
    }
  }
  std::cout << "deterministic moe_ffn: default mode differs in " << differ_default << " of " << std::size(kSubs)
            << " sub-batches\n";
}

}  // namespace

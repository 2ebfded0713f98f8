// The walk of the blocked prompt/decode attention kernels (attention_avx2.cpp,
// attention_avx512.cpp) over one block of queries (the query heads of one KV head over a
// few consecutive rows of one sequence, attention.h's AttnBlock) and its keys, read
// through the paged cache's key offsets, once: each file's kernel policy K does the
// vector work, the walk decides which keys go where in which order.
//   - scores: the keys every row of the block sees (j < nk0), K::kTile at a time for all
//     queries (K::score_tile: scores and each query's kTile lanes of running max); then
//     key by key (K::score_key) the tail and the causal triangle of a prompt block (row r
//     sees keys < nk0 + r); each query's max over its scores (NaN ignored, as fmax does);
//   - softmax: per query (K::softmax);
//   - value sum: key j goes to lane j % n_lanes, each lane adds its keys in ascending
//     order. Keys in chunks of kValueChunk (a multiple of n_lanes), each query's lane
//     accumulators kept in its acc buffer between chunks (stored and reloaded: exact);
//     within a chunk each value row is loaded once for up to K::kValueGroup queries
//     (K::add_values: qt of them); then each row's keys of the causal triangle (K::add_value_one);
//   - lane sums: per query (K::sum_lanes).
// x86-64 only (included by the *_avx2 / *_avx512 files alone). Nothing here has a target
// attribute or a vector type: the templates are always_inline, so they exist only inside
// each file's entry point (its instruction set's target, flatten), compiled for that
// instruction set, with K's kernels inlined into them there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <immintrin.h>  // _mm_prefetch, _mm_max_ss: SSE, baseline x86-64

#include "backends/cpu/attention.h"
#include "backends/cpu/kv_q8.h"
#include "backends/cpu/kv_rows.h"
#include "ops/backend.h"

#define HEARTH_WALK_INLINE __attribute__((always_inline)) inline

namespace hearth::cpu::block_walk {

// Keys per value chunk: a multiple of 64 (the most lanes); 256 keys of head_dim 256 are
// 128 KiB of f16 values (256 KiB f32), in L2 while every query of the block adds them.
constexpr int64_t kValueChunk = 256;
// Keys ahead whose rows the key-by-key score loop prefetches.
constexpr int64_t kKeyAhead = 4;

// Prefetches the cache lines of one K or V row of n elements.
template <int kHint, class T>
HEARTH_WALK_INLINE void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}
template <int kHint>
HEARTH_WALK_INLINE void prefetch_row(Q8Ptr row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row.row);
  const int64_t bytes = ops::kv_row_bytes(ops::KvType::Q8_0, n);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}

// std::fmax(m, s) for a running maximum m that is never NaN: a NaN score leaves it alone
// (maxss returns its second operand then), without a libm call per key.
HEARTH_WALK_INLINE float max_ignoring_nan(float m, float s) {
  return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(s), _mm_set_ss(m)));
}

// What K's score kernels see of one block: query i (i = r * nh + g: row r, head g) reads
// qp[i], writes its score of key j to scores[i * scs + j]; mx[i]: its running max (the
// key-by-key scores raise it), run + K::kTile * i: its lanes of running max over the tiles.
struct Block {
  const float* const* qp;
  int64_t nq, nh, n_rows, hd;
  float scale;
  float* scores;
  int64_t scs;
  float* mx;
  float* run;
  float* ktile;  // K::kKeyRows * hd floats: key rows converted to f32
  float* h;      // K::kHPerQuery floats per query: K's partial sums
};

struct Scratch {
  std::vector<float> scores, acc, max_s, ktile, run, ptile, h;
  std::vector<const float*> qp;
  int64_t sc_stride = 0, acc_stride = 0;
};

// K::add_values<qt>(...) for qt in [1, K::kValueGroup], kValueGroup <= 8: a switch (an
// if-chain here made GCC allocate the registers of the flattened AVX2 kernel worse).
template <class K, class V>
HEARTH_WALK_INLINE void add_values(int64_t qt, const V& vr, int64_t j0, int64_t j1, int64_t n_lanes, int64_t hd,
                                   const float* pt, float* const* qa) {
  static_assert(K::kValueGroup >= 1 && K::kValueGroup <= 8);
  constexpr int G = K::kValueGroup;
  switch (qt) {
    case 8: if constexpr (G >= 8) K::template add_values<8>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 7: if constexpr (G >= 7) K::template add_values<7>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 6: if constexpr (G >= 6) K::template add_values<6>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 5: if constexpr (G >= 5) K::template add_values<5>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 4: if constexpr (G >= 4) K::template add_values<4>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 3: if constexpr (G >= 3) K::template add_values<3>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    case 2: if constexpr (G >= 2) K::template add_values<2>(vr, j0, j1, n_lanes, hd, pt, qa); break;
    default: K::template add_values<1>(vr, j0, j1, n_lanes, hd, pt, qa); break;
  }
}

// One block. kr / vr: this KV head's key / value rows (KvRowsOffF32, KvRowsOffRawF16 or
// KvRowsOffRawQ8).
template <class K, class KV>
HEARTH_WALK_INLINE void attend_block(const AttendArgs& a, const AttnBlock& b, const KV& kr, const KV& vr, Scratch& s) {
  const ops::AttentionSeq& sq = a.seqs[b.seq];
  const int64_t hd = a.head_dim, nh = b.n_heads, nq = static_cast<int64_t>(b.n_rows) * nh;
  const int64_t nk0 = sq.pos0 + (b.row0 - sq.first_row) + 1;  // keys of the block's first row
  const int64_t nk_last = nk0 + b.n_rows - 1;
  const bool single = sq.n_tokens == 1;
  const int64_t n_lanes = single ? 64 : 16;
  float* scores = s.scores.data();
  float* acc = s.acc.data();
  float* mx = s.max_s.data();
  const float** qp = s.qp.data();
  const int64_t scs = s.sc_stride, accs = s.acc_stride;
  const float* q_block = a.q + (b.row0 * a.n_head + b.head0) * hd;  // row r, head g: + (r * n_head + g) * hd
  for (int64_t i = 0; i < nq; ++i) {
    qp[i] = q_block + (i / nh) * a.n_head * hd + (i % nh) * hd;
    mx[i] = -INFINITY;
  }
  const Block w{qp, nq, nh, b.n_rows, hd, a.scale, scores, scs, mx, s.run.data(), s.ktile.data(), s.h.data()};

  // Keys every row of the block sees (j < nk0), kTile at a time for all queries; the rest
  // (the tail, and the causal triangle of a prompt block) key by key below.
  constexpr int64_t kT = K::kTile;
  int64_t j_tiled = 0;
  if (nk0 >= kT) {
    for (int64_t i = 0; i < kT * nq; ++i) w.run[i] = -INFINITY;
    for (; j_tiled + kT <= nk0; j_tiled += kT) {
      for (int64_t k = 0; k < kT; ++k) {
        if (j_tiled + kT + k < nk_last) prefetch_row<_MM_HINT_T0>(kr(j_tiled + kT + k, nullptr), hd);
        prefetch_row<_MM_HINT_T1>(vr(j_tiled + k, nullptr), hd);
      }
      K::score_tile(w, kr, j_tiled);
    }
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t l = 0; l < kT; ++l) mx[i] = max_ignoring_nan(mx[i], w.run[kT * i + l]);
    }
  }
  for (int64_t j = j_tiled; j < nk_last; ++j) {
    // The rows come from a block table (a jump every block) and, decoding a batch, from
    // L3 or memory: ask for key j + kKeyAhead now, and for value j (read after all the
    // scores) into L2.
    if (j + kKeyAhead < nk_last) prefetch_row<_MM_HINT_T0>(kr(j + kKeyAhead, nullptr), hd);
    prefetch_row<_MM_HINT_T1>(vr(j, nullptr), hd);
    K::score_key(w, kr, j, std::max<int64_t>(0, j - nk0 + 1));  // rows with j < nk0 + r
  }
  for (int64_t i = 0; i < nq; ++i) K::softmax(scores + i * scs, nk0 + i / nh, mx[i]);

  // A lone query gains nothing from chunks: one pass. The keys every row sees (j < nk0)
  // go to the block's queries kValueGroup at a time; then each row's keys of the causal
  // triangle (nk0 <= j < nk0 + r), in order after them.
  const int64_t chunk = nq == 1 ? nk0 : kValueChunk;
  float* pt = s.ptile.data();  // query g's probability of key j at pt[8 (j - j0) + g]
  float* qa[8];
  for (int64_t j0 = 0; j0 < nk0; j0 += chunk) {
    const int64_t j1 = std::min(j0 + chunk, nk0);
    for (int64_t i0 = 0; i0 < nq; i0 += K::kValueGroup) {
      const int64_t qt = std::min<int64_t>(K::kValueGroup, nq - i0);
      for (int64_t g = 0; g < qt; ++g) {
        const float* p = scores + (i0 + g) * scs;
        for (int64_t j = j0; j < j1; ++j) pt[8 * (j - j0) + g] = p[j];
        qa[g] = acc + (i0 + g) * accs;
      }
      add_values<K>(qt, vr, j0, j1, n_lanes, hd, pt, qa);
    }
  }
  for (int64_t j = nk0; j < nk_last; ++j) {
    for (int64_t i = (j - nk0 + 1) * nh; i < nq; ++i) {
      K::add_value_one(vr, j, n_lanes, hd, scores[i * scs + j], acc + i * accs);
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t r = i / nh, g = i % nh;
    K::sum_lanes(acc + i * accs, hd, single, a.out + ((b.row0 + r) * a.n_head + b.head0 + g) * hd);
  }
}

// Runs blocks [begin, end) with kernel policy K: scratch for the largest block, then each
// block with its KV head's rows of the cache's type.
template <class K>
HEARTH_WALK_INLINE void attend_blocks(const AttendArgs& a, const AttnBlock* blocks, int64_t begin, int64_t end) {
  Scratch s;
  int64_t max_q = 1;
  for (int64_t i = begin; i < end; ++i) max_q = std::max<int64_t>(max_q, int64_t{blocks[i].n_rows} * blocks[i].n_heads);
  s.sc_stride = a.max_keys + 64;
  s.acc_stride = 64 * a.head_dim;
  s.scores.resize(static_cast<size_t>(max_q * s.sc_stride));
  s.acc.resize(static_cast<size_t>(max_q * s.acc_stride));
  s.max_s.resize(static_cast<size_t>(max_q));
  s.ktile.resize(static_cast<size_t>(K::kKeyRows * a.head_dim));
  s.run.resize(static_cast<size_t>(K::kTile * max_q));
  s.h.resize(static_cast<size_t>(K::kHPerQuery * max_q));
  s.qp.resize(static_cast<size_t>(max_q));
  s.ptile.resize(static_cast<size_t>(8 * std::max<int64_t>(kValueChunk, a.max_keys)));
  const ops::KvLayer& c = *a.cache;
  const int64_t group = a.n_head / a.n_head_kv;
  for (int64_t i = begin; i < end; ++i) {
    const AttnBlock& b = blocks[i];
    const int64_t kv_off = (b.head0 / group) * a.head_dim;
    const int64_t* offs = a.key_offs + a.seq_offs[b.seq];
    if (c.type == ops::KvType::Q8_0) {  // offsets in bytes
      const int64_t off = ops::kv_row_bytes(c.type, kv_off);
      const KvRowsOffRawQ8 kr{static_cast<const uint8_t*>(c.k) + off, offs};
      const KvRowsOffRawQ8 vr{static_cast<const uint8_t*>(c.v) + off, offs};
      attend_block<K>(a, b, kr, vr, s);
    } else if (c.type == ops::KvType::F16) {
      const KvRowsOffRawF16 kr{static_cast<const uint16_t*>(c.k) + kv_off, offs};
      const KvRowsOffRawF16 vr{static_cast<const uint16_t*>(c.v) + kv_off, offs};
      attend_block<K>(a, b, kr, vr, s);
    } else {
      const KvRowsOffF32 kr{static_cast<const float*>(c.k) + kv_off, offs};
      const KvRowsOffF32 vr{static_cast<const float*>(c.v) + kv_off, offs};
      attend_block<K>(a, b, kr, vr, s);
    }
  }
}

}  // namespace hearth::cpu::block_walk

#undef HEARTH_WALK_INLINE

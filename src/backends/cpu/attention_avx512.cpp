// Blocked AVX-512 attention: several queries that read the same keys and values (the
// query heads of one KV head, over a few consecutive rows of one sequence) run
// together, so each key and value row is read from memory once per block instead of
// once per query. Per query the arithmetic is exactly attend_one_avx512's
// (cpu_backend.cpp), so results do not change by a bit:
//   - scores: key j's dot product with each query of the block while the key row is in
//     registers (4 x 16-lane fma accumulators per query over steps of 64, combined
//     (0+2) + (1+3), sum16, times scale); each query's running max in ascending j;
//   - softmax: per query, the same code;
//   - value sum: key j goes to lane j % n_lanes and each lane adds its keys in
//     ascending order. The keys are walked in chunks (a multiple of 64, so of n_lanes);
//     each query's lane accumulators stay in its acc buffer between chunks (stored and
//     reloaded: exact), and within a chunk each value row is loaded once for the
//     queries of a head group;
//   - lane sums: per query, the same vertical sum16.
// Rows of a block see different key counts (causal): row r sees keys < nk0 + r.
#include "backends/cpu/attention_avx512.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kv_rows.h"

namespace hearth::cpu {

#if defined(__x86_64__)
namespace {

// Keys per value chunk: a multiple of 64 (the most lanes). 256 keys of head_dim 256
// are 128 KiB of f16 values (256 KiB f32): they stay in L2 while every query of the
// block adds them.
constexpr int64_t kValueChunk = 256;
// Heads whose accumulators fit in registers at once (4 x 4 zmm).
constexpr int kMaxGroup = 4;
// Keys ahead whose rows the score loop prefetches.
constexpr int64_t kKeyAhead = 4;

// Prefetches the cache lines of one K or V row of n elements.
template <int kHint, class T>
HEARTH_AVX512 inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}

// Scores of key row kj for NG query heads (q: NG consecutive head_dim rows); query g's
// score goes to sc[g * sc_stride] and its max to mx[g].
template <int NG, class KP>
HEARTH_AVX512 inline void score_key(const float* q, const KP* kj, int64_t head_dim, float scale, float* sc,
                                    int64_t sc_stride, float* mx) {
  __m512 c[NG][4];
  for (int g = 0; g < NG; ++g) {
    for (int a = 0; a < 4; ++a) c[g][a] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < head_dim; i += 64) {
    __m512 k[4];
    for (int a = 0; a < 4; ++a) k[a] = load16(kj + i + 16 * a);
    for (int g = 0; g < NG; ++g) {
      for (int a = 0; a < 4; ++a) {
        c[g][a] = _mm512_fmadd_ps(k[a], _mm512_loadu_ps(q + g * head_dim + i + 16 * a), c[g][a]);
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(c[g][0], c[g][2]), _mm512_add_ps(c[g][1], c[g][3]));
    const float s = sum16_zmm(sum) * scale;
    sc[g * sc_stride] = s;
    mx[g] = std::fmax(mx[g], s);
  }
}

// Adds keys [j0, j1) (j0 a multiple of n_lanes) to the lane accumulators of NG queries
// (query g: probabilities p + g * p_stride, accumulators acc + g * acc_stride). The
// first chunk (j0 == 0) starts every lane from zero in registers, and writes zeros for
// lanes without a key, so the buffer needs no clearing beforehand.
template <int NG, class V>
HEARTH_AVX512 inline void add_values(const V& vrow, int64_t j0, int64_t j1, int64_t n_lanes, int64_t head_dim,
                                     const float* p, int64_t p_stride, float* acc, int64_t acc_stride) {
  const bool first = j0 == 0;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      if (j0 + l >= j1 && !first) break;  // later chunks: the lanes past the keys keep their sums
      __m512 r[NG][4];
      for (int g = 0; g < NG; ++g) {
        for (int b = 0; b < 4; ++b) {
          r[g][b] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + g * acc_stride + l * head_dim + d0 + 16 * b);
        }
      }
      for (int64_t j = j0 + l; j < j1; j += n_lanes) {
        const auto* vj = vrow(j, nullptr) + d0;
        __m512 v[4];
        for (int b = 0; b < 4; ++b) v[b] = load16(vj + 16 * b);
        for (int g = 0; g < NG; ++g) {
          const __m512 pj = _mm512_set1_ps(p[g * p_stride + j]);
          for (int b = 0; b < 4; ++b) r[g][b] = _mm512_fmadd_ps(v[b], pj, r[g][b]);
        }
      }
      for (int g = 0; g < NG; ++g) {
        for (int b = 0; b < 4; ++b) _mm512_storeu_ps(acc + g * acc_stride + l * head_dim + d0 + 16 * b, r[g][b]);
      }
    }
  }
}

// attend_one_avx512's softmax over scores[0, n_keys) with their max (pads to 16 with
// zeros); exp_approx 16 keys at a time where exp16 applies, the same bits.
HEARTH_AVX512 inline void softmax(float* scores, int64_t n_keys, float max_s) {
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  const __m512 mx = _mm512_set1_ps(max_s);
  int64_t j = 0;
  for (; j + 16 <= n_keys; j += 16) {
    __m512 e;
    if (exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + j), mx), e)) {
      _mm512_storeu_ps(scores + j, e);
      continue;
    }
    for (int64_t i = j; i < j + 16; ++i) scores[i] = ggml_order::exp_approx(scores[i] - max_s);
  }
  for (; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double total = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) total += sum16_zmm(_mm512_loadu_ps(scores + j));
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
}

struct Scratch {
  std::vector<float> scores, acc, max_s;
  int64_t sc_stride = 0, acc_stride = 0;
};

// One block. kr / vr: this KV head's key / value rows (KvRowsOffF32 or KvRowsOffRawF16).
template <class KV>
HEARTH_AVX512 void attend_block(const AttendArgs& a, const AttnBlock& b, const KV& kr, const KV& vr, Scratch& s) {
  const ops::AttentionSeq& sq = a.seqs[b.seq];
  const int64_t hd = a.head_dim, nh = b.n_heads, nq = static_cast<int64_t>(b.n_rows) * nh;
  const int64_t nk0 = sq.pos0 + (b.row0 - sq.first_row) + 1;  // keys of the block's first row
  const int64_t nk_last = nk0 + b.n_rows - 1;
  const bool single = sq.n_tokens == 1;
  const int64_t n_lanes = single ? 64 : 16;
  float* scores = s.scores.data();
  float* acc = s.acc.data();
  float* mx = s.max_s.data();
  const int64_t scs = s.sc_stride, accs = s.acc_stride;
  const float* q_block = a.q + (b.row0 * a.n_head + b.head0) * hd;  // row r, head g: + (r * n_head + g) * hd

  for (int64_t i = 0; i < nq; ++i) mx[i] = -INFINITY;
  for (int64_t j = 0; j < nk_last; ++j) {
    const auto* kj = kr(j, nullptr);
    // The rows come from a block table (a jump every block) and, decoding a batch, from
    // L3 or memory: ask for key j + kKeyAhead now, and for value j (read after all the
    // scores) into L2.
    if (j + kKeyAhead < nk_last) prefetch_row<_MM_HINT_T0>(kr(j + kKeyAhead, nullptr), hd);
    prefetch_row<_MM_HINT_T1>(vr(j, nullptr), hd);
    for (int64_t r = std::max<int64_t>(0, j - nk0 + 1); r < b.n_rows; ++r) {  // rows with j < nk0 + r
      const float* q = q_block + r * a.n_head * hd;
      for (int64_t g = 0; g < nh; g += kMaxGroup) {
        const int64_t qi = r * nh + g;
        float* sc = scores + qi * scs + j;
        switch (std::min<int64_t>(kMaxGroup, nh - g)) {
          case 4: score_key<4>(q + g * hd, kj, hd, a.scale, sc, scs, mx + qi); break;
          case 3: score_key<3>(q + g * hd, kj, hd, a.scale, sc, scs, mx + qi); break;
          case 2: score_key<2>(q + g * hd, kj, hd, a.scale, sc, scs, mx + qi); break;
          default: score_key<1>(q + g * hd, kj, hd, a.scale, sc, scs, mx + qi); break;
        }
      }
    }
  }
  for (int64_t i = 0; i < nq; ++i) softmax(scores + i * scs, nk0 + i / nh, mx[i]);

  // A lone query gains nothing from chunks: one pass, as attend_one_avx512 does it.
  const int64_t chunk = nq == 1 ? nk_last : kValueChunk;
  for (int64_t j0 = 0; j0 < nk_last; j0 += chunk) {
    for (int64_t r = 0; r < b.n_rows; ++r) {
      const int64_t j1 = std::min(j0 + chunk, nk0 + r);
      if (j1 <= j0) continue;
      for (int64_t g = 0; g < nh; g += kMaxGroup) {
        const int64_t qi = r * nh + g;
        const float* p = scores + qi * scs;
        float* ac = acc + qi * accs;
        switch (std::min<int64_t>(kMaxGroup, nh - g)) {
          case 4: add_values<4>(vr, j0, j1, n_lanes, hd, p, scs, ac, accs); break;
          case 3: add_values<3>(vr, j0, j1, n_lanes, hd, p, scs, ac, accs); break;
          case 2: add_values<2>(vr, j0, j1, n_lanes, hd, p, scs, ac, accs); break;
          default: add_values<1>(vr, j0, j1, n_lanes, hd, p, scs, ac, accs); break;
        }
      }
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t r = i / nh, g = i % nh;
    sum_lanes(acc + i * accs, hd, single, a.out + ((b.row0 + r) * a.n_head + b.head0 + g) * hd);
  }
}

}  // namespace

HEARTH_AVX512 __attribute__((flatten)) void attend_blocks_avx512(const AttendArgs& a, const AttnBlock* blocks,
                                                                 int64_t begin, int64_t end) {
  Scratch s;
  int64_t max_q = 1;
  for (int64_t i = begin; i < end; ++i) max_q = std::max<int64_t>(max_q, int64_t{blocks[i].n_rows} * blocks[i].n_heads);
  s.sc_stride = a.max_keys + 64;
  s.acc_stride = 64 * a.head_dim;
  s.scores.resize(static_cast<size_t>(max_q * s.sc_stride));
  s.acc.resize(static_cast<size_t>(max_q * s.acc_stride));
  s.max_s.resize(static_cast<size_t>(max_q));
  const ops::KvLayer& c = *a.cache;
  const int64_t group = a.n_head / a.n_head_kv;
  for (int64_t i = begin; i < end; ++i) {
    const AttnBlock& b = blocks[i];
    const int64_t kv_off = (b.head0 / group) * a.head_dim;
    const int64_t* offs = a.key_offs + a.seq_offs[b.seq];
    if (c.type == ops::KvType::F16) {
      const KvRowsOffRawF16 kr{static_cast<const uint16_t*>(c.k) + kv_off, offs};
      const KvRowsOffRawF16 vr{static_cast<const uint16_t*>(c.v) + kv_off, offs};
      attend_block(a, b, kr, vr, s);
    } else {
      const KvRowsOffF32 kr{static_cast<const float*>(c.k) + kv_off, offs};
      const KvRowsOffF32 vr{static_cast<const float*>(c.v) + kv_off, offs};
      attend_block(a, b, kr, vr, s);
    }
  }
}
#else
void attend_blocks_avx512(const AttendArgs&, const AttnBlock*, int64_t, int64_t) {}
#endif

}  // namespace hearth::cpu

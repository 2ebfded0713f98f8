// Blocked AVX2 attention: attention_avx512.cpp's blocks with 256-bit registers, walked by
// attention_block_walk.h (each key and value row read once per block instead of once per
// query); here its kernel policy. Per query the arithmetic is exactly attend_one_avx2's
// (attention_x86.cpp), so results do not change by a bit:
//   - scores: for key j, each query's eight 8-lane fma accumulators c[a] over steps of
//     64 (the halves of attend_one_avx512's four 16-lane ones), lo = (c0 + c4) + (c2 + c6),
//     hi = (c1 + c5) + (c3 + c7), h8 = lo + hi; the key row is loaded (and converted from
//     f16 / q8_0) once for the block's queries, four queries per pass over it. The rest
//     of sum16 (4 + 4, (0 + 2) + (1 + 3)) runs for eight keys at once as a transposed
//     network (shuffles only move lanes; every addition pairs the same two values), then
//     times scale;
//   - softmax: per query, exp_approx on 8 lanes where exp8 applies (the same bits);
//   - value sum: each value row's 16 dims are loaded once for up to six queries, the fmas
//     of attend_one_avx2 per (query, lane, dim) in the same key order;
//   - lane sums: per query, sum_lanes8 (attend_one_avx2's).
#include "backends/cpu/attention_avx2.h"

#include <cstdint>

#include "backends/cpu/attention_block_walk.h"
#include "backends/cpu/exp_avx2.h"
#include "backends/cpu/ggml_order.h"

namespace hearth::cpu {

#if defined(__x86_64__)
namespace {

// Queries per pass over a key row (score accumulators: 3 x 4 registers).
constexpr int kScoreGroup = 4;

// A key row as f32: an f32 cache's own row, an f16 or q8_0 row converted into dst
// (exactly, as load8 does).
HEARTH_SIMD inline const float* key_f32(const float* row, int64_t, float*) { return row; }
template <class P>
HEARTH_SIMD inline const float* key_f32(P row, int64_t head_dim, float* dst) {
  for (int64_t i = 0; i < head_dim; i += 8) _mm256_storeu_ps(dst + i, load8(row + i));
  return dst;
}

// Accumulator a (dims 64 i + 8 a .. + 7 over the steps i) of NG queries against key row
// k: attend_one_avx2's c[a], the same fmas in the same order.
template <int NG, int NI>
HEARTH_SIMD inline void slice(const float* const* q, const float* k, int64_t ni, int a, __m256* c) {
  for (int g = 0; g < NG; ++g) c[g] = _mm256_setzero_ps();
  const int64_t n = NI > 0 ? NI : ni;
  for (int64_t i = 0; i < n; ++i) {
    const __m256 kv = _mm256_loadu_ps(k + 64 * i + 8 * a);
    for (int g = 0; g < NG; ++g) c[g] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[g] + 64 * i + 8 * a), c[g]);
  }
}

// h8 = lo + hi of key row k for NG queries (query g's to h + g * hs): lo first, stored,
// then hi added to it, so that 3 x NG accumulators are live at a time.
template <int NG, int NI>
HEARTH_SIMD inline void key_h8(const float* const* q, const float* k, int64_t ni, float* h, int64_t hs) {
  for (int p = 0; p < 2; ++p) {  // p = 0: lo (a = 0, 4, 2, 6), 1: hi (a = 1, 5, 3, 7)
    __m256 x[NG], y[NG], t[NG];
    slice<NG, NI>(q, k, ni, p, x);
    slice<NG, NI>(q, k, ni, p + 4, y);
    for (int g = 0; g < NG; ++g) t[g] = _mm256_add_ps(x[g], y[g]);
    slice<NG, NI>(q, k, ni, p + 2, x);
    slice<NG, NI>(q, k, ni, p + 6, y);
    for (int g = 0; g < NG; ++g) {
      const __m256 s = _mm256_add_ps(t[g], _mm256_add_ps(x[g], y[g]));
      _mm256_storeu_ps(h + g * hs, p == 0 ? s : _mm256_add_ps(_mm256_loadu_ps(h + g * hs), s));
    }
  }
}

// key_h8 for queries [0, nq) (q[i]; query i's h8 at h + i * hs), kScoreGroup at a time.
template <int NI>
HEARTH_SIMD inline void key_h8_all(const float* const* q, int64_t nq, const float* k, int64_t ni, float* h,
                                   int64_t hs) {
  int64_t i = 0;
  for (; i + kScoreGroup <= nq; i += kScoreGroup) key_h8<kScoreGroup, NI>(q + i, k, ni, h + i * hs, hs);
  switch (nq - i) {
    case 3: key_h8<3, NI>(q + i, k, ni, h + i * hs, hs); break;
    case 2: key_h8<2, NI>(q + i, k, ni, h + i * hs, hs); break;
    case 1: key_h8<1, NI>(q + i, k, ni, h + i * hs, hs); break;
    default: break;
  }
}
HEARTH_SIMD inline void key_h8_any(const float* const* q, int64_t nq, const float* k, int64_t head_dim, float* h,
                                   int64_t hs) {
  switch (head_dim) {
    case 64: key_h8_all<1>(q, nq, k, 1, h, hs); break;
    case 128: key_h8_all<2>(q, nq, k, 2, h, hs); break;
    case 256: key_h8_all<4>(q, nq, k, 4, h, hs); break;
    default: key_h8_all<0>(q, nq, k, head_dim / 64, h, hs); break;
  }
}

// The scores of 8 keys from their h8 (h + 8 k: key k's): sum16_tail of each, as a
// transposed network. Step 1, lanes i + i+4: keys 2m, 2m + 1 side by side (128-bit
// halves); step 2, lanes i + i+2 within each half: the low half of b[n] holds keys 4n and
// 4n + 2, the high half 4n + 1 and 4n + 3; step 3, lanes i + i+1: keys 0, 2, 4, 6 | 1, 3,
// 5, 7, then put in order.
HEARTH_SIMD inline __m256 reduce8(const float* h) {
  __m256 a[4];
  for (int m = 0; m < 4; ++m) {
    const __m256 x = _mm256_loadu_ps(h + 16 * m), y = _mm256_loadu_ps(h + 16 * m + 8);
    a[m] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
  }
  __m256 b[2];
  for (int n = 0; n < 2; ++n) {
    b[n] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * n], a[2 * n + 1], 0x44), _mm256_shuffle_ps(a[2 * n], a[2 * n + 1], 0xEE));
  }
  const __m256 c = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xDD));
  return _mm256_permutevar8x32_ps(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Adds keys [j0, j1) (j0 a multiple of n_lanes) to the lane accumulators of QT queries
// that all see them (pt[8 (j - j0) + g]: query g's probability of key j; qa[g]: query g's
// accumulators), 16 dims per pass, each value register loaded once for the QT queries.
// The first chunk (j0 == 0) starts every lane from zero and writes zeros for lanes
// without a key. Per (query, lane, dim) the fmas of attend_one_avx2 in the same key order.
template <int QT, class V>
HEARTH_SIMD inline void add_values_q(const V& vrow, int64_t j0, int64_t j1, int64_t n_lanes, int64_t head_dim,
                                     const float* pt, float* const* qa) {
  const bool first = j0 == 0;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 16) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      if (j0 + l >= j1 && !first) break;  // later chunks: the lanes past the keys keep their sums
      __m256 r[QT][2];
      for (int g = 0; g < QT; ++g) {
        for (int b = 0; b < 2; ++b) {
          r[g][b] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(qa[g] + l * head_dim + d0 + 8 * b);
        }
      }
      for (int64_t j = j0 + l; j < j1; j += n_lanes) {
        const auto vj = vrow(j, nullptr) + d0;
        const __m256 v0 = load8(vj), v1 = load8(vj + 8);
        for (int g = 0; g < QT; ++g) {
          const __m256 pj = _mm256_broadcast_ss(pt + 8 * (j - j0) + g);
          r[g][0] = _mm256_fmadd_ps(v0, pj, r[g][0]);
          r[g][1] = _mm256_fmadd_ps(v1, pj, r[g][1]);
        }
      }
      for (int g = 0; g < QT; ++g) {
        for (int b = 0; b < 2; ++b) _mm256_storeu_ps(qa[g] + l * head_dim + d0 + 8 * b, r[g][b]);
      }
    }
  }
}

// One key j (lane j % n_lanes) added to one query's lane accumulator: the keys of a
// prompt block's causal triangle, after all the keys below them.
template <class V>
HEARTH_SIMD inline void add_value_one(const V& vrow, int64_t j, int64_t n_lanes, int64_t head_dim, float p, float* acc) {
  const auto vj = vrow(j, nullptr);
  float* a = acc + (j % n_lanes) * head_dim;
  const __m256 pj = _mm256_set1_ps(p);
  for (int64_t d = 0; d < head_dim; d += 8) _mm256_storeu_ps(a + d, _mm256_fmadd_ps(load8(vj + d), pj, _mm256_loadu_ps(a + d)));
}

// attend_one_avx2's softmax over scores[0, n_keys) with their max (pads to 16 with
// zeros); exp_approx 8 keys at a time where exp8 applies, the same bits.
HEARTH_SIMD inline void softmax(float* scores, int64_t n_keys, float max_s) {
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  const __m256 mx = _mm256_set1_ps(max_s);
  int64_t j = 0;
  for (; j + 8 <= n_keys; j += 8) {
    __m256 e;
    if (exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + j), mx), e)) {
      _mm256_storeu_ps(scores + j, e);
      continue;
    }
    for (int64_t i = j; i < j + 8; ++i) scores[i] = ggml_order::exp_approx(scores[i] - max_s);
  }
  for (; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t i = n_keys; i < n_pad; ++i) scores[i] = 0.0f;
  double total = 0.0;
  for (int64_t i = 0; i < n_pad; i += 16) total += sum16_ymm(_mm256_loadu_ps(scores + i), _mm256_loadu_ps(scores + i + 8));
  const auto inv = static_cast<float>(1.0 / total);
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n_keys; i += 8) _mm256_storeu_ps(scores + i, _mm256_mul_ps(_mm256_loadu_ps(scores + i), vinv));
  for (; i < n_keys; ++i) scores[i] *= inv;
}

// attention_block_walk.h's kernel policy: tiles of 8 keys (each query's h8 of tile key k
// at h + 64 i + 8 k), six queries per pass over a value chunk (2 x 6 accumulators, 2
// value registers and a broadcast: 15 of 16).
struct Avx2 {
  static constexpr int64_t kTile = 8;
  static constexpr int kValueGroup = 6;
  static constexpr int64_t kKeyRows = 1;
  static constexpr int64_t kHPerQuery = 64;

  template <class KV>
  HEARTH_SIMD static void score_tile(const block_walk::Block& w, const KV& kr, int64_t j0) {
    const float* const* qp = w.qp;
    const int64_t nq = w.nq, hd = w.hd, scs = w.scs;
    float *const h = w.h, *const ktile = w.ktile, *const scores = w.scores, *const run = w.run;
    for (int64_t k = 0; k < 8; ++k) {
      const float* row = key_f32(kr(j0 + k, nullptr), hd, ktile);
      key_h8_any(qp, nq, row, hd, h + 8 * k, 64);
    }
    const __m256 scale = _mm256_set1_ps(w.scale);
    for (int64_t i = 0; i < nq; ++i) {
      const __m256 sc = _mm256_mul_ps(reduce8(h + 64 * i), scale);
      _mm256_storeu_ps(scores + i * scs + j0, sc);
      _mm256_storeu_ps(run + 8 * i, _mm256_max_ps(sc, _mm256_loadu_ps(run + 8 * i)));
    }
  }
  // Key j for the queries of rows [r0, n_rows).
  template <class KV>
  HEARTH_SIMD static void score_key(const block_walk::Block& w, const KV& kr, int64_t j, int64_t r0) {
    const int64_t nq = w.nq, hd = w.hd, scs = w.scs, i0 = r0 * w.nh;
    const float scale = w.scale;
    float *const h = w.h, *const scores = w.scores, *const mx = w.mx;
    const float* row = key_f32(kr(j, nullptr), hd, w.ktile);
    key_h8_any(w.qp + i0, nq - i0, row, hd, h, 8);
    for (int64_t i = i0; i < nq; ++i) {
      const float sc = sum16_tail(_mm256_loadu_ps(h + 8 * (i - i0))) * scale;
      scores[i * scs + j] = sc;
      mx[i] = block_walk::max_ignoring_nan(mx[i], sc);
    }
  }
  HEARTH_SIMD static void softmax(float* scores, int64_t n_keys, float max_s) { cpu::softmax(scores, n_keys, max_s); }
  template <int QT, class V>
  HEARTH_SIMD static void add_values(const V& vr, int64_t j0, int64_t j1, int64_t n_lanes, int64_t hd, const float* pt,
                                     float* const* qa) {
    add_values_q<QT>(vr, j0, j1, n_lanes, hd, pt, qa);
  }
  template <class V>
  HEARTH_SIMD static void add_value_one(const V& vr, int64_t j, int64_t n_lanes, int64_t hd, float p, float* acc) {
    cpu::add_value_one(vr, j, n_lanes, hd, p, acc);
  }
  HEARTH_SIMD static void sum_lanes(const float* acc, int64_t hd, bool single, float* out) {
    sum_lanes8(acc, hd, single, out);
  }
};

}  // namespace

HEARTH_SIMD __attribute__((flatten)) void attend_blocks_avx2(const AttendArgs& a, const AttnBlock* blocks, int64_t begin,
                                                             int64_t end) {
  block_walk::attend_blocks<Avx2>(a, blocks, begin, end);
}
#else
void attend_blocks_avx2(const AttendArgs&, const AttnBlock*, int64_t, int64_t) {}
#endif

}  // namespace hearth::cpu

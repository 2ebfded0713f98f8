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
template <int kHint>
HEARTH_AVX512 inline void prefetch_row(Q8Ptr row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row.row);
  const int64_t bytes = ops::kv_row_bytes(ops::KvType::Q8_0, n);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}

// std::fmax(m, s) for a running maximum m that is never NaN: a NaN score leaves it
// alone (maxss returns its second operand then), without a libm call per key.
HEARTH_AVX512 inline float max_ignoring_nan(float m, float s) {
  return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(s), _mm_set_ss(m)));
}

// Scores of 16 consecutive keys (rows[k]: key k as head_dim floats) for one query, each
// exactly score_key's: the key's 4 x 16-lane fma sums combined (0+2) + (1+3), then
// sum16 (lanes i + i+8, i + i+4, i + i+2, i + i+1), times scale. The 16 sum16 trees run
// together as a transposed network: shuffles only move lanes, every addition pairs the
// same two values as sum16_zmm. Writes sc[0..15]; returns running_max raised by them
// (lanewise; a NaN score leaves its lane alone, as std::fmax ignores it).
HEARTH_AVX512 inline __m512 score_tile16(const float* q, const float* const* rows, int64_t head_dim, __m512 scale,
                                        float* sc, __m512 running_max) {
  __m512 u[16];
  for (int k = 0; k < 16; ++k) {
    __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < head_dim; i += 64) {
      for (int a = 0; a < 4; ++a) {
        c[a] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[k] + i + 16 * a), _mm512_loadu_ps(q + i + 16 * a), c[a]);
      }
    }
    u[k] = _mm512_add_ps(_mm512_add_ps(c[0], c[2]), _mm512_add_ps(c[1], c[3]));
  }
  // (Masked shuffles with all lanes set: GCC 12 warns on the unmasked forms.)
  // Lanes i + i+8 of keys 2m, 2m+1: their low and high halves side by side.
  __m512 h8[8];
  for (int m = 0; m < 8; ++m) {
    h8[m] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, u[2 * m], u[2 * m + 1], 0x44),
                          _mm512_maskz_shuffle_f32x4(0xFFFF, u[2 * m], u[2 * m + 1], 0xEE));
  }
  // Lanes i + i+4: 128-bit quarter k of h4[n] is key 4n + k.
  __m512 h4[4];
  for (int n = 0; n < 4; ++n) {
    h4[n] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, h8[2 * n], h8[2 * n + 1], 0x88),
                          _mm512_maskz_shuffle_f32x4(0xFFFF, h8[2 * n], h8[2 * n + 1], 0xDD));
  }
  // Lanes i + i+2 within each quarter: quarter k of h2[p] is [key 8p + k, key 8p + 4 + k].
  __m512 h2[2];
  for (int p = 0; p < 2; ++p) {
    h2[p] = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, h4[2 * p], h4[2 * p + 1], 0x44),
                          _mm512_maskz_shuffle_ps(0xFFFF, h4[2 * p], h4[2 * p + 1], 0xEE));
  }
  // Lanes i + i+1: lane 4k + t is key 4t + k; put the keys in order.
  const __m512 h1 = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, h2[0], h2[1], 0x88),
                                    _mm512_maskz_shuffle_ps(0xFFFF, h2[0], h2[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 scores = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0xFFFF, order, h1), scale);
  _mm512_storeu_ps(sc, scores);
  return _mm512_maskz_max_ps(0xFFFF, scores, running_max);
}

// One key's 4 x 16-lane fma sums against a query held in registers (qr: head_dim / 64 x 4
// registers, NI = head_dim / 64), combined (0+2) + (1+3): score_tile16's u[k], the same
// fmas in the same order.
template <int NI>
HEARTH_AVX512 inline __m512 key_sum(const __m512* qr, const float* row) {
  __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int i = 0; i < NI; ++i) {
    for (int a = 0; a < 4; ++a) c[a] = _mm512_fmadd_ps(_mm512_loadu_ps(row + 64 * i + 16 * a), qr[4 * i + a], c[a]);
  }
  return _mm512_add_ps(_mm512_add_ps(c[0], c[2]), _mm512_add_ps(c[1], c[3]));
}

// score_tile16 for head_dim = 64 NI with the query in registers (one load per fma instead
// of two) and the first two levels of the network taken as the keys come (four keys per
// h4 register), so that the live registers fit: every addition pairs the same two values.
template <int NI>
HEARTH_AVX512 inline __m512 score_tile16_q(const float* q, const float* const* rows, __m512 scale, float* sc,
                                          __m512 running_max) {
  __m512 qr[4 * NI];
  for (int i = 0; i < 4 * NI; ++i) qr[i] = _mm512_loadu_ps(q + 16 * i);
  __m512 h4[4];
  for (int n = 0; n < 4; ++n) {
    __m512 h8[2];
    for (int m2 = 0; m2 < 2; ++m2) {
      const int m = 2 * n + m2;
      const __m512 u0 = key_sum<NI>(qr, rows[2 * m]), u1 = key_sum<NI>(qr, rows[2 * m + 1]);
      h8[m2] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, u0, u1, 0x44), _mm512_maskz_shuffle_f32x4(0xFFFF, u0, u1, 0xEE));
    }
    h4[n] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, h8[0], h8[1], 0x88),
                          _mm512_maskz_shuffle_f32x4(0xFFFF, h8[0], h8[1], 0xDD));
  }
  __m512 h2[2];
  for (int p = 0; p < 2; ++p) {
    h2[p] = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, h4[2 * p], h4[2 * p + 1], 0x44),
                          _mm512_maskz_shuffle_ps(0xFFFF, h4[2 * p], h4[2 * p + 1], 0xEE));
  }
  const __m512 h1 = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, h2[0], h2[1], 0x88),
                                    _mm512_maskz_shuffle_ps(0xFFFF, h2[0], h2[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 scores = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0xFFFF, order, h1), scale);
  _mm512_storeu_ps(sc, scores);
  return _mm512_maskz_max_ps(0xFFFF, scores, running_max);
}

// Key rows j0 .. j0 + 15 as f32 rows: an f32 cache's own rows, an f16 or q8_0 cache's
// converted into tile (exactly, as load16 does).
HEARTH_AVX512 inline void key_tile(const KvRowsOffF32& kr, int64_t j0, int64_t, float*, const float** rows) {
  for (int k = 0; k < 16; ++k) rows[k] = kr(j0 + k, nullptr);
}
template <class Raw>
HEARTH_AVX512 inline void key_tile(const Raw& kr, int64_t j0, int64_t head_dim, float* tile, const float** rows) {
  for (int k = 0; k < 16; ++k) {
    const auto src = kr(j0 + k, nullptr);
    float* dst = tile + k * head_dim;
    for (int64_t i = 0; i < head_dim; i += 16) _mm512_storeu_ps(dst + i, load16(src + i));
    rows[k] = dst;
  }
}

// Scores of key row kj for NG query heads (q: NG consecutive head_dim rows); query g's
// score goes to sc[g * sc_stride] and its max to mx[g].
template <int NG, class KP>
HEARTH_AVX512 inline void score_key(const float* q, KP kj, int64_t head_dim, float scale, float* sc,
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
    mx[g] = max_ignoring_nan(mx[g], s);
  }
}

// Adds keys [j0, j1) (j0 a multiple of n_lanes) to the lane accumulators of QT queries
// that all see them (pt[8 (j - j0) + g]: query g's probability of key j, the tile's
// probabilities key by key so that one register addresses them; qa[g]: query g's
// accumulators), 32 dims per
// pass, each value register loaded once for all QT queries. The first chunk (j0 == 0)
// starts every lane from zero in registers, and writes zeros for lanes without a key, so
// the buffer needs no clearing beforehand. Per (query, lane, dim) the fmas of
// attend_one_avx512 in the same key order, so the same bits.
template <int QT, class V>
HEARTH_AVX512 inline void add_values_q(const V& vrow, int64_t j0, int64_t j1, int64_t n_lanes, int64_t head_dim,
                                       const float* pt, float* const* qa) {
  const bool first = j0 == 0;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 32) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      if (j0 + l >= j1 && !first) break;  // later chunks: the lanes past the keys keep their sums
      __m512 r[QT][2];
      for (int g = 0; g < QT; ++g) {
        for (int b = 0; b < 2; ++b) {
          r[g][b] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(qa[g] + l * head_dim + d0 + 16 * b);
        }
      }
      for (int64_t j = j0 + l; j < j1; j += n_lanes) {
        const auto vj = vrow(j, nullptr) + d0;
        const __m512 v0 = load16(vj), v1 = load16(vj + 16);
        for (int g = 0; g < QT; ++g) {
          const __m512 pj = _mm512_set1_ps(pt[8 * (j - j0) + g]);
          r[g][0] = _mm512_fmadd_ps(v0, pj, r[g][0]);
          r[g][1] = _mm512_fmadd_ps(v1, pj, r[g][1]);
        }
      }
      for (int g = 0; g < QT; ++g) {
        for (int b = 0; b < 2; ++b) _mm512_storeu_ps(qa[g] + l * head_dim + d0 + 16 * b, r[g][b]);
      }
    }
  }
}

// One key j (any j, lane j % n_lanes) added to one query's lane accumulator: the keys of
// a prompt block's causal triangle, after all the keys below them.
template <class V>
HEARTH_AVX512 inline void add_value_one(const V& vrow, int64_t j, int64_t n_lanes, int64_t head_dim, float p,
                                        float* acc) {
  const auto vj = vrow(j, nullptr);
  float* a = acc + (j % n_lanes) * head_dim;
  const __m512 pj = _mm512_set1_ps(p);
  for (int64_t d = 0; d < head_dim; d += 16) _mm512_storeu_ps(a + d, _mm512_fmadd_ps(load16(vj + d), pj, _mm512_loadu_ps(a + d)));
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
  std::vector<float> scores, acc, max_s, ktile, run, ptile;
  int64_t sc_stride = 0, acc_stride = 0;
};

// One block. kr / vr: this KV head's key / value rows (KvRowsOffF32, KvRowsOffRawF16 or
// KvRowsOffRawQ8).
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
  // Keys every row of the block sees (j < nk0), 16 at a time for each query; the rest
  // (the tail, and the causal triangle of a prompt block) key by key below.
  int64_t j_tiled = 0;
  if (nk0 >= 16) {
    const __m512 scale = _mm512_set1_ps(a.scale);
    float* run = s.run.data();  // per query, the 16 lanes of its running max
    for (int64_t i = 0; i < 16 * nq; ++i) run[i] = -INFINITY;
    const float* rows[16];
    for (; j_tiled + 16 <= nk0; j_tiled += 16) {
      for (int64_t k = 0; k < 16; ++k) {
        if (j_tiled + 16 + k < nk_last) prefetch_row<_MM_HINT_T0>(kr(j_tiled + 16 + k, nullptr), hd);
        prefetch_row<_MM_HINT_T1>(vr(j_tiled + k, nullptr), hd);
      }
      key_tile(kr, j_tiled, hd, s.ktile.data(), rows);
      for (int64_t i = 0; i < nq; ++i) {
        const float* q = q_block + (i / nh) * a.n_head * hd + (i % nh) * hd;
        float* sc = scores + i * scs + j_tiled;
        const __m512 r = _mm512_loadu_ps(run + 16 * i);
        __m512 m;
        switch (hd) {
          case 64: m = score_tile16_q<1>(q, rows, scale, sc, r); break;
          case 128: m = score_tile16_q<2>(q, rows, scale, sc, r); break;
          case 256: m = score_tile16_q<4>(q, rows, scale, sc, r); break;
          default: m = score_tile16(q, rows, hd, scale, sc, r); break;
        }
        _mm512_storeu_ps(run + 16 * i, m);
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      for (int l = 0; l < 16; ++l) mx[i] = max_ignoring_nan(mx[i], run[16 * i + l]);
    }
  }
  for (int64_t j = j_tiled; j < nk_last; ++j) {
    const auto kj = kr(j, nullptr);
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
  // The keys every row sees (j < nk0) go to all the block's queries together, up to 8 at
  // a time (add_values_q); then each row's keys of the causal triangle (nk0 <= j < nk0 + r),
  // in order after them.
  const int64_t chunk = nq == 1 ? nk0 : kValueChunk;
  float* pt = s.ptile.data();
  float* qa[8];
  for (int64_t j0 = 0; j0 < nk0; j0 += chunk) {
    const int64_t j1 = std::min(j0 + chunk, nk0);
    for (int64_t i0 = 0; i0 < nq; i0 += 8) {
      const int64_t qt = std::min<int64_t>(8, nq - i0);
      for (int64_t g = 0; g < qt; ++g) {
        const float* p = scores + (i0 + g) * scs;
        for (int64_t j = j0; j < j1; ++j) pt[8 * (j - j0) + g] = p[j];
        qa[g] = acc + (i0 + g) * accs;
      }
      switch (qt) {
        case 8: add_values_q<8>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 7: add_values_q<7>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 6: add_values_q<6>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 5: add_values_q<5>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 4: add_values_q<4>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 3: add_values_q<3>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        case 2: add_values_q<2>(vr, j0, j1, n_lanes, hd, pt, qa); break;
        default: add_values_q<1>(vr, j0, j1, n_lanes, hd, pt, qa); break;
      }
    }
  }
  for (int64_t j = nk0; j < nk_last; ++j) {
    for (int64_t i = (j - nk0 + 1) * nh; i < nq; ++i) add_value_one(vr, j, n_lanes, hd, scores[i * scs + j], acc + i * accs);
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
  s.ktile.resize(static_cast<size_t>(16 * a.head_dim));
  s.run.resize(static_cast<size_t>(16 * max_q));
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
      attend_block(a, b, kr, vr, s);
    } else if (c.type == ops::KvType::F16) {
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

// Blocked AVX-512 attention: several queries that read the same keys and values (the
// query heads of one KV head, over a few consecutive rows of one sequence) run together,
// walked by attention_block_walk.h, so each key and value row is read from memory once per
// block instead of once per query; here its kernel policy. Per query the arithmetic is
// exactly attend_one_avx512's (attention_x86.cpp), so results do not change by a bit:
//   - scores: key j's dot product with each query of the block while the key row is in
//     registers (4 x 16-lane fma accumulators per query over steps of 64, combined
//     (0+2) + (1+3), sum16, times scale), 16 keys at a time as a transposed network;
//   - softmax: per query, the same code;
//   - value sum: within a chunk each value row is loaded once for up to eight queries,
//     the fmas of attend_one_avx512 per (query, lane, dim) in the same key order;
//   - lane sums: per query, the same vertical sum16.
#include "backends/cpu/attention_avx512.h"

#include <algorithm>
#include <cstdint>

#include "backends/cpu/attention_block_walk.h"
#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"

namespace hearth::cpu {

#if defined(__x86_64__)
namespace {

// Heads whose accumulators fit in registers at once (4 x 4 zmm).
constexpr int kMaxGroup = 4;

// Scores of 16 consecutive keys (rows[k]: key k as head_dim floats) for one query, each
// exactly score_heads': the key's 4 x 16-lane fma sums combined (0+2) + (1+3), then
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
HEARTH_AVX512 inline void score_heads(const float* q, KP kj, int64_t head_dim, float scale, float* sc,
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
    mx[g] = block_walk::max_ignoring_nan(mx[g], s);
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

// attention_block_walk.h's kernel policy: tiles of 16 keys (converted into ktile, 16 rows),
// eight queries per pass over a value chunk.
struct Avx512 {
  static constexpr int64_t kTile = 16;
  static constexpr int kValueGroup = 8;
  static constexpr int64_t kKeyRows = 16;
  static constexpr int64_t kHPerQuery = 0;

  template <class KV>
  HEARTH_AVX512 static void score_tile(const block_walk::Block& w, const KV& kr, int64_t j0) {
    const float* rows[16];
    key_tile(kr, j0, w.hd, w.ktile, rows);
    const __m512 scale = _mm512_set1_ps(w.scale);
    for (int64_t i = 0; i < w.nq; ++i) {
      const float* q = w.qp[i];
      float* sc = w.scores + i * w.scs + j0;
      const __m512 r = _mm512_loadu_ps(w.run + 16 * i);
      __m512 m;
      switch (w.hd) {
        case 64: m = score_tile16_q<1>(q, rows, scale, sc, r); break;
        case 128: m = score_tile16_q<2>(q, rows, scale, sc, r); break;
        case 256: m = score_tile16_q<4>(q, rows, scale, sc, r); break;
        default: m = score_tile16(q, rows, w.hd, scale, sc, r); break;
      }
      _mm512_storeu_ps(w.run + 16 * i, m);
    }
  }
  // Key j for the queries of rows [r0, n_rows), kMaxGroup heads at a time.
  template <class KV>
  HEARTH_AVX512 static void score_key(const block_walk::Block& w, const KV& kr, int64_t j, int64_t r0) {
    const auto kj = kr(j, nullptr);
    for (int64_t r = r0; r < w.n_rows; ++r) {
      for (int64_t g = 0; g < w.nh; g += kMaxGroup) {
        const int64_t qi = r * w.nh + g;
        const float* q = w.qp[qi];
        float* sc = w.scores + qi * w.scs + j;
        switch (std::min<int64_t>(kMaxGroup, w.nh - g)) {
          case 4: score_heads<4>(q, kj, w.hd, w.scale, sc, w.scs, w.mx + qi); break;
          case 3: score_heads<3>(q, kj, w.hd, w.scale, sc, w.scs, w.mx + qi); break;
          case 2: score_heads<2>(q, kj, w.hd, w.scale, sc, w.scs, w.mx + qi); break;
          default: score_heads<1>(q, kj, w.hd, w.scale, sc, w.scs, w.mx + qi); break;
        }
      }
    }
  }
  HEARTH_AVX512 static void softmax(float* scores, int64_t n_keys, float max_s) { cpu::softmax(scores, n_keys, max_s); }
  template <int QT, class V>
  HEARTH_AVX512 static void add_values(const V& vr, int64_t j0, int64_t j1, int64_t n_lanes, int64_t hd,
                                       const float* pt, float* const* qa) {
    add_values_q<QT>(vr, j0, j1, n_lanes, hd, pt, qa);
  }
  template <class V>
  HEARTH_AVX512 static void add_value_one(const V& vr, int64_t j, int64_t n_lanes, int64_t hd, float p, float* acc) {
    cpu::add_value_one(vr, j, n_lanes, hd, p, acc);
  }
  HEARTH_AVX512 static void sum_lanes(const float* acc, int64_t hd, bool single, float* out) {
    cpu::sum_lanes(acc, hd, single, out);
  }
};

}  // namespace

HEARTH_AVX512 __attribute__((flatten)) void attend_blocks_avx512(const AttendArgs& a, const AttnBlock* blocks,
                                                                 int64_t begin, int64_t end) {
  block_walk::attend_blocks<Avx512>(a, blocks, begin, end);
}
#else
void attend_blocks_avx512(const AttendArgs&, const AttnBlock*, int64_t, int64_t) {}
#endif

}  // namespace hearth::cpu

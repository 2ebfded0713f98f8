// Blocked AVX2 attention: attention_avx512.cpp's blocks (the query heads of one KV head
// over a few consecutive rows of one sequence, attention.h's AttnBlock) with 256-bit
// registers, so that each key and value row is read once per block instead of once
// per query. Per query the arithmetic is exactly attend_one_avx2's (attention_x86.cpp),
// so results do not change by a bit:
//   - scores: for key j, each query's eight 8-lane fma accumulators c[a] over steps of
//     64 (the halves of attend_one_avx512's four 16-lane ones), lo = (c0 + c4) + (c2 + c6),
//     hi = (c1 + c5) + (c3 + c7), h8 = lo + hi; the key row is loaded (and converted from
//     f16 / q8_0) once for the block's queries, four queries per pass over it. The rest
//     of sum16 (4 + 4, (0 + 2) + (1 + 3)) runs for eight keys at once as a transposed
//     network (shuffles only move lanes; every addition pairs the same two values), then
//     times scale; each query's max over its scores (order-free; NaN ignored as fmax does);
//   - softmax: per query, exp_approx on 8 lanes where exp8 applies (the same bits);
//   - value sum: key j goes to lane j % n_lanes, each lane adds its keys in ascending
//     order. Keys in chunks of 256 (a multiple of n_lanes), each query's lane accumulators
//     kept in its acc buffer between chunks (stored and reloaded: exact); within a chunk
//     each value row's 16 dims are loaded once for up to six queries;
//   - lane sums: per query, sum_lanes8 (attend_one_avx2's).
// Rows of a block see different key counts (causal): row r sees keys < nk0 + r.
#include "backends/cpu/attention_avx2.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/exp_avx2.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kv_rows.h"

namespace hearth::cpu {

#if defined(__x86_64__)
namespace {

// Keys per value chunk: a multiple of 64 (the most lanes); 256 f16 value rows of
// head_dim 128 are 64 KiB, in L2 while every query of the block adds them.
constexpr int64_t kValueChunk = 256;
// Queries per pass over a key row (score accumulators: 3 x 4 registers) and over a value
// chunk (2 x 6 accumulators, 2 value registers and a broadcast: 15 of 16).
constexpr int kScoreGroup = 4;
constexpr int kValueGroup = 6;

template <int kHint, class T>
HEARTH_SIMD inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}
template <int kHint>
HEARTH_SIMD inline void prefetch_row(Q8Ptr row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row.row);
  const int64_t bytes = ops::kv_row_bytes(ops::KvType::Q8_0, n);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, static_cast<_mm_hint>(kHint));
}

// std::fmax(m, s) for a running maximum m that is never NaN (maxss returns its second
// operand when either is NaN).
HEARTH_SIMD inline float max_ignoring_nan(float m, float s) {
  return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(s), _mm_set_ss(m)));
}

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

struct Scratch {
  std::vector<float> scores, acc, max_s, ktile, run, ptile, h;
  std::vector<const float*> qp;
  int64_t sc_stride = 0, acc_stride = 0;
};

// One block. kr / vr: this KV head's key / value rows (KvRowsOffF32, KvRowsOffRawF16 or
// KvRowsOffRawQ8).
template <class KV>
HEARTH_SIMD void attend_block(const AttendArgs& a, const AttnBlock& b, const KV& kr, const KV& vr, Scratch& s) {
  const ops::AttentionSeq& sq = a.seqs[b.seq];
  const int64_t hd = a.head_dim, nh = b.n_heads, nq = static_cast<int64_t>(b.n_rows) * nh;
  const int64_t nk0 = sq.pos0 + (b.row0 - sq.first_row) + 1;  // keys of the block's first row
  const int64_t nk_last = nk0 + b.n_rows - 1;
  const bool single = sq.n_tokens == 1;
  const int64_t n_lanes = single ? 64 : 16;
  float* scores = s.scores.data();
  float* acc = s.acc.data();
  float* mx = s.max_s.data();
  float* h = s.h.data();  // query i's h8 of tile key k at h + 64 i + 8 k
  const float** qp = s.qp.data();
  const int64_t scs = s.sc_stride, accs = s.acc_stride;
  const float* q_block = a.q + (b.row0 * a.n_head + b.head0) * hd;  // row r, head g: + (r * n_head + g) * hd
  for (int64_t i = 0; i < nq; ++i) {
    qp[i] = q_block + (i / nh) * a.n_head * hd + (i % nh) * hd;
    mx[i] = -INFINITY;
  }

  // Keys every row of the block sees (j < nk0), 8 at a time for all queries; the rest
  // (the tail, and the causal triangle of a prompt block) key by key below.
  int64_t j_tiled = 0;
  if (nk0 >= 8) {
    const __m256 scale = _mm256_set1_ps(a.scale);
    float* run = s.run.data();  // per query, the 8 lanes of its running max
    for (int64_t i = 0; i < 8 * nq; ++i) run[i] = -INFINITY;
    for (; j_tiled + 8 <= nk0; j_tiled += 8) {
      for (int64_t k = 0; k < 8; ++k) {
        if (j_tiled + 8 + k < nk_last) prefetch_row<_MM_HINT_T0>(kr(j_tiled + 8 + k, nullptr), hd);
        prefetch_row<_MM_HINT_T1>(vr(j_tiled + k, nullptr), hd);
      }
      for (int64_t k = 0; k < 8; ++k) {
        const float* row = key_f32(kr(j_tiled + k, nullptr), hd, s.ktile.data());
        key_h8_any(qp, nq, row, hd, h + 8 * k, 64);
      }
      for (int64_t i = 0; i < nq; ++i) {
        const __m256 sc = _mm256_mul_ps(reduce8(h + 64 * i), scale);
        _mm256_storeu_ps(scores + i * scs + j_tiled, sc);
        _mm256_storeu_ps(run + 8 * i, _mm256_max_ps(sc, _mm256_loadu_ps(run + 8 * i)));
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      for (int l = 0; l < 8; ++l) mx[i] = max_ignoring_nan(mx[i], run[8 * i + l]);
    }
  }
  for (int64_t j = j_tiled; j < nk_last; ++j) {
    if (j + 4 < nk_last) prefetch_row<_MM_HINT_T0>(kr(j + 4, nullptr), hd);
    prefetch_row<_MM_HINT_T1>(vr(j, nullptr), hd);
    const float* row = key_f32(kr(j, nullptr), hd, s.ktile.data());
    const int64_t r0 = std::max<int64_t>(0, j - nk0 + 1);  // rows with j < nk0 + r
    const int64_t i0 = r0 * nh;
    key_h8_any(qp + i0, nq - i0, row, hd, h, 8);
    for (int64_t i = i0; i < nq; ++i) {
      const float sc = sum16_tail(_mm256_loadu_ps(h + 8 * (i - i0))) * a.scale;
      scores[i * scs + j] = sc;
      mx[i] = max_ignoring_nan(mx[i], sc);
    }
  }
  for (int64_t i = 0; i < nq; ++i) softmax(scores + i * scs, nk0 + i / nh, mx[i]);

  // A lone query gains nothing from chunks: one pass. The keys every row sees (j < nk0)
  // go to the block's queries kValueGroup at a time; then each row's keys of the causal
  // triangle (nk0 <= j < nk0 + r), in order after them.
  const int64_t chunk = nq == 1 ? nk0 : kValueChunk;
  float* pt = s.ptile.data();
  float* qa[8];
  for (int64_t j0 = 0; j0 < nk0; j0 += chunk) {
    const int64_t j1 = std::min(j0 + chunk, nk0);
    for (int64_t i0 = 0; i0 < nq; i0 += kValueGroup) {
      const int64_t qt = std::min<int64_t>(kValueGroup, nq - i0);
      for (int64_t g = 0; g < qt; ++g) {
        const float* p = scores + (i0 + g) * scs;
        for (int64_t j = j0; j < j1; ++j) pt[8 * (j - j0) + g] = p[j];
        qa[g] = acc + (i0 + g) * accs;
      }
      switch (qt) {
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
    sum_lanes8(acc + i * accs, hd, single, a.out + ((b.row0 + r) * a.n_head + b.head0 + g) * hd);
  }
}

}  // namespace

HEARTH_SIMD __attribute__((flatten)) void attend_blocks_avx2(const AttendArgs& a, const AttnBlock* blocks, int64_t begin,
                                                             int64_t end) {
  Scratch s;
  int64_t max_q = 1;
  for (int64_t i = begin; i < end; ++i) max_q = std::max<int64_t>(max_q, int64_t{blocks[i].n_rows} * blocks[i].n_heads);
  s.sc_stride = a.max_keys + 64;
  s.acc_stride = 64 * a.head_dim;
  s.scores.resize(static_cast<size_t>(max_q * s.sc_stride));
  s.acc.resize(static_cast<size_t>(max_q * s.acc_stride));
  s.max_s.resize(static_cast<size_t>(max_q));
  s.ktile.resize(static_cast<size_t>(a.head_dim));
  s.run.resize(static_cast<size_t>(8 * max_q));
  s.h.resize(static_cast<size_t>(64 * max_q));
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
void attend_blocks_avx2(const AttendArgs&, const AttnBlock*, int64_t, int64_t) {}
#endif

}  // namespace hearth::cpu

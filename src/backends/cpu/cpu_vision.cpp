// The CPU back-end's vision-tower operations: layer_norm and gelu split over the pool
// by rows / elements (each value computed by the reference code), and attention_full as
// a tiled online-softmax ("flash") kernel: work items of up to kQueryRows query rows of
// one segment and head walk that segment's keys kKeyTile at a time, keeping a running
// max, sum and output per row, so no row ever holds all its scores. The keys are first
// transposed per head ([head, dim, row]) so that one query row's scores against 16 keys
// are 16 independent sums (one vector register), and the kernel is compiled three
// times (plain, AVX2+FMA, AVX-512) from the same template, picked at run time.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels_ref.h"
#include "core/error.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kQueryRows = 32;  // query rows per work item
constexpr int64_t kKeyTile = 64;    // keys per step of the online softmax
constexpr int64_t kLanes = 16;      // keys per score vector
constexpr int64_t kKtPad = kLanes;  // floats past each transposed row (a last partial vector reads them)

template <bool Fma>
inline float madd(float a, float b, float c) {
  if constexpr (Fma) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

// e^x for x <= 0: round(x / ln 2) split off, ln 2 in two parts (the first exact times
// any n here), a degree-6 polynomial on |r| <= ln2 / 2 (relative error about 2e-7),
// the power of two built in the exponent bits. Below -87 it returns e^-87 (about 1.6e-38),
// which only ever multiplies sums that are then at least 1 (the row's max scores 1).
// Branch-free, so loops over it vectorise.
template <bool Fma>
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float shift = 0x1.8p23f;
  const float n = (x * 1.44269504f + shift) - shift;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-6f;
  float p = 1.0f / 720.0f;
  p = madd<Fma>(p, r, 1.0f / 120.0f);
  p = madd<Fma>(p, r, 1.0f / 24.0f);
  p = madd<Fma>(p, r, 1.0f / 6.0f);
  p = madd<Fma>(p, r, 0.5f);
  p = madd<Fma>(p, r, 1.0f);
  p = madd<Fma>(p, r, 1.0f);
  const auto e = static_cast<int32_t>(n);
  return p * std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
}

struct FullArgs {
  const float* q;
  const float* kt;  // [n_head, head_dim, kt_stride]: key row r of head h, dim d at (h * head_dim + d) * kt_stride + r
  const float* v;
  int64_t n_head, head_dim, kt_stride;
  float scale;
  float* out;
};

using FullItem = FullAttnItem;

// Items [begin, end). kD: head_dim when it is a compile-time constant (the loops over
// it unroll and the output rows stay in registers), 0 for any other.
template <int kD, bool Fma>
inline void full_items(const FullArgs& a, const FullItem* items, int64_t begin, int64_t end) {
  const int64_t D = kD > 0 ? kD : a.head_dim, stride = a.n_head * D;
  std::vector<float> buf(static_cast<size_t>(2 * kQueryRows * D + kQueryRows * kKeyTile + 2 * kQueryRows));
  float* qs = buf.data();                       // [kQueryRows, D]: scaled queries
  float* acc = qs + kQueryRows * D;             // [kQueryRows, D]: unnormalised outputs
  float* sc = acc + kQueryRows * D;             // [kQueryRows, kKeyTile]: a tile's scores
  float* row_max = sc + kQueryRows * kKeyTile;  // [kQueryRows]
  float* row_sum = row_max + kQueryRows;        // [kQueryRows]
  for (int64_t it = begin; it < end; ++it) {
    const FullItem& w = items[it];
    const int64_t nq = w.n_q, h = w.head;
    for (int64_t i = 0; i < nq; ++i) {
      const float* qr = a.q + (w.row0 + i) * stride + h * D;
      for (int64_t d = 0; d < D; ++d) qs[i * D + d] = qr[d] * a.scale;
      row_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
    }
    std::fill(acc, acc + nq * D, 0.0f);
    const float* kt = a.kt + h * D * a.kt_stride;
    for (int64_t j0 = w.seg0; j0 < w.seg0 + w.seg_n; j0 += kKeyTile) {
      const int64_t nk = std::min(kKeyTile, w.seg0 + w.seg_n - j0);
      // Scores, 16 keys at a time (a partial last vector reads keys past the segment,
      // or the padding, and its extra scores are never used).
      for (int64_t i = 0; i < nq; ++i) {
        const float* qi = qs + i * D;
        for (int64_t jb = 0; jb < nk; jb += kLanes) {
          float s[kLanes] = {};
          const float* kc = kt + j0 + jb;
          for (int64_t d = 0; d < D; ++d) {
            const float qd = qi[d];
            const float* kr = kc + d * a.kt_stride;
            for (int64_t l = 0; l < kLanes; ++l) s[l] = madd<Fma>(qd, kr[l], s[l]);
          }
          for (int64_t l = 0; l < kLanes; ++l) sc[i * kKeyTile + jb + l] = s[l];
        }
      }
      // Online softmax: rescale what the row has by e^(old max - new max), add this tile.
      for (int64_t i = 0; i < nq; ++i) {
        float* si = sc + i * kKeyTile;
        float mx = row_max[i];
        for (int64_t j = 0; j < nk; ++j) mx = si[j] > mx ? si[j] : mx;
        const float corr = exp_nonpos<Fma>(row_max[i] - mx);
        row_max[i] = mx;
        for (int64_t j = 0; j < nk; ++j) si[j] = exp_nonpos<Fma>(si[j] - mx);
        float tile_sum = 0.0f;
        for (int64_t j = 0; j < nk; ++j) tile_sum += si[j];
        row_sum[i] = madd<Fma>(row_sum[i], corr, tile_sum);
        float o[kD > 0 ? kD : 1];
        float* oi = kD > 0 ? o : acc + i * D;
        for (int64_t d = 0; d < D; ++d) oi[d] = acc[i * D + d] * corr;
        for (int64_t j = 0; j < nk; ++j) {
          const float p = si[j];
          const float* vj = a.v + (j0 + j) * stride + h * D;
          for (int64_t d = 0; d < D; ++d) oi[d] = madd<Fma>(p, vj[d], oi[d]);
        }
        if constexpr (kD > 0) std::memcpy(acc + i * D, o, sizeof(float) * D);
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const float inv = 1.0f / row_sum[i];
      float* orow = a.out + (w.row0 + i) * stride + h * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = acc[i * D + d] * inv;
    }
  }
}

template <bool Fma>
inline void full_items_any(const FullArgs& a, const FullItem* items, int64_t begin, int64_t end) {
  switch (a.head_dim) {
    case 16: return full_items<16, Fma>(a, items, begin, end);
    case 64: return full_items<64, Fma>(a, items, begin, end);
    case 72: return full_items<72, Fma>(a, items, begin, end);
    case 80: return full_items<80, Fma>(a, items, begin, end);
    case 128: return full_items<128, Fma>(a, items, begin, end);
    default: return full_items<0, Fma>(a, items, begin, end);
  }
}

void full_items_plain(const FullArgs& a, const FullItem* items, int64_t begin, int64_t end) {
  full_items_any<false>(a, items, begin, end);
}
HEARTH_SIMD __attribute__((flatten)) void full_items_avx2(const FullArgs& a, const FullItem* items, int64_t begin,
                                                           int64_t end) {
  full_items_any<true>(a, items, begin, end);
}
HEARTH_AVX512 __attribute__((flatten)) void full_items_avx512(const FullArgs& a, const FullItem* items,
                                                               int64_t begin, int64_t end) {
  full_items_any<true>(a, items, begin, end);
}

bool has_avx512() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512vl && f.avx512bw;
}

}  // namespace

void check_rope_multi(const ops::RopeParams& p, const char* backend) {
  if (p.multi == ops::RopeMulti::kNone) return;
  const std::string what = "rope: multi-axis positions ";
  if (!p.neox) fail(ErrorKind::kInvalidInput, backend, what + "need the NeoX layout");
  if (p.pos3 == nullptr) fail(ErrorKind::kInvalidInput, backend, what + "without pos3");
  if (p.multi == ops::RopeMulti::kVision &&
      (p.sections[0] <= 0 || p.sections[1] <= 0 || p.sections[0] + p.sections[1] != p.n_rot / 2)) {
    fail(ErrorKind::kInvalidInput, backend,
         what + "(vision): sections " + std::to_string(p.sections[0]) + " + " + std::to_string(p.sections[1]) +
             " must be positive and cover n_rot / 2 = " + std::to_string(p.n_rot / 2) + " pairs");
  }
  if (p.multi != ops::RopeMulti::kVision && p.multi != ops::RopeMulti::kInterleaved) {
    fail(ErrorKind::kInvalidInput, backend, what + "of unknown kind " + std::to_string(static_cast<int>(p.multi)));
  }
}

void CpuBackend::layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias,
                            int64_t n_rows, int64_t n, float eps, float* y) {
  const OpScope timer(op_times_.get(), "layer_norm");
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  pool_.parallel_for(n_rows, grain, [&](int64_t begin, int64_t end, int) {
    ref::layer_norm(x + begin * n, weight, bias, end - begin, n, eps, y + begin * n);
  });
}

void CpuBackend::gelu(float* x, int64_t n, bool tanh_approx) {
  const OpScope timer(op_times_.get(), "gelu");
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end, int) { ref::gelu(x + begin, end - begin, tanh_approx); });
}

void CpuBackend::attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs,
                                int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out) {
  const OpScope timer(op_times_.get(), "attention_full");
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_segs; ++s) {
    if (segs[s].first_row < 0 || segs[s].n_rows < 0) {
      fail(ErrorKind::kInvalidInput, "cpu", "attention_full: segment " + std::to_string(s) + " has negative rows");
    }
    n_rows = std::max(n_rows, segs[s].first_row + segs[s].n_rows);
  }
  if (n_rows == 0 || n_head <= 0 || head_dim <= 0) return;
  // Keys transposed per head: [n_head, head_dim, kt_stride], kt_stride = n_rows + padding.
  const int64_t kt_stride = n_rows + kKtPad, stride = n_head * head_dim;
  full_kt_.resize(static_cast<size_t>(n_head * head_dim * kt_stride));
  float* kt = full_kt_.data();
  pool_.parallel_for(n_head * head_dim, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t hd = begin; hd < end; ++hd) {
      float* dst = kt + hd * kt_stride;
      const float* src = k + hd;  // (h, d) = hd: element h * head_dim + d of each row
      for (int64_t r = 0; r < n_rows; ++r) dst[r] = src[r * stride];
      std::fill(dst + n_rows, dst + kt_stride, 0.0f);
    }
  });
  full_items_.clear();
  for (int64_t s = 0; s < n_segs; ++s) {
    const ops::FullAttentionSeg& sg = segs[s];
    for (int64_t r = 0; r < sg.n_rows; r += kQueryRows) {
      const auto nq = static_cast<int32_t>(std::min(kQueryRows, sg.n_rows - r));
      for (int64_t h = 0; h < n_head; ++h) {
        full_items_.push_back({sg.first_row + r, sg.first_row, sg.n_rows, nq, static_cast<int32_t>(h)});
      }
    }
  }
  // Longest segments first, so the pool's dynamic chunks even out.
  std::stable_sort(full_items_.begin(), full_items_.end(),
                   [](const FullItem& a, const FullItem& b) { return a.seg_n > b.seg_n; });
  const FullArgs args{q, kt, v, n_head, head_dim, kt_stride, scale, out};
  const auto run = !simd_ok_ ? full_items_plain : has_avx512() ? full_items_avx512 : full_items_avx2;
  const FullItem* items = full_items_.data();
  pool_.parallel_for(static_cast<int64_t>(full_items_.size()), 1,
                     [&](int64_t begin, int64_t end, int) { run(args, items, begin, end); });
}

}  // namespace hearth::cpu

#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/attention_avx512.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/matmul_f32.h"
#include "backends/cpu/quant_dot.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/mapped_file.h"
#include "core/tune.h"
#include "quant/dequant_ref.h"


namespace hearth::cpu {
namespace {

class HostBuffer final : public ops::Buffer {
 public:
  explicit HostBuffer(int64_t n) : data_(static_cast<size_t>(n)) {}
  float* data() override { return data_.data(); }
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }

 private:
  std::vector<float> data_;
};

// Uninitialised host memory: large allocations come from fresh anonymous pages, which
// the OS commits only when first written, so an unused KV pool costs no resident memory.
// From 2 MiB up they are mapped for huge pages (core/huge_pages.h): attention reads
// the KV rows of many blocks all over the pool.
class LazyHostBuffer final : public ops::Buffer {
 public:
  explicit LazyHostBuffer(int64_t n) : n_(n) {
    const size_t bytes = sizeof(float) * static_cast<size_t>(n);
    if (bytes >= kHugePageBytes) region_ = HugeRegion::map(bytes);
    if (region_) {
      ptr_ = reinterpret_cast<float*>(region_.data());
    } else {
      heap_.reset(new float[static_cast<size_t>(n)]);
      ptr_ = heap_.get();
    }
  }
  float* data() override { return ptr_; }
  int64_t size() const override { return n_; }

 private:
  HugeRegion region_;
  std::unique_ptr<float[]> heap_;
  float* ptr_ = nullptr;
  int64_t n_;
};

using AttendFn = void (*)(const AttendArgs&, int64_t, int64_t);
using SwigluFn = void (*)(const float*, const float*, int64_t, float*);

// f16 -> f32 rows with F16C (exact, like the plain conversion).
struct CvtF16C {
  HEARTH_SIMD static void run(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
#if defined(__x86_64__)
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
#endif
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  }
  // q8_0 -> f32 (the same bits as CvtPlain::q8).
  HEARTH_SIMD static void q8(const uint8_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
    dequantize_row_q8_0_avx2(src, dst, n);
#else
    dequantize_row_q8_0(src, dst, n);
#endif
  }
};

struct GenericAttend {
  template <class K, class V>
  void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale, bool single,
                  float* scores, float* acc, float* tmp, float* out) const {
    ggml_order::attend_one(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};

// Work items [begin, end) of attention: item = query row * n_head + head, each read
// through its sequence's block table. The fast copies below are this same code
// compiled for AVX2+FMA (or AVX-512): `flatten` inlines the ggml_order math into them,
// so std::fma becomes one instruction and the 16-lane loops vectorise with the same
// roundings (without it GCC's identical-code folding merged the copies and every fma
// was a libm call).
// RawF16: the kernel reads f16 and q8_0 rows itself (the AVX-512 one converts in its
// loads). A q8_0 cache's offsets (key_offs, kv_off) are in bytes.
template <class Cvt, class Kernel, bool RawF16 = false>
inline void attend_rows(const AttendArgs& a, int64_t begin, int64_t end, const Kernel& kernel) {
  const int64_t group = a.n_head / a.n_head_kv;
  std::vector<float> scores(static_cast<size_t>(a.max_keys + 64)), acc(static_cast<size_t>(64 * a.head_dim)),
      tmp(static_cast<size_t>(a.head_dim));
  const ops::KvLayer& c = *a.cache;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t row = item / a.n_head, h = item % a.n_head, kv_off = (h / group) * a.head_dim;
    const ops::AttentionSeq& sq = a.seqs[a.row_seq[row]];
    const int64_t n_keys = sq.pos0 + (row - sq.first_row) + 1;
    const int64_t* offs = a.key_offs + a.seq_offs[a.row_seq[row]];
    const bool single = sq.n_tokens == 1;
    if (c.type == ops::KvType::Q8_0) {
      const int64_t off = ops::kv_row_bytes(c.type, kv_off);
      const auto* kb = static_cast<const uint8_t*>(c.k) + off;
      const auto* vb = static_cast<const uint8_t*>(c.v) + off;
      if constexpr (RawF16) {
        kernel(a.q + item * a.head_dim, KvRowsOffRawQ8{kb, offs}, KvRowsOffRawQ8{vb, offs}, n_keys, a.head_dim,
               a.scale, single, scores.data(), acc.data(), tmp.data(), a.out + item * a.head_dim);
      } else {
        kernel(a.q + item * a.head_dim, KvRowsOffQ8<Cvt>{kb, offs, a.head_dim}, KvRowsOffQ8<Cvt>{vb, offs, a.head_dim},
               n_keys, a.head_dim, a.scale, single, scores.data(), acc.data(), tmp.data(),
               a.out + item * a.head_dim);
      }
      continue;
    }
    if constexpr (RawF16) {
      if (c.type == ops::KvType::F16) {
        const KvRowsOffRawF16 kr{static_cast<const uint16_t*>(c.k) + kv_off, offs};
        const KvRowsOffRawF16 vr{static_cast<const uint16_t*>(c.v) + kv_off, offs};
        kernel(a.q + item * a.head_dim, kr, vr, n_keys, a.head_dim, a.scale, single, scores.data(), acc.data(),
               tmp.data(), a.out + item * a.head_dim);
        continue;
      }
    }
    if (c.type == ops::KvType::F16) {
      const KvRowsOffF16<Cvt> kr{static_cast<const uint16_t*>(c.k) + kv_off, offs, a.head_dim};
      const KvRowsOffF16<Cvt> vr{static_cast<const uint16_t*>(c.v) + kv_off, offs, a.head_dim};
      kernel(a.q + item * a.head_dim, kr, vr, n_keys, a.head_dim, a.scale, single, scores.data(), acc.data(),
             tmp.data(), a.out + item * a.head_dim);
    } else {
      const KvRowsOffF32 kr{static_cast<const float*>(c.k) + kv_off, offs};
      const KvRowsOffF32 vr{static_cast<const float*>(c.v) + kv_off, offs};
      kernel(a.q + item * a.head_dim, kr, vr, n_keys, a.head_dim, a.scale, single, scores.data(), acc.data(),
             tmp.data(), a.out + item * a.head_dim);
    }
  }
}
void attend_rows_plain(const AttendArgs& a, int64_t begin, int64_t end) {
  attend_rows<CvtPlain>(a, begin, end, GenericAttend{});
}
HEARTH_SIMD __attribute__((flatten)) void attend_rows_avx2(const AttendArgs& a, int64_t begin, int64_t end) {
  attend_rows<CvtF16C>(a, begin, end, GenericAttend{});
}

#if defined(__x86_64__)
// ggml_order::attend_one for head_dim a multiple of 64, with the reductions written as
// AVX-512 register code instead of scalar loops. Every rounding is the reference one:
// scores are dot_order_a (4 x 16-lane fma accumulators, combined (0+2) + (1+3), then
// sum16; no leftover elements, so the double step is exact); the value sum keeps each
// lane's keys j = l, l + n_lanes, ... in order, but runs lane by lane with the
// accumulators in registers (lanes are independent); the final lane sums are sum16
// done vertically, 16 output elements at a time.
template <class K, class V>
HEARTH_AVX512 void attend_one_avx512(const float* q, const K& krow, const V& vrow, int64_t n_keys, int64_t head_dim,
                                     float scale, bool single_query, float* scores, float* acc, float* tmp,
                                     float* out) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const auto kj = krow(j, tmp);
    __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < head_dim; i += 64) {
      for (int a = 0; a < 4; ++a) {
        c[a] = _mm512_fmadd_ps(load16(kj + i + 16 * a), _mm512_loadu_ps(q + i + 16 * a), c[a]);
      }
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(c[0], c[2]), _mm512_add_ps(c[1], c[3]));
    scores[j] = sum16_zmm(sum) * scale;
    max_s = std::fmax(max_s, scores[j]);
  }
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  for (int64_t j = 0; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double total = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) total += sum16_zmm(_mm512_loadu_ps(scores + j));
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
  const int64_t n_lanes = single_query ? 64 : 16;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      __m512 r[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int64_t j = l; j < n_keys; j += n_lanes) {
        const auto vj = vrow(j, tmp) + d0;
        const __m512 p = _mm512_set1_ps(scores[j]);
        for (int b = 0; b < 4; ++b) r[b] = _mm512_fmadd_ps(load16(vj + 16 * b), p, r[b]);
      }
      for (int b = 0; b < 4; ++b) _mm512_storeu_ps(acc + l * head_dim + d0 + 16 * b, r[b]);
    }
  }
  sum_lanes(acc, head_dim, single_query, out);
}
#endif

#if defined(__x86_64__)
struct Avx512Attend {
  template <class K, class V>
  HEARTH_AVX512 void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale,
                                bool single, float* scores, float* acc, float* tmp, float* out) const {
    attend_one_avx512(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};
#endif

HEARTH_AVX512 __attribute__((flatten)) void attend_rows_avx512(const AttendArgs& a, int64_t begin, int64_t end) {
#if defined(__x86_64__)
  if (a.head_dim % 64 == 0) {
    attend_rows<CvtF16C, Avx512Attend, true>(a, begin, end, Avx512Attend{});
    return;
  }
#endif
  attend_rows<CvtF16C>(a, begin, end, GenericAttend{});
}

bool avx512_ok() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512vl && f.avx512bw;
}

void swiglu_plain(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
HEARTH_SIMD __attribute__((flatten)) void swiglu_avx2(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
#if defined(__x86_64__)
// 16 at a time where exp16 applies (the same exp_approx bits; negation, division, the + 1
// and the product are single exact / IEEE operations either way), else the scalar code.
HEARTH_AVX512 __attribute__((flatten)) void swiglu_avx512(const float* g, const float* u, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    __m512 e;
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv), _mm512_set1_epi32(INT32_MIN)));
    if (exp16(neg, e)) {
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
      continue;
    }
    for (int64_t k = i; k < i + 16; ++k) out[k] = ggml_order::swiglu_one(g[k], u[k]);
  }
  for (; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
#else
void swiglu_avx512(const float* g, const float* u, int64_t n, float* out) { swiglu_plain(g, u, n, out); }
#endif

}  // namespace

CpuBackend::CpuBackend(int n_threads, bool reference_kernels)
    : pool_(n_threads > 0 ? n_threads : physical_core_count()),
      reference_kernels_(reference_kernels),
      simd_ok_(!reference_kernels && cpu_features().avx2 && cpu_features().fma && cpu_features().f16c) {
  set_repack(!reference_kernels && tune::on(tune::kCpuRepack));
  // cpu.moe=generic: the model's per-expert path (for comparisons).
  fused_moe_ = tune::get(tune::kCpuMoe) == 0;
  set_op_timing(tune::on(tune::kCpuOpTiming));
}

CpuBackend::~CpuBackend() {
  if (op_times_ && op_times_->dirty()) print_op_timing();
}

void CpuBackend::set_op_timing(bool on) {
  if (on && !op_times_) op_times_ = std::make_unique<OpTimes>();
  if (!on) op_times_.reset();
}

void CpuBackend::reset_op_timing() {
  if (op_times_) op_times_->reset();
}

void CpuBackend::print_op_timing(const std::string& title, double wall_ms) {
  if (op_times_) op_times_->print(stderr, title, wall_ms);
}

std::vector<OpTimeRow> CpuBackend::op_timing_rows() const {
  return op_times_ ? op_times_->rows() : std::vector<OpTimeRow>{};
}

bool CpuBackend::packed_available() { return find_packed_kernel(GgmlType::Q4_1) != nullptr; }

std::string CpuBackend::name() const {
  return "cpu (" + std::to_string(pool_.n_threads()) + " threads; " + cpu_features_string(cpu_features()) + ")";
}

bool CpuBackend::supports_weight(GgmlType type) const { return can_dequantize(type); }

ops::WeightView CpuBackend::prepare_weight(const ops::WeightView& w) {
  if (!supports_weight(w.type)) {
    fail(ErrorKind::kUnsupported, "cpu",
         "tensor '" + w.name + "' has type " + std::string(ggml_type_name(w.type)) +
             ", which the CPU back-end cannot multiply");
  }
  ops::WeightView out = w;
  out.backend_data = nullptr;
  if (!repack_ || !packable(w.type, w.n_cols) || find_packed_kernel(w.type) == nullptr) return out;
  // Several experts' rows: each expert must start a 16-row group (moe_ffn reads them alone).
  if (w.n_expert > 0 && (w.n_rows % w.n_expert != 0 || (w.n_rows / w.n_expert) % kPackRows != 0)) return out;
  // Every call packs anew: a copy is never looked up by its source address, which a
  // freed source (OwnedWeights) can hand to the next weight. Models prepare each tensor
  // once (a tied output layer reuses the table's prepared view).
  packed_.push_back(pack_weight(w, &pool_, &packed_arena_));
  packed_bytes_ += packed_.back()->n_groups * packed_.back()->nb * packed_.back()->block_bytes;
  out.backend_data = packed_.back().get();
  // The rows are read from the packed copy from now on. Packing already gave back the
  // mapped pages piece by piece; this sweep catches the pages straddling two pieces
  // (get_rows of a tied embedding faults in the few rows it reads).
  release_mapped_pages(w.data, static_cast<size_t>(w.n_rows) * w.row_bytes);
  return out;
}

std::unique_ptr<ops::Buffer> CpuBackend::alloc(int64_t n_floats) { return std::make_unique<HostBuffer>(n_floats); }

std::unique_ptr<ops::Buffer> CpuBackend::alloc_lazy(int64_t n_floats) {
  return std::make_unique<LazyHostBuffer>(n_floats);
}

void CpuBackend::copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) {
  const OpScope timer(op_times_.get(), "copy_to_host");
  std::memcpy(dst, src.data() + offset, sizeof(float) * n);
}

void CpuBackend::copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) {
  const OpScope timer(op_times_.get(), "copy_from_host");
  std::memcpy(dst.data() + offset, src, sizeof(float) * n);
}

void CpuBackend::get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) {
  const OpScope timer(op_times_.get(), "get_rows");
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_rows) {
      fail(ErrorKind::kInvalidInput, "cpu", "token id " + std::to_string(ids[i]) + " out of range for '" +
                                                table.name + "' (" + std::to_string(table.n_rows) + " rows)");
    }
  }
  ref::get_rows(table, ids, n_ids, out);
}

void CpuBackend::matmul_packed(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                               float* const* ys) {
  const auto& p0 = *static_cast<const PackedWeight*>(ws[0]->backend_data);
  const DotKernel* k = find_dot_kernel(p0.type);
  const PackedMatmulFn mm = find_packed_kernel(p0.type);
  const auto row_bytes = static_cast<int64_t>(*ggml_row_bytes(packed_act_type(p0.type), static_cast<uint64_t>(p0.n_cols)));
  const int64_t nb = p0.nb;
  act_scratch_.resize(static_cast<size_t>(n_tokens * row_bytes));
  act_d_.resize(static_cast<size_t>(n_tokens * nb));
  act_s_.resize(act_d_.size());
  act_corr_.resize(act_d_.size() * 8);
  uint8_t* xq = act_scratch_.data();
  {
    const OpScope timer(op_times_.get(), "act quantize");
    pool_.parallel_for(n_tokens, act_grain(p0.n_cols), [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        k->quantize_act(x + t * p0.n_cols, xq + t * row_bytes, p0.n_cols);
        packed_act_scales(p0.type, xq + t * row_bytes, nb, act_d_.data() + t * nb, act_s_.data() + t * nb,
                          act_corr_.data() + t * nb * 8);
      }
    });
  }
  PackedAct a;
  a.xq = xq;
  a.row_bytes = row_bytes;
  a.nb = nb;
  a.d = act_d_.data();
  a.s = act_s_.data();
  a.corr = act_corr_.data();
  // The weights' 16-row groups one after another; each chunk is cut at the weights' borders.
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += static_cast<const PackedWeight*>(ws[i]->backend_data)->n_groups;
  // cpu.prefill_blocks=N (a multiple of 8; off by default, an experiment for many
  // cores): tasks are (block of N tokens, group), block after block, so a thread's chunk
  // takes one block of the prompt against several groups while the block stays in its L2,
  // at the price of reading each group's weights once per block. Tiles start at the same
  // tokens, so the bits do not change.
  const int64_t prompt_block = tuned_token_block(tune::kCpuPrefillBlocks);
  const int64_t tb = prompt_block > 0 && n_tokens > prompt_block ? prompt_block : n_tokens;
  const int64_t n_blocks = (n_tokens + tb - 1) / tb;
  pool_.parallel_for(n_blocks * total, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t blk = begin / total; blk * total < end; ++blk) {
      const int64_t t0 = blk * tb, nt = std::min(tb, n_tokens - t0);
      PackedAct ab = a;
      ab.xq = a.xq + t0 * row_bytes;
      ab.d = a.d + t0 * nb;
      ab.s = a.s + t0 * nb;
      ab.corr = a.corr + t0 * nb * 8;
      const int64_t lo = std::max(begin, blk * total) - blk * total, hi = std::min(end, (blk + 1) * total) - blk * total;
      int64_t off = 0;
      for (int i = 0; i < n && off < hi; ++i) {
        const auto& p = *static_cast<const PackedWeight*>(ws[i]->backend_data);
        const int64_t b = std::max(lo, off) - off, e = std::min(hi, off + p.n_groups) - off;
        if (b < e) mm(p, b, e, ab, nt, ys[i] + t0 * p.n_rows, p.n_rows);
        off += p.n_groups;
      }
    }
  });
}

void CpuBackend::matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  if (w.backend_data != nullptr) {
    const OpScope timer(op_times_.get(), "matmul packed");
    const ops::WeightView* ws[1] = {&w};
    float* ys[1] = {y};
    matmul_packed(ws, 1, x, n_tokens, ys);
    return;
  }
  const DotKernel* k = find_dot_kernel(w.type, reference_kernels_);
  const auto act_row = k != nullptr ? ggml_row_bytes(k->act_type, static_cast<uint64_t>(w.n_cols)) : std::nullopt;
  if (act_row) {
    // Quantize the activations once, then each weight row meets every token's row
    // while it is in cache.
    const MatmulFn mm = reference_kernels_ ? nullptr : find_matmul_kernel(w.type);
    const OpScope timer(op_times_.get(), mm != nullptr ? "matmul tile" : "matmul dot");
    const auto row_bytes = static_cast<int64_t>(*act_row);
    act_scratch_.resize(static_cast<size_t>(n_tokens * row_bytes));
    uint8_t* xq = act_scratch_.data();
    {
      const OpScope quantize_timer(op_times_.get(), "act quantize");
      pool_.parallel_for(n_tokens, act_grain(w.n_cols), [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) k->quantize_act(x + t * w.n_cols, xq + t * row_bytes, w.n_cols);
      });
    }
    const auto* wdata = static_cast<const uint8_t*>(w.data);
    if (mm != nullptr) {
      // Tiles of 4 weight rows x 4 tokens: each weight block is unpacked once per 4 tokens
      // and each activation block loaded once per 4 rows; the same sums as vec_dot.
      pool_.parallel_for(w.n_rows, 16, [&](int64_t begin, int64_t end, int) {
        mm(w.n_cols, wdata + static_cast<uint64_t>(begin) * w.row_bytes, w.row_bytes, end - begin, xq,
           static_cast<uint64_t>(row_bytes), n_tokens, y + begin, w.n_rows);
      });
      return;
    }
    pool_.parallel_for(w.n_rows, 16, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* wrow = wdata + static_cast<uint64_t>(r) * w.row_bytes;
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.n_rows + r] = k->vec_dot(w.n_cols, wrow, xq + t * row_bytes);
      }
    });
    return;
  }
  // Types without a quantized dot product (f32, f16, bf16, Q2_K, Q3_K, ...): dequantize
  // each weight row once and reuse it for every token.
  // F32 rows are read in place. Every output is ref::dot16 of its row and token, whatever
  // the batch (the vector tiles give its bits, matmul_f32.h).
  const OpScope timer(op_times_.get(), "matmul float");
  const bool in_place = w.type == GgmlType::F32;
#if defined(__x86_64__)
  const auto dot_rows = !simd_ok_ ? dot_rows_f32_plain : avx512_ok() ? dot_rows_f32_avx512 : dot_rows_f32_avx2;
#elif defined(__aarch64__)
  const auto dot_rows = reference_kernels_ || !cpu_features().neon ? dot_rows_f32_plain : dot_rows_f32_neon;
#else
  const auto dot_rows = dot_rows_f32_plain;
#endif
  // Work items: a chunk of 16 to kFloatRows rows x a block of up to kFloatTokens tokens,
  // four items a thread at least. Each item reads its tokens' rows once for all the rows
  // of its chunk (a large chunk makes that traffic small; token blocks give many cores
  // work when the rows are few); consecutive items share a chunk, whose converted rows
  // a thread keeps while its items do.
  const int64_t n_tb = (n_tokens + kFloatTokens - 1) / kFloatTokens;
  const int64_t chunk =
      std::clamp<int64_t>(w.n_rows * n_tb / (4 * pool_.n_threads()) / 16 * 16, 16, kFloatRows);
  const int64_t n_rc = (w.n_rows + chunk - 1) / chunk;
  pool_.parallel_for(n_rc * n_tb, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> buf(in_place ? 0 : static_cast<size_t>(chunk * w.n_cols));
    const float* rows[kFloatRows];
    int64_t have = -1;  // the chunk whose rows are in `rows`
    for (int64_t item = begin; item < end; ++item) {
      const int64_t rc = item / n_tb, tb = item % n_tb, r0 = rc * chunk;
      const int64_t nr = std::min<int64_t>(chunk, w.n_rows - r0);
      if (rc != have) {
        for (int64_t k = 0; k < nr; ++k) {
          const auto* src = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r0 + k) * w.row_bytes;
          if (in_place) {
            rows[k] = reinterpret_cast<const float*>(src);
            continue;
          }
          float* dst = buf.data() + k * w.n_cols;
          if (w.type == GgmlType::F16) {
            f16_row_to_f32(reinterpret_cast<const uint16_t*>(src), dst, w.n_cols);
          } else {
            ref::dequantize_row(w, r0 + k, dst);
          }
          rows[k] = dst;
        }
        have = rc;
      }
      const int64_t t0 = tb * kFloatTokens, nt = std::min(kFloatTokens, n_tokens - t0);
      dot_rows(rows, nr, x + t0 * w.n_cols, nt, w.n_cols, y + t0 * w.n_rows + r0, w.n_rows);
    }
  });
}

void CpuBackend::matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                              float* const* ys) {
  if (n > 2 && matmul_multi_by_kind(ws, n, x, n_tokens, ys)) return;
  const ops::WeightView& w0 = *ws[0];
  bool same = n > 1;
  for (int i = 1; i < n && same; ++i) same = ws[i]->type == w0.type && ws[i]->n_cols == w0.n_cols;
  bool packed = same;
  for (int i = 0; i < n && packed; ++i) packed = ws[i]->backend_data != nullptr;
  if (packed) {
    const OpScope timer(op_times_.get(), "matmul_multi packed");
    matmul_packed(ws, n, x, n_tokens, ys);
    return;
  }
  const DotKernel* k = same ? find_dot_kernel(w0.type, reference_kernels_) : nullptr;
  const MatmulFn mm = k != nullptr && !reference_kernels_ ? find_matmul_kernel(w0.type) : nullptr;
  const auto act_row = mm != nullptr ? ggml_row_bytes(k->act_type, static_cast<uint64_t>(w0.n_cols)) : std::nullopt;
  if (!act_row) {
    const OpScope timer(op_times_.get(), "matmul_multi one by one");
    ops::Backend::matmul_multi(ws, n, x, n_tokens, ys);
    return;
  }
  const OpScope timer(op_times_.get(), "matmul_multi tile");
  const auto row_bytes = static_cast<int64_t>(*act_row);
  act_scratch_.resize(static_cast<size_t>(n_tokens * row_bytes));
  uint8_t* xq = act_scratch_.data();
  {
    const OpScope quantize_timer(op_times_.get(), "act quantize");
    pool_.parallel_for(n_tokens, act_grain(w0.n_cols), [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) k->quantize_act(x + t * w0.n_cols, xq + t * row_bytes, w0.n_cols);
    });
  }
  // The weights' rows one after another; each chunk is cut at the weights' borders.
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += ws[i]->n_rows;
  pool_.parallel_for(total, 16, [&](int64_t begin, int64_t end, int) {
    int64_t off = 0;
    for (int i = 0; i < n && off < end; ++i) {
      const ops::WeightView& w = *ws[i];
      const int64_t b = std::max(begin, off) - off, e = std::min(end, off + w.n_rows) - off;
      if (b < e) {
        mm(w.n_cols, static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(b) * w.row_bytes, w.row_bytes, e - b,
           xq, static_cast<uint64_t>(row_bytes), n_tokens, ys[i] + b, w.n_rows);
      }
      off += w.n_rows;
    }
  });
}

// Weights of several kinds (Qwen3.5's query, gate and key projections next to a value
// projection of another type; a DeltaNet layer's quantized qkv and z next to its f32
// gates): one matmul_multi per kind, so each kind's activations are quantized once and
// its rows run in one pass. Every output comes from the kernel its weight gets alone.
bool CpuBackend::matmul_multi_by_kind(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                                      float* const* ys) {
  const auto same_kind = [](const ops::WeightView& a, const ops::WeightView& b) {
    return a.type == b.type && a.n_cols == b.n_cols && (a.backend_data != nullptr) == (b.backend_data != nullptr);
  };
  std::vector<int> kind(static_cast<size_t>(n), -1);
  int n_kinds = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i && kind[i] < 0; ++j) {
      if (same_kind(*ws[i], *ws[j])) kind[i] = kind[j];
    }
    if (kind[i] < 0) kind[i] = n_kinds++;
  }
  if (n_kinds == 1 || n_kinds == n) return false;
  const OpScope timer(op_times_.get(), "matmul_multi by kind");
  std::vector<const ops::WeightView*> group_ws;
  std::vector<float*> group_ys;
  for (int k = 0; k < n_kinds; ++k) {
    group_ws.clear();
    group_ys.clear();
    for (int i = 0; i < n; ++i) {
      if (kind[i] != k) continue;
      group_ws.push_back(ws[i]);
      group_ys.push_back(ys[i]);
    }
    if (group_ws.size() == 1) {
      matmul(*group_ws[0], x, n_tokens, group_ys[0]);
    } else {
      matmul_multi(group_ws.data(), static_cast<int>(group_ws.size()), x, n_tokens, group_ys.data());
    }
  }
  return true;
}

void CpuBackend::add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) {
  const OpScope timer(op_times_.get(), "add_bias");
  ref::add_bias(x, bias, n_tokens);
}

// The element-wise operations below split over the pool by rows / tokens / elements when
// the batch is large enough (prefill); each output element is computed by the same
// reference code as before, so results are unchanged. Small calls (decode) run inline.
void CpuBackend::rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                          float* y) {
  const OpScope timer(op_times_.get(), "rms_norm");
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  pool_.parallel_for(n_rows, grain, [&](int64_t begin, int64_t end, int) {
    ref::rms_norm(x + begin * n, weight, end - begin, n, eps, y + begin * n);
  });
}

void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                      const ops::RopeParams& p) {
  const OpScope timer(op_times_.get(), "rope");
  if (p.multi != ops::RopeMulti::kNone) {
    check_rope_multi(p, "cpu");
    // Multi-axis positions come in p.pos3: each chunk gets its own tokens' triples.
    pool_.parallel_for(n_tokens, 8, [&](int64_t begin, int64_t end, int) {
      ops::RopeParams pc = p;
      pc.pos3 = p.pos3 + 3 * begin;
      ref::rope(x + begin * n_heads * head_dim, end - begin, n_heads, head_dim, nullptr, pc);
    });
    return;
  }
  pool_.parallel_for(n_tokens, 8, [&](int64_t begin, int64_t end, int) {
    ref::rope(x + begin * n_heads * head_dim, end - begin, n_heads, head_dim, positions + begin, p);
  });
}

void CpuBackend::store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                          const ops::KvLayer& cache) {
  const OpScope timer(op_times_.get(), "store_kv");
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_kv_dim));
  if (cache.type == ops::KvType::F16 && simd_ok_) {
    pool_.parallel_for(n_tokens, grain, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t row = slots[t];
        f32_to_f16_row_f16c(k + t * n_kv_dim, static_cast<uint16_t*>(cache.k) + row * n_kv_dim, n_kv_dim);
        f32_to_f16_row_f16c(v + t * n_kv_dim, static_cast<uint16_t*>(cache.v) + row * n_kv_dim, n_kv_dim);
      }
    });
    return;
  }
  pool_.parallel_for(n_tokens, grain, [&](int64_t begin, int64_t end, int) {
    ref::store_kv(k + begin * n_kv_dim, v + begin * n_kv_dim, end - begin, n_kv_dim, slots + begin, cache);
  });
}

void CpuBackend::attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                           int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  const OpScope timer(op_times_.get(), "attention");
  // One (query row, head) pair per work item, each the reference math (ggml_order.h)
  // compiled for AVX2+FMA where the CPU has them: same roundings, vectorised.
  const AttendFn attend = !simd_ok_ ? attend_rows_plain : avx512_ok() ? attend_rows_avx512 : attend_rows_avx2;
  const bool f16_in_kernel = simd_ok_ && avx512_ok() && head_dim % 64 == 0;
  if (cache.type == ops::KvType::F16 && !f16_in_kernel) {
    // Each sequence's keys and values are converted to f32 once (block by block, in
    // parallel) and attended there: converting inside the work items would repeat it
    // for every query row and head (prefill of n tokens: n x n_head times).
    const int64_t bs = cache.block_size, dim = cache.n_kv_dim;
    for (int64_t s = 0; s < n_seqs; ++s) {
      const ops::AttentionSeq& sq = seqs[s];
      if (sq.n_tokens <= 0) continue;
      const int64_t n_keys = sq.pos0 + sq.n_tokens, nb = (n_keys + bs - 1) / bs;
      kv_f32_.resize(static_cast<size_t>(2 * nb * bs * dim));
      float* kf = kv_f32_.data();
      float* vf = kf + nb * bs * dim;
      const auto* k16 = static_cast<const uint16_t*>(cache.k);
      const auto* v16 = static_cast<const uint16_t*>(cache.v);
      const bool simd = simd_ok_;
      {
        const OpScope convert_timer(op_times_.get(), "kv f16 to f32");
        pool_.parallel_for(nb, 1, [&](int64_t begin, int64_t end, int) {
          for (int64_t b = begin; b < end; ++b) {
            const int64_t rows = std::min(bs, n_keys - b * bs), src = sq.block_table[b] * bs * dim;
            if (simd) {
              CvtF16C::run(k16 + src, kf + b * bs * dim, rows * dim);
              CvtF16C::run(v16 + src, vf + b * bs * dim, rows * dim);
            } else {
              CvtPlain::run(k16 + src, kf + b * bs * dim, rows * dim);
              CvtPlain::run(v16 + src, vf + b * bs * dim, rows * dim);
            }
          }
        });
      }
      ident_.resize(static_cast<size_t>(nb));
      for (int64_t b = 0; b < nb; ++b) ident_[static_cast<size_t>(b)] = static_cast<int32_t>(b);
      const ops::KvLayer f32{kf, vf, ops::KvType::F32, bs, dim};
      const ops::AttentionSeq one{0, sq.n_tokens, sq.pos0, ident_.data()};
      row_seq_.assign(static_cast<size_t>(sq.n_tokens), 0);
      key_offs_.resize(static_cast<size_t>(n_keys));
      for (int64_t j = 0; j < n_keys; ++j) key_offs_[static_cast<size_t>(j)] = j * dim;
      seq_offs_.assign(1, 0);
      const AttendArgs args{q + sq.first_row * n_head * head_dim, &f32, &one, row_seq_.data(), key_offs_.data(),
                            seq_offs_.data(), n_head, n_head_kv, head_dim, n_keys, scale,
                            out + sq.first_row * n_head * head_dim};
      pool_.parallel_for(sq.n_tokens * n_head, 1, [&](int64_t begin, int64_t end, int) { attend(args, begin, end); });
    }
    return;
  }
  int64_t n_rows = 0, max_keys = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    n_rows = std::max(n_rows, seqs[s].first_row + seqs[s].n_tokens);
    max_keys = std::max(max_keys, seqs[s].pos0 + seqs[s].n_tokens);
  }
  row_seq_.assign(static_cast<size_t>(n_rows), 0);
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t t = 0; t < seqs[s].n_tokens; ++t) row_seq_[static_cast<size_t>(seqs[s].first_row + t)] = static_cast<int32_t>(s);
  }
  // Every sequence's key row offsets, once for all heads and queries (elements; bytes
  // for q8_0).
  const int64_t row_units =
      cache.type == ops::KvType::Q8_0 ? ops::kv_row_bytes(cache.type, cache.n_kv_dim) : cache.n_kv_dim;
  seq_offs_.resize(static_cast<size_t>(n_seqs));
  key_offs_.clear();
  for (int64_t s = 0; s < n_seqs; ++s) {
    seq_offs_[static_cast<size_t>(s)] = static_cast<int64_t>(key_offs_.size());
    const BlockMap map(seqs[s].block_table, cache.block_size);
    const int64_t n_keys = seqs[s].pos0 + seqs[s].n_tokens;
    for (int64_t j = 0; j < n_keys; ++j) key_offs_.push_back(map.row(j) * row_units);
  }
  const AttendArgs args{q,        &cache,   seqs,      row_seq_.data(), key_offs_.data(), seq_offs_.data(),
                        n_head,   n_head_kv, head_dim, max_keys,        scale,             out};
  if (f16_in_kernel && attention_blocks_) {
    make_attention_blocks(seqs, n_seqs, n_head, n_head_kv);
    const AttnBlock* blocks = attn_blocks_.data();
#if defined(__x86_64__)  // f16_in_kernel needs AVX-512 (attention_avx512.cpp)
    pool_.parallel_for(static_cast<int64_t>(attn_blocks_.size()), 1,
                       [&](int64_t begin, int64_t end, int) { attend_blocks_avx512(args, blocks, begin, end); });
    return;
#else
    (void)blocks;
#endif
  }
  pool_.parallel_for(n_rows * n_head, 1, [&](int64_t begin, int64_t end, int) { attend(args, begin, end); });
}

// Blocks of up to kRows consecutive rows x the query heads of one KV head (rows of a
// one-token sequence: that row alone). Where that leaves too few items for the threads
// (short prompts, decode of few sequences), the rows and then the head groups are split
// (see below), down to one query per block (which is attend_one_avx512's work item).
// The blocks run heaviest (most keys) first, so the pool's dynamic chunks even out.
void CpuBackend::make_attention_blocks(const ops::AttentionSeq* seqs, int64_t n_seqs, int64_t n_head,
                                       int64_t n_head_kv) {
  constexpr int64_t kRows = 4;
  const int64_t group = n_head / n_head_kv, want = 4 * static_cast<int64_t>(pool_.n_threads());
  int64_t rows = kRows, heads = group;
  const auto count = [&] {
    int64_t n = 0;
    for (int64_t s = 0; s < n_seqs; ++s) n += (seqs[s].n_tokens + rows - 1) / rows;
    return n * n_head_kv * ((group + heads - 1) / heads);
  };
  // Rows first (a prompt's blocks), down to single rows while there are fewer than 4
  // blocks per thread. The query heads of one KV head are split only until every thread
  // has a block: split, their parts each read that head's key and value rows (measured
  // with SmolLM2's 3 heads per KV head: one sequence decodes 15% faster at 2000 keys kept
  // together, the same at short contexts).
  while (count() < want && rows > 1) rows /= 2;
  while (count() < static_cast<int64_t>(pool_.n_threads()) && heads > 1) heads = (heads + 1) / 2;
  attn_blocks_.clear();
  for (int64_t s = 0; s < n_seqs; ++s) {
    const ops::AttentionSeq& sq = seqs[s];
    for (int64_t t = 0; t < sq.n_tokens; t += rows) {
      const auto n_rows = static_cast<int32_t>(std::min(rows, sq.n_tokens - t));
      for (int64_t kv = 0; kv < n_head_kv; ++kv) {
        for (int64_t g = 0; g < group; g += heads) {
          const auto nh = static_cast<int32_t>(std::min(heads, group - g));
          attn_blocks_.push_back({sq.first_row + t, static_cast<int32_t>(s), n_rows, static_cast<int32_t>(kv * group + g), nh});
        }
      }
    }
  }
  // keys of a block's last row: pos0 + (row0 - first_row) + n_rows
  const auto keys = [&](const AttnBlock& b) {
    const ops::AttentionSeq& sq = seqs[b.seq];
    return sq.pos0 + (b.row0 - sq.first_row) + b.n_rows;
  };
  std::stable_sort(attn_blocks_.begin(), attn_blocks_.end(),
                   [&](const AttnBlock& x, const AttnBlock& y) { return keys(x) > keys(y); });
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const OpScope timer(op_times_.get(), "swiglu");
  const SwigluFn f = !simd_ok_ ? swiglu_plain : avx512_ok() ? swiglu_avx512 : swiglu_avx2;
  pool_.parallel_for(n, 1024, [&](int64_t begin, int64_t end, int) { f(gate + begin, up + begin, end - begin, out + begin); });
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  const OpScope timer(op_times_.get(), "add");
  pool_.parallel_for(n, 16384, [&](int64_t begin, int64_t end, int) { ref::add(x + begin, y + begin, end - begin); });
}

void CpuBackend::copy(const float* src, int64_t n, float* dst) {
  const OpScope timer(op_times_.get(), "copy");
  std::memmove(dst, src, sizeof(float) * n);
}

}  // namespace hearth::cpu

#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/attend_rows.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/matmul_f32.h"
#include "backends/cpu/packed_kquant.h"
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

}  // namespace

// The plain builds of the kernel table's attention and SwiGLU (kernel_table.h); the
// instruction-set builds are in attention_x86.cpp, activations_x86.cpp and their NEON
// counterparts. attend_rows (attend_rows.h) compiled without target attributes: the
// reference math of ggml_order.h.
void attend_rows_plain(const AttendArgs& a, int64_t begin, int64_t end) {
  attend_rows<CvtPlain>(a, begin, end, GenericAttend{});
}

void swiglu_plain(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}

CpuBackend::CpuBackend(int n_threads, bool reference_kernels)
    : pool_(n_threads > 0 ? n_threads : physical_core_count()),
      reference_kernels_(reference_kernels),
      kernels_(&cpu_kernels(reference_kernels)) {
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
  // The K types may come mixed (packed_mixable): their activations are the same Q8_K rows,
  // and the scales of a Q4_K / Q5_K weight (corr) serve Q6_K too, whose kernel reads
  // the bsums themselves.
  GgmlType scale_type = p0.type;
  std::vector<PackedMatmulFn> mms(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const GgmlType t = static_cast<const PackedWeight*>(ws[i]->backend_data)->type;
    if (t != GgmlType::Q6_K) scale_type = t;
    mms[static_cast<size_t>(i)] = find_packed_kernel(t);
  }
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
        packed_act_scales(scale_type, xq + t * row_bytes, nb, act_d_.data() + t * nb, act_s_.data() + t * nb,
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
        if (b < e) mms[static_cast<size_t>(i)](p, b, e, ab, nt, ys[i] + t0 * p.n_rows, p.n_rows);
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
  const auto dot_rows = kernels_->dot_rows_f32;
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
// Whether weights of different K types can share one matmul_packed call: all packed,
// all Q4_K / Q5_K / Q6_K (Q8_K activations), the same width.
static bool packed_mixable(const ops::WeightView* const* ws, int n) {
  for (int i = 0; i < n; ++i) {
    const auto* p = static_cast<const PackedWeight*>(ws[i]->backend_data);
    if (p == nullptr || !kquant::is_k_type(p->type) || ws[i]->n_cols != ws[0]->n_cols) return false;
  }
  return true;
}

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
  if (packed_mixable(ws, n)) {  // one pass: the activations quantized once, one split over the threads
    const OpScope timer(op_times_.get(), "matmul_multi packed mixed");
    matmul_packed(ws, n, x, n_tokens, ys);
    return true;
  }
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
  // Split by tokens like the element-wise operations below (a 4096-patch image's biases
  // were 6 % of its encoding on 16 threads when run on one).
  const int64_t n = std::max<int64_t>(1, bias.n_cols);
  pool_.parallel_for(n_tokens, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end, int) {
    ref::add_bias(x + begin * bias.n_cols, bias, end - begin);
  });
}

// The element-wise operations below split over the pool by rows / tokens / elements when
// the batch is large enough (prefill); each output element is computed by the same
// reference code as before, so results are unchanged. Small calls (decode) run inline.
void CpuBackend::rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                          float* y) {
  const OpScope timer(op_times_.get(), "rms_norm");
  // Chunks of whole 8-row groups where there are many rows (the AVX-512 build takes eight at a time).
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  if (n_rows >= 64) grain = (grain + 7) / 8 * 8;
  const auto norm = kernels_->rms_norm_rows;
  pool_.parallel_for(n_rows, grain, [&](int64_t begin, int64_t end, int) {
    std::vector<float> w(static_cast<size_t>(n));
    ref::dequantize_row(weight, 0, w.data());
    norm(x + begin * n, w.data(), end - begin, n, eps, y + begin * n);
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
  // ref::rope, each token's heads rotated by the kernel table's build.
  const auto rotate = kernels_->rope_heads;
  pool_.parallel_for(n_tokens, 8, [&](int64_t begin, int64_t end, int) {
    float cos_sin[2 * 512];
    std::vector<float> big;
    float* cs = cos_sin;
    if (p.n_rot > 1024) {
      big.resize(static_cast<size_t>(p.n_rot));
      cs = big.data();
    }
    for (int64_t t = begin; t < end; ++t) {
      ref::rope_angles(static_cast<float>(positions[t]), p, cs);
      rotate(x + t * n_heads * head_dim, n_heads, head_dim, cs, p);
    }
  });
}

void CpuBackend::store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                          const ops::KvLayer& cache) {
  const OpScope timer(op_times_.get(), "store_kv");
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_kv_dim));
  if (cache.type == ops::KvType::F16) {
    const auto to_f16 = kernels_->f32_to_f16;
    pool_.parallel_for(n_tokens, grain, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t row = slots[t];
        to_f16(k + t * n_kv_dim, static_cast<uint16_t*>(cache.k) + row * n_kv_dim, n_kv_dim);
        to_f16(v + t * n_kv_dim, static_cast<uint16_t*>(cache.v) + row * n_kv_dim, n_kv_dim);
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
  // compiled for the CPU's instruction set (the kernel table): same roundings, vectorised.
  const KernelTable& kt = *kernels_;
  const auto attend = kt.attend_rows;
  // f16 rows are read raw by kernels that convert in their loads. Without a blocked kernel
  // a prompt's queries would each convert every key row again, so there only decode
  // batches (one query per sequence) read them raw; prompts convert each sequence once.
  bool decode_only = true;
  for (int64_t s = 0; s < n_seqs; ++s) decode_only = decode_only && seqs[s].n_tokens <= 1;
  const bool f16_in_kernel = kt.raw_kv_dim > 0 && head_dim % kt.raw_kv_dim == 0 &&
                             (kt.attend_blocks != nullptr || decode_only);
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
      {
        const OpScope convert_timer(op_times_.get(), "kv f16 to f32");
        pool_.parallel_for(nb, 1, [&](int64_t begin, int64_t end, int) {
          for (int64_t b = begin; b < end; ++b) {
            const int64_t rows = std::min(bs, n_keys - b * bs), src = sq.block_table[b] * bs * dim;
            kt.f16_to_f32(k16 + src, kf + b * bs * dim, rows * dim);
            kt.f16_to_f32(v16 + src, vf + b * bs * dim, rows * dim);
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
  // for q8_0). The rows of a decode run (decode_runs) share their first's list, made
  // long enough for its last row: each row's keys are a prefix of it.
  decode_runs(seqs, n_seqs, run_len_);
  const int64_t row_units =
      cache.type == ops::KvType::Q8_0 ? ops::kv_row_bytes(cache.type, cache.n_kv_dim) : cache.n_kv_dim;
  seq_offs_.resize(static_cast<size_t>(n_seqs));
  key_offs_.clear();
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t run = run_len_[static_cast<size_t>(s)];
    if (run == 0) {
      seq_offs_[static_cast<size_t>(s)] = seq_offs_[static_cast<size_t>(s - 1)];
      continue;
    }
    seq_offs_[static_cast<size_t>(s)] = static_cast<int64_t>(key_offs_.size());
    const BlockMap map(seqs[s].block_table, cache.block_size);
    const ops::AttentionSeq& last = seqs[s + run - 1];
    const int64_t n_keys = last.pos0 + last.n_tokens;
    for (int64_t j = 0; j < n_keys; ++j) key_offs_.push_back(map.row(j) * row_units);
  }
  const AttendArgs args{q,        &cache,   seqs,      row_seq_.data(), key_offs_.data(), seq_offs_.data(),
                        n_head,   n_head_kv, head_dim, max_keys,        scale,             out};
  if (f16_in_kernel && attention_blocks_ && kt.attend_blocks != nullptr) {
    make_attention_blocks(seqs, n_seqs, n_head, n_head_kv);
    const AttnBlock* blocks = attn_blocks_.data();
    pool_.parallel_for(static_cast<int64_t>(attn_blocks_.size()), 1,
                       [&](int64_t begin, int64_t end, int) { kt.attend_blocks(args, blocks, begin, end); });
    return;
  }
  pool_.parallel_for(n_rows * n_head, 1, [&](int64_t begin, int64_t end, int) { attend(args, begin, end); });
}

void decode_runs(const ops::AttentionSeq* seqs, int64_t n_seqs, std::vector<int32_t>& run) {
  run.assign(static_cast<size_t>(n_seqs), 1);
  for (int64_t s = n_seqs - 1; s > 0; --s) {
    const ops::AttentionSeq &a = seqs[s - 1], &b = seqs[s];
    if (a.n_tokens == 1 && b.n_tokens == 1 && a.block_table == b.block_table && b.pos0 == a.pos0 + 1 &&
        b.first_row == a.first_row + 1) {
      run[static_cast<size_t>(s - 1)] += run[static_cast<size_t>(s)];
      run[static_cast<size_t>(s)] = 0;
    }
  }
}

// Blocks of up to kRows consecutive rows x the query heads of one KV head (rows of a
// one-token sequence: that row alone). Where that leaves too few items for the threads
// (short prompts, decode of few sequences), the rows and then the head groups are split
// (see below), down to one query per block (which is attend_one_avx512's work item).
// The blocks run heaviest (most keys) first, so the pool's dynamic chunks even out.
// Eight rows (four before): each key tile is converted and each value line read once
// for twice the queries (the 1.7B shape's 512-token layer on one thread: 17.2 -> 16.0 ms,
// DISABLED_AttentionSpeed).
// A decode run (decode_runs) is taken like a sequence of as many rows, except that each
// block names the run's one-token sequence of its first row (so its queries keep the
// one-token arithmetic, see attend_blocks_avx512, and row r of the block sees the keys
// up to that sequence's position + r, which are its own).
void CpuBackend::make_attention_blocks(const ops::AttentionSeq* seqs, int64_t n_seqs, int64_t n_head,
                                       int64_t n_head_kv) {
  constexpr int64_t kRows = 8;
  const int64_t group = n_head / n_head_kv, want = 4 * static_cast<int64_t>(pool_.n_threads());
  int64_t rows = kRows, heads = group;
  // Rows of the unit starting at sequence s (0: s is inside a run).
  const auto unit_rows = [&](int64_t s) -> int64_t {
    const int32_t run = run_len_[static_cast<size_t>(s)];
    return run > 1 ? run : run == 1 ? seqs[s].n_tokens : 0;
  };
  const auto count = [&] {
    int64_t n = 0;
    for (int64_t s = 0; s < n_seqs; ++s) n += (unit_rows(s) + rows - 1) / rows;
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
    const int64_t n = unit_rows(s);
    const bool run = run_len_[static_cast<size_t>(s)] > 1;
    for (int64_t t = 0; t < n; t += rows) {
      const auto n_rows = static_cast<int32_t>(std::min(rows, n - t));
      const auto seq = static_cast<int32_t>(run ? s + t : s);
      for (int64_t kv = 0; kv < n_head_kv; ++kv) {
        for (int64_t g = 0; g < group; g += heads) {
          const auto nh = static_cast<int32_t>(std::min(heads, group - g));
          attn_blocks_.push_back({sq.first_row + t, seq, n_rows, static_cast<int32_t>(kv * group + g), nh});
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
  const auto f = kernels_->swiglu;
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

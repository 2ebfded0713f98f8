// The CPU back-end's vision-tower operations: layer_norm split over the pool by rows
// (each value computed by the reference code), gelu by elements (a branch-free vector
// form, gelu8), and attention_full as
// a tiled online-softmax ("flash") kernel: work items of up to kQueryRows query rows of
// one segment and head walk that segment's keys kKeyTile at a time, keeping a running
// max, sum and output per row, so no row ever holds all its scores. The keys are first
// transposed in blocks of kScoreLanes rows ([head, block, dim, row in block]), so that
// a query row's scores against a block are independent vector sums over the dimensions,
// each key vector loaded once for two query rows. The kernels are vision_kernels.h's
// templates, compiled plain here (vectors without fused multiply-adds: any CPU, ARM
// included) and for AVX2+FMA and AVX-512 in vision_x86.cpp, picked at run time through
// the back-end's kernel table (kernel_table.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/vision_kernels.h"
#include "core/error.h"

namespace hearth::cpu {

using vision::FullArgs;
using vision::kQueryRows;
using vision::kScoreLanes;

// The plain builds of the kernel table's vision kernels (vision_kernels.h without fused
// multiply-adds; the x86 builds are vision_x86.cpp's).
void full_items_plain(const FullArgs& a, const FullAttnItem* items, int64_t begin, int64_t end) {
  vision::full_items_any<vision::VecPlain>(a, items, begin, end);
}
__attribute__((flatten)) void gelu_plain(float* x, int64_t n, bool tanh_approx) {
  vision::gelu_rows<vision::VecPlain>(x, n, tanh_approx);
}

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
  // Vector kernels (gelu8) unless the reference kernels were asked for.
  const auto run = reference_kernels_ ? ref::gelu : kernels_->gelu;
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end, int) { run(x + begin, end - begin, tanh_approx); });
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
  // Each segment's keys transposed in blocks of kScoreLanes rows (FullArgs::kt), and the
  // work items: kQueryRows query rows of a segment x one head.
  full_blocks_.clear();
  full_items_.clear();
  for (int64_t s = 0; s < n_segs; ++s) {
    const ops::FullAttentionSeg& sg = segs[s];
    const auto block0 = static_cast<int64_t>(full_blocks_.size() / 2);
    for (int64_t r = 0; r < sg.n_rows; r += kScoreLanes) {
      full_blocks_.push_back(sg.first_row + r);
      full_blocks_.push_back(std::min(kScoreLanes, sg.n_rows - r));
    }
    for (int64_t r = 0; r < sg.n_rows; r += kQueryRows) {
      const auto nq = static_cast<int32_t>(std::min(kQueryRows, sg.n_rows - r));
      for (int64_t h = 0; h < n_head; ++h) {
        full_items_.push_back({sg.first_row + r, sg.first_row, sg.n_rows, block0, nq, static_cast<int32_t>(h)});
      }
    }
  }
  const auto n_blocks = static_cast<int64_t>(full_blocks_.size() / 2);
  const int64_t stride = n_head * head_dim, block_floats = head_dim * kScoreLanes;
  full_kt_.resize(static_cast<size_t>(n_head * n_blocks * block_floats));
  float* kt = full_kt_.data();
  const int64_t* blocks = full_blocks_.data();
  pool_.parallel_for(n_head * n_blocks, 4, [&](int64_t begin, int64_t end, int) {
    for (int64_t hb = begin; hb < end; ++hb) {
      const int64_t h = hb / n_blocks, b = hb % n_blocks, row0 = blocks[2 * b], rows = blocks[2 * b + 1];
      float* dst = kt + hb * block_floats;
      for (int64_t l = 0; l < kScoreLanes; ++l) {
        const float* src = k + (row0 + l) * stride + h * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) dst[d * kScoreLanes + l] = l < rows ? src[d] : 0.0f;
      }
    }
  });
  // Longest segments first, so the pool's dynamic chunks even out.
  std::stable_sort(full_items_.begin(), full_items_.end(),
                   [](const FullAttnItem& a, const FullAttnItem& b) { return a.seg_n > b.seg_n; });
  const FullArgs args{kt, q, v, n_head, head_dim, n_blocks, scale, out};
  const auto run = kernels_->full_items;
  const FullAttnItem* items = full_items_.data();
  pool_.parallel_for(static_cast<int64_t>(full_items_.size()), 1,
                     [&](int64_t begin, int64_t end, int) { run(args, items, begin, end); });
}

}  // namespace hearth::cpu

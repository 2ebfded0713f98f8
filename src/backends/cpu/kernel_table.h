// The CPU back-end's float kernels other than the quantized products (attention,
// SwiGLU / SiLU, the Gated DeltaNet recurrence, the vision tower's GELU and attention,
// f16 rows of the KV cache, float-row products), one table per instruction set: the
// shared code (cpu_backend.cpp, cpu_gdn.cpp, cpu_vision.cpp) calls through the table the
// back-end picked when it was made, and holds no instruction-set code itself.
//
// Each architecture's builds are in its own files, compiled only for it (src/CMakeLists.txt):
// x86-64 in *_x86.cpp (kernels_x86.cpp makes its AVX2 and AVX-512 tables), aarch64 in
// *_neon.cpp (kernels_neon.cpp). Every entry of every table gives the plain table's
// results bit for bit, except where an entry says otherwise (the vision tower's
// fused multiply-adds); the unit tests compare them.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_features.h"

namespace hearth::ops {
struct RopeParams;    // ops/backend.h
}

namespace hearth::cpu {

struct AttendArgs;    // attention.h
struct AttnBlock;     // attention.h
struct FullAttnItem;  // cpu_backend.h
namespace gdn {
struct HeadTask;      // gdn_kernels.h
}
namespace vision {
struct FullArgs;      // vision_kernels.h
}

struct KernelTable {
  const char* isa;  // "plain", "avx2", "avx512", "neon"
  // Exact f16 <-> f32 rows (core/half.h's conversions): the f16 KV cache.
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  // Causal attention, work items [begin, end) of (query row, head): ggml_order::attend_one.
  void (*attend_rows)(const AttendArgs& a, int64_t begin, int64_t end);
  // A multiple of head_dim for which attend_rows reads f16 and q8_0 cache rows itself
  // (converting in its loads; the caller then hands it the cache as it is), 0: never.
  int64_t raw_kv_dim;
  // The blocked kernel (attention.h's AttnBlock work items; the same bits per query) for
  // the head dims of raw_kv_dim, or nullptr.
  void (*attend_blocks)(const AttendArgs& a, const AttnBlock* blocks, int64_t begin, int64_t end);
  // out = silu(g) * u, ggml_order::swiglu_one.
  void (*swiglu)(const float* g, const float* u, int64_t n, float* out);
  // x = x / (1 + exp_approx(-x)) in place (the GDN layers' conv).
  void (*silu_row)(float* x, int64_t n);
  // The gated delta rule for one value head, token by token (decode).
  void (*gdn_recurrent)(const gdn::HeadTask& t, std::vector<float>& tmp);
  // The chunked form on register tiles for the state's columns [y0, y1) (prompts; the
  // columns split over tasks), or nullptr: the plain chunked form, whole heads.
  void (*gdn_chunked)(const gdn::HeadTask& t, int64_t y0, int64_t y1, std::vector<float>& buf);
  // Vision tower: GELU (vision_kernels.h's gelu8; within about 1e-7 |x| of ref::gelu)
  // and attention_full's work items. The x86 builds use fused multiply-adds (within the
  // tests' tolerance of the plain build, not its bits).
  void (*gelu)(float* x, int64_t n, bool tanh_approx);
  void (*full_items)(const vision::FullArgs& a, const FullAttnItem* items, int64_t begin, int64_t end);
  // Float-row products (matmul_f32.h): ref::dot16 bit for bit.
  void (*dot_rows_f32)(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride);
  // Rotary embedding of one token's n_heads heads (x: [n_heads, head_dim]) by angles of
  // ref::rope_angles: ref::rope_rotate on each head, bit for bit.
  void (*rope_heads)(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, const ops::RopeParams& p);
  // RMS norm of n_rows rows of n (w: the n weights as floats): ref::rms_norm's rounding
  // (squares rounded to float, summed in double in order), bit for bit.
  void (*rms_norm_rows)(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);
};

// The plain builds (kernel_table.cpp and the shared files), for every CPU.
const KernelTable& plain_kernels();
// The fastest table this CPU runs (the plain one with reference = true).
const KernelTable& cpu_kernels(bool reference);
// This architecture's fastest table for a CPU with features f, or nullptr: kernels_x86.cpp,
// kernels_neon.cpp (elsewhere none, kernel_table.cpp).
const KernelTable* arch_kernels(const CpuFeatures& f);

// The plain builds the tables point to (attention: cpu_backend.cpp, swiglu / silu / the
// delta rule: cpu_gdn.cpp and cpu_backend.cpp, vision: cpu_vision.cpp).
void attend_rows_plain(const AttendArgs& a, int64_t begin, int64_t end);
void swiglu_plain(const float* g, const float* u, int64_t n, float* out);
void silu_row_plain(float* x, int64_t n);
void gdn_recurrent_plain(const gdn::HeadTask& t, std::vector<float>& tmp);
void gelu_plain(float* x, int64_t n, bool tanh_approx);
void full_items_plain(const vision::FullArgs& a, const FullAttnItem* items, int64_t begin, int64_t end);
void rope_heads_plain(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, const ops::RopeParams& p);
void rms_norm_rows_plain(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);

// Flushes subnormal floats to zero (inputs and results) on this thread from the
// constructor to the destructor, where the architecture has such a mode that its
// kernels want (x86-64: MXCSR's FTZ and DAZ, kernels_x86.cpp); elsewhere nothing. The
// plain and the SIMD kernels run under it alike, so it never separates their bits.
class FlushSubnormals {
 public:
  FlushSubnormals() : saved_(flush_subnormals_begin()) {}
  ~FlushSubnormals() { flush_subnormals_end(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

  // The mode before (to restore), after switching flushing on.
  static uint64_t flush_subnormals_begin();
  static void flush_subnormals_end(uint64_t saved);

 private:
  uint64_t saved_;
};

}  // namespace hearth::cpu

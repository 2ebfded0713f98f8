// The per-item attention driver shared by every instruction set's build: work items
// [begin, end) of AttendArgs (item = query row * n_head + head), each read through its
// sequence's key offsets and handed to a kernel with the row accessors of the cache's
// type (kv_rows.h). cpu_backend.cpp compiles it plain; attention_x86.cpp and
// attention_neon.cpp compile it for their instruction sets.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kv_q8.h"
#include "backends/cpu/kv_rows.h"
#include "ops/backend.h"

namespace hearth::cpu {

struct GenericAttend {
  template <class K, class V>
  void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale, bool single,
                  float* scores, float* acc, float* tmp, float* out) const {
    ggml_order::attend_one(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};

// Work items [begin, end) of attention: item = query row * n_head + head, each read
// through its sequence's block table. The x86 copies (attention_x86.cpp) are this same
// code compiled for AVX2+FMA (or AVX-512): `flatten` inlines the ggml_order math into them,
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

}  // namespace hearth::cpu

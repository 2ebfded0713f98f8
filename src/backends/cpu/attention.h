// CPU attention: the arguments of the per-item kernels (attend_rows.h, compiled per
// instruction set) and of the blocked ones (attention_avx512.cpp), and the blocked
// kernels' work items. The kernels are reached through kernel_table.h.
#pragma once

#include <cstdint>

#include "ops/backend.h"

namespace hearth::cpu {

struct AttendArgs {
  const float* q;
  const ops::KvLayer* cache;
  const ops::AttentionSeq* seqs;
  const int32_t* row_seq;  // query row -> its sequence
  const int64_t* key_offs;   // element offset of each key row, per sequence ...
  const int64_t* seq_offs;   // ... starting at key_offs[seq_offs[s]]
  int64_t n_head, n_head_kv, head_dim;
  int64_t max_keys;        // most keys any query sees
  float scale;
  float* out;
};

// A work item of the blocked kernel: n_rows consecutive query rows of sequence `seq`
// (starting at global row row0), or of a decode run's one-token sequences from `seq` on
// (decode_runs, cpu_backend.h), x the query heads [head0, head0 + n_heads), all of one
// KV head. Every query of the block reads the same keys and values, so they share
// each key row while it is in registers / L1 and each value chunk while it is in L2.
struct AttnBlock {
  int64_t row0;
  int32_t seq, n_rows, head0, n_heads;
};

}  // namespace hearth::cpu

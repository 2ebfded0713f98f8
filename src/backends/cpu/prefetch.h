// Software prefetch of streamed weights: lines a fixed number of bytes ahead of the
// block being computed, into L2 (not L1, where they would push out the activations and
// the lines in use). The tuning key cpu.prefetch_kb sets the distance (default 32; 0:
// none), rounded up to whole blocks.
#pragma once

#include <cstdint>

#include "core/tune.h"

namespace hearth::cpu {

inline int64_t prefetch_bytes() { return tune::get(tune::kCpuPrefetchKb) * 1024; }

// The distance for blocks of block_bytes: a whole number of blocks, 0 when off.
inline int64_t prefetch_distance(int64_t block_bytes) {
  const int64_t n = prefetch_bytes();
  return n == 0 || block_bytes <= 0 ? 0 : (n + block_bytes - 1) / block_bytes * block_bytes;
}

// A read prefetch of p's line into L2 (prefetcht1 on x86); never faults.
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }

}  // namespace hearth::cpu

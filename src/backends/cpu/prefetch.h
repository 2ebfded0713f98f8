// Software prefetch of streamed weights: lines a fixed number of bytes ahead of the
// block being computed, into L2 (not L1, where they would push out the activations and
// the lines in use). HEARTH_CPU_PREFETCH_KB sets the distance (default 32; 0: none),
// rounded up to whole blocks.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace hearth::cpu {

inline int64_t prefetch_bytes() {
  static const int64_t n = [] {
    const char* e = std::getenv("HEARTH_CPU_PREFETCH_KB");
    const long kb = e != nullptr ? std::strtol(e, nullptr, 10) : 32;
    return kb <= 0 ? int64_t{0} : static_cast<int64_t>(kb) * 1024;
  }();
  return n;
}

// The distance for blocks of block_bytes: a whole number of blocks, 0 when off.
inline int64_t prefetch_distance(int64_t block_bytes) {
  const int64_t n = prefetch_bytes();
  return n == 0 || block_bytes <= 0 ? 0 : (n + block_bytes - 1) / block_bytes * block_bytes;
}

// A read prefetch of p's line into L2 (prefetcht1 on x86); never faults.
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }

}  // namespace hearth::cpu

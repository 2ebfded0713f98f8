// Row access into the paged KV cache for the attention kernels: logical key j of a
// sequence -> its row through the block table, as floats. An f32 cache hands out
// pointers into itself; an f16 cache converts the row into a scratch row first (with
// F16C where the caller is compiled for it, exact either way); a q8_0 cache
// dequantizes this head's part of the row into the scratch row (kv_q8.h).
#pragma once

#include <cstdint>

#include "backends/cpu/kv_q8.h"
#include "core/half.h"
#include "ops/backend.h"

namespace hearth::cpu {

// Maps logical position j to its cache row. block_size is a power of two.
struct BlockMap {
  const int32_t* table = nullptr;
  int shift = 0;
  int64_t mask = 0;
  BlockMap(const int32_t* t, int64_t block_size) : table(t), mask(block_size - 1) {
    while ((int64_t{1} << shift) < block_size) ++shift;
  }
  int64_t row(int64_t j) const { return (static_cast<int64_t>(table[j >> shift]) << shift) | (j & mask); }
};

// f32 cache: base points at this kv head's first element of row 0; stride = n_kv_dim.
struct KvRowsF32 {
  const float* base;
  int64_t stride;
  BlockMap map;
  const float* operator()(int64_t j, float*) const { return base + map.row(j) * stride; }
};

// f16 cache, raw: for kernels that convert as they load.
struct KvRowsRawF16 {
  const uint16_t* base;
  int64_t stride;
  BlockMap map;
  const uint16_t* operator()(int64_t j, float*) const { return base + map.row(j) * stride; }
};

// Plain f16 -> f32 row conversion (and q8_0 -> f32).
struct CvtPlain {
  static void run(const uint16_t* src, float* dst, int64_t n) { f16_to_f32_row(src, dst, n); }
  static void q8(const uint8_t* src, float* dst, int64_t n) { dequantize_row_q8_0(src, dst, n); }
};

// f16 cache with a conversion policy Cvt (CvtPlain or an F16C one).
template <class Cvt>
struct KvRowsF16 {
  const uint16_t* base;
  int64_t stride;
  BlockMap map;
  int64_t head_dim;
  const float* operator()(int64_t j, float* tmp) const {
    Cvt::run(base + map.row(j) * stride, tmp, head_dim);
    return tmp;
  }
};

// The fast kernels' accessors: key j at base + offs[j], the element offsets of a
// sequence's rows computed once per attention call (one load per key instead of a
// table lookup, shifts and a multiply, in loops that touch every key of every head).
struct KvRowsOffF32 {
  const float* base;
  const int64_t* offs;
  const float* operator()(int64_t j, float*) const { return base + offs[j]; }
};
struct KvRowsOffRawF16 {
  const uint16_t* base;
  const int64_t* offs;
  const uint16_t* operator()(int64_t j, float*) const { return base + offs[j]; }
};
template <class Cvt>
struct KvRowsOffF16 {
  const uint16_t* base;
  const int64_t* offs;
  int64_t head_dim;
  const float* operator()(int64_t j, float* tmp) const {
    Cvt::run(base + offs[j], tmp, head_dim);
    return tmp;
  }
};

// q8_0 cache with a dequantization policy Cvt (CvtPlain or CvtF16C: Cvt::q8 converts
// one row): base is this kv head's first byte of row 0, stride the bytes of a row.
template <class Cvt>
struct KvRowsQ8 {
  const uint8_t* base;
  int64_t stride;
  BlockMap map;
  int64_t head_dim;
  const float* operator()(int64_t j, float* tmp) const {
    Cvt::q8(base + map.row(j) * stride, tmp, head_dim);
    return tmp;
  }
};
// The fast kernels' form: key j at base + offs[j] (byte offsets).
template <class Cvt>
struct KvRowsOffQ8 {
  const uint8_t* base;
  const int64_t* offs;
  int64_t head_dim;
  const float* operator()(int64_t j, float* tmp) const {
    Cvt::q8(base + offs[j], tmp, head_dim);
    return tmp;
  }
};

}  // namespace hearth::cpu

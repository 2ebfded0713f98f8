// Shared by cuda_quant_test.cpp (the checks) and cuda_quant_perf.cpp (--perf): weights
// of every type made on the host, device copies, CUDA error checks.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cuda/quant_cuda.h"
#include "core/half.h"
#include "format/ggml_types.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"
#include "q8_ref.h"

using hearth::GgmlType;
using hearth::cuda::DeviceWeight;

namespace quant_test {

inline constexpr double kMatvecTol = 2e-5;

#define CUDA_OK(call)                                                                            \
  do {                                                                                           \
    const cudaError_t rc_ = (call);                                                              \
    if (rc_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(rc_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

inline const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,  GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,  GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,  GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::MXFP4};

inline std::string type_name(GgmlType t) { return std::string(hearth::ggml_type_name(t)); }
inline int block_elems(GgmlType t) { return static_cast<int>(hearth::ggml_traits(t).block_size); }
inline uint64_t row_bytes_of(GgmlType t, int64_t cols) { return *hearth::ggml_row_bytes(t, cols); }

// Runs f(i) for i in [0, n) on all cores.
template <class F>
void parallel_for(int64_t n, F f) {
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      for (int64_t i = k; i < n; i += threads) f(i);
    });
  }
  for (auto& th : pool) th.join();
}

// Little-endian f16 bits of a random finite value of magnitude in [lo, hi).
inline uint16_t random_scale_f16(std::mt19937_64& rng, float lo, float hi, bool allow_negative) {
  std::uniform_real_distribution<float> mag(lo, hi);
  float v = mag(rng);
  if (allow_negative && (rng() & 1)) v = -v;
  return hearth::f32_to_f16(v);
}
inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// A random matrix of `type`: quantized by the CPU reference from random floats, or random
// block bytes with finite random scales.
inline std::vector<uint8_t> make_weights(GgmlType type, int64_t rows, int64_t cols, bool quantized,
                                  std::mt19937_64& rng) {
  const uint64_t rb = row_bytes_of(type, cols);
  std::vector<uint8_t> w(rb * rows);
  if (quantized || type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    std::vector<uint64_t> seeds(rows);
    for (auto& s : seeds) s = rng();
    parallel_for(rows, [&](int64_t r) {
      std::mt19937_64 g(seeds[r]);
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> src(cols);
      const float scale = 0.02f * (1.f + static_cast<float>(g() % 8));
      for (auto& v : src) v = nd(g) * scale;
      hearth::quantize_row_ref(type, src.data(), w.data() + r * rb, cols);
    });
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bs = hearth::ggml_traits(type).type_size;
  const int64_t nb = static_cast<int64_t>(w.size()) / bs;
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = w.data() + i * bs;
    switch (type) {
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL:
        put_u16(blk, random_scale_f16(rng, 1e-3f, 3e-2f, true));
        break;
      case GgmlType::Q4_1: case GgmlType::Q5_1:
        put_u16(blk, random_scale_f16(rng, 1e-3f, 3e-2f, false));
        put_u16(blk + 2, random_scale_f16(rng, 1e-3f, 0.3f, true));
        break;
      case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(118 + rng() % 12); break;
      case GgmlType::Q2_K:
        put_u16(blk + 80, random_scale_f16(rng, 1e-4f, 3e-3f, false));
        put_u16(blk + 82, random_scale_f16(rng, 1e-4f, 3e-3f, false));
        break;
      case GgmlType::Q3_K: put_u16(blk + 108, random_scale_f16(rng, 1e-4f, 3e-3f, true)); break;
      case GgmlType::Q4_K: case GgmlType::Q5_K:
        put_u16(blk, random_scale_f16(rng, 1e-4f, 3e-3f, false));
        put_u16(blk + 2, random_scale_f16(rng, 1e-4f, 3e-3f, false));
        break;
      case GgmlType::Q6_K: put_u16(blk + 208, random_scale_f16(rng, 1e-5f, 3e-4f, true)); break;
      default: break;
    }
  }
  return w;
}

struct Failures {
  int count = 0;
  void add(const std::string& what) {
    if (++count <= 40) std::printf("  FAIL %s\n", what.c_str());
  }
};

template <class T>
T* device_copy(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, std::max<size_t>(1, v.size() * sizeof(T))));
  CUDA_OK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline void check_launch(cudaStream_t s) {
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaStreamSynchronize(s));
}

int run_perf(int64_t rows, int64_t cols, const std::string& only);
// q8_moe_gate_up / q8_moe_down with the pairs grouped by expert against pair by pair
// (cuda_quant_moe.cpp): the same bits.
void run_moe_group_cases(std::mt19937_64& rng, cudaStream_t stream, Failures& fails);

}  // namespace quant_test

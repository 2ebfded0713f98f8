// The decode matrix-vector product with its weights streamed through shared memory by
// the bulk copy engine (Hopper: cp.async.bulk completing on an mbarrier), for one or two
// tokens. The register-fed kernel of quant_q8.cu keeps about one 64-element unit per lane
// and row in flight, so the weights' latency is hidden only by the warps an SM holds
// (measured: ~2 TB/s, half the bandwidth). Here a block of W warps owns 2 W consecutive
// rows and walks them in segments of 32 units a row (one unit a lane); the weight bytes of
// S segments are requested at once by a few instructions, before the block even waits
// for the kernel before it (weights are constants), and each segment is decoded from
// shared memory once it lands. At most as many blocks as the SMs hold at once walk all
// the rows, so that the stream of copies does not stop between groups of rows.
//
// Same sums as q8_matvec_kernel with a warp per two rows: lane l takes units l, l + 32,
// ... of its rows in that order with the same decoders and the activations staged the
// same way (q8::SharedX), then the same warp reduction: the outputs are the same bits
// (cuda_quant_test compares them). Internal to quant_q8.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/quant_q8_dot.cuh"

namespace hearth::cuda::q8 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also announces `bytes` of copies completing on the barrier.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared memory.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
#endif

// Units of a row per segment (one a lane) and the segment's bytes for type T.
template <class T>
struct StreamSeg {
  static constexpr int kUnits = 32;
  static constexpr int kBytes = kUnits / T::kUnits * T::kBytes;
  static constexpr int kCols = kUnits / T::kUnits * T::kElems;
  static_assert(kBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
};

// Shared memory of a launch: S stages of 2 W row segments, the NT tokens' staged
// activations (rows of n16p 16-byte chunks), 2 S barriers (stage full, stage free).
template <class T, int NT, int W, int S>
__host__ __device__ constexpr size_t stream_smem_bytes(int64_t n_cols) {
  return static_cast<size_t>(S) * 2 * W * StreamSeg<T>::kBytes +
         static_cast<size_t>(NT) * static_cast<size_t>(((n_cols / 16 + 7) & ~int64_t{7}) * 16) + 16 * S;
}

// TG: quant_q8.cu's Targets (up to kMaxTargets weights of one type and shape sharing x;
// block_end[i] here counts the row groups of 2 W rows of weights 0..i). Block b takes the
// groups [b G / B, (b + 1) G / B) of the G in all (B blocks: as many as the SMs hold at
// once, or one a group), one segment after another through the same stages, x staged
// once. Requires n_units a multiple of 32, data and row_bytes multiples of 16 (checked by
// the launcher).
//
// kProducer: a warp of its own (warp W) requests the segments, waiting for each stage to be
// released by the W computing warps (an arrival each on the stage's "free" barrier), so
// that those never wait for each other; otherwise warp 0 requests them between its own
// segments after a barrier of the whole block.
template <class T, int NT, int W, int S, int kMaxTargets, class TG, bool kProducer = false>
__global__ void __launch_bounds__((W + (kProducer ? 1 : 0)) * 32)
    q8_matvec_stream_kernel(const TG tg, int n_units, const int8_t* __restrict__ xq, const float2* __restrict__ xd,
                            int64_t n_cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int G = 2 * W;  // rows of a group, two a warp
  using Seg = StreamSeg<T>;
  constexpr int kStage = G * Seg::kBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  const int n16 = static_cast<int>(n_cols / 16), n16p = (n16 + 7) & ~7;
  int4* xs = reinterpret_cast<int4*>(smem + S * kStage);
  auto* bars = reinterpret_cast<uint64_t*>(xs + NT * n16p);

  // Group g: weight k's rows from row0 (constant indices only: no local-memory copy).
  struct Group {
    const uint8_t* w;
    uint64_t row_bytes;
    int64_t n_rows, row0;
    float* y;
  };
  auto group = [&](unsigned g) {
    Group r{tg.w[0], tg.row_bytes[0], tg.n_rows[0], 0, tg.y[0]};
    unsigned first = 0;
#pragma unroll
    for (int k = 1; k < kMaxTargets; ++k) {
      if (k < tg.n && g >= tg.block_end[k - 1]) {
        r = Group{tg.w[k], tg.row_bytes[k], tg.n_rows[k], 0, tg.y[k]};
        first = tg.block_end[k - 1];
      }
    }
    r.row0 = static_cast<int64_t>(g - first) * G;
    return r;
  };
  const unsigned n_groups = tg.block_end[tg.n - 1];
  const auto g_begin = static_cast<unsigned>(static_cast<uint64_t>(blockIdx.x) * n_groups / gridDim.x);
  const auto g_end = static_cast<unsigned>((static_cast<uint64_t>(blockIdx.x) + 1) * n_groups / gridDim.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n_seg = n_units / Seg::kUnits;
  const int n_it = static_cast<int>(g_end - g_begin) * n_seg;

  // Warp 0 requests step it (segment it % n_seg of group g_begin + it / n_seg) into stage
  // it % S (lane r: the group's row r).
  auto issue = [&](int it) {
    uint64_t* bar = bars + it % S;
    uint8_t* dst = smem + (it % S) * kStage;
    if (lane == 0) mbar_arrive_expect(bar, kStage);
    __syncwarp();
    if (lane < G) {
      const Group gr = group(g_begin + static_cast<unsigned>(it / n_seg));
      const int64_t r = min(gr.row0 + lane, gr.n_rows - 1);
      const uint64_t k = static_cast<uint64_t>(it % n_seg);
      bulk_copy(dst + lane * Seg::kBytes, gr.w + static_cast<uint64_t>(r) * gr.row_bytes + k * Seg::kBytes,
                Seg::kBytes, bar);
    }
  };
  uint64_t* freed = bars + S;  // kProducer: stage s released by the W computing warps
  if constexpr (kProducer) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        mbar_init(bars + s, 1);
        mbar_init(freed + s, W);
      }
      mbar_init_fence();
    }
    __syncthreads();
    if (warp == W) {  // the producer: every segment, each stage once released
      for (int it = 0; it < n_it; ++it) {
        if (it >= S) mbar_wait(freed + it % S, static_cast<uint32_t>((it / S - 1) & 1));
        issue(it);
      }
      ::hearth::cuda::pdl_trigger();
      return;
    }
  } else if (warp == 0) {
    if (lane == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) mbar_init(bars + s, 1);
      mbar_init_fence();
    }
    __syncwarp();
    for (int it = 0; it < S && it < n_it; ++it) issue(it);
  }
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  {
    const auto* src = reinterpret_cast<const int4*>(xq);
    for (int c = threadIdx.x; c < NT * n16; c += W * 32) {
      const int t = c / n16, k = c - t * n16;
      xs[t * n16p + swizzle16(k)] = __ldg(src + c);
    }
  }
  if constexpr (kProducer) {
    asm volatile("bar.sync 1, %0;" ::"n"(W * 32) : "memory");  // the computing warps only
  } else {
    __syncthreads();
  }

  float acc[2][NT];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  }
  const int64_t chunks = n_cols / 32;
  const int s_unit = lane % T::kUnits;
  for (int it = 0; it < n_it; ++it) {
    const int k = it % n_seg;
    mbar_wait(bars + it % S, static_cast<uint32_t>((it / S) & 1));
    const uint8_t* seg = smem + (it % S) * kStage + (lane / T::kUnits) * T::kBytes;
    typename T::Dec dec[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) dec[r] = T::decode(seg + (2 * warp + r) * Seg::kBytes, s_unit);
    const int b = (k * Seg::kUnits + lane) / T::kUnits;  // the unit's block in the row
    const float2* db = xd + static_cast<int64_t>(b) * (T::kElems / 32);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const SharedX x{xs + t * n16p, b * (T::kElems / 16)};
#pragma unroll
      for (int r = 0; r < 2; ++r) acc[r][t] += T::dot(dec[r], s_unit, x, db + t * chunks);
    }
    if constexpr (kProducer) {
      __syncwarp();
      if (lane == 0) mbar_arrive(freed + it % S);  // this warp is done with stage it % S
    } else {
      __syncthreads();  // every warp is done with stage it % S
      if (warp == 0 && it + S < n_it) issue(it + S);
    }
    if (k == n_seg - 1) {  // the group's rows are complete
      const Group gr = group(g_begin + static_cast<unsigned>(it / n_seg));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float v = acc[r][t];
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
          const int64_t row = gr.row0 + 2 * warp + r;
          if (lane == 0 && row < gr.n_rows) gr.y[t * gr.n_rows + row] = v;
          acc[r][t] = 0.f;
        }
      }
    }
  }
#else
  __trap();  // launched on Hopper and later only (quant_q8.cu: launch_stream)
#endif
}

}  // namespace hearth::cuda::q8

// Kernel launches with programmatic dependent launch (PDL, Hopper and later): a kernel
// launched through launch_pdl may start (its blocks scheduled, its set-up done) while
// the kernel before it on the stream is still running, and waits in pdl_wait() for that
// kernel's results before touching global memory. Kernels of the back-end call
// pdl_wait() first and pdl_trigger() right after (the next kernel may then be
// launched), so each one is correct whichever way it was launched. So when a kernel
// starts, every kernel before the one before it has finished; what the kernel before
// writes is read only after pdl_wait(). Exceptions, each safe by what it reads early:
// the 8-bit quantizer triggers before it waits (the product after it loads only weights
// before its own wait), the decode products load weights before the wait, and decode
// attention loads the batch description and earlier steps' keys. On older GPUs, or
// with cuda.pdl=0, launch_pdl is an ordinary launch. Inside a captured graph the
// early start becomes a programmatic edge: decode steps of ~500 short kernels lose
// most of the gap between one kernel's end and the next one's start.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace hearth::cuda {

// Whether launch_pdl asks for the early start (set once per process from the device).
bool pdl_enabled();
void set_pdl_enabled(bool on);
// Throws "[cuda] launch: <runtime message>" for a failed launch.
void check_launch(cudaError_t rc);

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  check_launch(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace hearth::cuda

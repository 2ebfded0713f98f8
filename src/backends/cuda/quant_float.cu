// The weight kernels for the float types F32, F16 and BF16 (16-byte loads of 8
// elements when a row holds a multiple of 8, element loads otherwise).
#include "backends/cuda/quant_kernels.cuh"

namespace hearth::cuda::qk {
namespace {

template <GgmlType T>
void run_float(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream) {
  if (w.n_cols % 8 == 0) {
    run_op<FloatDot<T, 8>>(w, a, stream);
  } else {
    run_op<FloatDot<T, 1>>(w, a, stream);
  }
}

}  // namespace

bool run_float_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream) {
  switch (w.type) {
    case GgmlType::F32: run_float<GgmlType::F32>(w, a, stream); return true;
    case GgmlType::F16: run_float<GgmlType::F16>(w, a, stream); return true;
    case GgmlType::BF16: run_float<GgmlType::BF16>(w, a, stream); return true;
    default: return false;
  }
}

}  // namespace hearth::cuda::qk

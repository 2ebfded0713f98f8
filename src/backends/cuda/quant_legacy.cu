// The weight kernels for the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, IQ4_NL and MXFP4.
#include "backends/cuda/quant_kernels.cuh"

namespace hearth::cuda::qk {

bool run_legacy_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream) {
  switch (w.type) {
    case GgmlType::Q4_0: run_op<QDot<GgmlType::Q4_0>>(w, a, stream); return true;
    case GgmlType::Q4_1: run_op<QDot<GgmlType::Q4_1>>(w, a, stream); return true;
    case GgmlType::Q5_0: run_op<QDot<GgmlType::Q5_0>>(w, a, stream); return true;
    case GgmlType::Q5_1: run_op<QDot<GgmlType::Q5_1>>(w, a, stream); return true;
    case GgmlType::Q8_0: run_op<QDot<GgmlType::Q8_0>>(w, a, stream); return true;
    case GgmlType::IQ4_NL: run_op<QDot<GgmlType::IQ4_NL>>(w, a, stream); return true;
    case GgmlType::MXFP4: run_op<QDot<GgmlType::MXFP4>>(w, a, stream); return true;
    default: return false;
  }
}

}  // namespace hearth::cuda::qk

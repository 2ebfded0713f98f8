// The weight kernels for the 256-element K-quant super-blocks: Q2_K, Q3_K, Q4_K,
// Q5_K and Q6_K.
#include "backends/cuda/quant_kernels.cuh"

namespace hearth::cuda::qk {

bool run_kquant_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream) {
  switch (w.type) {
    case GgmlType::Q2_K: run_op<QDot<GgmlType::Q2_K>>(w, a, stream); return true;
    case GgmlType::Q3_K: run_op<QDot<GgmlType::Q3_K>>(w, a, stream); return true;
    case GgmlType::Q4_K: run_op<QDot<GgmlType::Q4_K>>(w, a, stream); return true;
    case GgmlType::Q5_K: run_op<QDot<GgmlType::Q5_K>>(w, a, stream); return true;
    case GgmlType::Q6_K: run_op<QDot<GgmlType::Q6_K>>(w, a, stream); return true;
    default: return false;
  }
}

}  // namespace hearth::cuda::qk

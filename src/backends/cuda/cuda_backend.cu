// CudaBackend: buffers, weight upload, steps, copies to the host (the launch runtime:
// launch_runtime.cu; the matrix products: cuda_matmul.cu).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/small_gemm.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

// Device memory handed out by alloc(): stream-ordered, so freeing a scratch buffer
// while work that uses it is queued is safe and costs no synchronisation.
class DeviceBuffer final : public ops::Buffer {
 public:
  DeviceBuffer(LaunchRuntime& rt, int64_t n, bool pooled) : rt_(rt), n_(n), pooled_(pooled) {
    rt.flush_capture();  // a graph holds no allocations
    const size_t bytes = sizeof(float) * static_cast<size_t>(std::max<int64_t>(n, 1));
    if (pooled) {
      HEARTH_CUDA_CHECK("alloc", cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, rt.stream()));
    } else {
      const cudaError_t rc = cudaMalloc(reinterpret_cast<void**>(&p_), bytes);
      if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        fail(ErrorKind::kResource, "cuda", "alloc_lazy: out of device memory for " +
                                               std::to_string(bytes >> 20) + " MiB");
      }
      HEARTH_CUDA_CHECK("alloc_lazy", rc);
    }
    bytes_ = static_cast<int64_t>(bytes);
    rt_.note_alloc(bytes_);
  }
  ~DeviceBuffer() override {
    rt_.flush_capture();
    rt_.note_free();  // its address may come back for another buffer: no recorded graph may keep it
    if (pooled_) {
      cudaFreeAsync(p_, rt_.stream());
    } else {
      cudaFree(p_);
    }
    rt_.note_alloc(-bytes_);
  }
  float* data() override { return p_; }
  int64_t size() const override { return n_; }

 private:
  LaunchRuntime& rt_;
  float* p_ = nullptr;
  int64_t n_, bytes_ = 0;
  bool pooled_;
};

}  // namespace

DeviceWeight device_weight(const ops::WeightView& w, const char* op) {
  if (w.backend_data == nullptr) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": weight '" + w.name + "' was not prepared for the GPU");
  }
  return DeviceWeight{w.type, w.backend_data, w.n_rows, w.n_cols, w.row_bytes};
}

CudaBackend::CudaBackend(int device) : rt_(device), stream_(rt_.stream()) {
  // The tuning keys (core/tune_keys.h) of this back-end's switches, read once here (the
  // runtime's: LaunchRuntime's constructor).
  fuse_ = tune::on(tune::kCudaFuse);
  fuse_quant_ = fuse_ && tune::on(tune::kCudaFuseQuant);
  // Off unless cuda.fuse_swiglu=1: measured on the H200, one kernel for gate / up /
  // SwiGLU (two rows a warp) took longer than the two products in one launch and swiglu
  // (Llama-3-8B decode step 3,708 against 3,572 us of device time).
  fuse_swiglu_ = fuse_ && tune::on(tune::kCudaFuseSwiglu);
  device_argmax_ = tune::on(tune::kCudaArgmax);
  int8_gemm_ = tune::on(tune::kCudaInt8Gemm);
  tc_attention_ = tune::on(tune::kCudaAttnTc);
  decode_warp_ = tune::on(tune::kCudaAttnDecodeWarp);
  decode_warp_stages_ = static_cast<int>(tune::get(tune::kCudaAttnDecodeWarpStages));
  decode_warp_dot_ = tune::get(tune::kCudaAttnDecodeWarpDot) == 1;
  gated_norm_q8_ = tune::on(tune::kCudaGatedQ8);
  device_draw_ = tune::on(tune::kCudaDraw);
  tc_decode_mode_ = static_cast<int>(tune::get(tune::kCudaAttnTcDecode));
  tc_decode_range_keys_ = tune::get(tune::kCudaTcDecodeRange);
  tc_decode_blocks_ = tune::get(tune::kCudaTcDecodeBlocks);
  tc_decode_min_keys_ = tune::get(tune::kCudaTcDecodeMin);
  tc_decode_min_rows_ = tune::get(tune::kCudaTcDecodeRows);
  moe_group_min_tokens_ = tune::get(tune::kCudaMoeGroupMin);
  moe_mma_min_tokens_ = tune::get(tune::kCudaMoeMmaMin);
  moe_shared_mma_ = tune::on(tune::kCudaMoeSharedMma);
  moe_shared_max_tokens_ = tune::get(tune::kCudaMoeShared);
  moe_norm_ = tune::on(tune::kCudaMoeNorm);
  q8_matvec_ = tune::get(tune::kCudaMatvec) == 0;  // 1: f32
  qgemm_max_tokens_ = tune::get(tune::kCudaQgemmMax);
  q8_gemm_prepare();
  HEARTH_CUDA_CHECK("init", cudaMalloc(reinterpret_cast<void**>(&attn_counters_), sizeof(unsigned) * kAttnCounters));
  HEARTH_CUDA_CHECK("init", cudaMemset(attn_counters_, 0, sizeof(unsigned) * kAttnCounters));
  rt_.note_alloc(static_cast<int64_t>(sizeof(unsigned) * kAttnCounters));
}

CudaBackend::~CudaBackend() {
  rt_.finish();  // no queued work reads what is freed here (the runtime frees its own after)
  for (void* p : weights_) cudaFree(p);
  cudaFree(attn_counters_);
}

std::string CudaBackend::name() const { return rt_.device_name(); }

bool CudaBackend::supports_weight(GgmlType type) const { return quant_supported(type); }

void CudaBackend::begin_step(int64_t n_tokens) {
  (void)n_tokens;  // a step without a description runs op by op
  q8_ready_ = {};
  rt_.begin_step();
}

void CudaBackend::begin_step(const ops::StepDesc& d) {
  rt_.bind();
  step_attention_prepare(d);  // the front part of the step's arena
  // The attention's context bucket, part of the step's key (of 64 keys doubled: the
  // launches' key ranges and table strides are the bucket's).
  int64_t bucket = 64;
  while (bucket < step_attn_.max_keys) bucket *= 2;
  step_tiles_ = {};
  q8_ready_ = {};
  // Graph steps: those the matrix-vector kernels take (decode).
  rt_.begin_step(d, step_front_, bucket, d.n_tokens() > 0 && d.n_tokens() <= kMaxMatvecTokens);
}

ops::WeightView CudaBackend::prepare_weight(const ops::WeightView& w) {
  rt_.bind();
  rt_.flush_capture();
  if (!supports_weight(w.type)) {
    fail(ErrorKind::kUnsupported, "cuda",
         "tensor '" + w.name + "' has type " + std::string(ggml_type_name(w.type)) +
             ", which the CUDA back-end cannot multiply");
  }
  if (w.data == nullptr) fail(ErrorKind::kInternal, "cuda", "prepare_weight: tensor '" + w.name + "' has no data");
  const size_t bytes = static_cast<size_t>(w.n_rows) * w.row_bytes;
  void* dev = nullptr;
  const cudaError_t rc = cudaMalloc(&dev, std::max<size_t>(bytes, 1));
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(ErrorKind::kResource, "cuda", "prepare_weight: out of device memory for tensor '" + w.name + "' (" +
                                           std::to_string(bytes >> 20) + " MiB; " +
                                           std::to_string(weight_bytes_ >> 20) + " MiB of weights loaded)");
  }
  HEARTH_CUDA_CHECK("prepare_weight", rc);
  weights_.push_back(dev);
  HEARTH_CUDA_CHECK("prepare_weight", cudaMemcpy(dev, w.data, bytes, cudaMemcpyHostToDevice));
  weight_bytes_ += bytes;
  rt_.note_alloc(static_cast<int64_t>(bytes));
  ops::WeightView out = w;
  out.backend_data = dev;
  release_mapped_pages(w.data, bytes);  // the file's pages are read back if touched again
  return out;
}

std::unique_ptr<ops::Buffer> CudaBackend::alloc(int64_t n_floats) {
  rt_.bind();
  return std::make_unique<DeviceBuffer>(rt_, n_floats, true);
}

std::unique_ptr<ops::Buffer> CudaBackend::alloc_lazy(int64_t n_floats) {
  rt_.bind();
  return std::make_unique<DeviceBuffer>(rt_, n_floats, false);
}

void CudaBackend::copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) {
  rt_.bind();
  if (offset < 0 || n < 0 || offset + n > src.size()) {
    fail(ErrorKind::kInternal, "cuda", "copy_to_host: range out of the buffer");
  }
  rt_.end_step();  // the end of a graph step: the graph (recorded or replayed)
  // (A copy to pageable memory waits inside cudaMemcpyAsync; measured, wait first.)
  if (rt_.wait_timing()) rt_.wait("copy_to_host");
  HEARTH_CUDA_CHECK("copy_to_host", cudaMemcpyAsync(dst, src.data() + offset, sizeof(float) * n,
                                                    cudaMemcpyDeviceToHost, stream_));
  rt_.wait("copy_to_host");
}

void CudaBackend::copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) {
  q8_ready_ = {};  // dst may be the x an op quantized
  rt_.bind();
  if (offset < 0 || n < 0 || offset + n > dst.size()) {
    fail(ErrorKind::kInternal, "cuda", "copy_from_host: range out of the buffer");
  }
  // Synchronous with respect to the host buffer: it may be reused once this returns.
  rt_.flush_capture();
  HEARTH_CUDA_CHECK("copy_from_host", cudaMemcpyAsync(dst.data() + offset, src, sizeof(float) * n,
                                                      cudaMemcpyHostToDevice, stream_));
  rt_.wait("copy_from_host");
}

const float* CudaBackend::f32_values(const ops::WeightView& w, int64_t n, const char* op) {
  if (w.n_cols * w.n_rows != n) {
    fail(ErrorKind::kInvalidInput, "cuda", std::string(op) + ": weight '" + w.name + "' has " +
                                               std::to_string(w.n_cols * w.n_rows) + " values, expected " +
                                               std::to_string(n));
  }
  const DeviceWeight dw = device_weight(w, op);
  if (w.type == GgmlType::F32) return static_cast<const float*>(dw.data);
  auto* out = static_cast<float*>(rt_.scratch(3, sizeof(float) * static_cast<size_t>(n), op));
  if (rt_.skip_launch()) return out;
  dequantize_rows_f32(dw, 0, w.n_rows, out, stream_);
  HEARTH_CUDA_LAUNCHED(op);
  return out;
}

void CudaBackend::get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) {
  OpTimer timer(rt_, "get_rows");
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_rows) {
      fail(ErrorKind::kInvalidInput, "cuda", "token id " + std::to_string(ids[i]) + " out of range for '" +
                                                 table.name + "' (" + std::to_string(table.n_rows) + " rows)");
    }
  }
  if (n_ids == 0) return;
  const int32_t* d_ids = rt_.stage_array(ids, n_ids, "get_rows");
  if (rt_.skip_launch()) return;
  get_rows_f32(device_weight(table, "get_rows"), d_ids, n_ids, out, stream_);
  HEARTH_CUDA_LAUNCHED("get_rows");
}

}  // namespace hearth::cuda

// CudaBackend: device, stream, cuBLAS, buffers, weight upload, staging of host
// arguments, and the matrix products (quantized matrix-vector kernels for a few tokens,
// dequantized f16 tiles through cuBLAS tensor-core GEMMs for more).
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/small_gemm.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace hearth::cuda {
namespace {

constexpr size_t kStageBytes = size_t{8} << 20;
// f16 weight rows dequantized per GEMM: at most this many elements (128 MiB).
constexpr int64_t kGemmTileElems = int64_t{64} << 20;
// For many tokens, matrices of at most this many rows (routers, recurrent gates, the
// gate / up of small experts), and F16 / BF16 matrices of at most this many elements,
// take the f32 path (dequantized to f32, cuBLAS SGEMM): their outputs pick experts or
// gate states and must not carry the f16 rounding of the activations.
constexpr int64_t kF32GemmMaxRows = 512;
// f32 products of at most this many rows (and more tokens than the matrix-vector kernels
// take) use small_gemm instead of cuBLAS's SGEMM (0.4-0.5 ms a call for these shapes).
constexpr int64_t kSmallGemmMaxRows = 1024;
constexpr int64_t kF32GemmMaxElems = int64_t{4} << 20;

const char* cublas_message(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS operation not supported";
    default: return "cuBLAS error";
  }
}

void check_cublas(cublasStatus_t s, const char* op, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": " + what + ": " + cublas_message(s) + " (" +
                                           std::to_string(static_cast<int>(s)) + ")");
  }
}

// Device memory handed out by alloc(): stream-ordered, so freeing a scratch buffer
// while work that uses it is queued is safe and costs no synchronisation.
class DeviceBuffer final : public ops::Buffer {
 public:
  DeviceBuffer(CudaBackend& be, int64_t n, bool pooled) : be_(be), n_(n), pooled_(pooled) {
    be.flush_capture();  // a graph holds no allocations
    const size_t bytes = sizeof(float) * static_cast<size_t>(std::max<int64_t>(n, 1));
    if (pooled) {
      HEARTH_CUDA_CHECK("alloc", cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, be.stream()));
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
    be_.note_alloc(bytes_);
  }
  ~DeviceBuffer() override {
    be_.flush_capture();
    if (pooled_) {
      cudaFreeAsync(p_, be_.stream());
    } else {
      cudaFree(p_);
    }
    be_.note_alloc(-bytes_);
  }
  float* data() override { return p_; }
  int64_t size() const override { return n_; }

 private:
  CudaBackend& be_;
  float* p_ = nullptr;
  int64_t n_, bytes_ = 0;
  bool pooled_;
};

DeviceWeight device_weight(const ops::WeightView& w, const char* op) {
  if (w.backend_data == nullptr) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": weight '" + w.name + "' was not prepared for the GPU");
  }
  return DeviceWeight{w.type, w.backend_data, w.n_rows, w.n_cols, w.row_bytes};
}

__global__ void f32_to_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __float2half_rn(x[i]);
  }
}

}  // namespace

void CudaBackend::check(int rc, const char* op, const char* what) {
  if (rc == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(rc);
  const ErrorKind kind = e == cudaErrorMemoryAllocation ? ErrorKind::kResource : ErrorKind::kInternal;
  if (e == cudaErrorMemoryAllocation) cudaGetLastError();  // not sticky: clear it
  fail(kind, "cuda", std::string(op) + ": " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void CudaBackend::bind() const {
  thread_local int current = -1;
  if (current != device_) {
    check(cudaSetDevice(device_), "bind", "cudaSetDevice");
    current = device_;
  }
}

CudaBackend::OpTimer::OpTimer(CudaBackend& be, const char* op) : be_(be.timing_ ? &be : nullptr), op_(op) {
  be.bind();
  if (be_ != nullptr) t0_ns_ = now_ns();
}

CudaBackend::OpTimer::~OpTimer() {
  if (be_ == nullptr) return;
  if (!be_->host_timing_) cudaStreamSynchronize(be_->stream_);
  const int64_t dt = now_ns() - t0_ns_;
  for (auto& e : be_->op_times_) {
    if (e.first == op_) {
      e.second.first += 1;
      e.second.second += dt;
      return;
    }
  }
  be_->op_times_.push_back({op_, {1, dt}});
}

CudaBackend::CudaBackend(int device) : device_(device) {
  const char* timing = std::getenv("HEARTH_CUDA_OP_TIMING");
  timing_ = timing != nullptr && (std::string(timing) == "1" || std::string(timing) == "host");
  host_timing_ = timing_ && std::string(timing) == "host";
  const char* graph = std::getenv("HEARTH_CUDA_GRAPH");
  graphs_ = graph != nullptr && std::string(graph) == "1" && !(timing_ && !host_timing_);
  const char* wait_timing = std::getenv("HEARTH_CUDA_WAIT_TIMING");
  wait_timing_ = wait_timing != nullptr && std::string(wait_timing) == "1";
  const char* matvec = std::getenv("HEARTH_CUDA_MATVEC");
  q8_matvec_ = matvec == nullptr || std::string(matvec) != "f32";
  if (const char* qg = std::getenv("HEARTH_CUDA_QGEMM_MAX")) qgemm_max_tokens_ = std::atoll(qg);
  int n = 0;
  HEARTH_CUDA_CHECK("init", cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) {
    fail(ErrorKind::kInvalidInput, "cuda", "device " + std::to_string(device) + " does not exist (" +
                                               std::to_string(n) + " visible)");
  }
  HEARTH_CUDA_CHECK("init", cudaSetDevice(device));
  cudaDeviceProp prop{};
  HEARTH_CUDA_CHECK("init", cudaGetDeviceProperties(&prop, device));
  name_ = "cuda:" + std::to_string(device) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
          std::to_string(prop.minor) + ")";
  HEARTH_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Keep memory freed by buffers in the pool: scratch of every step is reused, not
  // returned to the driver and asked for again.
  cudaMemPool_t pool = nullptr;
  HEARTH_CUDA_CHECK("init", cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  HEARTH_CUDA_CHECK("init", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  check_cublas(cublasCreate(&cublas_), "init", "cublasCreate");
  check_cublas(cublasSetStream(cublas_, stream_), "init", "cublasSetStream");
  HEARTH_CUDA_CHECK("init", cudaMallocHost(reinterpret_cast<void**>(&stage_host_), kStageBytes));
  HEARTH_CUDA_CHECK("init", cudaMalloc(reinterpret_cast<void**>(&stage_dev_), kStageBytes));
  stage_cap_ = kStageBytes;
  note_alloc(static_cast<int64_t>(kStageBytes));
}

CudaBackend::~CudaBackend() {
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g != nullptr) cudaGraphDestroy(g);
  }
  cudaStreamSynchronize(stream_);
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
  if (graphs_ && (wait_timing_ || timing_)) {
    std::fprintf(stderr, "hearth: CUDA graphs: %lld steps launched as graphs, %lld updated in place, %lld made, "
                 "%lld captures abandoned\n", static_cast<long long>(graph_stats_.launched),
                 static_cast<long long>(graph_stats_.updated), static_cast<long long>(graph_stats_.instantiated),
                 static_cast<long long>(graph_stats_.failed));
  }
  if (wait_timing_ && waits_ > 1) {
    const int64_t span = last_wait_ns_ - first_wait_ns_;
    std::fprintf(stderr,
                 "hearth: CUDA waits: the host waited %.1f ms for the device in %lld waits over %.1f ms (%.1f %%)\n",
                 wait_ns_ / 1e6, static_cast<long long>(waits_), span / 1e6, span > 0 ? 100.0 * wait_ns_ / span : 0.0);
  }
  if (timing_ && !op_times_.empty()) {
    std::sort(op_times_.begin(), op_times_.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    int64_t total = 0;
    for (const auto& e : op_times_) total += e.second.second;
    std::fprintf(stderr, "hearth: CUDA op timing (%s): %.1f ms in all\n",
                 host_timing_ ? "host time inside each op, no waiting" : "each op synchronised", total / 1e6);
    for (const auto& e : op_times_) {
      std::fprintf(stderr, "  %-22s %8lld calls %10.2f ms %5.1f %%  %8.1f us/call\n", e.first.c_str(),
                   static_cast<long long>(e.second.first), e.second.second / 1e6, 100.0 * e.second.second / total,
                   e.second.second / 1e3 / e.second.first);
    }
  }
  for (void* p : weights_) cudaFree(p);
  for (void* p : scratch_) cudaFree(p);
  cudaFree(stage_dev_);
  cudaFreeHost(stage_host_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return name_; }

bool CudaBackend::supports_weight(GgmlType type) const { return quant_supported(type); }

void CudaBackend::note_alloc(int64_t bytes) {
  used_ = static_cast<uint64_t>(static_cast<int64_t>(used_) + bytes);
  peak_ = std::max(peak_, used_);
}

void CudaBackend::synchronize() {
  bind();
  wait("synchronize");
}

void CudaBackend::set_graphs(bool on) {
  bind();
  flush_capture();
  graphs_ = on && !(timing_ && !host_timing_);
}

void CudaBackend::flush_capture() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t rc = cudaStreamEndCapture(stream_, &g);
  if (rc != cudaSuccess || g == nullptr) {
    // A capture the runtime invalidated (an operation it cannot record): its work was
    // not run. That is a bug in the op that did it; report it rather than lose work.
    cudaGetLastError();
    ++graph_stats_.failed;
    HEARTH_CUDA_CHECK("graph capture", rc == cudaSuccess ? cudaErrorStreamCaptureInvalidated : rc);
  }
  auto exec = static_cast<cudaGraphExec_t>(graph_exec_);
  bool reused = false;
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    reused = cudaGraphExecUpdate(exec, g, &info) == cudaSuccess;
    if (!reused) {
      cudaGetLastError();
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
  }
  if (exec == nullptr) {
    const cudaError_t irc = cudaGraphInstantiate(&exec, g, 0);
    if (irc != cudaSuccess) cudaGraphDestroy(g);
    HEARTH_CUDA_CHECK("graph instantiate", irc);
    ++graph_stats_.instantiated;
  } else {
    ++graph_stats_.updated;
  }
  graph_exec_ = exec;
  cudaGraphDestroy(g);
  HEARTH_CUDA_CHECK("graph launch", cudaGraphLaunch(exec, stream_));
  ++graph_stats_.launched;
}

void CudaBackend::wait(const char* op) {
  flush_capture();
  if (!wait_timing_) {
    HEARTH_CUDA_CHECK(op, cudaStreamSynchronize(stream_));
    return;
  }
  const int64_t t0 = now_ns();
  HEARTH_CUDA_CHECK(op, cudaStreamSynchronize(stream_));
  const int64_t t1 = now_ns();
  // Time from the first wait's end, so that loading and the first step's set-up are out.
  if (waits_ == 0) first_wait_ns_ = t1;
  else wait_ns_ += t1 - t0;
  last_wait_ns_ = t1;
  ++waits_;
}

ops::WeightView CudaBackend::prepare_weight(const ops::WeightView& w) {
  bind();
  flush_capture();
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
  note_alloc(static_cast<int64_t>(bytes));
  ops::WeightView out = w;
  out.backend_data = dev;
  release_mapped_pages(w.data, bytes);  // the file's pages are read back if touched again
  return out;
}

std::unique_ptr<ops::Buffer> CudaBackend::alloc(int64_t n_floats) {
  bind();
  return std::make_unique<DeviceBuffer>(*this, n_floats, true);
}

std::unique_ptr<ops::Buffer> CudaBackend::alloc_lazy(int64_t n_floats) {
  bind();
  return std::make_unique<DeviceBuffer>(*this, n_floats, false);
}

void CudaBackend::copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) {
  bind();
  if (offset < 0 || n < 0 || offset + n > src.size()) {
    fail(ErrorKind::kInternal, "cuda", "copy_to_host: range out of the buffer");
  }
  flush_capture();
  HEARTH_CUDA_CHECK("copy_to_host", cudaMemcpyAsync(dst, src.data() + offset, sizeof(float) * n,
                                                    cudaMemcpyDeviceToHost, stream_));
  wait("copy_to_host");
}

void CudaBackend::copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) {
  bind();
  if (offset < 0 || n < 0 || offset + n > dst.size()) {
    fail(ErrorKind::kInternal, "cuda", "copy_from_host: range out of the buffer");
  }
  // Synchronous with respect to the host buffer: it may be reused once this returns.
  flush_capture();
  HEARTH_CUDA_CHECK("copy_from_host", cudaMemcpyAsync(dst.data() + offset, src, sizeof(float) * n,
                                                      cudaMemcpyHostToDevice, stream_));
  wait("copy_from_host");
}

const void* CudaBackend::stage(const void* host, size_t n, const char* op) {
  const size_t bytes = (n + 255) & ~size_t{255};
  if (bytes > stage_cap_) {
    wait(op);
    cudaFreeHost(stage_host_);
    cudaFree(stage_dev_);
    note_alloc(-static_cast<int64_t>(stage_cap_));
    stage_cap_ = std::max(bytes, 2 * stage_cap_);
    stage_host_ = nullptr;
    stage_dev_ = nullptr;
    HEARTH_CUDA_CHECK(op, cudaMallocHost(reinterpret_cast<void**>(&stage_host_), stage_cap_));
    HEARTH_CUDA_CHECK(op, cudaMalloc(reinterpret_cast<void**>(&stage_dev_), stage_cap_));
    note_alloc(static_cast<int64_t>(stage_cap_));
    stage_off_ = 0;
    ++stage_epoch_;
  }
  // The same bytes staged recently (positions, slots, tables: the same for every layer of
  // a step) are still in the ring, on both sides, unless it wrapped since: reuse them.
  // While a step is captured, only its own stagings (so that every step of a shape makes
  // a graph of the same nodes, which the next step can update in place).
  for (const StageMemo& m : stage_memo_) {
    if (m.n == n && n > 0 && m.epoch == stage_epoch_ && (!capturing_ || m.capture == captures_) &&
        std::memcmp(stage_host_ + m.off, host, n) == 0) {
      return stage_dev_ + m.off;
    }
  }
  if (stage_off_ + bytes > stage_cap_) {
    // Work queued earlier may still read the start of the ring: let it finish.
    wait(op);
    stage_off_ = 0;
    ++stage_epoch_;
  }
  if (n > 0) std::memcpy(stage_host_ + stage_off_, host, n);
  uint8_t* dev = stage_dev_ + stage_off_;
  if (n > 0) {
    HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(dev, stage_host_ + stage_off_, n, cudaMemcpyHostToDevice, stream_));
    stage_memo_[stage_memo_next_] = StageMemo{stage_off_, n, stage_epoch_, capturing_ ? captures_ : 0};
    stage_memo_next_ = (stage_memo_next_ + 1) % kStageMemo;
  }
  stage_off_ += bytes;
  return dev;
}

void* CudaBackend::scratch(int slot, size_t bytes, const char* op) {
  if (bytes > scratch_bytes_[slot]) {
    flush_capture();  // a graph holds no allocations
    if (scratch_[slot] != nullptr) {
      wait(op);
      cudaFree(scratch_[slot]);
      note_alloc(-static_cast<int64_t>(scratch_bytes_[slot]));
      scratch_[slot] = nullptr;
      scratch_bytes_[slot] = 0;
    }
    HEARTH_CUDA_CHECK(op, cudaMalloc(&scratch_[slot], bytes));
    scratch_bytes_[slot] = bytes;
    note_alloc(static_cast<int64_t>(bytes));
  }
  return scratch_[slot];
}

const float* CudaBackend::f32_values(const ops::WeightView& w, int64_t n, const char* op) {
  if (w.n_cols * w.n_rows != n) {
    fail(ErrorKind::kInvalidInput, "cuda", std::string(op) + ": weight '" + w.name + "' has " +
                                               std::to_string(w.n_cols * w.n_rows) + " values, expected " +
                                               std::to_string(n));
  }
  const DeviceWeight dw = device_weight(w, op);
  if (w.type == GgmlType::F32) return static_cast<const float*>(dw.data);
  auto* out = static_cast<float*>(scratch(3, sizeof(float) * static_cast<size_t>(n), op));
  dequantize_rows_f32(dw, 0, w.n_rows, out, stream_);
  HEARTH_CUDA_LAUNCHED(op);
  return out;
}

void CudaBackend::get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) {
  OpTimer timer(*this, "get_rows");
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_rows) {
      fail(ErrorKind::kInvalidInput, "cuda", "token id " + std::to_string(ids[i]) + " out of range for '" +
                                                 table.name + "' (" + std::to_string(table.n_rows) + " rows)");
    }
  }
  if (n_ids == 0) return;
  if (graphs_ && !capturing_ && n_ids <= kMaxMatvecTokens) {
    // A decode step starts here (the token embeddings): record it until the logits are read.
    HEARTH_CUDA_CHECK("graph capture", cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capturing_ = true;
    ++captures_;
  }
  const int32_t* d_ids = stage_array(ids, n_ids, "get_rows");
  get_rows_f32(device_weight(table, "get_rows"), d_ids, n_ids, out, stream_);
  HEARTH_CUDA_LAUNCHED("get_rows");
}

void CudaBackend::matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  OpTimer timer(*this, "matmul");
  if (n_tokens <= 0) return;
  const DeviceWeight dw = device_weight(w, "matmul");
  if (n_tokens <= kMaxMatvecTokens) {
    // Decode: one pass over the weights, dequantized in registers; 8-bit activations
    // for the types that have that kernel, f32 ones otherwise.
    if (q8_matvec_ && q8_matvec_supported(w.type)) {
      timer.rename("matmul matvec q8");
      const size_t bytes = q8_matvec_scratch_bytes(w.n_cols, n_tokens);
      q8_matvec(dw, x, n_tokens, y, scratch(5, bytes, "matmul"), bytes, stream_);
      HEARTH_CUDA_LAUNCHED("matmul");
      return;
    }
    timer.rename("matmul matvec");
    quant_matvec(dw, x, n_tokens, y, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  // f32 rows (the weight's own or a dequantized copy, ldw floats apart) times x by small_gemm.
  auto small_product = [&](const float* w32, int64_t ldw) {
    const size_t bytes = small_gemm_scratch_bytes(w.n_rows, w.n_cols, n_tokens);
    small_gemm(w32, ldw, w.n_rows, w.n_cols, x, n_tokens, y, bytes ? scratch(1, bytes, "matmul") : nullptr, bytes,
               stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
  };
  if (w.type == GgmlType::F32 && w.n_rows <= kSmallGemmMaxRows && w.row_bytes % 4 == 0) {
    timer.rename("matmul small f32");
    small_product(static_cast<const float*>(dw.data), static_cast<int64_t>(w.row_bytes / 4));
    return;
  }
  if (w.type == GgmlType::F32) {
    timer.rename("matmul sgemm f32");
    check_cublas(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_rows), static_cast<int>(n_tokens),
                             static_cast<int>(w.n_cols), &one, static_cast<const float*>(dw.data),
                             static_cast<int>(w.row_bytes / 4), x, static_cast<int>(w.n_cols), &zero, y,
                             static_cast<int>(w.n_rows)),
                 "matmul", w.name.c_str());
    return;
  }
  const bool half_type = w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  if (w.n_rows > kF32GemmMaxRows && n_tokens <= qgemm_max_tokens_ && quant_gemm_supported(w.type)) {
    // Batched decode and prompt chunks: weight tiles dequantized in shared memory, tensor cores.
    timer.rename("matmul qgemm");
    const size_t bytes = quant_gemm_scratch_bytes(dw, n_tokens);
    quant_gemm(dw, x, n_tokens, y, scratch(5, bytes, "matmul"), bytes, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    return;
  }
  if (w.n_rows <= kF32GemmMaxRows || (half_type && w.n_rows * w.n_cols <= kF32GemmMaxElems)) {
    timer.rename("matmul dequant+sgemm");
    auto* w32 = static_cast<float*>(scratch(2, sizeof(float) * static_cast<size_t>(w.n_rows * w.n_cols), "matmul"));
    dequantize_rows_f32(dw, 0, w.n_rows, w32, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    if (w.n_rows <= kSmallGemmMaxRows) {
      small_product(w32, w.n_cols);
      return;
    }
    check_cublas(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_rows), static_cast<int>(n_tokens),
                             static_cast<int>(w.n_cols), &one, w32, static_cast<int>(w.n_cols), x,
                             static_cast<int>(w.n_cols), &zero, y, static_cast<int>(w.n_rows)),
                 "matmul", w.name.c_str());
    return;
  }
  timer.rename("matmul dequant+f16 gemm");
  matmul_gemm(w, x, n_tokens, y);
}

void CudaBackend::matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                               float* const* ys) {
  // Decode products sharing x (q/k/v, gate/up): x quantized to 8 bits once for all.
  bool shared = q8_matvec_ && n > 1 && n <= 8 && n_tokens > 0 && n_tokens <= kMaxMatvecTokens;
  for (int i = 0; shared && i < n; ++i) {
    shared = q8_matvec_supported(ws[i]->type) && ws[i]->n_cols == ws[0]->n_cols;
  }
  if (!shared) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, n_tokens, ys[i]);
    return;
  }
  OpTimer timer(*this, "matmul matvec q8");
  DeviceWeight dws[8];
  for (int i = 0; i < n; ++i) dws[i] = device_weight(*ws[i], "matmul");
  const size_t bytes = q8_matvec_scratch_bytes(ws[0]->n_cols, n_tokens);
  q8_matvec_multi(dws, n, x, n_tokens, ys, scratch(5, bytes, "matmul"), bytes, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
}

void CudaBackend::matmul_gemm(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  const int64_t k = w.n_cols;
  auto* x16 = static_cast<__half*>(scratch(0, sizeof(__half) * static_cast<size_t>(n_tokens * k), "matmul"));
  f32_to_f16_kernel<<<grid_for(n_tokens * k), kThreads, 0, stream_>>>(x, x16, n_tokens * k);
  HEARTH_CUDA_LAUNCHED("matmul");
  const float one = 1.0f, zero = 0.0f;
  if (w.type == GgmlType::F16 && w.row_bytes % 2 == 0) {
    // f16 weights as stored: no dequantized copy.
    check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_rows), static_cast<int>(n_tokens),
                              static_cast<int>(k), &one, dw.data, CUDA_R_16F, static_cast<int>(w.row_bytes / 2), x16,
                              CUDA_R_16F, static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(w.n_rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul", w.name.c_str());
    return;
  }
  const int64_t tile_rows = std::max<int64_t>(1, std::min<int64_t>(w.n_rows, kGemmTileElems / k));
  auto* w16 = static_cast<__half*>(scratch(1, sizeof(__half) * static_cast<size_t>(tile_rows * k), "matmul"));
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += tile_rows) {
    const int64_t nr = std::min(tile_rows, w.n_rows - r0);
    dequantize_rows_f16(dw, r0, nr, w16, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(n_tokens),
                              static_cast<int>(k), &one, w16, CUDA_R_16F, static_cast<int>(k), x16, CUDA_R_16F,
                              static_cast<int>(k), &zero, y + r0, CUDA_R_32F, static_cast<int>(w.n_rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul", w.name.c_str());
  }
}

}  // namespace hearth::cuda

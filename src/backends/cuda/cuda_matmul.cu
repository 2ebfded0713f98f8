// CudaBackend's matrix products (the variants of cuda_matmul_family.h): quantized matrix-vector kernels with 8-bit activations
// for a few tokens (their input possibly quantized by the op before), tensor-core tiles
// (quant_gemm) for batches, small f32 products, dequantized tiles through cuBLAS for more.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_matmul_family.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/small_gemm.h"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

// f16 weight rows dequantized per GEMM: at most this many elements (128 MiB).
constexpr int64_t kGemmTileElems = int64_t{64} << 20;
// For many tokens, matrices of at most this many rows (routers, recurrent gates, the
// gate / up of small experts), and F16 / BF16 matrices of at most this many elements,
// take the f32 path (dequantized to f32, cuBLAS SGEMM): their outputs pick experts or
// gate states and must not carry the f16 rounding of the activations. (Batched decode of
// Q4_K / Q6_K matrices from kMinQ8GemmRows rows takes the int8 products instead, with the
// 8-bit activations the same matrices get at 1-8 tokens.)
constexpr int64_t kF32GemmMaxRows = 512;
// f32 products of at most this many rows (and more tokens than the matrix-vector kernels
// take) use small_gemm instead of cuBLAS's SGEMM (0.4-0.5 ms a call for these shapes).
constexpr int64_t kSmallGemmMaxRows = 1024;
constexpr int64_t kF32GemmMaxElems = int64_t{4} << 20;
constexpr int64_t kMinQ8GemmRows = 64;
// A matrix dequantized to f32 whole (scratch) for the f32 products: at most this many
// elements (1 GiB); larger ones are not taken by those variants (they go as f16 tiles).
constexpr int64_t kF32DequantMaxElems = int64_t{256} << 20;

__global__ void f32_to_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __float2half_rn(x[i]);
  }
}

}  // namespace

bool CudaBackend::int8_gemm_takes(const ops::WeightView& w, int64_t n_tokens) const {
  return mm_q8gemm_takes(w, n_tokens) && mm_q8gemm_prefers(w, n_tokens);
}

// ---- The variants, in dispatch order (matmul_variants below). What a run launches
// depends on the weight, x, y, the token count and whether x came quantized only, all
// the same in every step of a recorded step's key (scratch moves invalidate recordings).

// Batched decode: the weights' integer quants on the int8 tensor cores (q8_gemm), x
// quantized as Q8_K (or per 32). From 64 rows (a tile) and 256-column multiples.
bool CudaBackend::mm_q8gemm_takes(const ops::WeightView& w, int64_t n) const {
  return q8_gemm_supported(w.type) && w.n_rows >= kMinQ8GemmRows && w.n_cols % 256 == 0 && w.row_bytes % 16 == 0 &&
         n >= 1 && n <= kMaxQ8GemmTokens;
}
// From 4 (Q6_K: 9) tokens, where it beats the matrix-vector kernels (q4_K 4096 x 14336,
// 8 tokens: 28 against 73 us); a 512-row matrix (a MoE model's shared expert, 2 KV heads'
// K / V) otherwise took dequantize + f32 products at 9-64 tokens (125 us a call, H200).
bool CudaBackend::mm_q8gemm_prefers(const ops::WeightView& w, int64_t n) const {
  const int64_t lo = !q8_gemm_uses_q8k()          ? kMaxMatvecTokens + 1
                     : w.type == GgmlType::Q6_K ? kMinQ8GemmTokensQ6K
                                                : kMinQ8GemmTokens;
  return int8_gemm_ && n >= lo && n <= qgemm_max_tokens_;
}
void CudaBackend::mm_q8gemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  const size_t bytes = q8_gemm_scratch_bytes(dw, n);
  q8_gemm(dw, x, n, y, rt_.scratch(5, bytes, "matmul"), bytes, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
}

// Decode with 8-bit activations: one pass over the weights, dequantized in registers; x
// may come quantized by the op before (take_q8_ready).
bool CudaBackend::mm_matvec_q8_takes(const ops::WeightView& w, int64_t n) const {
  return n >= 1 && n <= kMaxMatvecTokens && q8_matvec_supported(w.type);
}
bool CudaBackend::mm_matvec_q8_prefers(const ops::WeightView&, int64_t) const { return q8_matvec_; }
void CudaBackend::mm_matvec_q8_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  const size_t bytes = q8_matvec_scratch_bytes(w.n_cols, n);
  void* tmp = rt_.scratch(5, bytes, "matmul");
  const bool ready = take_q8_ready(x, n, w.n_cols, tmp);
  if (rt_.skip_launch()) return;
  q8_matvec_multi(&dw, 1, x, n, &y, tmp, bytes, stream_, ready);
  HEARTH_CUDA_LAUNCHED("matmul");
}

// Decode with f32 activations (every type).
bool CudaBackend::mm_matvec_takes(const ops::WeightView&, int64_t n) const { return n >= 1 && n <= kMaxMatvecTokens; }
void CudaBackend::mm_matvec_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  quant_matvec(dw, x, n, y, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
}

// f32 rows (w32, ldw floats apart) times x by small_gemm (cuBLAS's SGEMM takes 0.4-0.5 ms
// a call for these shapes).
void CudaBackend::small_f32_product(const ops::WeightView& w, const float* w32, int64_t ldw, const float* x, int64_t n,
                                    float* y) {
  const size_t bytes = small_gemm_scratch_bytes(w.n_rows, w.n_cols, n);
  small_gemm(w32, ldw, w.n_rows, w.n_cols, x, n, y, bytes ? rt_.scratch(1, bytes, "matmul") : nullptr, bytes, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
}

void CudaBackend::sgemm_f32_product(const ops::WeightView& w, const float* w32, int64_t ldw, const float* x, int64_t n,
                                    float* y) {
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasSgemm(rt_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_rows), static_cast<int>(n),
                           static_cast<int>(w.n_cols), &one, w32, static_cast<int>(ldw), x, static_cast<int>(w.n_cols),
                           &zero, y, static_cast<int>(w.n_rows)),
               "matmul", w.name.c_str());
}

bool CudaBackend::mm_small_f32_takes(const ops::WeightView& w, int64_t) const {
  return w.type == GgmlType::F32 && w.n_rows <= kSmallGemmMaxRows && w.row_bytes % 4 == 0;
}
void CudaBackend::mm_small_f32_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  small_f32_product(w, static_cast<const float*>(dw.data), static_cast<int64_t>(w.row_bytes / 4), x, n, y);
}

bool CudaBackend::mm_sgemm_f32_takes(const ops::WeightView& w, int64_t) const {
  return w.type == GgmlType::F32 && w.row_bytes % 4 == 0;
}
void CudaBackend::mm_sgemm_f32_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  sgemm_f32_product(w, static_cast<const float*>(dw.data), static_cast<int64_t>(w.row_bytes / 4), x, n, y);
}

// Batches and prompt chunks: weight tiles dequantized in shared memory, tensor cores (f16
// activations). Past qgemm_max_tokens_ (64) dequantize + cuBLAS is faster; up to 512 rows
// the f32 products below keep routers and gates free of f16 rounding.
bool CudaBackend::mm_qgemm_takes(const ops::WeightView& w, int64_t n) const {
  return quant_gemm_supported(w.type) && n >= 1;
}
bool CudaBackend::mm_qgemm_prefers(const ops::WeightView& w, int64_t n) const {
  return w.n_rows > kF32GemmMaxRows && n <= qgemm_max_tokens_;
}
void CudaBackend::mm_qgemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  const size_t bytes = quant_gemm_scratch_bytes(dw, n);
  quant_gemm(dw, x, n, y, rt_.scratch(5, bytes, "matmul"), bytes, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
}

// Dequantized to f32 in scratch, then small_gemm (up to 1024 rows) or cuBLAS SGEMM: for
// many tokens, matrices of at most 512 rows (routers, recurrent gates, small experts'
// gate / up) and F16 / BF16 ones of at most 4M elements, whose outputs pick experts or
// gate states and must not carry the f16 rounding of the activations.
bool CudaBackend::mm_dequant_f32_prefers(const ops::WeightView& w, int64_t) const {
  const bool half_type = w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  return w.n_rows <= kF32GemmMaxRows || (half_type && w.n_rows * w.n_cols <= kF32GemmMaxElems);
}
bool CudaBackend::mm_dequant_small_takes(const ops::WeightView& w, int64_t) const {
  return w.type != GgmlType::F32 && w.n_rows <= kSmallGemmMaxRows;
}
void CudaBackend::mm_dequant_small_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  auto* w32 = static_cast<float*>(rt_.scratch(2, sizeof(float) * static_cast<size_t>(w.n_rows * w.n_cols), "matmul"));
  dequantize_rows_f32(dw, 0, w.n_rows, w32, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
  small_f32_product(w, w32, w.n_cols, x, n, y);
}
bool CudaBackend::mm_dequant_sgemm_takes(const ops::WeightView& w, int64_t) const {
  return w.type != GgmlType::F32 && w.n_rows * w.n_cols <= kF32DequantMaxElems;
}
void CudaBackend::mm_dequant_sgemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  if (rt_.skip_launch()) return;
  auto* w32 = static_cast<float*>(rt_.scratch(2, sizeof(float) * static_cast<size_t>(w.n_rows * w.n_cols), "matmul"));
  dequantize_rows_f32(dw, 0, w.n_rows, w32, stream_);
  HEARTH_CUDA_LAUNCHED("matmul");
  sgemm_f32_product(w, w32, w.n_cols, x, n, y);
}

// The rest: x to f16, the weights as stored (F16) or dequantized to f16 in tiles, cuBLAS.
bool CudaBackend::mm_f16_gemm_takes(const ops::WeightView& w, int64_t) const { return w.type != GgmlType::F32; }
void CudaBackend::mm_f16_gemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y) {
  if (rt_.skip_launch()) return;
  matmul_gemm(w, x, n, y);
}

const std::vector<CudaBackend::MatmulVariant>& CudaBackend::matmul_variants() {
  using B = CudaBackend;
  static const std::vector<MatmulVariant> kVariants = {
      {"q8 gemm", "matmul q8 gemm", MatmulMath::kQ8Gemm, &B::mm_q8gemm_takes, &B::mm_q8gemm_prefers, &B::mm_q8gemm_run},
      {"matvec q8", "matmul matvec q8", MatmulMath::kQ8, &B::mm_matvec_q8_takes, &B::mm_matvec_q8_prefers,
       &B::mm_matvec_q8_run},
      {"matvec", "matmul matvec", MatmulMath::kF32, &B::mm_matvec_takes, &B::mm_always, &B::mm_matvec_run},
      {"small f32", "matmul small f32", MatmulMath::kF32, &B::mm_small_f32_takes, &B::mm_always, &B::mm_small_f32_run},
      {"sgemm f32", "matmul sgemm f32", MatmulMath::kF32, &B::mm_sgemm_f32_takes, &B::mm_always, &B::mm_sgemm_f32_run},
      {"qgemm", "matmul qgemm", MatmulMath::kF16, &B::mm_qgemm_takes, &B::mm_qgemm_prefers, &B::mm_qgemm_run},
      {"dequant+small f32", "matmul dequant+sgemm", MatmulMath::kF32, &B::mm_dequant_small_takes,
       &B::mm_dequant_f32_prefers, &B::mm_dequant_small_run},
      {"dequant+sgemm f32", "matmul dequant+sgemm", MatmulMath::kF32, &B::mm_dequant_sgemm_takes,
       &B::mm_dequant_f32_prefers, &B::mm_dequant_sgemm_run},
      {"f16 gemm", "matmul dequant+f16 gemm", MatmulMath::kF16, &B::mm_f16_gemm_takes, &B::mm_always,
       &B::mm_f16_gemm_run},
  };
  return kVariants;
}

bool CudaBackend::matmul_takes(const MatmulVariant& v, const ops::WeightView& w, int64_t n_tokens) const {
  return (this->*v.takes)(w, n_tokens);
}

const CudaBackend::MatmulVariant& CudaBackend::matmul_pick(const ops::WeightView& w, int64_t n_tokens) const {
  for (const MatmulVariant& v : matmul_variants()) {
    if ((this->*v.takes)(w, n_tokens) && (this->*v.prefers)(w, n_tokens)) return v;
  }
  fail(ErrorKind::kUnsupported, "cuda", "matmul: no product takes '" + w.name + "' (" + std::string(ggml_type_name(w.type)) + ", " +
                                            std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) + ") at " +
                                            std::to_string(n_tokens) + " tokens");
}

void CudaBackend::matmul_variant(const MatmulVariant& v, const ops::WeightView& w, const float* x, int64_t n_tokens,
                                 float* y) {
  if (!(this->*v.takes)(w, n_tokens)) {
    fail(ErrorKind::kInvalidInput, "cuda", std::string("matmul variant '") + v.name + "' does not take '" + w.name + "'");
  }
  OpTimer timer(rt_, v.timer);
  (this->*v.run)(w, x, n_tokens, y);
}

void CudaBackend::matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  OpTimer timer(rt_, "matmul");
  if (n_tokens <= 0) return;
  if (deterministic_) {
    timer.rename("matmul invariant");
    matmul_invariant(w, x, n_tokens, y);
    return;
  }
  const MatmulVariant& v = matmul_pick(w, n_tokens);
  timer.rename(v.timer);
  (this->*v.run)(w, x, n_tokens, y);
}

bool CudaBackend::invariant_gemm8(const ops::WeightView& w) const {
  return int8_gemm_ && w.n_rows > kF32GemmMaxRows && q8_gemm_supported(w.type) && w.n_cols % 256 == 0 &&
         w.row_bytes % 16 == 0;
}

// Q6_K only: one H100, 12288 x 4096, one token, the matrix-vector form 28.3 us against the
// tiles' 44.2; Q4_K's tiles are as fast (22.8 us against 24.1), and from 2 tokens on the
// form loses (Q4_K 5 tokens: 50.1 against 24.4 us; cuda_quant_test --perf, 2026-12-07).
bool CudaBackend::det_matvec_takes(const ops::WeightView& w, int64_t n_tokens) const {
  return w.type == GgmlType::Q6_K && invariant_gemm8(w) && n_tokens >= 1 && n_tokens <= kMaxMatvecTokens &&
         q8_gemm_uses_q8k() && tune::on(tune::kCudaDetMatvec);
}

void CudaBackend::matmul_invariant(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  // The family depends on the weight only. Calls of up to 256 tokens on q8_gemm (its
  // partial sums for 256 tokens of a 4096-row matrix: 32 MiB), of up to 64 on quant_gemm (past 64 tokens it stops splitting the
  // columns, which changes the order of a sum); small matrices and the other types on the
  // matrix-vector kernels, 8 tokens a launch.
  // (Measured on the H200, 9B shape: Q6_K matrices on the matrix-vector kernels instead
  // of quant_gemm made one stream 1.5x faster but 64 streams 1.7x slower and prompts 1.6x;
  // the output head alone on them, 64 streams 1.25x slower for 1.15x at one stream. A
  // user who asks for this mode runs batches: quant_gemm for all.)
  constexpr int64_t kQ8GemmChunk = 256;
  const bool big = w.n_rows > kF32GemmMaxRows;
  const bool gemm8 = invariant_gemm8(w);
  const bool qgemm = !gemm8 && big && quant_gemm_supported(w.type);
  const bool q8 = !gemm8 && !qgemm && q8_matvec_ && q8_matvec_supported(w.type);
  // Decode (1-8 tokens): q8_gemm's bits by its matrix-vector form (a 16-token tile's
  // cost otherwise).
  if (det_matvec_takes(w, n_tokens)) {
    const size_t mv_bytes = q8_gemm_matvec_scratch_bytes(w.n_cols, n_tokens);
    void* mv_tmp = rt_.scratch(5, mv_bytes, "matmul");
    if (rt_.skip_launch()) return;
    q8_gemm_matvec(dw, x, n_tokens, y, mv_tmp, mv_bytes, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    return;
  }
  const int64_t chunk = std::min(n_tokens, gemm8 ? kQ8GemmChunk : qgemm ? kMaxQ8GemmTokens : kMaxMatvecTokens);
  const size_t bytes = gemm8   ? q8_gemm_scratch_bytes(dw, chunk)
                       : qgemm ? quant_gemm_scratch_bytes(dw, chunk)
                       : q8    ? q8_matvec_scratch_bytes(w.n_cols, chunk)
                               : 0;
  void* tmp = bytes > 0 ? rt_.scratch(5, bytes, "matmul") : nullptr;
  if (rt_.skip_launch()) return;
  if (gemm8 || qgemm) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
      const int64_t nt = std::min(chunk, n_tokens - t0);
      // (A shorter last call needs no more scratch than a full one.)
      if (gemm8) {
        q8_gemm(dw, x + t0 * w.n_cols, nt, y + t0 * w.n_rows, tmp, bytes, stream_);
      } else {
        quant_gemm(dw, x + t0 * w.n_cols, nt, y + t0 * w.n_rows, tmp, bytes, stream_);
      }
    }
  } else if (q8) {
    q8_matvec_multi(&dw, 1, x, n_tokens, &y, tmp, bytes, stream_, false);
  } else {
    quant_matvec(dw, x, n_tokens, y, stream_);
  }
  HEARTH_CUDA_LAUNCHED("matmul");
}

namespace {

// The weights of a matmul_multi call that one shared-quantization kernel takes (`takes`,
// and the column count of the first taken), and the rest.
struct WeightSplit {
  DeviceWeight taken[8];
  float* taken_y[8];
  const ops::WeightView* rest[8];
  float* rest_y[8];
  int n_taken = 0, n_rest = 0;
};

}  // namespace

void CudaBackend::matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                               float* const* ys) {
  // Products that quantize x once between them, then the others (each product's bits as
  // matmul gives them): deterministic decode on q8_gemm's matrix-vector form, batched decode
  // on the int8 tensor cores (q8_gemm; cuda.gemm_multi=0: each product quantizes x itself).
  const bool det = deterministic_;
  const bool shared = det || tune::on(tune::kCudaGemmMulti);
  if (shared && n > 1 && n <= 8) {
    WeightSplit sp;
    for (int i = 0; i < n; ++i) {
      const bool takes = det ? det_matvec_takes(*ws[i], n_tokens) : int8_gemm_takes(*ws[i], n_tokens);
      if (takes && (sp.n_taken == 0 || ws[i]->n_cols == sp.taken[0].n_cols)) {
        sp.taken[sp.n_taken] = device_weight(*ws[i], "matmul");
        sp.taken_y[sp.n_taken++] = ys[i];
      } else {
        sp.rest[sp.n_rest] = ws[i];
        sp.rest_y[sp.n_rest++] = ys[i];
      }
    }
    if (sp.n_taken >= 2) {
      {
        OpTimer timer(rt_, det ? "matmul invariant multi" : "matmul q8 gemm multi");
        const size_t bytes = det ? q8_gemm_matvec_scratch_bytes(sp.taken[0].n_cols, n_tokens)
                                 : q8_gemm_multi_scratch_bytes(sp.taken, sp.n_taken, n_tokens);
        void* tmp = rt_.scratch(5, bytes, "matmul");
        if (!rt_.skip_launch()) {
          if (det) {
            q8_gemm_matvec_multi(sp.taken, sp.n_taken, x, n_tokens, sp.taken_y, tmp, bytes, stream_);
          } else {
            q8_gemm_multi(sp.taken, sp.n_taken, x, n_tokens, sp.taken_y, tmp, bytes, stream_);
          }
          HEARTH_CUDA_LAUNCHED("matmul");
        }
      }
      if (sp.n_rest > 0) matmul_multi(sp.rest, sp.n_rest, x, n_tokens, sp.rest_y);
      return;
    }
  }
  // Decode products sharing x (q/k/v, gate/up, the Gated DeltaNet's four inputs): the
  // weights with 8-bit activation kernels quantize x once for all of them, the others
  // (f32 routers and gates) share one f32 launch; each weight's result is the one
  // matmul gives it.
  bool small = !deterministic_ && n > 1 && n <= 8 && n_tokens > 0 && n_tokens <= kMaxMatvecTokens;
  for (int i = 0; small && i < n; ++i) small = ws[i]->n_cols == ws[0]->n_cols;
  if (!small) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, n_tokens, ys[i]);
    return;
  }
  OpTimer timer(rt_, "matmul matvec multi");
  DeviceWeight q8w[8], fw[8];
  float *q8y[8], *fy[8];
  int nq = 0, nf = 0;
  for (int i = 0; i < n; ++i) {
    if (int8_gemm_takes(*ws[i], n_tokens)) {  // its own product on the int8 tensor cores
      matmul(*ws[i], x, n_tokens, ys[i]);
      continue;
    }
    const DeviceWeight dw = device_weight(*ws[i], "matmul");
    if (q8_matvec_ && q8_matvec_supported(ws[i]->type)) {
      q8w[nq] = dw;
      q8y[nq++] = ys[i];
    } else {
      fw[nf] = dw;
      fy[nf++] = ys[i];
    }
  }
  const size_t bytes = nq > 0 ? q8_matvec_scratch_bytes(ws[0]->n_cols, n_tokens) : 0;
  void* q8_tmp = nq > 0 ? rt_.scratch(5, bytes, "matmul") : nullptr;
  const bool ready = nq > 0 && take_q8_ready(x, n_tokens, ws[0]->n_cols, q8_tmp);
  if (nq + nf == 0) return;
  if (rt_.skip_launch()) return;
  if (nq > 0) {
    q8_matvec_multi(q8w, nq, x, n_tokens, q8y, q8_tmp, bytes, stream_, ready);
    HEARTH_CUDA_LAUNCHED("matmul");
  }
  if (nf > 0) {
    quant_matvec_multi(fw, nf, x, n_tokens, fy, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
  }
}

void* CudaBackend::q8_ready_scratch(const float* out, int64_t n_rows, int64_t n) {
  q8_ready_ = {};
  if (deterministic_ || !fuse_quant_ || !q8_matvec_ || n_rows <= 0 || n_rows > kMaxMatvecTokens || n % 32 != 0) return nullptr;
  const size_t bytes = q8_matvec_scratch_bytes(n, n_rows);
  void* s = rt_.scratch(5, bytes, "add_rms_norm");
  q8_ready_ = {out, n_rows, n, s, rt_.op_seq()};
  return s;
}

bool CudaBackend::take_q8_ready(const float* x, int64_t n_tokens, int64_t n_cols, const void* scratch5) {
  const Q8Ready r = q8_ready_;
  q8_ready_ = {};
  return r.x != nullptr && r.x == x && r.n_rows == n_tokens && r.n_cols == n_cols && r.scratch == scratch5 &&
         r.seq + 1 == rt_.op_seq();
}

void CudaBackend::matmul_swiglu(const ops::WeightView& gate, const ops::WeightView& up, const float* x,
                                int64_t n_tokens, float* g, float* u) {
  // Decode: one 8-bit kernel computes a row of gate and of up per warp and writes
  // silu(gate) * up (the bits of the separate products and swiglu_kernel).
  // (Only where the separate products take the matrix-vector kernel too.)
  if (deterministic_ || !fuse_swiglu_ || !q8_matvec_ || n_tokens <= 0 || n_tokens > kMaxMatvecTokens ||
      !q8_matvec_supported(gate.type) || up.type != gate.type || up.n_rows != gate.n_rows ||
      up.n_cols != gate.n_cols || int8_gemm_takes(gate, n_tokens)) {
    // Both products in one launch, then SwiGLU (its output quantized for the product
    // after it when that takes 8-bit activations).
    const ops::WeightView* ws[2] = {&gate, &up};
    float* ys[2] = {g, u};
    matmul_multi(ws, 2, x, n_tokens, ys);
    swiglu_rows(g, u, n_tokens, gate.n_rows, g);
    return;
  }
  OpTimer timer(rt_, "matmul matvec swiglu");
  const DeviceWeight dg = device_weight(gate, "matmul"), du = device_weight(up, "matmul");
  const size_t bytes = q8_matvec_scratch_bytes(gate.n_cols, n_tokens);
  void* tmp = rt_.scratch(5, bytes, "matmul");
  const bool ready = take_q8_ready(x, n_tokens, gate.n_cols, tmp);
  if (rt_.skip_launch()) {
    return;
  }
  q8_matvec_swiglu(dg, du, x, n_tokens, g, tmp, bytes, stream_, ready);
  HEARTH_CUDA_LAUNCHED("matmul");
}

void CudaBackend::matmul_gemm(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const DeviceWeight dw = device_weight(w, "matmul");
  const int64_t k = w.n_cols;
  auto* x16 = static_cast<__half*>(rt_.scratch(0, sizeof(__half) * static_cast<size_t>(n_tokens * k), "matmul"));
  ::hearth::cuda::launch_pdl(f32_to_f16_kernel, grid_for(n_tokens * k), kThreads, 0, stream_, x, x16, n_tokens * k);
  HEARTH_CUDA_LAUNCHED("matmul");
  const float one = 1.0f, zero = 0.0f;
  if (w.type == GgmlType::F16 && w.row_bytes % 2 == 0) {
    // f16 weights as stored: no dequantized copy.
    check_cublas(cublasGemmEx(rt_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_rows), static_cast<int>(n_tokens),
                              static_cast<int>(k), &one, dw.data, CUDA_R_16F, static_cast<int>(w.row_bytes / 2), x16,
                              CUDA_R_16F, static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(w.n_rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul", w.name.c_str());
    return;
  }
  const int64_t tile_rows = std::max<int64_t>(1, std::min<int64_t>(w.n_rows, kGemmTileElems / k));
  auto* w16 = static_cast<__half*>(rt_.scratch(1, sizeof(__half) * static_cast<size_t>(tile_rows * k), "matmul"));
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += tile_rows) {
    const int64_t nr = std::min(tile_rows, w.n_rows - r0);
    dequantize_rows_f16(dw, r0, nr, w16, stream_);
    HEARTH_CUDA_LAUNCHED("matmul");
    check_cublas(cublasGemmEx(rt_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(n_tokens),
                              static_cast<int>(k), &one, w16, CUDA_R_16F, static_cast<int>(k), x16, CUDA_R_16F,
                              static_cast<int>(k), &zero, y + r0, CUDA_R_32F, static_cast<int>(w.n_rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul", w.name.c_str());
  }
}

}  // namespace hearth::cuda

// GPU check of the quantized-weight kernels (src/backends/cuda/quant_cuda.h) against
// the CPU reference dequantizer (src/quant/dequant_ref.h), for every supported type:
//  - the argument checks (no device needed: they run, then the test skips, without a GPU);
//  - quant_matvec for 1..8 and 11 tokens vs a float64 product of the CPU-dequantized weights,
//    per output |y - ref| <= kMatvecTol * sum_c |w_rc * x_tc| (f32 accumulation: the error
//    bound scales with the sum of magnitudes, not with |ref|, which may cancel), and
//    ||y - ref|| / ||ref|| <= kMatvecTol for the whole output; the same for every type since
//    the kernels decode exactly and accumulate in f32;
//  - q8_matvec (8-bit activations) vs the product with the quantized x;
//  - quant_gemm (tensor cores, 9..130 tokens) vs the product of the f16-rounded weights and x,
//    and bit-identical outputs for a token whatever the batch (9..64 tokens; 65..130);
//  - the routed experts' products grouped by expert bit-identical with pair by pair;
//  - dequantize_rows_f32 and get_rows_f32 bit-identical with the CPU dequantizer,
//    dequantize_rows_f16 bit-identical with that value rounded to f16 (ties to even).
// Weights come from the CPU reference quantizers (realistic blocks) or are random bytes
// with finite random scales (every bit pattern of the quants). Outputs are poisoned (NaN)
// before every run. Exit 0: all passed; 1: a failure; 77: no GPU (skipped).
//
// --perf [--rows R --cols C]: times quant_matvec (CUDA events around batches of 10 launches,
// median of 50 batches, weight buffers rotated so the set exceeds L2) per type for n_tokens 1, 4, 8 and
// dequantize_rows_f16, and prints GB/s and the share of 4.0 TB/s; then quant_gemm for 16..512
// tokens against what it replaces (dequantize_rows_f16 of the whole matrix + cuBLAS f16 GEMM).
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
#include "quant_test_common.h"
#include "core/tune.h"

namespace quant_test {
namespace {

// Checks the first nt tokens' outputs y (rows per token) against ref within tol of
// mag (sum |w x|), and within tol32 of mag32 against ref32; the outputs past them must
// still hold the NaN poison. `what` names the kernel in the failure lines.
void check_outputs(const std::string& tag, const char* what, int nt, int64_t rows, int64_t k_tokens,
                   const std::vector<float>& y, const std::vector<double>& ref, const std::vector<double>& mag,
                   const std::vector<double>& ref32, const std::vector<double>& mag32, double tol, double tol32,
                   Failures& fails, double* worst_err) {
  int bad = 0;
  for (int64_t i = 0; i < nt * rows; ++i) {
    const double e = std::fabs(static_cast<double>(y[i]) - ref[i]);
    const double rel = mag[i] > 0 ? e / mag[i] : e;
    const double e32 = std::fabs(static_cast<double>(y[i]) - ref32[i]);
    const double rel32 = mag32[i] > 0 ? e32 / mag32[i] : e32;
    if (!(rel <= tol) || !(rel32 <= tol32)) {
      if (bad++ < 3) {
        fails.add(tag + " " + what + " nt=" + std::to_string(nt) + " token " + std::to_string(i / rows) + " row " +
                  std::to_string(i % rows) + ": got " + std::to_string(y[i]) + " want " + std::to_string(ref[i]) +
                  " (rel " + std::to_string(rel) + ", vs f32 " + std::to_string(rel32) + ")");
      }
    }
    if (rel > *worst_err || std::isnan(rel)) *worst_err = std::isnan(rel) ? INFINITY : rel;
  }
  for (int64_t i = nt * rows; i < k_tokens * rows; ++i) {
    if (!std::isnan(y[i])) {
      fails.add(tag + " " + what + " nt=" + std::to_string(nt) + " wrote past its tokens at " + std::to_string(i));
      break;
    }
  }
}

// q8_matvec for 1..8 and 11 tokens against the exact product with the quantized x
// (kMatvecTol of sum |w xq|), and within kQ8VsF32Tol of sum |w x| of the f32 product.
constexpr double kQ8VsF32Tol = 5e-3;
void run_q8_case(const std::string& tag, const DeviceWeight& dw, const std::vector<float>& wf,
                 const std::vector<float>& x, const std::vector<double>& ref32, const std::vector<double>& mag32,
                 int k_tokens, cudaStream_t stream, Failures& fails, double* worst_err) {
  const int64_t rows = dw.n_rows, cols = dw.n_cols;
  const std::vector<double> xq = q8_values(x);
  std::vector<double> ref(static_cast<size_t>(k_tokens * rows)), mag(ref.size());
  parallel_for(rows, [&](int64_t r) {
    const float* wr = wf.data() + r * cols;
    for (int t = 0; t < k_tokens; ++t) {
      double s = 0, m = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wr[c]) * xq[t * cols + c];
        s += p;
        m += std::fabs(p);
      }
      ref[t * rows + r] = s;
      mag[t * rows + r] = m;
    }
  });
  float* d_x = device_copy(x);
  float* d_y = nullptr;
  CUDA_OK(cudaMalloc(&d_y, sizeof(float) * k_tokens * rows));
  const size_t sb = hearth::cuda::q8_matvec_scratch_bytes(cols, k_tokens);
  void* d_s = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb));
  std::vector<float> y(static_cast<size_t>(k_tokens * rows));
  for (int nt : {1, 2, 3, 4, 5, 6, 7, 8, 11}) {
    if (nt > k_tokens) break;
    CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * k_tokens * rows, stream));
    hearth::cuda::q8_matvec(dw, d_x, nt, d_y, d_s, sb, stream);
    check_launch(stream);
    CUDA_OK(cudaMemcpy(y.data(), d_y, sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    check_outputs(tag, "q8_matvec", nt, rows, k_tokens, y, ref, mag, ref32, mag32, kMatvecTol, kQ8VsF32Tol, fails,
                  worst_err);
    // Every kernel shape (threads per row, units decoded ahead, loads before the wait)
    // gives the default's bits.
    struct Shape {
      int tpr, ilp, early;
    };
    std::vector<float> y2(y.size());
    // (Other threads per row than the default's sum in other orders: checked against the
    // reference below.)
    for (const Shape sh : {Shape{0, 1, 0}, Shape{0, 1, 1}, Shape{0, 2, 0}, Shape{0, 2, 1}}) {
      hearth::tune::set(hearth::tune::kCudaMatvecTpr, sh.tpr);
      hearth::tune::set(hearth::tune::kCudaMatvecIlp, sh.ilp);
      hearth::tune::set(hearth::tune::kCudaMatvecEarly, sh.early);
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * k_tokens * rows, stream));
      hearth::cuda::q8_matvec(dw, d_x, nt, d_y, d_s, sb, stream);
      check_launch(stream);
      CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
        fails.add(tag + " q8_matvec nt=" + std::to_string(nt) + ": shape tpr=" + std::to_string(sh.tpr) +
                  " ilp=" + std::to_string(sh.ilp) + " early=" + std::to_string(sh.early) +
                  " differs from the default's bits");
      }
    }
    hearth::tune::reset(hearth::tune::kCudaMatvecTpr);
    hearth::tune::reset(hearth::tune::kCudaMatvecIlp);
    hearth::tune::reset(hearth::tune::kCudaMatvecEarly);
    // One row a warp, and activations read from global memory instead of staged in shared
    // memory: the default's bits.
    auto same_bits = [&](hearth::tune::Id key, int on, int off, const char* what) {
      hearth::tune::set(key, on);
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * k_tokens * rows, stream));
      hearth::cuda::q8_matvec(dw, d_x, nt, d_y, d_s, sb, stream);
      check_launch(stream);
      hearth::tune::set(key, off);
      CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
        fails.add(tag + " q8_matvec nt=" + std::to_string(nt) + ": " + what + " differs from the default's bits");
      }
    };
    same_bits(hearth::tune::kCudaMatvecRows, 1, 0, "one row a warp");
    same_bits(hearth::tune::kCudaMatvecSmem, 0, 1, "activations from global memory");
    // The weights streamed through shared memory in every block shape (4, the default;
    // 1; 2; 3) against the register-fed kernel (0).
    for (const int shape : {0, 1, 2, 3}) {
      same_bits(hearth::tune::kCudaMatvecStream, shape, 4,
                ("streamed weights shape " + std::to_string(shape) + " (0: off)").c_str());
    }
    same_bits(hearth::tune::kCudaMatvecPersist, 0, 1, "streamed weights, a block per group of rows");
    for (const int tpr : {32, 64, 128}) {
      hearth::tune::set(hearth::tune::kCudaMatvecTpr, tpr);
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * k_tokens * rows, stream));
      hearth::cuda::q8_matvec(dw, d_x, nt, d_y, d_s, sb, stream);
      check_launch(stream);
      hearth::tune::reset(hearth::tune::kCudaMatvecTpr);
      CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      check_outputs(tag, ("q8_matvec (" + std::to_string(tpr) + " threads a row)").c_str(), nt, rows, k_tokens, y2,
                    ref, mag, ref32, mag32, kMatvecTol, kQ8VsF32Tol, fails, worst_err);
    }
  }
  CUDA_OK(cudaFree(d_s));
  CUDA_OK(cudaFree(d_x));
  CUDA_OK(cudaFree(d_y));
}

// q8_gemm for 1..64 tokens against the exact product with the quantized x (kMatvecTol of
// sum |w xq|) and within kQ8VsF32Tol of the f32 product, writing nothing past its tokens;
// a token's outputs are the same bits in batches of 1, 9, 16, 40 and 64 tokens.
void run_q8_gemm_case(const std::string& tag, const DeviceWeight& dw, const std::vector<float>& wf,
                      std::mt19937_64& rng, cudaStream_t stream, Failures& fails, double* worst_err) {
  const int64_t rows = dw.n_rows, cols = dw.n_cols;
  constexpr int kTok = 64;
  std::vector<float> x(static_cast<size_t>(kTok * cols));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : x) v = ud(rng);
  // (The tokens quantized as the kernel does: as Q8_K per 256 values, or in chunks of 32.)
  const std::vector<double> xq = hearth::cuda::q8_gemm_uses_q8k() ? q8k_values(x) : q8_values(x);
  std::vector<double> ref(static_cast<size_t>(kTok * rows)), mag(ref.size()), ref32(ref.size()), mag32(ref.size());
  parallel_for(rows, [&](int64_t r) {
    for (int t = 0; t < kTok; ++t) {
      double s = 0, m = 0, s32 = 0, m32 = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double w = wf[r * cols + c];
        s += w * xq[t * cols + c];
        m += std::fabs(w * xq[t * cols + c]);
        s32 += w * x[t * cols + c];
        m32 += std::fabs(w * x[t * cols + c]);
      }
      ref[t * rows + r] = s;
      mag[t * rows + r] = m;
      ref32[t * rows + r] = s32;
      mag32[t * rows + r] = m32;
    }
  });
  float* d_x = device_copy(x);
  float *d_y = nullptr, *d_y2 = nullptr;
  CUDA_OK(cudaMalloc(&d_y, sizeof(float) * kTok * rows));
  CUDA_OK(cudaMalloc(&d_y2, sizeof(float) * kTok * rows));
  size_t sb = 0;
  for (int nt = 1; nt <= kTok; ++nt) sb = std::max(sb, hearth::cuda::q8_gemm_scratch_bytes(dw, nt));
  void* d_s = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb));
  std::vector<float> y(static_cast<size_t>(kTok * rows)), first;
  for (int nt : {1, 9, 16, 17, 40, 64}) {
    CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
    hearth::cuda::q8_gemm(dw, d_x, nt, d_y, d_s, sb, stream);
    check_launch(stream);
    CUDA_OK(cudaMemcpy(y.data(), d_y, sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    check_outputs(tag, "q8_gemm", nt, rows, kTok, y, ref, mag, ref32, mag32, kMatvecTol, kQ8VsF32Tol, fails,
                  worst_err);
    if (nt == 1) {
      first.assign(y.begin(), y.begin() + rows);
    } else if (std::memcmp(first.data(), y.data(), sizeof(float) * static_cast<size_t>(rows)) != 0) {
      fails.add(tag + " q8_gemm nt=" + std::to_string(nt) + ": the first token's outputs differ from a batch of 1");
    }
    // Two weights sharing x in one call (x quantized once): each the single call's bits.
    std::vector<float> y2(y.size());
    {
      const DeviceWeight two[2] = {dw, dw};
      float* outs[2] = {d_y, d_y2};
      const size_t mb = hearth::cuda::q8_gemm_multi_scratch_bytes(two, 2, nt);
      void* d_m = nullptr;
      CUDA_OK(cudaMalloc(&d_m, mb));
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
      CUDA_OK(cudaMemsetAsync(d_y2, 0xff, sizeof(float) * kTok * rows, stream));
      hearth::cuda::q8_gemm_multi(two, 2, d_x, nt, outs, d_m, mb, stream);
      check_launch(stream);
      for (float* o : outs) {
        CUDA_OK(cudaMemcpy(y2.data(), o, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
        if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
          fails.add(tag + " q8_gemm_multi nt=" + std::to_string(nt) + ": differs from q8_gemm's bits");
        }
      }
      CUDA_OK(cudaFree(d_m));
    }
    // Both kernel variants (scaling the raw sub-block sums afterwards, or the scale's split
    // halves in two MMAs): the default's bits.
    for (int mode : {0, 1}) {
      hearth::tune::set(hearth::tune::kCudaMmqScaleAfter, mode);
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
      hearth::cuda::q8_gemm(dw, d_x, nt, d_y, d_s, sb, stream);
      check_launch(stream);
      CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
        fails.add(tag + " q8_gemm nt=" + std::to_string(nt) + ": scale-after mode " + std::to_string(mode) +
                  " differs from the default's bits");
      }
    }
    hearth::tune::reset(hearth::tune::kCudaMmqScaleAfter);
    // 17 or more tokens: the wide kernel's shapes (32- and 64-token tiles) and the narrow
    // kernel's 32-token tiles, the same bits.
    if (nt > 16) {
      for (int wide : {0, 2, 4}) {
        hearth::tune::set(hearth::tune::kCudaMmqWide, wide);
        CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
        hearth::cuda::q8_gemm(dw, d_x, nt, d_y, d_s, sb, stream);
        check_launch(stream);
        CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
        if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
          fails.add(tag + " q8_gemm nt=" + std::to_string(nt) + ": wide kernel " + std::to_string(wide) +
                    " differs from the default's bits");
        }
      }
      hearth::tune::reset(hearth::tune::kCudaMmqWide);
    }
  }
  // Its matrix-vector form for 1-8 tokens (the deterministic mode's decode): q8_gemm's bits.
  if (hearth::cuda::q8_gemm_uses_q8k()) {
    const size_t mb = hearth::cuda::q8_gemm_matvec_scratch_bytes(dw.n_cols, hearth::cuda::kMaxMatvecTokens);
    void* d_m = nullptr;
    CUDA_OK(cudaMalloc(&d_m, mb));
    std::vector<float> y2(y.size());
    for (int nt = 1; nt <= hearth::cuda::kMaxMatvecTokens; ++nt) {
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
      hearth::cuda::q8_gemm(dw, d_x, nt, d_y, d_s, sb, stream);
      CUDA_OK(cudaMemsetAsync(d_y2, 0xff, sizeof(float) * kTok * rows, stream));
      hearth::cuda::q8_gemm_matvec(dw, d_x, nt, d_y2, d_m, mb, stream);
      check_launch(stream);
      CUDA_OK(cudaMemcpy(y.data(), d_y, sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(y2.data(), d_y2, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
        size_t i = 0;
        while (i + 1 < static_cast<size_t>(nt * rows) && std::memcmp(&y[i], &y2[i], sizeof(float)) == 0) ++i;
        fails.add(tag + " q8_gemm_matvec nt=" + std::to_string(nt) + ": differs from q8_gemm's bits (first at " +
                  std::to_string(i) + ": " + std::to_string(y2[i]) + " against " + std::to_string(y[i]) + ")");
      }
      // Nothing written past its tokens.
      const float sentinel = y2[static_cast<size_t>(nt * rows)];
      if (nt < kTok && !std::isnan(sentinel)) fails.add(tag + " q8_gemm_matvec nt=" + std::to_string(nt) + ": wrote past its tokens");
      // Two weights sharing x (x quantized once): each the single call's bits.
      {
        const DeviceWeight two[2] = {dw, dw};
        float* outs[2] = {d_y, d_y2};
        CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
        CUDA_OK(cudaMemsetAsync(d_y2, 0xff, sizeof(float) * kTok * rows, stream));
        hearth::cuda::q8_gemm_matvec_multi(two, 2, d_x, nt, outs, d_m, mb, stream);
        check_launch(stream);
        std::vector<float> y3(y.size());
        for (float* o : outs) {
          CUDA_OK(cudaMemcpy(y3.data(), o, sizeof(float) * y3.size(), cudaMemcpyDeviceToHost));
          if (std::memcmp(y.data(), y3.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
            fails.add(tag + " q8_gemm_matvec_multi nt=" + std::to_string(nt) + ": differs from q8_gemm's bits");
          }
        }
      }
    }
    CUDA_OK(cudaFree(d_m));
  }
  CUDA_OK(cudaFree(d_s));
  CUDA_OK(cudaFree(d_x));
  CUDA_OK(cudaFree(d_y));
  CUDA_OK(cudaFree(d_y2));
}

// quant_gemm for 9..130 tokens against the double product of the f16-rounded weights and
// activations (kMatvecTol of sum |w x|; kGemmHalfDecodeTol for the fast-decoded types), within kGemmVsF32Tol of the f32 product, writing
// nothing past its tokens; and batch invariance: a token's outputs are bit-identical
// whether it runs in a batch of 9, 16 or 64 tokens (or of 65 or 130).
constexpr double kGemmVsF32Tol = 2e-3;
// Types whose tiles come from the fast half2 decoders (quant_half.cuh): each weight within a
// rounding or two of its f16 value, so against the f16 reference they get this tolerance.
constexpr double kGemmHalfDecodeTol = 1e-3;
bool half_decoded(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K;
}
void run_gemm_case(const std::string& tag, const DeviceWeight& dw, const std::vector<float>& wf, std::mt19937_64& rng,
                   cudaStream_t stream, Failures& fails, double* worst_err) {
  const int64_t rows = dw.n_rows, cols = dw.n_cols;
  constexpr int kTok = 130;
  std::vector<float> x(static_cast<size_t>(kTok * cols));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : x) v = ud(rng);
  auto r16 = [](float v) { return static_cast<double>(hearth::f16_to_f32(hearth::f32_to_f16(v))); };
  std::vector<double> w16(wf.size()), x16(x.size());
  parallel_for(rows, [&](int64_t r) {
    for (int64_t c = 0; c < cols; ++c) w16[r * cols + c] = r16(wf[r * cols + c]);
  });
  for (size_t i = 0; i < x.size(); ++i) x16[i] = r16(x[i]);
  std::vector<double> ref(static_cast<size_t>(kTok * rows)), mag(ref.size()), ref32(ref.size());
  parallel_for(rows, [&](int64_t r) {
    for (int t = 0; t < kTok; ++t) {
      double sum = 0, m = 0, s32 = 0;
      for (int64_t c = 0; c < cols; ++c) {
        sum += w16[r * cols + c] * x16[t * cols + c];
        m += std::fabs(static_cast<double>(wf[r * cols + c]) * x[t * cols + c]);
        s32 += static_cast<double>(wf[r * cols + c]) * x[t * cols + c];
      }
      ref[t * rows + r] = sum;
      mag[t * rows + r] = m;
      ref32[t * rows + r] = s32;
    }
  });
  float* d_x = device_copy(x);
  float* d_y = nullptr;
  CUDA_OK(cudaMalloc(&d_y, sizeof(float) * kTok * rows));
  const size_t sb = hearth::cuda::quant_gemm_scratch_bytes(dw, kTok);
  size_t sb_max = sb;
  for (int nt : {9, 16, 17, 40, 64, 65}) sb_max = std::max(sb_max, hearth::cuda::quant_gemm_scratch_bytes(dw, nt));
  void* d_s = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb_max));
  const double tol = half_decoded(dw.type) ? kGemmHalfDecodeTol : kMatvecTol;
  std::vector<float> y(static_cast<size_t>(kTok * rows)), y_small, y_big;
  for (int nt : {9, 16, 17, 40, 64, 65, 130}) {
    CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
    hearth::cuda::quant_gemm(dw, d_x, nt, d_y, d_s, sb_max, stream);
    check_launch(stream);
    CUDA_OK(cudaMemcpy(y.data(), d_y, sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    check_outputs(tag, "quant_gemm", nt, rows, kTok, y, ref, mag, ref32, mag, tol, kGemmVsF32Tol, fails, worst_err);
    // Batch invariance: the first 9 tokens' outputs at 9 and 64 tokens, the first 65 at 65 and 130.
    if (nt == 9) y_small.assign(y.begin(), y.begin() + 9 * rows);
    if (nt == 65) y_big.assign(y.begin(), y.begin() + 65 * rows);
    const std::vector<float>* same = nt == 16 || nt == 64 ? &y_small : nt == 130 ? &y_big : nullptr;
    if (same != nullptr && std::memcmp(same->data(), y.data(), sizeof(float) * same->size()) != 0) {
      fails.add(tag + " quant_gemm nt=" + std::to_string(nt) + ": outputs of the first tokens differ from a " +
                (nt == 130 ? "65" : "9") + "-token batch");
    }
    // Every prefetch depth: the default's bits.
    std::vector<float> y2(y.size());
    for (int pf : {1, 3}) {
      hearth::tune::set(hearth::tune::kCudaQgemmPf, pf);
      CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTok * rows, stream));
      hearth::cuda::quant_gemm(dw, d_x, nt, d_y, d_s, sb_max, stream);
      check_launch(stream);
      CUDA_OK(cudaMemcpy(y2.data(), d_y, sizeof(float) * y2.size(), cudaMemcpyDeviceToHost));
      if (std::memcmp(y.data(), y2.data(), sizeof(float) * static_cast<size_t>(nt * rows)) != 0) {
        fails.add(tag + " quant_gemm nt=" + std::to_string(nt) + ": prefetch " + std::to_string(pf) +
                  " differs from the default's bits");
      }
    }
    hearth::tune::reset(hearth::tune::kCudaQgemmPf);
  }
  CUDA_OK(cudaFree(d_s));
  CUDA_OK(cudaFree(d_x));
  CUDA_OK(cudaFree(d_y));
}

// One (type, shape) case: matvec for 1..8 tokens, dequantize_rows f32/f16, get_rows.
void run_case(GgmlType type, int64_t rows, int64_t cols, bool quantized, std::mt19937_64& rng,
              cudaStream_t stream, Failures& fails, double* worst_err, double* q8_worst, double* gemm_worst) {
  const std::string tag = type_name(type) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                          (quantized ? " (quantized)" : " (random blocks)");
  const uint64_t rb = row_bytes_of(type, cols);
  const std::vector<uint8_t> w = make_weights(type, rows, cols, quantized, rng);
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  parallel_for(rows, [&](int64_t r) {
    hearth::dequantize_row_ref(type, w.data() + r * rb, wf.data() + r * cols, cols);
  });

  constexpr int kTokens = 11;  // 1..8 in one launch, 11 in two
  std::vector<float> x(static_cast<size_t>(kTokens * cols));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : x) v = ud(rng);
  std::vector<double> ref(static_cast<size_t>(kTokens * rows)), mag(ref.size());
  parallel_for(rows, [&](int64_t r) {
    const float* wr = wf.data() + r * cols;
    for (int t = 0; t < kTokens; ++t) {
      const float* xt = x.data() + t * cols;
      double s = 0, m = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wr[c]) * static_cast<double>(xt[c]);
        s += p;
        m += std::fabs(p);
      }
      ref[t * rows + r] = s;
      mag[t * rows + r] = m;
    }
  });

  uint8_t* d_w = device_copy(w);
  float* d_x = device_copy(x);
  float* d_y = nullptr;
  CUDA_OK(cudaMalloc(&d_y, sizeof(float) * kTokens * rows));
  const DeviceWeight dw{type, d_w, rows, cols, rb};
  std::vector<float> y(static_cast<size_t>(kTokens * rows));
  for (int nt : {1, 2, 3, 4, 5, 6, 7, 8, 11}) {
    CUDA_OK(cudaMemsetAsync(d_y, 0xff, sizeof(float) * kTokens * rows, stream));
    hearth::cuda::quant_matvec(dw, d_x, nt, d_y, stream);
    check_launch(stream);
    CUDA_OK(cudaMemcpy(y.data(), d_y, sizeof(float) * kTokens * rows, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < nt * rows; ++i) {
      const double e = std::fabs(static_cast<double>(y[i]) - ref[i]);
      num += e * e;
      den += ref[i] * ref[i];
      const double rel = mag[i] > 0 ? e / mag[i] : e;
      if (!(rel <= kMatvecTol)) {  // NaN fails too
        if (bad++ < 3) {
          fails.add(tag + " matvec nt=" + std::to_string(nt) + " token " + std::to_string(i / rows) +
                    " row " + std::to_string(i % rows) + ": got " + std::to_string(y[i]) + " want " +
                    std::to_string(ref[i]) + " (rel " + std::to_string(rel) + ")");
        }
      }
      if (rel > worst || std::isnan(rel)) worst = std::isnan(rel) ? INFINITY : rel;
    }
    // Rows past the tokens asked for must be left alone (still poison).
    for (int64_t i = nt * rows; i < kTokens * rows; ++i) {
      if (!std::isnan(y[i])) {
        fails.add(tag + " matvec nt=" + std::to_string(nt) + " wrote past its tokens at " + std::to_string(i));
        break;
      }
    }
    const double norm_rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (!(norm_rel <= kMatvecTol)) {
      fails.add(tag + " matvec nt=" + std::to_string(nt) + ": ||y-ref||/||ref|| = " + std::to_string(norm_rel));
    }
    *worst_err = std::max(*worst_err, worst);
  }

  if (hearth::cuda::q8_matvec_supported(type)) {
    run_q8_case(tag, dw, wf, x, ref, mag, kTokens, stream, fails, q8_worst);
  }
  if (hearth::cuda::quant_gemm_supported(type) && rows * cols <= (int64_t{17} << 20)) run_gemm_case(tag, dw, wf, rng, stream, fails, gemm_worst);
  if (hearth::cuda::q8_gemm_supported(type) && cols % 256 == 0 && dw.row_bytes % 16 == 0 &&
      rows * cols <= (int64_t{17} << 20)) {
    run_q8_gemm_case(tag, dw, wf, rng, stream, fails, q8_worst);
  }

  // dequantize_rows: an inner range of rows, bit-exact.
  const int64_t row0 = rows / 3, n = std::max<int64_t>(1, rows - row0 - 1);
  std::vector<float> got(static_cast<size_t>(n * cols));
  float* d_f = nullptr;
  CUDA_OK(cudaMalloc(&d_f, sizeof(float) * n * cols));
  CUDA_OK(cudaMemsetAsync(d_f, 0xff, sizeof(float) * n * cols, stream));
  hearth::cuda::dequantize_rows_f32(dw, row0, n, d_f, stream);
  check_launch(stream);
  CUDA_OK(cudaMemcpy(got.data(), d_f, sizeof(float) * n * cols, cudaMemcpyDeviceToHost));
  if (std::memcmp(got.data(), wf.data() + row0 * cols, sizeof(float) * n * cols) != 0) {
    for (int64_t i = 0; i < n * cols; ++i) {
      if (hearth::f32_bits(got[i]) != hearth::f32_bits(wf[row0 * cols + i])) {
        fails.add(tag + " dequantize_rows_f32 row " + std::to_string(row0 + i / cols) + " col " +
                  std::to_string(i % cols) + ": got " + std::to_string(got[i]) + " want " +
                  std::to_string(wf[row0 * cols + i]));
        break;
      }
    }
  }
  std::vector<uint16_t> got16(static_cast<size_t>(n * cols));
  CUDA_OK(cudaMemsetAsync(d_f, 0xff, sizeof(uint16_t) * n * cols, stream));
  hearth::cuda::dequantize_rows_f16(dw, row0, n, d_f, stream);
  check_launch(stream);
  CUDA_OK(cudaMemcpy(got16.data(), d_f, sizeof(uint16_t) * n * cols, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n * cols; ++i) {
    const uint16_t want = hearth::f32_to_f16(wf[row0 * cols + i]);
    if (got16[i] != want) {
      fails.add(tag + " dequantize_rows_f16 row " + std::to_string(row0 + i / cols) + " col " +
                std::to_string(i % cols) + ": got 0x" + std::to_string(got16[i]) + " want 0x" +
                std::to_string(want));
      break;
    }
  }
  CUDA_OK(cudaFree(d_f));

  // get_rows: random ids with repeats, the first and the last row.
  const int64_t n_ids = 67;
  std::vector<int32_t> ids(n_ids);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % rows);
  ids[0] = 0;
  ids[n_ids - 1] = static_cast<int32_t>(rows - 1);
  ids[5] = ids[6];
  int32_t* d_ids = device_copy(ids);
  float* d_g = nullptr;
  CUDA_OK(cudaMalloc(&d_g, sizeof(float) * n_ids * cols));
  CUDA_OK(cudaMemsetAsync(d_g, 0xff, sizeof(float) * n_ids * cols, stream));
  hearth::cuda::get_rows_f32(dw, d_ids, n_ids, d_g, stream);
  check_launch(stream);
  std::vector<float> gr(static_cast<size_t>(n_ids * cols));
  CUDA_OK(cudaMemcpy(gr.data(), d_g, sizeof(float) * n_ids * cols, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n_ids; ++i) {
    if (std::memcmp(gr.data() + i * cols, wf.data() + static_cast<int64_t>(ids[i]) * cols,
                    sizeof(float) * cols) != 0) {
      fails.add(tag + " get_rows_f32 id " + std::to_string(ids[i]) + " (output row " + std::to_string(i) + ")");
      break;
    }
  }
  CUDA_OK(cudaFree(d_g));
  CUDA_OK(cudaFree(d_ids));
  CUDA_OK(cudaFree(d_w));
  CUDA_OK(cudaFree(d_x));
  CUDA_OK(cudaFree(d_y));
}

// quant_matvec_multi over weights of mixed types and row counts (grouped into launches
// by type) against one float64 reference each.
void run_multi_case(std::mt19937_64& rng, cudaStream_t stream, Failures& fails) {
  const int64_t cols = 2048;
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q4_K,
                            GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q8_0};
  const int64_t rows[] = {1000, 256, 300, 0, 77, 512, 33, 129};
  constexpr int kN = 8;
  std::vector<float> x(static_cast<size_t>(3 * cols));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : x) v = ud(rng);
  float* d_x = device_copy(x);
  DeviceWeight ws[kN];
  float* ys[kN];
  std::vector<std::vector<float>> wf(kN);
  for (int i = 0; i < kN; ++i) {
    const uint64_t rb = row_bytes_of(types[i], cols);
    const std::vector<uint8_t> w = make_weights(types[i], rows[i], cols, false, rng);
    wf[i].resize(static_cast<size_t>(rows[i] * cols));
    for (int64_t r = 0; r < rows[i]; ++r) {
      hearth::dequantize_row_ref(types[i], w.data() + r * rb, wf[i].data() + r * cols, cols);
    }
    ws[i] = DeviceWeight{types[i], device_copy(w), rows[i], cols, rb};
    CUDA_OK(cudaMalloc(&ys[i], sizeof(float) * 3 * std::max<int64_t>(1, rows[i])));
    CUDA_OK(cudaMemsetAsync(ys[i], 0xff, sizeof(float) * 3 * std::max<int64_t>(1, rows[i]), stream));
  }
  hearth::cuda::quant_matvec_multi(ws, kN, d_x, 3, ys, stream);
  check_launch(stream);
  // The 8-bit activation path over the same weights (one launch per run of one type).
  std::vector<float*> ys8(kN);
  for (int i = 0; i < kN; ++i) {
    CUDA_OK(cudaMalloc(&ys8[i], sizeof(float) * 3 * std::max<int64_t>(1, rows[i])));
    CUDA_OK(cudaMemsetAsync(ys8[i], 0xff, sizeof(float) * 3 * std::max<int64_t>(1, rows[i]), stream));
  }
  const size_t sb = hearth::cuda::q8_matvec_scratch_bytes(cols, 3);
  void* d_s = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb));
  hearth::cuda::q8_matvec_multi(ws, kN, d_x, 3, ys8.data(), d_s, sb, stream);
  check_launch(stream);
  const std::vector<double> xq = q8_values(x);
  for (int i = 0; i < kN; ++i) {
    std::vector<float> y(static_cast<size_t>(3 * rows[i]));
    CUDA_OK(cudaMemcpy(y.data(), ys8[i], sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < 3 * rows[i]; ++k) {
      const int64_t t = k / rows[i], r = k % rows[i];
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wf[i][r * cols + c]) * xq[t * cols + c];
        ref += p;
        mag += std::fabs(p);
      }
      if (!(std::fabs(y[k] - ref) <= kMatvecTol * mag)) {
        fails.add("q8_matvec_multi weight " + std::to_string(i) + " token " + std::to_string(t) + " row " +
                  std::to_string(r) + ": got " + std::to_string(y[k]) + " want " + std::to_string(ref));
        break;
      }
    }
    CUDA_OK(cudaFree(ys8[i]));
  }
  CUDA_OK(cudaFree(d_s));
  for (int i = 0; i < kN; ++i) {
    std::vector<float> y(static_cast<size_t>(3 * rows[i]));
    CUDA_OK(cudaMemcpy(y.data(), ys[i], sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < 3 * rows[i]; ++k) {
      const int64_t t = k / rows[i], r = k % rows[i];
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wf[i][r * cols + c]) * x[t * cols + c];
        ref += p;
        mag += std::fabs(p);
      }
      if (!(std::fabs(y[k] - ref) <= kMatvecTol * mag)) {
        fails.add("quant_matvec_multi weight " + std::to_string(i) + " token " + std::to_string(t) + " row " +
                  std::to_string(r) + ": got " + std::to_string(y[k]) + " want " + std::to_string(ref));
        break;
      }
    }
    CUDA_OK(cudaFree(const_cast<void*>(ws[i].data)));
    CUDA_OK(cudaFree(ys[i]));
  }
  CUDA_OK(cudaFree(d_x));
}

struct Shape {
  int64_t rows, cols;
  bool quantized;
};

// The argument checks need no device: they throw before any CUDA call.
int run_argument_checks() {
  int bad = 0;
  auto expect_throw = [&](const char* what, auto&& f) {
    try {
      f();
      std::printf("  FAIL %s: no error\n", what);
      ++bad;
    } catch (const std::exception&) {
    }
  };
  alignas(256) static float buf[64];
  const auto* data = reinterpret_cast<const uint8_t*>(buf);
  expect_throw("unsupported type", [&] {
    hearth::cuda::quant_matvec(DeviceWeight{GgmlType::IQ2_XXS, data, 1, 256, 66}, buf, 1, buf, nullptr);
  });
  expect_throw("n_cols not a whole number of blocks", [&] {
    hearth::cuda::quant_matvec(DeviceWeight{GgmlType::Q4_K, data, 1, 200, 144}, buf, 1, buf, nullptr);
  });
  expect_throw("row_bytes too small", [&] {
    hearth::cuda::quant_matvec(DeviceWeight{GgmlType::Q8_0, data, 2, 64, 34}, buf, 1, buf, nullptr);
  });
  expect_throw("misaligned Q4_K rows", [&] {
    hearth::cuda::dequantize_rows_f32(DeviceWeight{GgmlType::Q4_K, data + 4, 1, 256, 144}, 0, 1, buf, nullptr);
  });
  expect_throw("misaligned x", [&] {
    hearth::cuda::quant_matvec(DeviceWeight{GgmlType::Q8_0, data, 1, 32, 34}, buf + 1, 1, buf, nullptr);
  });
  expect_throw("rows out of range", [&] {
    hearth::cuda::dequantize_rows_f16(DeviceWeight{GgmlType::Q8_0, data, 4, 32, 34}, 3, 2, buf, nullptr);
  });
  expect_throw("quant_gemm scratch too small", [&] {
    hearth::cuda::quant_gemm(DeviceWeight{GgmlType::Q8_0, data, 64, 256, 272}, buf, 16, buf, buf, 16, nullptr);
  });
  expect_throw("quant_gemm on f32 weights", [&] {
    hearth::cuda::quant_gemm(DeviceWeight{GgmlType::F32, data, 1, 8, 32}, buf, 16, buf, buf, 1 << 20, nullptr);
  });
  expect_throw("negative n_tokens", [&] {
    hearth::cuda::quant_matvec(DeviceWeight{GgmlType::F32, data, 1, 8, 32}, buf, -1, buf, nullptr);
  });
  std::printf("argument checks: %s\n", bad == 0 ? "ok" : "FAIL");
  return bad;
}

int run_tests(const std::string& only) {
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  std::mt19937_64 rng(20261201);
  Failures fails;
  for (GgmlType type : kAllTypes) {
    if (!only.empty() && only != type_name(type)) continue;
    if (!hearth::cuda::quant_supported(type)) {
      fails.add(type_name(type) + " reported unsupported");
      continue;
    }
    std::vector<Shape> shapes;
    if (block_elems(type) <= 32) {
      shapes = {{1000, 576, true}, {49152, 576, false}, {300, 2048, false}, {1000, 12288, false},
                {37, 4096, true}};
      if (block_elems(type) == 1) {  // the element-wise path: rows not a multiple of 8 (or 4)
        shapes.push_back({100, 100, false});
        shapes.push_back({33, 37, false});
      }
    } else {
      shapes = {{1000, 1536, true}, {300, 2048, false}, {1000, 12288, false}, {37, 4096, true},
                {4099, 4096, false}};
    }
    const int before = fails.count;
    double worst = 0, q8_worst = 0, gemm_worst = 0;
    for (const Shape& s : shapes) {
      run_case(type, s.rows, s.cols, s.quantized, rng, stream, fails, &worst, &q8_worst, &gemm_worst);
    }
    std::printf("%-7s %s  (matvec worst |y-ref|/sum|w*x| = %.2e, tolerance %.0e; dequantize/get_rows "
                "bit-exact",
                type_name(type).c_str(), fails.count == before ? "ok  " : "FAIL", worst, kMatvecTol);
    if (hearth::cuda::q8_matvec_supported(type)) std::printf("; q8_matvec vs quantized x %.2e", q8_worst);
    if (hearth::cuda::quant_gemm_supported(type)) std::printf("; quant_gemm vs f16 x, w %.2e", gemm_worst);
    std::printf(")\n");
    std::fflush(stdout);
  }
  if (only.empty()) {
    const int before = fails.count;
    run_multi_case(rng, stream, fails);
    std::printf("multi   %s  (quant_matvec_multi and q8_matvec_multi: 8 weights of 3 types, 3 tokens)\n",
                fails.count == before ? "ok  " : "FAIL");
  }
  if (only.empty() || only == "moe") {
    const int before = fails.count;
    run_moe_group_cases(rng, stream, fails);
    std::printf("moe     %s  (q8_moe_gate_up / q8_moe_down grouped by expert vs pair by pair: same bits)\n",
                fails.count == before ? "ok  " : "FAIL");
  }
  CUDA_OK(cudaStreamDestroy(stream));
  std::printf(fails.count == 0 ? "all passed\n" : "%d failure(s)\n", fails.count);
  return fails.count == 0 ? 0 : 1;
}

}  // namespace
}  // namespace quant_test

using namespace quant_test;

int main(int argc, char** argv) {
  bool perf = false;
  int64_t rows = 4096, cols = 14336;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--perf") {
      perf = true;
    } else if (a == "--rows" && i + 1 < argc) {
      rows = std::atoll(argv[++i]);
    } else if (a == "--cols" && i + 1 < argc) {
      cols = std::atoll(argv[++i]);
    } else if (a == "--type" && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--type NAME|moe] [--perf [--rows R] [--cols C]]\n", argv[0]);
      return 2;
    }
  }
  if (!perf && run_argument_checks() != 0) return 1;
  int n_dev = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n_dev);
  if (rc != cudaSuccess || n_dev == 0) {
    std::printf("SKIP: no CUDA device visible (%s)\n", rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    return 77;
  }
  return perf ? run_perf(rows, cols, only) : run_tests(only);
}

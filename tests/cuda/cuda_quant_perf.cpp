// cuda_quant_test --perf: bandwidth of the matrix-vector kernels (f32 and 8-bit
// activations, their kernel shapes), dequantization, and quant_gemm against dequantize +
// cuBLAS, per type, on one matrix shape (CUDA events around batches of launches).
#include "quant_test_common.h"
#include "core/tune.h"

namespace quant_test {

int run_perf(int64_t rows, int64_t cols, const std::string& only) {
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("perf: %s, L2 %d MiB, matrix %lld x %lld, median of 50 batches of 10 launches (CUDA events)\n", prop.name,
              prop.l2CacheSize >> 20, static_cast<long long>(rows), static_cast<long long>(cols));
  std::printf("%-7s %9s | %18s | %18s | %18s | %18s\n", "type", "MiB", "matvec t=1 GB/s %", "t=4", "t=8",
              "dequant f16 GB/s %");
  std::mt19937_64 rng(7);
  constexpr double kPeak = 4.0e12;
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  for (GgmlType type : kAllTypes) {
    if (!only.empty() && only != type_name(type)) continue;
    const uint64_t rb = row_bytes_of(type, cols);
    const uint64_t bytes = rb * rows;
    const int n_buf = static_cast<int>(std::max<uint64_t>(3, (3ull * prop.l2CacheSize) / bytes + 1));
    // Random blocks (not zeros); one host matrix copied into every buffer.
    const std::vector<uint8_t> w = make_weights(type, rows, cols, false, rng);
    std::vector<uint8_t*> bufs(n_buf);
    for (auto& b : bufs) b = device_copy(w);
    std::vector<float> x(static_cast<size_t>(8 * cols));
    std::uniform_real_distribution<float> ud(-1.f, 1.f);
    for (auto& v : x) v = ud(rng);
    float* d_x = device_copy(x);
    float* d_y = nullptr;
    CUDA_OK(cudaMalloc(&d_y, sizeof(float) * 8 * rows));
    void* d_h = nullptr;
    const int64_t deq_rows = std::min<int64_t>(rows, 1024);
    CUDA_OK(cudaMalloc(&d_h, sizeof(uint16_t) * deq_rows * cols));

    // Batches of kBatch back-to-back launches between two events (so the host's launch
    // time overlaps the device's work, as in a real decode step), over rotating weight
    // buffers; the median batch over kReps, per launch.
    constexpr int kBatch = 10, kReps = 50;
    auto time_it = [&](auto&& launch) {
      std::vector<float> ms;
      int k = 0;
      for (int rep = -2; rep < kReps; ++rep) {
        CUDA_OK(cudaEventRecord(e0, stream));
        for (int j = 0; j < kBatch; ++j) launch(k++ % n_buf);
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaGetLastError());
        float t = 0;
        CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
        if (rep >= 0) ms.push_back(t / kBatch);
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2] * 1e-3;  // seconds
    };
    std::printf("%-7s %9.1f", type_name(type).c_str(), bytes / 1048576.0);
    for (int nt : {1, 4, 8}) {
      const double s = time_it([&](int k) {
        hearth::cuda::quant_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_x, nt, d_y, stream);
      });
      const double moved = static_cast<double>(bytes) + 4.0 * nt * (cols + rows);
      std::printf(" | %7.0f %5.1f%% %3.0fus", moved / s * 1e-9, 100 * moved / s / kPeak, s * 1e6);
    }
    if (hearth::cuda::q8_matvec_supported(type)) {
      const size_t sb = hearth::cuda::q8_matvec_scratch_bytes(cols, 8);
      void* d_s = nullptr;
      CUDA_OK(cudaMalloc(&d_s, sb));
      for (int nt : {1, 4, 8}) {
        const double s = time_it([&](int k) {
          hearth::cuda::q8_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_x, nt, d_y, d_s, sb, stream);
        });
        const double moved = static_cast<double>(bytes) + 4.0 * nt * (cols + rows);
        std::printf(" | q8 t=%d %7.0f %5.1f%% %3.0fus", nt, moved / s * 1e-9, 100 * moved / s / kPeak, s * 1e6);
      }
      // One token through the kernel shapes (cuda.matvec_ilp, cuda.matvec_early).
      for (const auto& [ilp, early] : {std::pair{1, 0}, std::pair{1, 1}, std::pair{2, 0}, std::pair{2, 1}}) {
        hearth::tune::set(hearth::tune::kCudaMatvecIlp, ilp);
        hearth::tune::set(hearth::tune::kCudaMatvecEarly, early);
        const double s = time_it([&](int k) {
          hearth::cuda::q8_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_x, 1, d_y, d_s, sb, stream);
        });
        const double moved = static_cast<double>(bytes) + 4.0 * (cols + rows);
        std::printf(" | ilp%d%s %5.1f%% %3.0fus", ilp, early ? "e" : "", 100 * moved / s / kPeak, s * 1e6);
      }
      hearth::tune::reset(hearth::tune::kCudaMatvecIlp);
      hearth::tune::reset(hearth::tune::kCudaMatvecEarly);
      // Threads per row (the default: 32).
      for (const int tpr : {32, 64, 128}) {
        hearth::tune::set(hearth::tune::kCudaMatvecTpr, tpr);
        const double s = time_it([&](int k) {
          hearth::cuda::q8_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_x, 1, d_y, d_s, sb, stream);
        });
        const double moved = static_cast<double>(bytes) + 4.0 * (cols + rows);
        std::printf(" | tpr%d %5.1f%% %3.0fus", tpr, 100 * moved / s / kPeak, s * 1e6);
      }
      hearth::tune::reset(hearth::tune::kCudaMatvecTpr);
      // Weights streamed through shared memory (0: off; 1; 2; 3; 4, the default), a block per
      // group of rows, and tall matrices streamed too; 1 and 2 tokens each.
      auto time_streamed = [&](const std::string& label) {
        for (int nt : {1, 2}) {
          const double s = time_it([&](int k) {
            hearth::cuda::q8_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_x, nt, d_y, d_s, sb, stream);
          });
          const double moved = static_cast<double>(bytes) + 4.0 * nt * (cols + rows);
          std::printf(" | %s t=%d %5.1f%% %3.0fus", label.c_str(), nt, 100 * moved / s / kPeak, s * 1e6);
        }
      };
      for (const int shape : {0, 1, 2, 3, 4}) {
        hearth::tune::set(hearth::tune::kCudaMatvecStream, shape);
        time_streamed("stream" + std::to_string(shape));
      }
      hearth::tune::reset(hearth::tune::kCudaMatvecStream);
      hearth::tune::set(hearth::tune::kCudaMatvecPersist, 0);
      time_streamed("stream4-block-a-group");
      hearth::tune::reset(hearth::tune::kCudaMatvecPersist);
      hearth::tune::set(hearth::tune::kCudaMatvecStreamRows, 0);  // streamed whatever the rows
      time_streamed("stream4-any-rows");
      hearth::tune::reset(hearth::tune::kCudaMatvecStreamRows);
      CUDA_OK(cudaFree(d_s));
    }
    {
      const double s = time_it([&](int k) {
        hearth::cuda::dequantize_rows_f16(DeviceWeight{type, bufs[k], rows, cols, rb}, 0, deq_rows, d_h, stream);
      });
      const double moved = static_cast<double>(rb) * deq_rows + 2.0 * deq_rows * cols;
      std::printf(" | %7.0f %5.1f%% %3.0fus", moved / s * 1e-9, 100 * moved / s / kPeak, s * 1e6);
    }
    std::printf("\n");
    if (hearth::cuda::quant_gemm_supported(type)) {
      // quant_gemm vs dequantize (whole matrix, f16) + cublasGemmEx, for batches and prompt chunks.
      constexpr int kMaxTok = 512;
      std::vector<float> xg(static_cast<size_t>(kMaxTok * cols));
      for (auto& v : xg) v = ud(rng);
      float* d_xg = device_copy(xg);
      float* d_yg = nullptr;
      CUDA_OK(cudaMalloc(&d_yg, sizeof(float) * kMaxTok * rows));
      size_t sb = 0;
      for (int nt : {16, 32, 64, 128, 256, 512}) {
        sb = std::max(sb, hearth::cuda::quant_gemm_scratch_bytes(DeviceWeight{type, bufs[0], rows, cols, rb}, nt));
      }
      void* d_s = nullptr;
      CUDA_OK(cudaMalloc(&d_s, sb));
      void* d_w16 = nullptr;
      CUDA_OK(cudaMalloc(&d_w16, sizeof(uint16_t) * rows * cols));
      void* d_x16 = nullptr;
      CUDA_OK(cudaMalloc(&d_x16, sizeof(uint16_t) * kMaxTok * cols));
      cublasHandle_t h = nullptr;
      if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cuBLAS init failed\n");
        return 1;
      }
      if (hearth::cuda::q8_gemm_supported(type)) {
        std::printf("  %-5s q8_gemm (int8 tensor cores; us, weight GB/s) vs quant_gemm:", type_name(type).c_str());
        size_t sq8 = 0;
        for (int nt : {16, 32, 64}) sq8 = std::max(sq8, hearth::cuda::q8_gemm_scratch_bytes(DeviceWeight{type, bufs[0], rows, cols, rb}, nt));
        void* d_q8 = nullptr;
        CUDA_OK(cudaMalloc(&d_q8, sq8));
        for (int nt : {9, 16, 32, 64}) {
          const double s8 = time_it([&](int k) {
            hearth::cuda::q8_gemm(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_q8, sq8, stream);
          });
          const double sq = time_it([&](int k) {
            hearth::cuda::quant_gemm(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_s, sb, stream);
          });
          std::printf(" | t=%d %.0f (%.0f GB/s) vs %.0f", nt, s8 * 1e6, bytes / s8 * 1e-9, sq * 1e6);
        }
        std::printf("\n");
        // Few tokens: q8_gemm's matrix-vector form (the deterministic decode) against its
        // tiles and the 8-bit-activation matrix-vector kernel (the default decode).
        if (hearth::cuda::q8_gemm_uses_q8k()) {
          std::printf("  %-5s few tokens (us) q8_gemm_matvec / q8_gemm / q8_matvec:", type_name(type).c_str());
          const size_t smv = std::max(hearth::cuda::q8_gemm_matvec_scratch_bytes(cols, 8),
                                      hearth::cuda::q8_matvec_scratch_bytes(cols, 8));
          void* d_mv = nullptr;
          CUDA_OK(cudaMalloc(&d_mv, smv));
          for (int nt : {1, 2, 3, 5, 8}) {
            const double sm = time_it([&](int k) {
              hearth::cuda::q8_gemm_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_mv, smv,
                                           stream);
            });
            const double sg = time_it([&](int k) {
              hearth::cuda::q8_gemm(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_q8, sq8, stream);
            });
            const double sv = time_it([&](int k) {
              hearth::cuda::q8_matvec(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_mv, smv, stream);
            });
            std::printf(" | t=%d %.1f / %.1f / %.1f", nt, sm * 1e6, sg * 1e6, sv * 1e6);
          }
          std::printf("\n");
          CUDA_OK(cudaFree(d_mv));
        }
        CUDA_OK(cudaFree(d_q8));
      }
      std::printf("  %-5s gemm (us, weight GB/s, TFLOP/s) quant_gemm vs dequant+cuBLAS:", type_name(type).c_str());
      for (int nt : {16, 32, 64, 128, 256, 512}) {
        const double sq = time_it([&](int k) {
          hearth::cuda::quant_gemm(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_s, sb, stream);
        });
        const double sc = time_it([&](int k) {
          hearth::cuda::dequantize_rows_f16(DeviceWeight{type, bufs[k], rows, cols, rb}, 0, rows, d_w16, stream);
          const float one = 1.f, zero = 0.f;
          cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), nt, static_cast<int>(cols), &one, d_w16,
                       CUDA_R_16F, static_cast<int>(cols), d_x16, CUDA_R_16F, static_cast<int>(cols), &zero, d_yg,
                       CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        });
        const double flop = 2.0 * nt * rows * cols;
        std::printf(" | t=%d %.0f %.0f %.1f vs %.0f (x%.2f)", nt, sq * 1e6, bytes / sq * 1e-9, flop / sq * 1e-12,
                    sc * 1e6, sc / sq);
      }
      std::printf("\n");
      // quant_gemm's prefetch depths (steps of loads in flight), batched-decode sizes.
      std::printf("%-7s prefetch", type_name(type).c_str());
      for (int pf : {1, 2, 3}) {
        hearth::tune::set(hearth::tune::kCudaQgemmPf, pf);
        for (int nt : {16, 64}) {
          const double sq = time_it([&](int k) {
            hearth::cuda::quant_gemm(DeviceWeight{type, bufs[k], rows, cols, rb}, d_xg, nt, d_yg, d_s, sb, stream);
          });
          std::printf(" | pf%d t=%d %.0fus %.0fGB/s", pf, nt, sq * 1e6, bytes / sq * 1e-9);
        }
      }
      hearth::tune::reset(hearth::tune::kCudaQgemmPf);
      std::printf("\n");
      cublasDestroy(h);
      CUDA_OK(cudaFree(d_xg));
      CUDA_OK(cudaFree(d_yg));
      CUDA_OK(cudaFree(d_s));
      CUDA_OK(cudaFree(d_w16));
      CUDA_OK(cudaFree(d_x16));
    }
    std::fflush(stdout);
    for (auto* b : bufs) CUDA_OK(cudaFree(b));
    CUDA_OK(cudaFree(d_x));
    CUDA_OK(cudaFree(d_y));
    CUDA_OK(cudaFree(d_h));
  }
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace quant_test

// CUDA back-end parity (in the spirit of ggml's test-backend-ops): every operation of
// ops/backend.h run on the CPU back-end and on the CUDA back-end with the same random
// inputs over the shapes the models use, compared with the tolerances stated below;
// then whole models: the tiny random Qwen3.5 dense / MoE / Qwen3-Next fixtures against
// transformers' logits and the CPU, and random-weight Llama-family models (quantized
// like real GGUFs) CUDA vs CPU, logits close and greedy identical up to a near-tie.
// Skips cleanly when no CUDA device is visible. Errors are measured as
//   rel = max |gpu - cpu| / max(max |cpu|, 1e-6)
// and each test prints what it measured (docs/BENCHMARKS.md records a run on an H200).
// This file: the operations and the shared back-ends; backend_parity_models.cpp: whole models;
// backend_parity_rows.cpp: the output rows reduced on the device (argmax, draws, penalties).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "backends/cuda/small_gemm.h"
#include "exact_matmul.h"
#include "parity_common.h"

namespace parity {
namespace {

std::unique_ptr<ops::Backend> g_gpu;
std::string g_skip;

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string err;
    const auto devs = hearth::backends::cuda_devices(&err);
    if (devs.empty()) {
      g_skip = "no CUDA device visible (" + err + ")";
      return;
    }
    g_gpu = hearth::backends::make_cuda_backend(0);
    std::cout << "parity: CPU vs " << g_gpu->name() << "\n";
  }
  void TearDown() override { g_gpu.reset(); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

}  // namespace

bool has_gpu() { return g_gpu != nullptr; }
const std::string& gpu_skip_reason() { return g_skip; }
ops::Backend& gpu() { return *g_gpu; }
hearth::cpu::CpuBackend& cpu() {
  static hearth::cpu::CpuBackend be(4);
  return be;
}

}  // namespace parity

namespace {

using namespace parity;

// ---------------------------------------------------------------- matrix products

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::MXFP4};

// The GPU's products against the exact ones. Up to 8 tokens (matrix-vector kernels; and
// Q4_K / Q6_K matrices of more than 512 rows from 4 to 64 tokens, q8_gemm):
// for the types with 8-bit activation kernels (Q4_0 .. Q8_0, Q4_K, Q5_K, Q6_K) the exact
// product with x quantized as those kernels do (q8_ref.h; q8_gemm as Q8_K) within 1e-4, and the f32 one
// within 1e-2 (the CPU's 8-bit activations are reported); other types f32 arithmetic on
// f32 activations. For F32 weights, matrices of at most
// 512 rows and F16 / BF16 ones of at most 4M elements (dequantized to f32; small_gemm up
// to 1024 rows, cuBLAS SGEMM beyond)
// must be within 1e-4; the f16 tensor-core path (other matrices, more than 8 tokens)
// rounds the activations to f16 (11-bit mantissa): within 2e-3. The CPU (8-bit activations for quantized weights) is
// reported, not bounded here (backend_cpu_test bounds it).
TEST(CudaParity, MatmulAllTypes) {
  NEED_GPU();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{384, 1024}, {16, 256}, {1088, 4096}})
  for (GgmlType type : kTypes) {
    if (!gpu().supports_weight(type)) {
      ADD_FAILURE() << "CUDA back-end does not take " << hearth::ggml_type_name(type);
      continue;
    }
    const auto w = make_weight(type, randn(static_cast<size_t>(rows * cols), 11, 0.5f), rows, cols);
    for (int64_t n_tok : {1, 2, 5, 8, 9, 64}) {
      const auto x = randn(static_cast<size_t>(n_tok * cols), 100 + static_cast<uint32_t>(n_tok));
      Both xb(x), yb(n_tok * rows);
      cpu().matmul(w->c, xb.c->data(), n_tok, yb.c->data());
      gpu().matmul(w->g, xb.g->data(), n_tok, yb.g->data());
      const auto exact = exact_matmul(*w, x, n_tok);
      const double eg = rel_err(yb.gv(), exact), ec = rel_err(yb.cv(), exact);
      // 8-bit activations: the matrix-vector kernels (up to 8 tokens), and q8_gemm (Q4_K /
      // Q6_K matrices of more than 512 rows, up to 64 tokens).
      const bool by_gemm = dynamic_cast<hearth::cuda::CudaBackend&>(gpu()).int8_gemm_takes(w->g, n_tok);
      const bool matvec = !by_gemm && n_tok <= 8 && hearth::cuda::q8_matvec_supported(type);
      const bool q8_path = matvec || by_gemm;
      if (q8_path) {
        // q8_gemm quantizes as the CPU does for K-quants (Q8_K, per 256), the matrix-vector
        // kernels in chunks of 32.
        const bool q8k = !matvec && hearth::cuda::q8_gemm_uses_q8k();
        const double eq = rel_err(yb.gv(), exact_matmul(*w, q8k ? q8k_values(x) : q8_values(x), n_tok));
        EXPECT_LE(eq, 1e-4) << hearth::ggml_type_name(type) << " n_tokens=" << n_tok << " (vs quantized x)";
        // Same integer dot products as the CPU back-end: the two differ by f32 rounding only.
        if (q8k) {
          EXPECT_LE(rel_err(yb.gv(), yb.cv()), 1e-5) << hearth::ggml_type_name(type) << " n_tokens=" << n_tok;
        }
        EXPECT_LE(eg, 1e-2) << hearth::ggml_type_name(type) << " n_tokens=" << n_tok;
        std::cout << "matmul " << hearth::ggml_type_name(type) << " [" << rows << "x" << cols << "] n=" << n_tok
                  << ": gpu (8-bit x) vs exact of quantized x " << eq << ", vs exact " << eg << ", cpu vs exact "
                  << ec << "\n";
        continue;
      }
      const bool half = type == GgmlType::F16 || type == GgmlType::BF16;
      const bool f32_path = n_tok <= 8 || type == GgmlType::F32 || rows <= 512 || (half && rows * cols <= (4 << 20));
      const double tol = f32_path ? 1e-4 : 2e-3;
      EXPECT_LE(eg, tol) << hearth::ggml_type_name(type) << " n_tokens=" << n_tok;
      std::cout << "matmul " << hearth::ggml_type_name(type) << " [" << rows << "x" << cols << "] n=" << n_tok
                << ": gpu vs exact " << eg << ", cpu vs exact " << ec << "\n";
    }
  }
}

// Gate and up products with SwiGLU (Backend::matmul_swiglu; one 8-bit kernel on the
// GPU for decode batches): the bits of the GPU's matmul_multi + swiglu for every 8-bit
// type and batch size, fallbacks included (9 tokens; an f16 weight), and within the
// products' tolerance of the CPU's.
TEST(CudaParity, FusedSwiGLU) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  cuda->set_fused_swiglu(true);
  const int64_t rows = 384, cols = 1024;
  for (GgmlType type : kTypes) {
    const auto gate = make_weight(type, randn(static_cast<size_t>(rows * cols), 51, 0.5f), rows, cols);
    const auto up = make_weight(type, randn(static_cast<size_t>(rows * cols), 52, 0.5f), rows, cols);
    for (int64_t n_tok : {1, 2, 3, 5, 8, 9}) {
      const auto x = randn(static_cast<size_t>(n_tok * cols), 200 + static_cast<uint32_t>(n_tok));
      Both xb(x), g(n_tok * rows), u(n_tok * rows), g2(n_tok * rows), u2(n_tok * rows);
      cpu().matmul_swiglu(gate->c, up->c, xb.c->data(), n_tok, g.c->data(), u.c->data());
      gpu().matmul_swiglu(gate->g, up->g, xb.g->data(), n_tok, g.g->data(), u.g->data());
      const ops::WeightView* ws[2] = {&gate->g, &up->g};
      float* ys[2] = {g2.g->data(), u2.g->data()};
      gpu().matmul_multi(ws, 2, xb.g->data(), n_tok, ys);
      gpu().swiglu(g2.g->data(), u2.g->data(), n_tok * rows, g2.g->data());
      const std::string what = std::string(hearth::ggml_type_name(type)) + " n_tokens=" + std::to_string(n_tok);
      const auto a = g.gv(), b = g2.gv();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << "fused vs separate bits, " << what;
      // (The CPU takes 8-bit activations for these types at any batch, the GPU f16 ones
      // past 8 tokens: each within ~6e-3 of the exact product.)
      EXPECT_LE(g.err(), hearth::cuda::q8_matvec_supported(type) ? 3e-2 : 5e-3) << what;
    }
  }
  cuda->set_fused_swiglu(false);
}

// add_rms_norm quantizes its output for the 8-bit product right after it (matmul,
// matmul_multi, matmul_swiglu take it instead of quantizing x again), and so does the
// SwiGLU of the unfused matmul_swiglu for the down product: the same bits as when another
// op comes between and the product quantizes x itself.
TEST(CudaParity, FusedQuantization) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (int64_t n : {2048, 4096, 5120}) {
      const int64_t rows = 256;
      const auto nw = make_weight(GgmlType::F32, randn(static_cast<size_t>(n), 61), 1, n);
      const auto w = make_weight(type, randn(static_cast<size_t>(rows * n), 62, 0.5f), rows, n);
      const auto w2 = make_weight(type, randn(static_cast<size_t>(rows * n), 63, 0.5f), rows, n);
      const auto wd = make_weight(type, randn(static_cast<size_t>(rows * rows), 66, 0.5f), rows, rows);
      for (int64_t n_tok : {1, 3, 8}) {
        const auto xv = randn(static_cast<size_t>(n_tok * n), 64, 3.0f), yv = randn(static_cast<size_t>(n_tok * n), 65);
        const std::string what = std::string(hearth::ggml_type_name(type)) + " n=" + std::to_string(n) +
                                 " n_tokens=" + std::to_string(n_tok);
        // 0: matmul, 1: matmul_multi, 2: matmul_swiglu, 3: unfused matmul_swiglu then the
        // down product; fused (norm / SwiGLU right before) or not.
        for (int op = 0; op < 4; ++op) {
          std::vector<float> res[2];
          for (int fused = 0; fused < 2; ++fused) {
            Both x(xv), y(yv), out(n_tok * rows), out2(n_tok * rows), other(16), down(n_tok * rows);
            gpu().add_rms_norm(x.g->data(), y.g->data(), nw->g, n_tok, n, 1e-6f, y.g->data());
            if (fused == 0) gpu().fill(other.g->data(), 1.0f, 16);
            if (op == 0) {
              gpu().matmul(w->g, y.g->data(), n_tok, out.g->data());
            } else if (op == 1) {
              const ops::WeightView* ws[2] = {&w->g, &w2->g};
              float* ys[2] = {out.g->data(), out2.g->data()};
              gpu().matmul_multi(ws, 2, y.g->data(), n_tok, ys);
            } else if (op == 2) {
              cuda->set_fused_swiglu(true);
              gpu().matmul_swiglu(w->g, w2->g, y.g->data(), n_tok, out.g->data(), out2.g->data());
              cuda->set_fused_swiglu(false);
            } else {
              gpu().matmul_swiglu(w->g, w2->g, y.g->data(), n_tok, out.g->data(), out2.g->data());
              if (fused == 0) gpu().fill(other.g->data(), 1.0f, 16);
              gpu().matmul(wd->g, out.g->data(), n_tok, down.g->data());
            }
            res[fused] = op == 3 ? down.gv() : out.gv();
            if (op == 1) {
              const auto o2 = out2.gv();
              res[fused].insert(res[fused].end(), o2.begin(), o2.end());
            }
          }
          EXPECT_EQ(0, std::memcmp(res[0].data(), res[1].data(), sizeof(float) * res[0].size()))
              << "op " << op << ": quantized by the norm vs by the product, " << what;
        }
      }
    }
  }
}

// The Gated DeltaNet's gated norm quantizing its output for the out projection right
// after it (rows_per_token heads a token): the same product bits as the product
// quantizing x itself (another op between them), and the same normed values.
TEST(CudaParity, GatedNormQuantizedForTheProduct) {
  NEED_GPU();
  const int64_t hv = 32, dv = 128, vd = hv * dv, rows = 256;
  const auto nw = make_weight(GgmlType::F32, randn(static_cast<size_t>(dv), 71), 1, dv);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0}) {
    const auto w = make_weight(type, randn(static_cast<size_t>(rows * vd), 72, 0.5f), rows, vd);
    for (int64_t n_tok : {1, 3, 8}) {
      const auto xv = randn(static_cast<size_t>(n_tok * vd), 73, 2.0f), zv = randn(static_cast<size_t>(n_tok * vd), 74);
      std::vector<float> res[2], normed[2];
      for (int fused = 0; fused < 2; ++fused) {
        Both x(xv), z(zv), out(n_tok * rows), other(16);
        gpu().gated_rms_norm(x.g->data(), z.g->data(), nw->g, n_tok * hv, dv, 1e-6f, fused != 0 ? hv : 1);
        if (fused == 0) gpu().fill(other.g->data(), 1.0f, 16);
        gpu().matmul(w->g, x.g->data(), n_tok, out.g->data());
        res[fused] = out.gv();
        normed[fused] = x.gv();
      }
      const std::string what = std::string(hearth::ggml_type_name(type)) + " n_tokens=" + std::to_string(n_tok);
      EXPECT_EQ(0, std::memcmp(normed[0].data(), normed[1].data(), sizeof(float) * normed[0].size())) << what;
      EXPECT_EQ(0, std::memcmp(res[0].data(), res[1].data(), sizeof(float) * res[0].size())) << what;
    }
  }
}

// F32 weights of few rows against many tokens (CudaBackend::matmul -> small_gemm: the
// Gated DeltaNet's alpha / beta, MoE routers; columns split over blocks when the rows are
// few): within 1e-4 of the exact product, odd shapes included, and a token's outputs
// bit-identical in batches of 9, 33 and 300 tokens (the splits depend on the shape only).
TEST(CudaParity, SmallF32Gemm) {
  NEED_GPU();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32, 2048}, {256, 2048}, {40, 1000}, {1000, 512}, {7, 4096}}) {
    const auto w = make_weight(GgmlType::F32, randn(static_cast<size_t>(rows * cols), 21, 0.5f), rows, cols);
    const auto x = randn(static_cast<size_t>(300 * cols), 22);
    std::vector<float> first;
    for (int64_t n_tok : {9, 33, 300}) {
      const std::vector<float> xs(x.begin(), x.begin() + n_tok * cols);
      Both xb(xs), yb(n_tok * rows);
      gpu().matmul(w->g, xb.g->data(), n_tok, yb.g->data());
      const auto got = yb.gv();
      const double e = rel_err(got, exact_matmul(*w, xs, n_tok));
      EXPECT_LE(e, 1e-4) << rows << "x" << cols << " n_tokens=" << n_tok;
      std::cout << "small f32 gemm [" << rows << "x" << cols << "] n=" << n_tok << ": gpu vs exact " << e << "\n";
      if (first.empty()) {
        first = got;
      } else {
        for (size_t i = 0; i < first.size(); ++i) {
          ASSERT_EQ(first[i], got[i]) << rows << "x" << cols << ": output " << i << " differs in a batch of " << n_tok;
        }
      }
    }
  }
}

// The fused routed experts (CudaBackend::moe_ffn): Q4_K gate/up and Q6_K down experts,
// an F32 router (tokens whose K-th and (K+1)-th logits are within 1e-3 are left out),
// against a double-precision forward. Up to 64 tokens run on 8-bit activations, so the
// reference quantizes x and the SwiGLU output as those kernels do (in chunks of 32 for the
// dp4a kernels, as Q8_K where the int8 tensor-core expert kernels take the batch: within
// 2e-3 of the largest output); 80 and 200 tokens take the grouped tensor-core path (pairs
// sorted by expert, tiles of up to 64 pairs, f16 activations: within 5e-3 of the
// unquantized forward).
TEST(CudaParity, MoeFfnFused) {
  NEED_GPU();
  ASSERT_TRUE(gpu().fused_moe());
  const int64_t X = 16, K = 4, E = 512, F = 512;
  const auto router = make_weight(GgmlType::F32, randn(static_cast<size_t>(X * E), 71, 0.05f), X, E);
  const auto gate = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(X * F * E), 72, 0.5f), X * F, E);
  const auto up = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(X * F * E), 73, 0.5f), X * F, E);
  const auto down = make_weight(GgmlType::Q6_K, randn(static_cast<size_t>(X * E * F), 74, 0.5f), X * E, F);
  auto deq = [](const WeightPair& w, int64_t rows, int64_t cols) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      hearth::dequantize_row_ref(w.c.type, w.bytes.data() + r * w.c.row_bytes, out.data() + r * cols, cols);
    }
    return out;
  };
  const auto wr = deq(*router, X, E), wg = deq(*gate, X * F, E), wu = deq(*up, X * F, E), wd = deq(*down, X * E, F);
  // A shared expert (Qwen3.5-MoE's): its own gate / up / down of the routed experts' types,
  // scaled by sigmoid(inp . x); decode batches run it as each token's last pair.
  const auto sgate = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(F * E), 75, 0.5f), F, E);
  const auto sup = make_weight(GgmlType::Q4_K, randn(static_cast<size_t>(F * E), 76, 0.5f), F, E);
  const auto sdown = make_weight(GgmlType::Q6_K, randn(static_cast<size_t>(E * F), 77, 0.5f), E, F);
  const auto sinp = make_weight(GgmlType::F32, randn(static_cast<size_t>(E), 78, 0.05f), 1, E);
  const auto wsg = deq(*sgate, F, E), wsu = deq(*sup, F, E), wsd = deq(*sdown, E, F), wsi = deq(*sinp, 1, E);
  const auto norm_w = make_weight(GgmlType::F32, randn(static_cast<size_t>(E), 79, 1.0f), 1, E);
  for (const bool with_shared : {false, true}) {
    ops::MoeLayer L = gpu_moe_layer(*router, *gate, *up, *down, X, K, E, F);
    if (with_shared) {
      L.shared_gate = &sgate->g;
      L.shared_up = &sup->g;
      L.shared_down = &sdown->g;
      L.shared_inp = &sinp->g;
      L.n_ff_shared = F;
      ASSERT_TRUE(gpu().moe_takes_shared(L, 1));
      EXPECT_FALSE(gpu().moe_takes_shared(L, 80));  // prompts: the model's separate ops
      ops::MoeLayer odd = L;  // another type for the shared down rows: not taken
      odd.shared_down = &sgate->g;
      EXPECT_FALSE(gpu().moe_takes_shared(odd, 1));
    }
    for (int64_t n : {1, 3, 8, 16, 20, 80, 200}) {
      if (with_shared && !gpu().moe_takes_shared(L, n)) continue;
      const auto x = randn(static_cast<size_t>(n * E), 80 + static_cast<uint32_t>(n));
      const bool q8 = n <= 64;  // CudaBackend's kMaxFusedTokens
      const bool q8k = static_cast<hearth::cuda::CudaBackend&>(gpu()).moe_mma_takes(L, n);
      if (n == 20) {
        EXPECT_TRUE(q8k) << "20 tokens should take the tensor-core expert kernels";
      }
      const auto quant = [&](const std::vector<float>& v) { return q8k ? q8k_values(v) : q8_values(v); };
      const auto xq = quant(x);
      std::vector<float> want(static_cast<size_t>(n * E), 0.f);
      std::vector<bool> clear_row(static_cast<size_t>(n), true);
      int clear = 0;
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> p(static_cast<size_t>(X)), logit(static_cast<size_t>(X));
        double mx = -1e300, sum = 0;
        for (int64_t e = 0; e < X; ++e) {
          double s = 0;
          for (int64_t c = 0; c < E; ++c) s += static_cast<double>(wr[e * E + c]) * x[t * E + c];
          p[e] = logit[e] = s;
          mx = std::max(mx, s);
        }
        for (auto& v : p) sum += (v = std::exp(v - mx));
        for (auto& v : p) v /= sum;
        std::vector<int64_t> order(static_cast<size_t>(X));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
        // A token whose K-th and (K+1)-th logits are within 1e-3 could route either way.
        if (logit[order[K - 1]] - logit[order[K]] > 1e-3) {
          ++clear;
        } else {
          clear_row[t] = false;
        }
        double chosen = 0;
        for (int64_t k = 0; k < K; ++k) chosen += p[order[k]];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t e = order[k];
          std::vector<float> h(static_cast<size_t>(F));
          for (int64_t r = 0; r < F; ++r) {
            double g = 0, u = 0;
            for (int64_t c = 0; c < E; ++c) {
              const double xv = q8 ? xq[t * E + c] : x[t * E + c];
              g += wg[(e * F + r) * E + c] * xv;
              u += wu[(e * F + r) * E + c] * xv;
            }
            h[r] = static_cast<float>(g / (1 + std::exp(-g)) * u);
          }
          const std::vector<double> hq = q8 ? quant(h) : std::vector<double>(h.begin(), h.end());
          for (int64_t c = 0; c < E; ++c) {
            double y = 0;
            for (int64_t r = 0; r < F; ++r) y += wd[(e * E + c) * F + r] * hq[r];
            want[t * E + c] += static_cast<float>(p[e] / chosen * y);
          }
        }
        if (with_shared) {
          double gs = 0;
          for (int64_t c = 0; c < E; ++c) gs += static_cast<double>(wsi[c]) * x[t * E + c];
          const double sg = 1 / (1 + std::exp(-gs));
          std::vector<float> h(static_cast<size_t>(F));
          for (int64_t r = 0; r < F; ++r) {
            double g = 0, u = 0;
            for (int64_t c = 0; c < E; ++c) {
              const double xv = q8 ? xq[t * E + c] : x[t * E + c];
              g += wsg[r * E + c] * xv;
              u += wsu[r * E + c] * xv;
            }
            h[r] = static_cast<float>(g / (1 + std::exp(-g)) * u);
          }
          const std::vector<double> hq = q8 ? quant(h) : std::vector<double>(h.begin(), h.end());
          for (int64_t c = 0; c < E; ++c) {
            double y = 0;
            for (int64_t r = 0; r < F; ++r) y += wsd[c * F + r] * hq[r];
            want[t * E + c] += static_cast<float>(sg * y);
          }
        }
      }
      ASSERT_GE(clear, (n + 1) / 2) << "the test's routing has many near-ties: pick other seeds";
      Both xb(x), out(n * E);
      gpu().moe_ffn(L, xb.g->data(), n, out.g->data());
      std::vector<float> got = out.gv();
      for (int64_t t = 0; t < n; ++t) {  // compare only the tokens routed without a near-tie
        if (!clear_row[t]) std::fill(got.begin() + t * E, got.begin() + (t + 1) * E, 0.f);
        if (!clear_row[t]) std::fill(want.begin() + t * E, want.begin() + (t + 1) * E, 0.f);
      }
      const double err = rel_err(got, want);
      EXPECT_LE(err, q8 ? 2e-3 : 5e-3) << "moe_ffn n=" << n << (with_shared ? " with the shared expert" : "");
      std::cout << "moe_ffn " << n << " tokens ("
                << (q8k  ? "int8 tensor-core experts"
                    : q8 ? "8-bit activations"
                         : "grouped tensor-core products")
                << (with_shared ? ", shared expert" : "") << "): gpu vs double " << err << "\n";
      // moe_ffn_add_rms_norm (decode: the experts' sum, the residual add and the norm in one
      // kernel) against moe_ffn then add_rms_norm: the same bits.
      const auto res = randn(static_cast<size_t>(n * E), 90 + static_cast<uint32_t>(n));
      Both r1(res), r2(res), y1(n * E), y2(n * E), o1(n * E), o2(n * E);
      gpu().moe_ffn(L, xb.g->data(), n, y1.g->data());
      gpu().add_rms_norm(r1.g->data(), y1.g->data(), norm_w->g, n, E, 1e-6f, o1.g->data());
      gpu().moe_ffn_add_rms_norm(L, xb.g->data(), n, y2.g->data(), r2.g->data(), norm_w->g, 1e-6f, o2.g->data());
      EXPECT_EQ(y1.gv(), y2.gv()) << "moe_ffn_add_rms_norm n=" << n << ": the experts' sum";
      EXPECT_EQ(r1.gv(), r2.gv()) << "moe_ffn_add_rms_norm n=" << n << ": the residual";
      EXPECT_EQ(o1.gv(), o2.gv()) << "moe_ffn_add_rms_norm n=" << n << ": the norm";
    }
  }
}

// get_rows dequantizes: every type exact to f32 rounding.
TEST(CudaParity, GetRowsAllTypes) {
  NEED_GPU();
  const int64_t rows = 300, cols = 512;
  const std::vector<int32_t> ids = {0, 299, 17, 17, 150, 3};
  for (GgmlType type : kTypes) {
    if (!gpu().supports_weight(type)) continue;
    const auto w = make_weight(type, randn(static_cast<size_t>(rows * cols), 5), rows, cols);
    Both out(static_cast<int64_t>(ids.size()) * cols);
    cpu().get_rows(w->c, ids.data(), static_cast<int64_t>(ids.size()), out.c->data());
    gpu().get_rows(w->g, ids.data(), static_cast<int64_t>(ids.size()), out.g->data());
    EXPECT_LE(out.err(), 1e-6) << hearth::ggml_type_name(type);
  }
}

// ---------------------------------------------------------------- element-wise

TEST(CudaParity, NormsAndElementwise) {
  NEED_GPU();
  for (int64_t n : {64, 2048, 4096, 5120}) {
    const int64_t rows = 7;
    const auto w = make_weight(GgmlType::F32, randn(static_cast<size_t>(n), 1), 1, n);
    const auto xv = randn(static_cast<size_t>(rows * n), 2, 3.0f);
    Both x(xv), y(rows * n);
    cpu().rms_norm(x.c->data(), w->c, rows, n, 1e-6f, y.c->data());
    gpu().rms_norm(x.g->data(), w->g, rows, n, 1e-6f, y.g->data());
    EXPECT_LE(y.err(), 1e-5) << "rms_norm n=" << n;
    Both z(randn(static_cast<size_t>(rows * n), 3));
    cpu().gated_rms_norm(x.c->data(), z.c->data(), w->c, rows, n, 1e-6f);
    gpu().gated_rms_norm(x.g->data(), z.g->data(), w->g, rows, n, 1e-6f);
    EXPECT_LE(x.err(), 1e-5) << "gated_rms_norm n=" << n;
    Both bias_x(randn(static_cast<size_t>(rows * n), 4));
    cpu().add_bias(bias_x.c->data(), w->c, rows);
    gpu().add_bias(bias_x.g->data(), w->g, rows);
    EXPECT_LE(bias_x.err(), 1e-7) << "add_bias";
  }
  const int64_t n = 100003;
  Both a(randn(n, 7, 4.0f)), b(randn(n, 8, 4.0f)), o(n);
  cpu().swiglu(a.c->data(), b.c->data(), n, o.c->data());
  gpu().swiglu(a.g->data(), b.g->data(), n, o.g->data());
  EXPECT_LE(o.err(), 1e-6) << "swiglu";
  cpu().sigmoid_mul(a.c->data(), b.c->data(), n);
  gpu().sigmoid_mul(a.g->data(), b.g->data(), n);
  EXPECT_LE(a.err(), 1e-6) << "sigmoid_mul";
  {
    Both x(randn(3 * 2048, 9, 4.0f)), g(randn(3, 10, 4.0f));
    cpu().sigmoid_scale_rows(x.c->data(), g.c->data(), 3, 2048);
    gpu().sigmoid_scale_rows(x.g->data(), g.g->data(), 3, 2048);
    EXPECT_LE(x.err(), 1e-6) << "sigmoid_scale_rows";
  }
  cpu().add(a.c->data(), b.c->data(), n);
  gpu().add(a.g->data(), b.g->data(), n);
  EXPECT_LE(a.err(), 1e-6) << "add";
  cpu().copy(b.c->data(), n - 5, a.c->data() + 5);
  gpu().copy(b.g->data(), n - 5, a.g->data() + 5);
  EXPECT_EQ(a.gv(), a.cv()) << "copy";
  cpu().fill(a.c->data() + 11, -2.5f, 1000);
  gpu().fill(a.g->data() + 11, -2.5f, 1000);
  EXPECT_EQ(a.gv(), a.cv()) << "fill";
  // Row movement of routed experts.
  const int64_t E = 1536;
  Both src(randn(static_cast<size_t>(20 * E), 9)), dst(randn(static_cast<size_t>(20 * E), 10));
  const std::vector<int32_t> ids = {3, 19, 0, 7, 8};
  const std::vector<float> wts = {0.5f, 0.25f, 1.0f, -0.75f, 0.125f};
  Both g(static_cast<int64_t>(ids.size()) * E);
  cpu().gather_rows(src.c->data(), E, ids.data(), 5, g.c->data());
  gpu().gather_rows(src.g->data(), E, ids.data(), 5, g.g->data());
  EXPECT_EQ(g.gv(), g.cv()) << "gather_rows";
  cpu().scatter_add_rows(g.c->data(), E, ids.data(), wts.data(), 5, dst.c->data());
  gpu().scatter_add_rows(g.g->data(), E, ids.data(), wts.data(), 5, dst.g->data());
  EXPECT_LE(dst.err(), 1e-7) << "scatter_add_rows";
}

TEST(CudaParity, Rope) {
  NEED_GPU();
  struct Case {
    int64_t heads, dim, n_rot;
    bool neox;
    float base, scale;
  };
  for (const Case& c : {Case{32, 128, 128, false, 500000.0f, 1.0f}, Case{16, 256, 64, true, 10000000.0f, 1.0f},
                        Case{8, 64, 64, true, 10000.0f, 0.25f}, Case{4, 80, 32, false, 10000.0f, 1.0f}}) {
    const int64_t n_tok = 9;
    const std::vector<int32_t> pos = {0, 1, 2, 63, 64, 511, 4095, 32767, 100000};
    Both x(randn(static_cast<size_t>(n_tok * c.heads * c.dim), 21));
    const ops::RopeParams p{c.n_rot, c.base, c.scale, c.neox};
    cpu().rope(x.c->data(), n_tok, c.heads, c.dim, pos.data(), p);
    gpu().rope(x.g->data(), n_tok, c.heads, c.dim, pos.data(), p);
    // Angles up to 1e5 rad: cos / sin of the same float angle, both correctly rounded
    // within an ulp or two.
    EXPECT_LE(x.err(), 1e-5) << "rope dim " << c.dim << " n_rot " << c.n_rot << " neox " << c.neox;
  }
}

// The fused ops (add_rms_norm; rope_store_kv: RoPE on q and k plus the KV write): CUDA's
// one-kernel versions against the CPU's separate ops (within the rms_norm / rope
// tolerances) and bit-identical to CUDA's own separate ops (same arithmetic), f32 and
// f16 caches, full and partial rotation, out aliasing y.
TEST(CudaParity, FusedNormAndRopeKv) {
  NEED_GPU();
  for (int64_t n : {2048, 4096, 5120}) {
    const int64_t rows = 5;
    const auto w = make_weight(GgmlType::F32, randn(static_cast<size_t>(n), 31), 1, n);
    const auto xv = randn(static_cast<size_t>(rows * n), 32, 3.0f), yv = randn(static_cast<size_t>(rows * n), 33);
    Both x(xv), y(yv), out(rows * n), x2(xv), y2(yv);
    cpu().add_rms_norm(x.c->data(), y.c->data(), w->c, rows, n, 1e-6f, out.c->data());
    gpu().add_rms_norm(x.g->data(), y.g->data(), w->g, rows, n, 1e-6f, out.g->data());
    EXPECT_LE(out.err(), 1e-5) << "add_rms_norm n=" << n;
    EXPECT_LE(x.err(), 1e-7) << "add_rms_norm sum n=" << n;
    // GPU separate ops, out aliasing y: the same bits.
    gpu().add(x2.g->data(), y2.g->data(), rows * n);
    gpu().rms_norm(x2.g->data(), w->g, rows, n, 1e-6f, y2.g->data());
    Both x3(xv), y3(yv);
    gpu().add_rms_norm(x3.g->data(), y3.g->data(), w->g, rows, n, 1e-6f, y3.g->data());
    EXPECT_EQ(y3.gv(), y2.gv()) << "add_rms_norm (out = y) vs add + rms_norm on the GPU, n=" << n;
    EXPECT_EQ(x3.gv(), x2.gv()) << "add_rms_norm sum vs add on the GPU, n=" << n;
  }
  struct Case {
    int64_t heads, heads_kv, dim, n_rot;
    bool neox;
    ops::KvType type;
  };
  for (const Case& c : {Case{32, 8, 128, 128, false, ops::KvType::F16}, Case{16, 2, 256, 64, true, ops::KvType::F16},
                        Case{8, 8, 64, 64, true, ops::KvType::F32}, Case{4, 2, 80, 32, false, ops::KvType::F32}}) {
    const int64_t n_tok = 6, kvd = c.heads_kv * c.dim, n_rows = 64;
    const std::vector<int32_t> pos = {0, 1, 63, 511, 4095, 32767};
    const std::vector<int32_t> slots = {5, 0, 17, 63, 32, 8};
    const ops::RopeParams p{c.n_rot, 1000000.0f, 1.0f, c.neox};
    const auto qv = randn(static_cast<size_t>(n_tok * c.heads * c.dim), 41);
    const auto kv = randn(static_cast<size_t>(n_tok * kvd), 42), vv = randn(static_cast<size_t>(n_tok * kvd), 43);
    const int64_t cache_floats = (n_rows * kvd * ops::kv_type_size(c.type) + 3) / 4;
    Both q(qv), k(kv), v(vv), kc(cache_floats), vc(cache_floats);
    Both q2(qv), k2(kv), kc2(cache_floats), vc2(cache_floats);
    for (Both* b : {&kc, &vc, &kc2, &vc2}) {
      cpu().fill(b->c->data(), 0.0f, cache_floats);
      gpu().fill(b->g->data(), 0.0f, cache_floats);
    }
    auto layer = [&](Both& kb, Both& vb, bool on_gpu) {
      return ops::KvLayer{on_gpu ? kb.g->data() : kb.c->data(), on_gpu ? vb.g->data() : vb.c->data(), c.type, 16, kvd};
    };
    cpu().rope_store_kv(q.c->data(), k.c->data(), v.c->data(), n_tok, c.heads, c.heads_kv, c.dim, pos.data(), p,
                        slots.data(), layer(kc, vc, false));
    gpu().rope_store_kv(q.g->data(), k.g->data(), v.g->data(), n_tok, c.heads, c.heads_kv, c.dim, pos.data(), p,
                        slots.data(), layer(kc, vc, true));
    const std::string what = "rope_store_kv dim " + std::to_string(c.dim) + " n_rot " + std::to_string(c.n_rot);
    EXPECT_LE(q.err(), 1e-5) << what;
    EXPECT_LE(k.err(), 1e-5) << what;
    if (c.type == ops::KvType::F32) {
      EXPECT_LE(kc.err(), 1e-5) << what;
      EXPECT_LE(vc.err(), 1e-7) << what;
    }
    // The GPU's separate ops: the same bits (q, k and both caches).
    gpu().rope(q2.g->data(), n_tok, c.heads, c.dim, pos.data(), p);
    gpu().rope(k2.g->data(), n_tok, c.heads_kv, c.dim, pos.data(), p);
    gpu().store_kv(k2.g->data(), v.g->data(), n_tok, kvd, slots.data(), layer(kc2, vc2, true));
    auto bits = [](const std::vector<float>& f) {
      std::vector<uint32_t> u(f.size());
      std::memcpy(u.data(), f.data(), 4 * f.size());
      return u;
    };
    EXPECT_EQ(bits(q.gv()), bits(q2.gv())) << what;
    EXPECT_EQ(bits(k.gv()), bits(k2.gv())) << what;
    EXPECT_EQ(bits(kc.gv()), bits(kc2.gv())) << what;
    EXPECT_EQ(bits(vc.gv()), bits(vc2.gv())) << what;
  }
}

// ---------------------------------------------------------------- attention

struct AttnCase {
  int64_t n_head, n_head_kv, head_dim;
  ops::KvType type;
};

void run_attention(const AttnCase& ac, const std::vector<ops::AttentionSeq>& shape_seqs, const char* what) {
  const int64_t bs = 16, kvd = ac.n_head_kv * ac.head_dim;
  int64_t n_blocks = 400;  // (or what the sequences need)
  {
    int64_t need = 0;
    for (const auto& s : shape_seqs) need += (s.pos0 + s.n_tokens + bs - 1) / bs;
    n_blocks = std::max(n_blocks, need);
  }
  const int64_t floats = (n_blocks * bs * ops::kv_row_bytes(ac.type, kvd) + 3) / 4;
  Both K(floats, true), V(floats, true);
  for (Both* b : {&K, &V}) {  // (rows no sequence writes compare equal too)
    cpu().fill(b->c->data(), 0.0f, floats);
    gpu().fill(b->g->data(), 0.0f, floats);
  }
  const ops::KvLayer kc{K.c->data(), V.c->data(), ac.type, bs, kvd};
  const ops::KvLayer kg{K.g->data(), V.g->data(), ac.type, bs, kvd};
  // Block tables: a shuffled pool, each sequence its own blocks.
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(5));
  std::vector<std::vector<int32_t>> tables;
  size_t next = 0;
  std::vector<ops::AttentionSeq> seqs = shape_seqs;
  for (auto& s : seqs) {
    const int64_t nb = (s.pos0 + s.n_tokens + bs - 1) / bs;
    tables.emplace_back(pool.begin() + static_cast<int64_t>(next), pool.begin() + static_cast<int64_t>(next + nb));
    next += static_cast<size_t>(nb);
    ASSERT_LE(next, pool.size());
  }
  // Fill each sequence's cache for every position it will see, through store_kv.
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].block_table = tables[i].data();
    const int64_t n = seqs[i].pos0 + seqs[i].n_tokens;
    std::vector<int32_t> slots(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) slots[p] = tables[i][p / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(p % bs);
    Both k(randn(static_cast<size_t>(n * kvd), 30 + static_cast<uint32_t>(i))),
        v(randn(static_cast<size_t>(n * kvd), 60 + static_cast<uint32_t>(i)));
    cpu().store_kv(k.c->data(), v.c->data(), n, kvd, slots.data(), kc);
    gpu().store_kv(k.g->data(), v.g->data(), n, kvd, slots.data(), kg);
  }
  int64_t rows = 0;
  for (const auto& s : seqs) rows = std::max(rows, s.first_row + s.n_tokens);
  Both q(randn(static_cast<size_t>(rows * ac.n_head * ac.head_dim), 99, 2.0f)), out(rows * ac.n_head * ac.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ac.head_dim));
  cpu().attention(q.c->data(), kc, seqs.data(), static_cast<int64_t>(seqs.size()), ac.n_head, ac.n_head_kv, ac.head_dim,
                  scale, out.c->data());
  gpu().attention(q.g->data(), kg, seqs.data(), static_cast<int64_t>(seqs.size()), ac.n_head, ac.n_head_kv, ac.head_dim,
                  scale, out.g->data());
  const double e = out.err();
  if (ac.type == ops::KvType::Q8_0) {
    // Both back-ends quantize the rows with the same arithmetic: the same cache bits.
    // (Compared as bytes: the blocks read as floats may hold NaN patterns.)
    for (Both* b : {&K, &V}) {
      const auto c = b->cv(), g = b->gv();
      EXPECT_EQ(0, std::memcmp(c.data(), g.data(), 4 * c.size())) << what << ": q8_0 cache bytes";
    }
  }
  // f32 softmax (expf vs the CPU's 1.5-ulp polynomial) and sums in another order; q8_0 on
  // the tensor cores: the rows' values rounded to f16 as they are staged (2^-11 of each).
  EXPECT_LE(e, ac.type == ops::KvType::Q8_0 ? 3e-3 : 2e-5) << what << " heads " << ac.n_head << "/" << ac.n_head_kv << " dim " << ac.head_dim << " "
                     << ops::kv_type_name(ac.type);
  std::cout << "attention " << what << " " << ac.n_head << "/" << ac.n_head_kv << "x" << ac.head_dim << " "
            << ops::kv_type_name(ac.type) << ": " << e << "\n";
}

TEST(CudaParity, AttentionDecodeAndPrefill) {
  NEED_GPU();
  for (const AttnCase& ac : {AttnCase{32, 8, 128, ops::KvType::F16}, AttnCase{32, 8, 128, ops::KvType::F32},
                             AttnCase{16, 2, 256, ops::KvType::F16}, AttnCase{9, 3, 64, ops::KvType::F16},
                             AttnCase{8, 8, 80, ops::KvType::F32}, AttnCase{32, 8, 128, ops::KvType::Q8_0},
                             AttnCase{16, 2, 256, ops::KvType::Q8_0}, AttnCase{9, 3, 64, ops::KvType::Q8_0}}) {
    // Decode: sequences of one token at different depths, one 5,000 keys deep (32 key
    // ranges of ~157 keys, merged by the last).
    run_attention(ac, {{0, 1, 0, nullptr}, {1, 1, 15, nullptr}, {2, 1, 100, nullptr}, {3, 1, 700, nullptr}}, "decode");
    run_attention(ac, {{0, 1, 3, nullptr}, {1, 1, 5000, nullptr}, {2, 1, 40, nullptr}}, "decode long");
    // One row 20,000 keys deep: on the tensor cores more than 64 key ranges (a model with
    // few KV heads spreads such a row over the whole GPU).
    if (ac.n_head_kv <= 3) run_attention(ac, {{0, 1, 20000, nullptr}}, "decode 20k");
    // Prefill: a fresh 70-token prompt, and a 33-token chunk on top of 20 cached positions,
    // with a decode token between them.
    run_attention(ac, {{0, 70, 0, nullptr}, {70, 1, 300, nullptr}, {71, 33, 20, nullptr}}, "prefill");
    // Longer: a 300-token prompt, a 200-token chunk on top of 900 cached positions (many
    // tiles and 32-key chunks of the tensor-core kernel) and a decode token between them.
    run_attention(ac, {{0, 300, 0, nullptr}, {300, 1, 50, nullptr}, {301, 200, 900, nullptr}}, "prefill long");
  }
}

// ---------------------------------------------------------------- Gated DeltaNet

// gap: rows left out before each sequence (the model's passes around a snapshot inside
// a step run a subset of a batch's sequences, or the rows after a point).
void run_gdn(const ops::GdnShape& sh, const std::vector<int64_t>& lens, double tol, int64_t gap = 0) {
  const int64_t C = sh.conv_channels(), HV = sh.n_v_heads, K = sh.conv_kernel;
  int64_t n = 0;
  for (int64_t l : lens) n += l + gap;
  const auto ns = static_cast<int64_t>(lens.size());
  const int64_t per = sh.conv_state_floats() + sh.ssm_state_floats();
  Both state(randn(static_cast<size_t>(ns * per), 41, 0.1f));
  // Sequence s in state slot ns - 1 - s (slots are indices into the states, not the
  // sequences' order).
  std::vector<ops::GdnSeq> seqs;
  int64_t row = 0;
  for (int64_t s = 0; s < ns; ++s) {
    row += gap;
    seqs.push_back({static_cast<int32_t>(row), static_cast<int32_t>(lens[s]), static_cast<int32_t>(ns - 1 - s)});
    row += lens[s];
  }
  const ops::GdnStates sc{state.c->data(), state.c->data() + sh.conv_state_floats(), per},
      sg{state.g->data(), state.g->data() + sh.conv_state_floats(), per};
  const auto conv_w = make_weight(GgmlType::F32, randn(static_cast<size_t>(C * K), 42, 0.5f), C, K);
  Both x(randn(static_cast<size_t>(n * C), 43)), conv(std::vector<float>(static_cast<size_t>(n * C), 0.0f));
  cpu().ssm_conv_silu(x.c->data(), C, conv_w->c, sc, seqs.data(), ns, conv.c->data());
  gpu().ssm_conv_silu(x.g->data(), C, conv_w->g, sg, seqs.data(), ns, conv.g->data());
  EXPECT_LE(conv.err(), 1e-5) << "ssm_conv_silu";
  // The GDN op reads the CPU's conv output on both sides (so its own error is measured).
  const auto conv_out = conv.cv();
  Both qkv(conv_out), a(randn(static_cast<size_t>(n * HV), 44)), b(randn(static_cast<size_t>(n * HV), 45)),
      o(std::vector<float>(static_cast<size_t>(n * sh.value_dim()), 0.0f));
  std::vector<float> av = randu(static_cast<size_t>(HV), 46, 0.05f, 1.6f);
  for (auto& v : av) v = -v;
  const auto A = make_weight(GgmlType::F32, av, 1, HV);
  const auto dt = make_weight(GgmlType::F32, randn(static_cast<size_t>(HV), 47), 1, HV);
  cpu().gated_delta_net(qkv.c->data(), a.c->data(), b.c->data(), A->c, dt->c, sh, sc, seqs.data(), ns, o.c->data());
  gpu().gated_delta_net(qkv.g->data(), a.g->data(), b.g->data(), A->g, dt->g, sh, sg, seqs.data(), ns, o.g->data());
  const double eo = o.err(), es = state.err();
  EXPECT_LE(eo, tol) << "gated_delta_net output";
  EXPECT_LE(es, tol) << "gated_delta_net state";
  std::cout << "gated_delta_net Hk " << sh.n_k_heads << " Hv " << sh.n_v_heads << " dk " << sh.d_k << " dv " << sh.d_v
            << (sh.v_tiled ? " tiled" : " grouped") << " lens";
  for (int64_t l : lens) std::cout << " " << l;
  if (gap > 0) std::cout << " gaps " << gap;
  std::cout << ": output " << eo << ", state " << es << "\n";
}

TEST(CudaParity, GatedDeltaNet) {
  NEED_GPU();
  ops::GdnShape big{16, 32, 128, 128, 4, true, 1e-6f};   // Qwen3.5-9B
  ops::GdnShape tiny{2, 4, 16, 24, 4, false, 1e-6f};     // the Qwen3-Next fixture
  // Decode only: the same recurrence on both sides (f32, other summation order).
  run_gdn(big, {1, 1, 1}, 1e-4);
  run_gdn(tiny, {1, 1}, 1e-4);
  // Prompts: the CPU's chunked form (chunks of 64) against the GPU's token-by-token
  // recurrence: equal in exact arithmetic, f32 rounding apart.
  run_gdn(big, {5, 70, 1}, 1e-3);
  tiny.v_tiled = true;
  run_gdn(tiny, {70, 3}, 1e-3);
  // Sequences with rows left out between them.
  run_gdn(big, {40, 1, 23}, 1e-3, 7);
}

}  // namespace

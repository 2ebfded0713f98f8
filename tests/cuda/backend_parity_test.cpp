// CUDA back-end parity (in the spirit of ggml's test-backend-ops): every operation of
// ops/backend.h run on the CPU back-end and on the CUDA back-end with the same random
// inputs over the shapes the models use, compared with the tolerances stated below;
// then whole models: the tiny random Qwen3.5 dense / MoE / Qwen3-Next fixtures against
// transformers' logits and the CPU, and random-weight Llama-family models (quantized
// like real GGUFs) CUDA vs CPU, logits close and greedy identical up to a near-tie.
// Skips cleanly when no CUDA device is visible. Errors are measured as
//   rel = max |gpu - cpu| / max(max |cpu|, 1e-6)
// and each test prints what it measured (docs/BENCHMARKS.md records a run on an H200).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../unit/model_tiny_builder.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda_info.h"
#include "convert/hf_import.h"
#include "model/causal_lm.h"
#include "ops/backend.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"
#include "q8_ref.h"

namespace {

using hearth::GgmlType;
namespace ops = hearth::ops;
namespace model = hearth::model;
using json = nlohmann::json;

std::unique_ptr<ops::Backend> g_gpu;
std::string g_skip;

ops::Backend& gpu() { return *g_gpu; }
hearth::cpu::CpuBackend& cpu() {
  static hearth::cpu::CpuBackend be(4);
  return be;
}

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

#define NEED_GPU() \
  if (!g_gpu) GTEST_SKIP() << g_skip

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> randu(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    m = std::max(m, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return m / scale;
}

// A buffer on each back-end holding the same values.
struct Both {
  std::unique_ptr<ops::Buffer> c, g;
  int64_t n = 0;
  explicit Both(const std::vector<float>& v) : n(static_cast<int64_t>(v.size())) {
    c = cpu().alloc(n);
    g = gpu().alloc(n);
    cpu().copy_from_host(v.data(), n, *c, 0);
    gpu().copy_from_host(v.data(), n, *g, 0);
  }
  explicit Both(int64_t size, bool lazy = false) : n(size) {
    c = lazy ? cpu().alloc_lazy(n) : cpu().alloc(n);
    g = lazy ? gpu().alloc_lazy(n) : gpu().alloc(n);
  }
  std::vector<float> cv() {
    std::vector<float> v(static_cast<size_t>(n));
    cpu().copy_to_host(*c, 0, n, v.data());
    return v;
  }
  std::vector<float> gv() {
    std::vector<float> v(static_cast<size_t>(n));
    gpu().copy_to_host(*g, 0, n, v.data());
    return v;
  }
  double err() { return rel_err(gv(), cv()); }
};

// A weight prepared for each back-end (the bytes stay alive here).
struct WeightPair {
  std::vector<uint8_t> bytes;
  ops::WeightView c, g;
};

std::unique_ptr<WeightPair> make_weight(GgmlType type, const std::vector<float>& values, int64_t rows, int64_t cols) {
  auto w = std::make_unique<WeightPair>();
  w->bytes = tiny::encode(type, values, cols);
  ops::WeightView v{"w", type, w->bytes.data(), cols, rows, w->bytes.size() / static_cast<size_t>(rows)};
  w->g = gpu().prepare_weight(v);
  w->c = cpu().prepare_weight(v);
  return w;
}

// ---------------------------------------------------------------- matrix products

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::MXFP4};

// Exact products of the dequantized weights with the f32 inputs, in double.
template <class X>
std::vector<float> exact_matmul(const WeightPair& w, const std::vector<X>& x, int64_t n_tok) {
  const int64_t rows = w.c.n_rows, cols = w.c.n_cols;
  std::vector<float> row(static_cast<size_t>(cols)), y(static_cast<size_t>(n_tok * rows));
  for (int64_t r = 0; r < rows; ++r) {
    hearth::dequantize_row_ref(w.c.type, w.bytes.data() + r * w.c.row_bytes, row.data(), cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(row[i]) * x[t * cols + i];
      y[t * rows + r] = static_cast<float>(s);
    }
  }
  return y;
}

// The GPU's products against the exact ones. Up to 8 tokens (matrix-vector kernels):
// for the types with 8-bit activation kernels (Q4_0 .. Q8_0, Q4_K, Q5_K, Q6_K) the exact
// product with x quantized as those kernels do (q8_ref.h) within 1e-4, and the f32 one
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
      if (n_tok <= 8 && hearth::cuda::q8_matvec_supported(type)) {
        const double eq = rel_err(yb.gv(), exact_matmul(*w, q8_values(x), n_tok));
        EXPECT_LE(eq, 1e-4) << hearth::ggml_type_name(type) << " n_tokens=" << n_tok << " (vs quantized x)";
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
// reference quantizes x and the SwiGLU output as those kernels do (within 2e-3 of the
// largest output); 80 and 200 tokens take the grouped tensor-core path (pairs sorted by
// expert, tiles of up to 64 pairs, f16 activations: within 5e-3 of the unquantized forward).
TEST(CudaParity, MoeFfnFused) {
  NEED_GPU();
  ASSERT_TRUE(gpu().fused_moe());
  const int64_t X = 16, K = 4, E = 512, F = 256;
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
  ops::MoeLayer L;
  L.router = &router->g;
  L.gate = &gate->g;
  L.up = &up->g;
  L.down = &down->g;
  L.n_expert = X;
  L.n_used = K;
  L.n_embd = E;
  L.n_ff = F;
  for (int64_t n : {1, 3, 8, 20, 80, 200}) {
    const auto x = randn(static_cast<size_t>(n * E), 80 + static_cast<uint32_t>(n));
    const bool q8 = n <= 64;  // CudaBackend's kMaxFusedTokens
    const auto xq = q8_values(x);
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
        const std::vector<double> hq = q8 ? q8_values(h) : std::vector<double>(h.begin(), h.end());
        for (int64_t c = 0; c < E; ++c) {
          double y = 0;
          for (int64_t r = 0; r < F; ++r) y += wd[(e * E + c) * F + r] * hq[r];
          want[t * E + c] += static_cast<float>(p[e] / chosen * y);
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
    EXPECT_LE(err, q8 ? 2e-3 : 5e-3) << "moe_ffn n=" << n;
    std::cout << "moe_ffn " << n << " tokens (" << (q8 ? "8-bit activations" : "grouped tensor-core products")
              << "): gpu vs double " << err << "\n";
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

// ---------------------------------------------------------------- attention

struct AttnCase {
  int64_t n_head, n_head_kv, head_dim;
  ops::KvType type;
};

void run_attention(const AttnCase& ac, const std::vector<ops::AttentionSeq>& shape_seqs, const char* what) {
  const int64_t bs = 16, n_blocks = 160, kvd = ac.n_head_kv * ac.head_dim;
  const int64_t floats = (n_blocks * bs * kvd * ops::kv_type_size(ac.type) + 3) / 4;
  Both K(floats, true), V(floats, true);
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
  // f32 softmax (expf vs the CPU's 1.5-ulp polynomial) and sums in another order.
  EXPECT_LE(e, 2e-5) << what << " heads " << ac.n_head << "/" << ac.n_head_kv << " dim " << ac.head_dim << " "
                     << ops::kv_type_name(ac.type);
  std::cout << "attention " << what << " " << ac.n_head << "/" << ac.n_head_kv << "x" << ac.head_dim << " "
            << ops::kv_type_name(ac.type) << ": " << e << "\n";
}

TEST(CudaParity, AttentionDecodeAndPrefill) {
  NEED_GPU();
  for (const AttnCase& ac : {AttnCase{32, 8, 128, ops::KvType::F16}, AttnCase{32, 8, 128, ops::KvType::F32},
                             AttnCase{16, 2, 256, ops::KvType::F16}, AttnCase{9, 3, 64, ops::KvType::F16},
                             AttnCase{8, 8, 80, ops::KvType::F32}}) {
    // Decode: four sequences of one token at different depths.
    run_attention(ac, {{0, 1, 0, nullptr}, {1, 1, 15, nullptr}, {2, 1, 100, nullptr}, {3, 1, 700, nullptr}}, "decode");
    // Prefill: a fresh 70-token prompt, and a 33-token chunk on top of 20 cached positions,
    // with a decode token between them.
    run_attention(ac, {{0, 70, 0, nullptr}, {70, 1, 300, nullptr}, {71, 33, 20, nullptr}}, "prefill");
  }
}

// ---------------------------------------------------------------- Gated DeltaNet

void run_gdn(const ops::GdnShape& sh, const std::vector<int64_t>& lens, double tol) {
  const int64_t C = sh.conv_channels(), HV = sh.n_v_heads, K = sh.conv_kernel;
  int64_t n = 0;
  for (int64_t l : lens) n += l;
  const auto ns = static_cast<int64_t>(lens.size());
  const int64_t per = sh.conv_state_floats() + sh.ssm_state_floats();
  Both state(randn(static_cast<size_t>(ns * per), 41, 0.1f));
  std::vector<ops::GdnSeq> sc, sg;
  int64_t row = 0;
  for (int64_t s = 0; s < ns; ++s) {
    sc.push_back({row, lens[s], state.c->data() + s * per, state.c->data() + s * per + sh.conv_state_floats()});
    sg.push_back({row, lens[s], state.g->data() + s * per, state.g->data() + s * per + sh.conv_state_floats()});
    row += lens[s];
  }
  const auto conv_w = make_weight(GgmlType::F32, randn(static_cast<size_t>(C * K), 42, 0.5f), C, K);
  Both x(randn(static_cast<size_t>(n * C), 43)), conv(n * C);
  cpu().ssm_conv_silu(x.c->data(), C, conv_w->c, sc.data(), ns, conv.c->data());
  gpu().ssm_conv_silu(x.g->data(), C, conv_w->g, sg.data(), ns, conv.g->data());
  EXPECT_LE(conv.err(), 1e-5) << "ssm_conv_silu";
  // The GDN op reads the CPU's conv output on both sides (so its own error is measured).
  const auto conv_out = conv.cv();
  Both qkv(conv_out), a(randn(static_cast<size_t>(n * HV), 44)), b(randn(static_cast<size_t>(n * HV), 45)),
      o(n * sh.value_dim());
  std::vector<float> av = randu(static_cast<size_t>(HV), 46, 0.05f, 1.6f);
  for (auto& v : av) v = -v;
  const auto A = make_weight(GgmlType::F32, av, 1, HV);
  const auto dt = make_weight(GgmlType::F32, randn(static_cast<size_t>(HV), 47), 1, HV);
  cpu().gated_delta_net(qkv.c->data(), a.c->data(), b.c->data(), A->c, dt->c, sh, sc.data(), ns, o.c->data());
  gpu().gated_delta_net(qkv.g->data(), a.g->data(), b.g->data(), A->g, dt->g, sh, sg.data(), ns, o.g->data());
  const double eo = o.err(), es = state.err();
  EXPECT_LE(eo, tol) << "gated_delta_net output";
  EXPECT_LE(es, tol) << "gated_delta_net state";
  std::cout << "gated_delta_net Hk " << sh.n_k_heads << " Hv " << sh.n_v_heads << " dk " << sh.d_k << " dv " << sh.d_v
            << (sh.v_tiled ? " tiled" : " grouped") << " lens";
  for (int64_t l : lens) std::cout << " " << l;
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
}

// ---------------------------------------------------------------- whole models

// The fixtures: under $HEARTH_SOURCE_DIR when set (a binary carried to another machine).
const std::string kQwenDir =
    std::string(std::getenv("HEARTH_SOURCE_DIR") ? std::getenv("HEARTH_SOURCE_DIR") : HEARTH_SOURCE_DIR) +
    "/tests/data/qwen35/";

int argmax(const float* x, int64_t n) { return static_cast<int>(std::max_element(x, x + n) - x); }

double margin(const float* x, int64_t n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

double max_abs(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct Greedy {
  std::vector<int> tokens;
  std::vector<double> margins;
  std::vector<std::vector<float>> logits;
};

Greedy greedy(model::CausalLm& m, model::KvCache& cache, const std::vector<int32_t>& prompt, int n) {
  Greedy g;
  const int64_t V = m.hparams().n_vocab;
  std::vector<float> lg = m.forward(cache, prompt, false);
  for (int i = 0; i < n; ++i) {
    g.logits.push_back(lg);
    g.tokens.push_back(argmax(lg.data(), V));
    g.margins.push_back(margin(lg.data(), V));
    lg = m.forward(cache, {g.tokens.back()}, false);
  }
  return g;
}

// Greedy continuations equal, or first different where the CPU's top two were within
// `near_tie` (then the two back-ends legitimately pick different tokens).
void expect_same_greedy(const Greedy& c, const Greedy& g, double near_tie, const std::string& what) {
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (c.tokens[i] != g.tokens[i]) {
      EXPECT_LE(c.margins[i], near_tie) << what << ": greedy differs at step " << i << " with CPU margin "
                                        << c.margins[i];
      std::cout << what << ": greedy differs at step " << i << " (near-tie, CPU margin " << c.margins[i] << ")\n";
      return;
    }
  }
}

class HybridFixture : public ::testing::TestWithParam<std::string> {};

// The GPU against transformers' recorded logits (1e-3, the CPU's bound) and the CPU.
TEST_P(HybridFixture, MatchesTransformersAndCpu) {
  NEED_GPU();
  const std::string name = GetParam();
  const hearth::gguf::File file = hearth::convert::open_model(kQwenDir + name);
  std::ifstream f(kQwenDir + name + ".json");
  const json rec = json::parse(f);
  const auto mg = model::load_causal_lm(file, gpu());
  const auto mc = model::load_causal_lm(file, cpu());
  const int64_t V = mg->hparams().n_vocab;
  double worst_tf = 0, worst_cpu = 0;
  for (const auto& pr : rec.at("prompts")) {
    const auto ids = pr.at("ids").get<std::vector<int32_t>>();
    model::KvCache cg(gpu(), mg->hparams(), 256, ops::KvType::F32), cc(cpu(), mc->hparams(), 256, ops::KvType::F32);
    const std::vector<float> full = mg->forward(cg, ids, true);
    const std::vector<float> fullc = mc->forward(cc, ids, true);
    worst_cpu = std::max(worst_cpu, max_abs(full.data(), fullc.data(), static_cast<int64_t>(full.size())));
    cg.clear();
    std::vector<float> dec;
    for (int32_t t : ids) {
      const auto lg = mg->forward(cg, {t}, false);
      dec.insert(dec.end(), lg.begin(), lg.end());
    }
    const auto& pos = pr.at("positions");
    for (size_t i = 0; i < pos.size(); ++i) {
      const int64_t p = pos[i];
      const auto want_p = pr.at("prefill_logits")[i].get<std::vector<float>>();
      const auto want_d = pr.at("decode_logits")[i].get<std::vector<float>>();
      const double dp = max_abs(&full[p * V], want_p.data(), V), dd = max_abs(&dec[p * V], want_d.data(), V);
      EXPECT_LE(dp, 1e-3) << name << " n=" << ids.size() << " pos " << p << " prefill";
      EXPECT_LE(dd, 1e-3) << name << " n=" << ids.size() << " pos " << p << " decode";
      worst_tf = std::max({worst_tf, dp, dd});
    }
    cg.clear();
    cc.clear();
    const Greedy gg = greedy(*mg, cg, ids, 16), gc = greedy(*mc, cc, ids, 16);
    EXPECT_EQ(gg.tokens, pr.at("greedy").get<std::vector<int>>()) << name << " n=" << ids.size();
    EXPECT_EQ(gg.tokens, gc.tokens) << name;
  }
  std::cout << "model " << name << ": GPU vs transformers max |diff| " << worst_tf << ", GPU vs CPU prefill logits "
            << worst_cpu << "\n";
}

INSTANTIATE_TEST_SUITE_P(Qwen35, HybridFixture, ::testing::Values("dense", "moe", "next"),
                         [](const auto& info) { return info.param; });

tiny::Spec llama_spec(const std::string& arch, GgmlType t, GgmlType t_out) {
  tiny::Spec s;
  s.name = arch;
  s.arch = arch;
  s.n_embd = 512;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 1024;
  s.n_layer = 3;
  s.n_vocab = 1000;
  s.t_embd = t;
  s.t_output = t_out;
  s.t_q = s.t_k = s.t_o = s.t_gate = s.t_up = t;
  s.t_v = s.t_down = t_out;
  s.neox = arch != "llama";
  s.biases = arch == "qwen2";
  s.qk_norm = arch == "qwen3" || arch == "qwen3moe";
  if (arch == "qwen3moe") {
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 256;
  }
  return s;
}

// Random-weight Llama-family models quantized like the GGUFs people run (Q4_K with
// Q6_K for V / down / output, as Q4_K_M; Q8_0; Q4_0; Q5_K; a qwen3moe with 8 experts),
// 40-token prompt then 24 greedy steps, f32 KV cache. Both back-ends against the
// independent double-precision forward pass of the same dequantized weights
// (tests/unit/model_tiny_builder.h), error relative to the largest logit: the GPU
// decodes with f32 activations (matrix-vector kernels): within 1e-3 at every decode
// step; the prompt's 1024-row gate / up and 1000-row output go through the f16 GEMM
// path: within 5e-3 at every prompt position. The CPU multiplies 8-bit activations and
// is reported. Greedy GPU = CPU up to a near-tie
// (CPU top-2 gap < 5 % of the largest logit).
TEST(CudaParity, LlamaFamilyModels) {
  NEED_GPU();
  struct Case {
    std::string arch;
    GgmlType t, t_out;
  };
  for (const Case& c : {Case{"llama", GgmlType::Q4_K, GgmlType::Q6_K}, Case{"llama", GgmlType::Q8_0, GgmlType::Q8_0},
                        Case{"qwen2", GgmlType::Q4_0, GgmlType::Q8_0}, Case{"qwen3", GgmlType::Q5_K, GgmlType::Q6_K},
                        Case{"qwen3moe", GgmlType::Q4_K, GgmlType::Q6_K}}) {
    const tiny::Spec s = llama_spec(c.arch, c.t, c.t_out);
    const auto built = tiny::parse(tiny::build_writer(s), s.name + ".gguf");
    const tiny::FloatForward oracle(*built->file, s);
    const std::string what = c.arch + " " + std::string(hearth::ggml_type_name(c.t)) + "/" +
                             std::string(hearth::ggml_type_name(c.t_out));
    std::vector<int32_t> prompt(40);
    std::mt19937 rng(3);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % s.n_vocab);
    Greedy runs[2];
    double errs[2][2] = {};
    for (int i = 0; i < 2; ++i) {
      ops::Backend& be = i == 0 ? gpu() : static_cast<ops::Backend&>(cpu());
      const auto m = model::load_causal_lm(*built->file, be);
      const int64_t V = m->hparams().n_vocab;
      model::KvCache cache(be, m->hparams(), 128, ops::KvType::F32);
      const auto all = m->forward(cache, prompt, true);
      cache.clear();
      runs[i] = greedy(*m, cache, prompt, 24);
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), runs[i].tokens.begin(), runs[i].tokens.end() - 1);
      const auto want = oracle.logits(seq);
      double scale = 0;
      for (const auto& row : want) {
        for (double v : row) scale = std::max(scale, std::abs(v));
      }
      auto diff = [&](const float* got, const std::vector<double>& w) {
        double d = 0;
        for (int64_t k = 0; k < V; ++k) d = std::max(d, std::abs(got[k] - w[static_cast<size_t>(k)]));
        return d / scale;
      };
      for (size_t t = 0; t < prompt.size(); ++t) errs[i][0] = std::max(errs[i][0], diff(&all[t * V], want[t]));
      for (size_t k = 0; k < runs[i].logits.size(); ++k) {
        errs[i][1] = std::max(errs[i][1], diff(runs[i].logits[k].data(), want[prompt.size() - 1 + k]));
      }
    }
    // Decode multiplies 8-bit activations for the quantized types (as the CPU does):
    // bounded like a quantized-activation forward, not like the f32 one. The MoE model's
    // experts take 8-bit activations in prompts too (few tokens per expert), and a
    // routing decision that flips on such rounding moves its logits far, for the CPU as
    // well: there the greedy agreement below and MoeFfnFused are the checks.
    if (c.arch != "qwen3moe") {
      EXPECT_LE(errs[0][0], 5e-3) << what << ": GPU prefill vs double forward";
      EXPECT_LE(errs[0][1], 3e-2) << what << ": GPU decode vs double forward";
    }
    double scale = 0;
    for (float v : runs[1].logits[0]) scale = std::max(scale, static_cast<double>(std::abs(v)));
    expect_same_greedy(runs[1], runs[0], 0.05 * scale, what);
    std::cout << "model " << what << ": vs double forward (relative to max |logit|): GPU prefill " << errs[0][0]
              << ", decode " << errs[0][1] << "; CPU prefill " << errs[1][0] << ", decode " << errs[1][1] << "\n";
  }
}

// Decode steps captured as CUDA graphs (CudaBackend::set_graphs) give the logits of the
// same steps launched op by op, bit for bit (the same kernels on the same data): a Llama
// model (Q4_K / Q6_K), a qwen3moe one and the tiny Qwen3.5 MoE fixture (Gated DeltaNet
// states, attention every fourth layer), 24 greedy steps after a 40-token prompt and
// then after a 1-token prompt (another graph shape); the graphs must actually run, and
// most steps must reuse the previous step's executable graph.
TEST(CudaParity, DecodeStepsAsGraphs) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  struct Run {
    std::string what;
    std::unique_ptr<model::CausalLm> m;
  };
  std::vector<std::unique_ptr<tiny::Built>> keep;
  std::vector<Run> runs;
  for (const auto& [arch, t, t_out] : {std::tuple{"llama", GgmlType::Q4_K, GgmlType::Q6_K},
                                       std::tuple{"qwen3moe", GgmlType::Q4_K, GgmlType::Q6_K}}) {
    const tiny::Spec s = llama_spec(arch, t, t_out);
    keep.push_back(tiny::parse(tiny::build_writer(s), s.name + ".gguf"));
    runs.push_back({arch, model::load_causal_lm(*keep.back()->file, gpu())});
  }
  const hearth::gguf::File hybrid = hearth::convert::open_model(kQwenDir + "moe");
  runs.push_back({"qwen35 moe fixture", model::load_causal_lm(hybrid, gpu())});
  for (Run& r : runs) {
    for (const int prompt_len : {40, 1}) {
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      std::mt19937 rng(5);
      for (auto& tok : prompt) tok = static_cast<int32_t>(rng() % r.m->hparams().n_vocab);
      Greedy plain, graphed;
      {
        cuda->set_graphs(false);
        model::KvCache cache(gpu(), r.m->hparams(), 128, ops::KvType::F16);
        plain = greedy(*r.m, cache, prompt, 24);
      }
      const auto before = cuda->graph_stats();
      {
        cuda->set_graphs(true);
        model::KvCache cache(gpu(), r.m->hparams(), 128, ops::KvType::F16);
        graphed = greedy(*r.m, cache, prompt, 24);
        cuda->set_graphs(false);
      }
      const auto after = cuda->graph_stats();
      EXPECT_EQ(graphed.tokens, plain.tokens) << r.what;
      ASSERT_EQ(graphed.logits.size(), plain.logits.size());
      for (size_t k = 0; k < plain.logits.size(); ++k) {
        ASSERT_EQ(graphed.logits[k], plain.logits[k]) << r.what << " prompt " << prompt_len << ": step " << k;
      }
      const int64_t launched = after.launched - before.launched, updated = after.updated - before.updated;
      EXPECT_GE(launched, 23) << r.what;
      EXPECT_GE(updated, launched / 2) << r.what;
      EXPECT_EQ(after.failed, before.failed) << r.what;
      std::cout << "graphs " << r.what << " prompt " << prompt_len << ": " << launched << " steps as graphs, "
                << updated << " updated in place, " << after.instantiated - before.instantiated << " made\n";
    }
  }
}

}  // namespace

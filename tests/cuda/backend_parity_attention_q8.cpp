// Decode attention over q8_0 and f16 caches on the GPU:
// - the tensor-core decode variant (cuda_attention_tc.cu; on a back-end made with
//   cuda.attn_decode_warp=0): its raw q8_0 path (each warp copies its keys' 34-byte blocks
//   with cp.async, chunks ahead, and dequantizes them itself) against the staged reference
//   path of the same kernel (set_tc_decode_q8_raw(false)), and both against the CPU;
// - the warp decode kernel (cuda_attention_decode.cu, the default where it takes the
//   shape) against the CPU back-end and the tensor-core variant, f16 and q8_0.
//
// Tolerances: the two tensor-core paths put the same f16 values into shared memory (d * q,
// exact in f32 and f16 arithmetic alike, rounded once to f16) and run the same arithmetic
// on them in the same order, so their outputs must be equal bit for bit: no tolerance. The
// CPU reads the q8_0 values in f32 (no f16 rounding: 2^-11 of each value), keeps q and the
// softmax weights in f32 where the tensor cores round them to f16 once (over q8_0 caches
// only), and sums in another order: 3e-3 of the largest output, as the q8_0 rows of
// CudaParity.AttentionDecodeAndPrefill. The warp kernel is f32 throughout (exact values,
// sums in another order, exp2 of log2-scaled scores): 2e-5 of the largest output against
// the CPU for both cache types, as the f16 tensor-core rows.
//
// CudaPerf.DecodeAttentionQ8VsF16 (HEARTH_PARITY_PERF=1; skipped otherwise) times one
// 32,768-key decode row of the models' head layouts over f16 and q8_0 caches (the warp
// kernel with 2 and 3 stages and with int8 scores, the tensor-core variant, and its staged
// q8_0 reference), one 4,096 keys deep, and 64 rows of 640 keys.
#include <chrono>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_backend.h"
#include "core/tune.h"
#include "parity_common.h"

namespace parity {
namespace {

struct Q8Case {
  const char* name;
  int64_t n_head, n_head_kv, head_dim;
};

// One layer's cache on both back-ends: sequence i holds keys[i] positions (values of
// K and V randn times scale[i]), its decode row is row i at position keys[i] - 1, its
// blocks taken from a shuffled pool.
struct Layer {
  std::unique_ptr<Both> K, V;
  ops::KvLayer kc{}, kg{};
  std::vector<int32_t> pool;
  std::vector<ops::AttentionSeq> seqs;
};

constexpr int64_t kBs = 16;

std::unique_ptr<Layer> make_layer(const Q8Case& c, ops::KvType type, const std::vector<int64_t>& keys,
                                  const std::vector<float>& scales) {
  auto L = std::make_unique<Layer>();
  const int64_t kvd = c.n_head_kv * c.head_dim;
  std::vector<int64_t> first_block;
  int64_t n_blocks = 0;
  for (int64_t k : keys) {
    first_block.push_back(n_blocks);
    n_blocks += (k + kBs - 1) / kBs;
  }
  const int64_t floats = (n_blocks * kBs * ops::kv_row_bytes(type, kvd) + 3) / 4;
  L->K = std::make_unique<Both>(floats, true);
  L->V = std::make_unique<Both>(floats, true);
  L->kc = ops::KvLayer{L->K->c->data(), L->V->c->data(), type, kBs, kvd};
  L->kg = ops::KvLayer{L->K->g->data(), L->V->g->data(), type, kBs, kvd};
  L->pool.resize(static_cast<size_t>(n_blocks));
  std::iota(L->pool.begin(), L->pool.end(), 0);
  std::shuffle(L->pool.begin(), L->pool.end(), std::mt19937(11));
  for (size_t s = 0; s < keys.size(); ++s) {
    const int32_t* table = L->pool.data() + first_block[s];
    L->seqs.push_back({static_cast<int64_t>(s), 1, keys[s] - 1, table});
    for (int64_t p0 = 0; p0 < keys[s]; p0 += 4096) {
      const int64_t n = std::min<int64_t>(4096, keys[s] - p0);
      std::vector<int32_t> slots(static_cast<size_t>(n));
      for (int64_t p = 0; p < n; ++p) {
        slots[p] = table[(p0 + p) / kBs] * static_cast<int32_t>(kBs) + static_cast<int32_t>((p0 + p) % kBs);
      }
      const auto seed = static_cast<uint32_t>(s * 1000 + p0 / 4096);
      Both k(randn(static_cast<size_t>(n * kvd), 30 + seed, scales[s]));
      Both v(randn(static_cast<size_t>(n * kvd), 60 + seed, scales[s]));
      cpu().store_kv(k.c->data(), v.c->data(), n, kvd, slots.data(), L->kc);
      gpu().store_kv(k.g->data(), v.g->data(), n, kvd, slots.data(), L->kg);
    }
  }
  return L;
}

// Puts the raw variant back on (the default) when a test leaves.
struct RawSwitch {
  explicit RawSwitch(bool on) { hearth::cuda::set_tc_decode_q8_raw(on); }
  ~RawSwitch() { hearth::cuda::set_tc_decode_q8_raw(true); }
};

// A back-end whose decode attention is the tensor-core variant (the warp kernel off).
ops::Backend& tc_gpu() {
  static std::unique_ptr<ops::Backend> be = [] {
    static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarp, 0);
    return hearth::backends::make_cuda_backend(0);
  }();
  return *be;
}

// A back-end whose decode attention is the warp kernel (whatever the default).
ops::Backend& warp_gpu() {
  static std::unique_ptr<ops::Backend> be = [] {
    static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarp, 1);
    return hearth::backends::make_cuda_backend(0);
  }();
  return *be;
}

// A back-end whose warp decode kernel scores q8_0 caches in int8 (cuda.attn_decode_warp_dot).
ops::Backend& dot_gpu() {
  static std::unique_ptr<ops::Backend> be = [] {
    static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarpDot, 1);
    hearth::tune::Override w(hearth::tune::kCudaAttnDecodeWarp, 1);
    return hearth::backends::make_cuda_backend(0);
  }();
  return *be;
}

std::vector<float> gpu_attention(ops::Backend& be, const Q8Case& c, Layer& L, Both& q, Both& out, bool raw) {
  RawSwitch sw(raw);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  gpu().fill(out.g->data(), std::nanf(""), out.n);  // (a row left unwritten shows)
  static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
  be.attention(q.g->data(), L.kg, L.seqs.data(), static_cast<int64_t>(L.seqs.size()), c.n_head, c.n_head_kv,
               c.head_dim, scale, out.g->data());
  if (&be != &gpu()) static_cast<hearth::cuda::CudaBackend&>(be).synchronize();
  return out.gv();
}

// Values that differ in their bits, and the largest difference.
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int64_t diff = 0;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ++diff;
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    }
  }
  EXPECT_EQ(diff, 0) << what << ": raw and staged q8_0 decode differ in " << diff << " of " << a.size()
                     << " values, by at most " << worst;
}

// The decode rows of `keys` through the raw variant and the reference path (on be: the
// parity back-end, or one made with another decode mode), bit for bit; with cpu_check,
// both against the CPU back-end.
void check_batch(ops::Backend& be, const Q8Case& c, const std::vector<int64_t>& keys, const std::vector<float>& scales,
                 bool cpu_check, const std::string& what) {
  auto L = make_layer(c, ops::KvType::Q8_0, keys, scales);
  const auto rows = static_cast<int64_t>(keys.size());
  Both q(randn(static_cast<size_t>(rows * c.n_head * c.head_dim), 99, 2.0f)), out(rows * c.n_head * c.head_dim);
  const auto raw = gpu_attention(be, c, *L, q, out, true);
  const auto ref = gpu_attention(be, c, *L, q, out, false);
  std::string label = std::string(c.name) + " " + what + " keys";
  for (int64_t k : keys) label += " " + std::to_string(k);
  expect_same_bits(raw, ref, label);
  if (cpu_check) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    cpu().attention(q.c->data(), L->kc, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale,
                    out.c->data());
    const double e = rel_err(raw, out.cv());
    EXPECT_LE(e, 3e-3) << label << ": against the CPU";
    std::cout << "attention q8_0 decode " << label << ": CPU err " << e << "\n";
  } else {
    std::cout << "attention q8_0 decode " << label << ": bitwise checked\n";
  }
}

const Q8Case kCases[] = {
    {"llama3-8b", 32, 8, 128}, {"qwen35-9b", 16, 4, 256}, {"qwen35-35b", 16, 2, 256},
    {"d64-g3", 9, 3, 64},      {"d64-g16", 32, 2, 64},    {"d128-g1", 8, 8, 128},
};

TEST(CudaParity, AttentionDecodeQ8Raw) {
  NEED_GPU();
  for (const Q8Case& c : kCases) {
    // Stages the GPU's shared memory allows for the default decode mode 2 (the H100 and
    // A100 hold all three).
    const int stages = hearth::cuda::tc_decode_q8_raw_stages(c.head_dim, c.n_head_kv * c.head_dim, 2);
    EXPECT_GE(stages, 2) << c.name << ": the raw variant should take this shape";
    std::cout << c.name << ": " << stages << " raw stages\n";
    // A batch of rows (two or more decode rows: the tensor-core decode kernel at any depth)
    // across the block boundaries of q8_0 (32 values), the pool (16 keys), the warps' 16
    // keys and the 64-key chunks, and beyond one key range.
    check_batch(tc_gpu(), c, {1, 31, 32, 33, 64, 65, 1000, 5000}, std::vector<float>(8, 1.0f), true, "batch");
    // One row 32,768 keys deep (a single row from 4,096 keys on takes the tensor cores).
    check_batch(tc_gpu(), c, {32768}, {1.0f}, true, "long");
    // Tiny values (f16 subnormal scales d and products) and large ones: bits only (the
    // CPU's f32 values make a sharp softmax differ more than the tolerance above).
    check_batch(tc_gpu(), c, {33, 1000, 700, 17}, {1e-5f, 300.0f, 1.0f, 3e-7f}, false, "scaled");
  }
}

// Decode modes 1 and 3 (two and four raw stages) on back-ends made with them.
TEST(CudaParity, AttentionDecodeQ8RawModes) {
  NEED_GPU();
  static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
  for (int mode : {1, 3}) {
    hearth::tune::Override o(hearth::tune::kCudaAttnTcDecode, mode);
    hearth::tune::Override w(hearth::tune::kCudaAttnDecodeWarp, 0);
    auto be = hearth::backends::make_cuda_backend(0);
    for (const Q8Case& c : {kCases[0], kCases[1], kCases[3]}) {
      std::cout << c.name << " mode " << mode << ": "
                << hearth::cuda::tc_decode_q8_raw_stages(c.head_dim, c.n_head_kv * c.head_dim, mode)
                << " raw stages\n";
      const std::string what = "mode " + std::to_string(mode);
      check_batch(*be, c, {1, 33, 1000, 5000}, std::vector<float>(4, 1.0f), true, what);
      check_batch(*be, c, {20000}, {1.0f}, false, what);
    }
  }
}

// The warp decode kernel on both cache types against the
// CPU and the tensor-core variant: batches across the q8_0 blocks, the pool's 16 keys, the
// warps' 8-key chunks and the ranges, one 32k-key row, and scaled values.
void check_warp(const Q8Case& c, ops::KvType type, const std::vector<int64_t>& keys, const std::vector<float>& scales,
                double cpu_tol, const std::string& what) {
  auto L = make_layer(c, type, keys, scales);
  const auto rows = static_cast<int64_t>(keys.size());
  Both q(randn(static_cast<size_t>(rows * c.n_head * c.head_dim), 99, 2.0f)), out(rows * c.n_head * c.head_dim);
  const auto warp = gpu_attention(warp_gpu(), c, *L, q, out, true);
  const auto tc = gpu_attention(tc_gpu(), c, *L, q, out, true);
  std::vector<float> dot;
  if (type == ops::KvType::Q8_0) dot = gpu_attention(dot_gpu(), c, *L, q, out, true);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cpu().attention(q.c->data(), L->kc, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale, out.c->data());
  std::string label = std::string(c.name) + " " + ops::kv_type_name(type) + " " + what + " keys";
  for (int64_t k : keys) label += " " + std::to_string(k);
  int64_t nan = 0;
  for (float x : warp) nan += std::isfinite(x) ? 0 : 1;
  EXPECT_EQ(nan, 0) << label << ": values not written or not finite";
  const double e_cpu = rel_err(warp, out.cv()), e_tc = rel_err(warp, tc);
  std::cout << "warp decode " << label << ": CPU err " << e_cpu << ", tensor-core err " << e_tc << "\n";
  EXPECT_LE(e_cpu, cpu_tol) << label << ": against the CPU";
  EXPECT_LE(e_tc, type == ops::KvType::Q8_0 ? 3e-3 : 2e-5) << label << ": against the tensor-core variant";
  if (!dot.empty()) {
    // The int8 scores: q rounded to 8 bits per 32 dimensions (2^-8 of a block's largest
    // value, where the tensor cores' f16 q is within 2^-11).
    const double e_dot = rel_err(dot, out.cv());
    std::cout << "warp decode (int8 scores) " << label << ": CPU err " << e_dot << "\n";
    EXPECT_LE(e_dot, 2e-2) << label << ": int8 scores against the CPU";
  }
}

TEST(CudaParity, AttentionDecodeWarp) {
  NEED_GPU();
  for (const Q8Case& c : kCases) {
    const int64_t group = c.n_head / c.n_head_kv;
    for (ops::KvType type : {ops::KvType::F16, ops::KvType::Q8_0}) {
      const bool takes = hearth::cuda::decode_warp_supported(c.head_dim, group, type == ops::KvType::Q8_0,
                                                             reinterpret_cast<void*>(256), reinterpret_cast<void*>(256),
                                                             c.n_head_kv * c.head_dim);
      EXPECT_EQ(takes, group <= hearth::cuda::kDecodeWarpGroup) << c.name;
      if (!takes) continue;
      check_warp(c, type, {1, 7, 8, 9, 31, 32, 33, 64, 65, 1000, 5000}, std::vector<float>(11, 1.0f), 2e-5, "batch");
      check_warp(c, type, {32768}, {1.0f}, 2e-5, "long");
      check_warp(c, type, {4100, 33}, {1.0f, 1.0f}, 2e-5, "two");
      // A sharp softmax (large values) and tiny ones: the CPU sums in another order.
      check_warp(c, type, {33, 1000, 700, 17}, {1e-5f, 30.0f, 1.0f, 3e-7f}, 1e-3, "scaled");
    }
  }
}

// The warp kernel with two and with three stages a warp (cuda.attn_decode_warp_stages).
TEST(CudaParity, AttentionDecodeWarpStages) {
  NEED_GPU();
  static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
  for (int stages : {2, 3}) {
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarpStages, stages);
    hearth::tune::Override w(hearth::tune::kCudaAttnDecodeWarp, 1);
    auto be = hearth::backends::make_cuda_backend(0);
    for (const Q8Case& c : {kCases[0], kCases[1], kCases[2], kCases[3]}) {
      for (ops::KvType type : {ops::KvType::F16, ops::KvType::Q8_0}) {
        auto L = make_layer(c, type, {1, 33, 1000, 20000}, std::vector<float>(4, 1.0f));
        Both q(randn(static_cast<size_t>(4 * c.n_head * c.head_dim), 99, 2.0f)), out(4 * c.n_head * c.head_dim);
        const auto a = gpu_attention(*be, c, *L, q, out, true);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        cpu().attention(q.c->data(), L->kc, L->seqs.data(), 4, c.n_head, c.n_head_kv, c.head_dim, scale,
                        out.c->data());
        const double e = rel_err(a, out.cv());
        std::cout << "warp decode " << c.name << " " << ops::kv_type_name(type) << " stages " << stages << ": CPU err "
                  << e << "\n";
        EXPECT_LE(e, 2e-5) << c.name << " stages " << stages;
      }
    }
  }
}

// us a call of one decode attention on back-end be (the mean of 50 after 5), its result
// checked once against the CPU.
double time_decode(ops::Backend& be, const Q8Case& c, ops::KvType type, bool raw, int64_t rows, int64_t keys,
                   double* err) {
  RawSwitch sw(raw);
  auto L = make_layer(c, type, std::vector<int64_t>(static_cast<size_t>(rows), keys),
                      std::vector<float>(static_cast<size_t>(rows), 1.0f));
  Both q(randn(static_cast<size_t>(rows * c.n_head * c.head_dim), 99, 2.0f)), out(rows * c.n_head * c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto& cb = static_cast<hearth::cuda::CudaBackend&>(be);
  auto call = [&] {
    be.attention(q.g->data(), L->kg, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale, out.g->data());
  };
  call();
  cb.synchronize();
  cpu().attention(q.c->data(), L->kc, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale, out.c->data());
  *err = out.err();
  for (int w = 0; w < 5; ++w) call();
  cb.synchronize();
  const int reps = 50;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) call();
  cb.synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
}

TEST(CudaPerf, DecodeAttentionQ8VsF16) {
  NEED_GPU();
  const char* on = std::getenv("HEARTH_PARITY_PERF");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "HEARTH_PARITY_PERF=1 times decode attention";
  static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
  std::unique_ptr<ops::Backend> w2, w3;
  {
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarpStages, 2);
    hearth::tune::Override w(hearth::tune::kCudaAttnDecodeWarp, 1);
    w2 = hearth::backends::make_cuda_backend(0);
  }
  {
    hearth::tune::Override o(hearth::tune::kCudaAttnDecodeWarpStages, 3);
    hearth::tune::Override w(hearth::tune::kCudaAttnDecodeWarp, 1);
    w3 = hearth::backends::make_cuda_backend(0);
  }
  for (const Q8Case& c : {kCases[0], kCases[1], kCases[2]}) {
    for (const auto& [rows, keys] : {std::pair<int64_t, int64_t>{1, 32768}, {1, 4096}, {64, 640}}) {
      const double vals = 2.0 * static_cast<double>(rows * keys * c.n_head_kv * c.head_dim);  // K and V
      double best_f16 = 1e30, best_q8 = 1e30;
      for (ops::KvType type : {ops::KvType::F16, ops::KvType::Q8_0}) {
        const bool q8 = type == ops::KvType::Q8_0;
        const double bytes = q8 ? vals * 34.0 / 32.0 : vals * 2.0;
        double e2 = 0, e3 = 0, et = 0, es = 0;
        const double t2 = time_decode(*w2, c, type, true, rows, keys, &e2);
        const double t3 = time_decode(*w3, c, type, true, rows, keys, &e3);
        const double tt = time_decode(tc_gpu(), c, type, true, rows, keys, &et);
        const double ts = q8 ? time_decode(tc_gpu(), c, type, false, rows, keys, &es) : 0.0;
        double ed = 0;
        const double td = q8 ? time_decode(dot_gpu(), c, type, true, rows, keys, &ed) : 1e30;
        if (q8) {
          std::printf("decode attention %-10s q8_0 %2lld rows x %5lld keys: warp int8 scores %7.1f us (%.2f TB/s, "
                      "CPU err %.2g)\n",
                      c.name, static_cast<long long>(rows), static_cast<long long>(keys), td, bytes / td / 1e6, ed);
          EXPECT_LE(ed, 2e-2) << c.name;
        }
        std::printf("decode attention %-10s %-4s %2lld rows x %5lld keys: warp 2 stages %7.1f us (%.2f TB/s), "
                    "3 stages %7.1f us (%.2f TB/s), tensor-core %7.1f us (%.2f TB/s)%s (CPU err %.2g / %.2g / "
                    "%.2g)\n",
                    c.name, q8 ? "q8_0" : "f16", static_cast<long long>(rows), static_cast<long long>(keys), t2,
                    bytes / t2 / 1e6, t3, bytes / t3 / 1e6, tt, bytes / tt / 1e6,
                    q8 ? (", staged " + std::to_string(ts) + " us").c_str() : "", e2, e3, et);
        EXPECT_LE(e2, 2e-5) << c.name;
        EXPECT_LE(e3, 2e-5) << c.name;
        EXPECT_LE(et, q8 ? 3e-3 : 2e-5) << c.name;
        EXPECT_LE(es, 3e-3) << c.name;
        (q8 ? best_q8 : best_f16) = std::min({t2, t3, tt, td});
      }
      std::printf("decode attention %-10s %2lld rows x %5lld keys: best q8_0 / best f16 %.2fx\n", c.name,
                  static_cast<long long>(rows), static_cast<long long>(keys), best_q8 / best_f16);
      // Half the bytes: at 32k keys, where reading the cache is the call, q8_0 must win.
      if (keys >= 32768) {
        EXPECT_LT(best_q8, best_f16) << c.name << ": q8_0 decode attention slower than f16 at 32k keys";
      }
    }
  }
}

}  // namespace
}  // namespace parity

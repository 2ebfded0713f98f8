// Decode attention over a q8_0 cache on the tensor cores (cuda_attention_tc.cu): the raw
// variant (each warp copies its keys' 34-byte blocks with cp.async, chunks ahead, and
// dequantizes them itself) against the staged reference path of the same kernel
// (set_tc_decode_q8_raw(false)), and both against the CPU back-end.
//
// Tolerances: the two GPU paths put the same f16 values into shared memory (d * q, exact
// in f32 and f16 arithmetic alike, rounded once to f16) and run the same arithmetic on
// them in the same order, so their outputs must be equal bit for bit: no tolerance. The
// CPU reads the q8_0 values in f32 (no f16 rounding: 2^-11 of each value), keeps q and the
// softmax weights in f32 where the GPU rounds them to f16 once (over q8_0 caches only), and
// sums in another order: 3e-3 of the largest output, as the q8_0 rows of
// CudaParity.AttentionDecodeAndPrefill.
//
// CudaPerf.DecodeAttentionQ8VsF16 (HEARTH_PARITY_PERF=1; skipped otherwise) times one
// 32,768-key decode row of the models' head layouts over f16 and q8_0 caches (q8_0: the raw
// variant and the staged reference) and 64 rows of 640 keys.
#include <chrono>

#include "backends/cuda/cuda_attention.cuh"
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
    check_batch(gpu(), c, {1, 31, 32, 33, 64, 65, 1000, 5000}, std::vector<float>(8, 1.0f), true, "batch");
    // One row 32,768 keys deep (a single row from 4,096 keys on takes the tensor cores).
    check_batch(gpu(), c, {32768}, {1.0f}, true, "long");
    // Tiny values (f16 subnormal scales d and products) and large ones: bits only (the
    // CPU's f32 values make a sharp softmax differ more than the tolerance above).
    check_batch(gpu(), c, {33, 1000, 700, 17}, {1e-5f, 300.0f, 1.0f, 3e-7f}, false, "scaled");
  }
}

// Decode modes 1 and 3 (two and four raw stages) on back-ends made with them.
TEST(CudaParity, AttentionDecodeQ8RawModes) {
  NEED_GPU();
  static_cast<hearth::cuda::CudaBackend&>(gpu()).synchronize();
  for (int mode : {1, 3}) {
    hearth::tune::Override o(hearth::tune::kCudaAttnTcDecode, mode);
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

// us a call of one decode attention (the mean of 50 after 5), its result checked once
// against the CPU.
double time_decode(const Q8Case& c, ops::KvType type, bool raw, int64_t rows, int64_t keys, double* err) {
  RawSwitch sw(raw);
  auto L = make_layer(c, type, std::vector<int64_t>(static_cast<size_t>(rows), keys),
                      std::vector<float>(static_cast<size_t>(rows), 1.0f));
  Both q(randn(static_cast<size_t>(rows * c.n_head * c.head_dim), 99, 2.0f)), out(rows * c.n_head * c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto call = [&] {
    gpu().attention(q.g->data(), L->kg, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale,
                    out.g->data());
  };
  call();
  cpu().attention(q.c->data(), L->kc, L->seqs.data(), rows, c.n_head, c.n_head_kv, c.head_dim, scale, out.c->data());
  *err = out.err();
  for (int w = 0; w < 5; ++w) call();
  float sink = 0.0f;
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  const int reps = 50;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) call();
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
}

TEST(CudaPerf, DecodeAttentionQ8VsF16) {
  NEED_GPU();
  const char* on = std::getenv("HEARTH_PARITY_PERF");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "HEARTH_PARITY_PERF=1 times decode attention";
  for (const Q8Case& c : {kCases[0], kCases[1], kCases[2]}) {
    for (const auto& [rows, keys] : {std::pair<int64_t, int64_t>{1, 32768}, {64, 640}}) {
      double ef = 0, er = 0, es = 0;
      const double f16 = time_decode(c, ops::KvType::F16, true, rows, keys, &ef);
      const double q8 = time_decode(c, ops::KvType::Q8_0, true, rows, keys, &er);
      const double q8_staged = time_decode(c, ops::KvType::Q8_0, false, rows, keys, &es);
      const double vals = 2.0 * static_cast<double>(rows * keys * c.n_head_kv * c.head_dim);  // K and V
      std::printf("decode attention %-10s %2lld rows x %5lld keys: f16 %7.1f us (%.2f TB/s), q8_0 %7.1f us "
                  "(%.2f TB/s), q8_0 staged %7.1f us; q8_0 / f16 %.2fx (CPU err %.2g / %.2g / %.2g)\n",
                  c.name, static_cast<long long>(rows), static_cast<long long>(keys), f16, vals * 2.0 / f16 / 1e6,
                  q8, vals * 34.0 / 32.0 / q8 / 1e6, q8_staged, q8 / f16, ef, er, es);
      EXPECT_LE(ef, 2e-5) << c.name;
      EXPECT_LE(er, 3e-3) << c.name;
      EXPECT_LE(es, 3e-3) << c.name;
      // Half the bytes: at 32k keys, where reading the cache is the call, q8_0 must win.
      if (keys >= 32768) {
        EXPECT_LT(q8, f16) << c.name << ": q8_0 decode attention slower than f16 at 32k keys";
      }
    }
  }
}

}  // namespace
}  // namespace parity

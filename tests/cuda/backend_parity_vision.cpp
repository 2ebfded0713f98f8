// The vision-tower operations on the GPU against the CPU back-end (whose kernels
// backend_vision_test checks against double-precision formulas): layer_norm, gelu (both
// forms), attention_full over segments of odd lengths (head sizes 16, 20, 64, 72, 128)
// and the 9B vision tower's one-image shape, multi-axis RoPE (interleaved mRoPE, the
// vision 2-D form) in rope and the fused rope_store_kv, multi-axis positions in a replayed
// CUDA-graph step (staged like plain positions: never stale), and a timing of
// attention_full at 4096 rows x 16 heads x 72.
//
// Tolerances (rel_err: largest |gpu - cpu| over the largest |cpu|):
//  - layer_norm 1e-5 (float sums in another order; one rsqrt), gelu 1e-6 (erff / tanhf
//    within 2 ulp on both sides);
//  - attention_full 2e-5 (online softmax in another order, exp2f on pre-scaled scores);
//  - rope 1e-5 (cos / sin of the same float angles, as the plain RoPE test); the fused
//    rope_store_kv equals the GPU's own rope bit for bit.
#include <chrono>

#include "parity_common.h"

namespace parity {
namespace {

TEST(CudaParity, VisionLayerNormAndGelu) {
  NEED_GPU();
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{1, 32}, {7, 1152}, {33, 13}, {4096, 1152}, {3, 5000}}) {
    auto xv = randn(static_cast<size_t>(rows * n), 101, 3.0f);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] += 2.0f + static_cast<float>(i % 5);
    const auto w = make_weight(GgmlType::F32, randn(static_cast<size_t>(n), 102), 1, n);
    const auto b = make_weight(GgmlType::F32, randn(static_cast<size_t>(n), 103), 1, n);
    Both x(xv), y(rows * n), x2(xv);
    cpu().layer_norm(x.c->data(), w->c, b->c, rows, n, 1e-6f, y.c->data());
    gpu().layer_norm(x.g->data(), w->g, b->g, rows, n, 1e-6f, y.g->data());
    const std::string what = std::to_string(rows) + " x " + std::to_string(n);
    EXPECT_LE(y.err(), 1e-5) << "layer_norm " << what;
    // y aliasing x: the same bits as into another buffer.
    gpu().layer_norm(x2.g->data(), w->g, b->g, rows, n, 1e-6f, x2.g->data());
    EXPECT_EQ(x2.gv(), y.gv()) << "layer_norm in place " << what;
    for (const bool tanh_approx : {false, true}) {
      Both g(randn(static_cast<size_t>(rows * n), 104, 2.5f));
      cpu().gelu(g.c->data(), rows * n, tanh_approx);
      gpu().gelu(g.g->data(), rows * n, tanh_approx);
      EXPECT_LE(g.err(), 1e-6) << (tanh_approx ? "gelu tanh " : "gelu erf ") << what;
    }
  }
}

struct FullCase {
  int64_t n_head, head_dim;
  std::vector<int64_t> seg_rows;
};

std::vector<ops::FullAttentionSeg> segments(const std::vector<int64_t>& rows, int64_t* total) {
  std::vector<ops::FullAttentionSeg> segs;
  int64_t r0 = 0;
  for (const int64_t n : rows) {
    segs.push_back({r0, n});
    r0 += n;
  }
  *total = r0;
  return segs;
}

TEST(CudaParity, VisionAttentionFull) {
  NEED_GPU();
  const std::vector<FullCase> cases = {
      {16, 72, {1024}},                // the 9B vision tower's heads, one 512 x 512 image (32 x 32 patches)
      {16, 72, {1, 37, 200, 511}},     // several images of odd sizes in one batch
      {2, 16, {1, 5, 70, 33, 129}},    // the tiny test model's heads
      {3, 20, {17, 40}},               // a head size padded to the next compiled one
      {4, 64, {100}},
      {1, 128, {65, 3}},
  };
  for (const auto& c : cases) {
    int64_t n_rows = 0;
    const auto segs = segments(c.seg_rows, &n_rows);
    const int64_t n = n_rows * c.n_head * c.head_dim;
    Both q(randn(static_cast<size_t>(n), 111, 1.5f)), k(randn(static_cast<size_t>(n), 112, 1.5f)),
        v(randn(static_cast<size_t>(n), 113)), out(n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const auto ns = static_cast<int64_t>(segs.size());
    cpu().attention_full(q.c->data(), k.c->data(), v.c->data(), segs.data(), ns, c.n_head, c.head_dim, scale,
                         out.c->data());
    gpu().fill(out.g->data(), NAN, n);  // every output value must be written
    gpu().attention_full(q.g->data(), k.g->data(), v.g->data(), segs.data(), ns, c.n_head, c.head_dim, scale,
                         out.g->data());
    EXPECT_LE(out.err(), 2e-5) << "attention_full heads " << c.n_head << " dim " << c.head_dim << " rows " << n_rows
                               << " in " << ns << " segments";
  }
}

// Multi-axis RoPE: the GPU against the CPU, in rope and in the fused rope_store_kv (which
// must equal the GPU's own rope + store_kv bit for bit), f32 and f16 caches; and
// interleaved positions all equal give the GPU's plain NeoX RoPE bit for bit.
TEST(CudaParity, VisionRopeMulti) {
  NEED_GPU();
  struct Case {
    ops::RopeMulti multi;
    int64_t heads, heads_kv, dim, n_rot;
    int32_t s0, s1, s2;
    float base;
    ops::KvType type;
  };
  for (const Case& c : {Case{ops::RopeMulti::kInterleaved, 16, 4, 256, 64, 11, 11, 10, 10000000.0f, ops::KvType::F16},
                        Case{ops::RopeMulti::kInterleaved, 2, 1, 32, 16, 3, 3, 2, 10000000.0f, ops::KvType::F32},
                        Case{ops::RopeMulti::kVision, 16, 16, 72, 72, 18, 18, 0, 10000.0f, ops::KvType::F32},
                        Case{ops::RopeMulti::kVision, 2, 2, 16, 16, 4, 4, 0, 10000.0f, ops::KvType::F16}}) {
    const int64_t n_tok = 37, kvd = c.heads_kv * c.dim, n_rows = 64;
    std::vector<int32_t> pos3(static_cast<size_t>(3 * n_tok));
    std::mt19937 rng(5);
    for (auto& p : pos3) p = static_cast<int32_t>(rng() % 300);
    ops::RopeParams p{c.n_rot, c.base, 1.0f, true};
    p.multi = c.multi;
    p.sections[0] = c.s0;
    p.sections[1] = c.s1;
    p.sections[2] = c.s2;
    p.pos3 = pos3.data();
    const std::string what = std::string(c.multi == ops::RopeMulti::kVision ? "vision" : "interleaved") + " dim " +
                             std::to_string(c.dim);
    const auto qv = randn(static_cast<size_t>(n_tok * c.heads * c.dim), 121);
    const auto kv = randn(static_cast<size_t>(n_tok * kvd), 122), vv = randn(static_cast<size_t>(n_tok * kvd), 123);
    {
      Both x(qv);
      cpu().rope(x.c->data(), n_tok, c.heads, c.dim, nullptr, p);
      gpu().rope(x.g->data(), n_tok, c.heads, c.dim, nullptr, p);
      EXPECT_LE(x.err(), 1e-5) << "rope " << what;
    }
    std::vector<int32_t> slots(static_cast<size_t>(n_tok));
    for (int64_t t = 0; t < n_tok; ++t) slots[t] = static_cast<int32_t>((t * 7) % n_rows);
    const int64_t cache_floats = (n_rows * kvd * ops::kv_type_size(c.type) + 3) / 4;
    Both q(qv), k(kv), v(vv), kc(cache_floats), vc(cache_floats), q2(qv), k2(kv), kc2(cache_floats), vc2(cache_floats);
    for (Both* b : {&kc, &vc, &kc2, &vc2}) {
      cpu().fill(b->c->data(), 0.0f, cache_floats);
      gpu().fill(b->g->data(), 0.0f, cache_floats);
    }
    auto layer = [&](Both& kb, Both& vb, bool on_gpu) {
      return ops::KvLayer{on_gpu ? kb.g->data() : kb.c->data(), on_gpu ? vb.g->data() : vb.c->data(), c.type, 16, kvd};
    };
    cpu().rope_store_kv(q.c->data(), k.c->data(), v.c->data(), n_tok, c.heads, c.heads_kv, c.dim, nullptr, p,
                        slots.data(), layer(kc, vc, false));
    gpu().rope_store_kv(q.g->data(), k.g->data(), v.g->data(), n_tok, c.heads, c.heads_kv, c.dim, nullptr, p,
                        slots.data(), layer(kc, vc, true));
    EXPECT_LE(q.err(), 1e-5) << "rope_store_kv q " << what;
    EXPECT_LE(k.err(), 1e-5) << "rope_store_kv k " << what;
    if (c.type == ops::KvType::F32) {
      EXPECT_LE(kc.err(), 1e-5) << "rope_store_kv cache " << what;
    }
    gpu().rope(q2.g->data(), n_tok, c.heads, c.dim, nullptr, p);
    gpu().rope(k2.g->data(), n_tok, c.heads_kv, c.dim, nullptr, p);
    gpu().store_kv(k2.g->data(), v.g->data(), n_tok, kvd, slots.data(), layer(kc2, vc2, true));
    EXPECT_EQ(q.gv(), q2.gv()) << "rope_store_kv q vs rope on the GPU, " << what;
    EXPECT_EQ(k.gv(), k2.gv()) << "rope_store_kv k vs rope on the GPU, " << what;
    EXPECT_EQ(kc.gv(), kc2.gv()) << "rope_store_kv cache vs store_kv on the GPU, " << what;
    EXPECT_EQ(vc.gv(), vc2.gv()) << "rope_store_kv values vs store_kv on the GPU, " << what;
    if (c.multi == ops::RopeMulti::kInterleaved) {
      std::vector<int32_t> pos(static_cast<size_t>(n_tok)), same(static_cast<size_t>(3 * n_tok));
      for (int64_t t = 0; t < n_tok; ++t) pos[t] = same[3 * t] = same[3 * t + 1] = same[3 * t + 2] = pos3[3 * t];
      ops::RopeParams eq = p;
      eq.pos3 = same.data();
      const ops::RopeParams plain{c.n_rot, c.base, 1.0f, true};
      Both a(qv), b(qv);
      gpu().rope(a.g->data(), n_tok, c.heads, c.dim, pos.data(), plain);
      gpu().rope(b.g->data(), n_tok, c.heads, c.dim, nullptr, eq);
      EXPECT_EQ(a.gv(), b.gv()) << "interleaved with equal positions vs plain NeoX on the GPU, " << what;
    }
  }
}

// A decode-sized step with multi-axis RoPE recorded as a CUDA graph and replayed with
// other positions: each step's results follow its own pos3 (read from the step
// description, uploaded anew for each step), not the recorded step's.
TEST(CudaParity, VisionRopeMultiInGraphSteps) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  cuda->set_graphs(true);
  const int64_t n_tok = 5, heads = 4, heads_kv = 2, dim = 32, kvd = heads_kv * dim, n = n_tok * heads * dim;
  const auto qv = randn(static_cast<size_t>(n), 131), kv = randn(static_cast<size_t>(n_tok * kvd), 132),
             vv = randn(static_cast<size_t>(n_tok * kvd), 133);
  Both q0(qv), k0(kv), v(vv), q(n), k(n_tok * kvd), kc(16 * kvd), vc(16 * kvd);
  const std::vector<int32_t> slots = {3, 1, 4, 15, 9};
  std::vector<int32_t> pos3(static_cast<size_t>(3 * n_tok));
  ops::RopeParams p{16, 10000000.0f, 1.0f, true};
  p.multi = ops::RopeMulti::kInterleaved;
  p.sections[0] = 3;
  p.sections[1] = 3;
  p.sections[2] = 2;
  // The step's arrays in a step description (recorded steps are described ones), refilled
  // every step: its slots and 3-D positions, read where begin_step uploaded them.
  ops::StepDesc desc;
  const std::vector<int32_t> toks(static_cast<size_t>(n_tok), 0), positions(static_cast<size_t>(n_tok), 0);
  const auto before = cuda->graph_stats();
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < pos3.size(); ++i) pos3[i] = static_cast<int32_t>(step * 50 + i * (step + 3) % 41);
    ops::StepDesc::Inputs in;
    in.tokens = toks;
    in.positions = positions;
    in.slots = slots;
    in.pos3 = pos3;
    desc.assign(in);
    p.pos3 = desc.pos3();
    std::vector<float> got_q(static_cast<size_t>(n)), got_kc(static_cast<size_t>(16 * kvd));
    for (int attempt = 0;; ++attempt) {
      try {
        cuda->begin_step(desc);
        gpu().copy(q0.g->data(), n, q.g->data());
        gpu().copy(k0.g->data(), n_tok * kvd, k.g->data());
        gpu().rope_store_kv(q.g->data(), k.g->data(), v.g->data(), n_tok, heads, heads_kv, dim, nullptr, p,
                            desc.slots(), {kc.g->data(), vc.g->data(), ops::KvType::F32, 16, kvd});
        gpu().copy_to_host(*q.g, 0, n, got_q.data());
        gpu().copy_to_host(*kc.g, 0, 16 * kvd, got_kc.data());
        break;
      } catch (const ops::StepRetry&) {
        ASSERT_LT(attempt, 2) << "step " << step << " retried again and again";
      }
    }
    std::vector<float> want_q = qv, want_k = kv;
    cpu().rope(want_q.data(), n_tok, heads, dim, nullptr, p);
    cpu().rope(want_k.data(), n_tok, heads_kv, dim, nullptr, p);
    EXPECT_LE(rel_err(got_q, want_q), 1e-5) << "q of step " << step;
    for (int64_t t = 0; t < n_tok; ++t) {
      const std::vector<float> row(got_kc.begin() + slots[t] * kvd, got_kc.begin() + (slots[t] + 1) * kvd);
      const std::vector<float> want(want_k.begin() + t * kvd, want_k.begin() + (t + 1) * kvd);
      EXPECT_LE(rel_err(row, want), 1e-5) << "cached key of token " << t << ", step " << step;
    }
  }
  const auto after = cuda->graph_stats();
  std::cout << "vision rope graph steps: " << after.recorded - before.recorded << " recorded, "
            << after.replayed - before.replayed << " replayed, " << after.retried - before.retried << " retried\n";
  EXPECT_GE(after.replayed - before.replayed, 1) << "no step was replayed: the test did not exercise the graphs";
}

// attention_full at the 9B vision tower's size for a 1024 x 1024 image (4096 patches, 16
// heads of 72), timed; 64 of its rows (all heads) checked against a double-precision
// computation on the host.
TEST(CudaPerf, AttentionFullVision) {
  NEED_GPU();
  const int64_t n_rows = 4096, n_head = 16, hd = 72, stride = n_head * hd, n = n_rows * stride;
  const auto qv = randn(static_cast<size_t>(n), 141, 1.5f), kv = randn(static_cast<size_t>(n), 142, 1.5f),
             vv = randn(static_cast<size_t>(n), 143);
  Both q(qv), k(kv), v(vv), out(n);
  const ops::FullAttentionSeg seg{0, n_rows};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  gpu().attention_full(q.g->data(), k.g->data(), v.g->data(), &seg, 1, n_head, hd, scale, out.g->data());
  const auto got = out.gv();
  std::vector<float> got_rows, want_rows;
  for (int64_t r = 0; r < n_rows; r += 64) {
    for (int64_t h = 0; h < n_head; ++h) {
      std::vector<double> s(static_cast<size_t>(n_rows));
      double mx = -INFINITY, total = 0.0;
      for (int64_t j = 0; j < n_rows; ++j) {
        double d = 0.0;
        for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(qv[r * stride + h * hd + i]) * kv[j * stride + h * hd + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) total += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0.0;
        for (int64_t j = 0; j < n_rows; ++j) o += s[j] * vv[j * stride + h * hd + i];
        want_rows.push_back(static_cast<float>(o / total));
        got_rows.push_back(got[r * stride + h * hd + i]);
      }
    }
  }
  const double e = rel_err(got_rows, want_rows);
  EXPECT_LE(e, 2e-5) << "attention_full 4096 x 16 x 72, sampled rows";
  float sink = 0.0f;
  for (int w = 0; w < 3; ++w) {
    gpu().attention_full(q.g->data(), k.g->data(), v.g->data(), &seg, 1, n_head, hd, scale, out.g->data());
  }
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    gpu().attention_full(q.g->data(), k.g->data(), v.g->data(), &seg, 1, n_head, hd, scale, out.g->data());
  }
  gpu().copy_to_host(*out.g, 0, 1, &sink);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  const double flops = 4.0 * n_rows * n_rows * hd * n_head;  // q k^T and p v, 2 flops a multiply-add
  std::printf("attention_full perf 4096 rows x 16 heads x 72: %8.1f us a call, %6.2f TFLOP/s (sampled err %.2g)\n", us,
              flops / us / 1e6, e);
}

}  // namespace
}  // namespace parity

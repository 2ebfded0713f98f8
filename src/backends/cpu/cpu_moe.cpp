// CpuBackend::moe_ffn: the routed experts of one MoE layer in three parallel passes
// instead of three matmuls per selected expert. The router's logits pick each token's
// experts on the host (ops::route_top_k); the (token, expert) pairs are grouped by expert,
// expert ascending and tokens ascending within one, exactly as the model's generic path
// groups them. Then:
//   1. the activations are quantized once per token and gathered per pair;
//   2. one parallel pass covers the gate and up rows of every selected expert (16-row
//      units), each expert's rows against its own pairs;
//   3. SwiGLU over all pairs, the results quantized per pair;
//   4. one parallel pass covers the down rows of every selected expert;
//   5. the weighted sum per token, expert by expert in ascending order.
// Every output element comes from the kernel matmul would use for that expert's weight
// alone (packed, tiled, vec_dot, or dequantized rows), which gives a row the same bits in
// any batch and any row split: the result equals the generic path bit for bit. What
// changes is the number of hand-offs to the thread pool: 3 per layer instead of 3 per
// selected expert (24 for top-8 decode, ~100 for a batch of four), which on many cores
// cost more than the expert rows themselves.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/quant_dot.h"
#include "core/error.h"
#include "ops/moe_route.h"

namespace hearth::cpu {
namespace {

// How matmul multiplies one weight; the activation rows quantized for it.
struct ActRows {
  enum class Kind { kPacked, kTile, kDot, kFloat } kind = Kind::kFloat;
  const DotKernel* k = nullptr;
  MatmulFn mm = nullptr;
  PackedMatmulFn pmm = nullptr;
  GgmlType type = GgmlType::F32;  // the weight's type
  int64_t cols = 0, row_bytes = 0, nb = 0;
  std::vector<uint8_t> q;  // quantized rows (row_bytes each)
  std::vector<float> d, s;  // packed kernels: per (row, block) scales
  std::vector<int32_t> corr;
  std::vector<float> f;  // kFloat: the rows themselves

  // Same kind of activations for both weights (so one quantization serves both).
  bool same_as(const ActRows& o) const { return kind == o.kind && type == o.type && cols == o.cols && k == o.k; }
};

// The choice CpuBackend::matmul makes for w (matmul_packed for a packed weight), into a
// (its buffers are kept for reuse).
void plan_for(const ops::WeightView& w, bool reference, ActRows& a) {
  a.kind = ActRows::Kind::kFloat;
  a.k = nullptr;
  a.mm = nullptr;
  a.pmm = nullptr;
  a.nb = a.row_bytes = 0;
  a.cols = w.n_cols;
  a.type = w.type;
  if (w.backend_data != nullptr) {
    const auto& p = *static_cast<const PackedWeight*>(w.backend_data);
    a.kind = ActRows::Kind::kPacked;
    a.type = p.type;
    a.k = find_dot_kernel(p.type);
    a.pmm = find_packed_kernel(p.type);
    a.nb = p.nb;
    a.row_bytes = static_cast<int64_t>(*ggml_row_bytes(packed_act_type(p.type), static_cast<uint64_t>(p.n_cols)));
    return;
  }
  a.k = find_dot_kernel(w.type, reference);
  const auto act_row = a.k != nullptr ? ggml_row_bytes(a.k->act_type, static_cast<uint64_t>(w.n_cols)) : std::nullopt;
  if (!act_row) {
    a.k = nullptr;
    return;
  }
  a.row_bytes = static_cast<int64_t>(*act_row);
  a.mm = reference ? nullptr : find_matmul_kernel(w.type);
  a.kind = a.mm != nullptr ? ActRows::Kind::kTile : ActRows::Kind::kDot;
}

void resize_rows(ActRows& a, int64_t m) {
  if (a.kind == ActRows::Kind::kFloat) {
    a.f.resize(static_cast<size_t>(m * a.cols));
    return;
  }
  a.q.resize(static_cast<size_t>(m * a.row_bytes));
  if (a.kind == ActRows::Kind::kPacked) {
    a.d.resize(static_cast<size_t>(m * a.nb));
    a.s.resize(a.d.size());
    a.corr.resize(a.d.size() * 8);
  }
}

// Row t of x into a's row t.
void quantize_row(ActRows& a, const float* x, int64_t t) {
  if (a.kind == ActRows::Kind::kFloat) {
    std::memcpy(a.f.data() + t * a.cols, x, sizeof(float) * a.cols);
    return;
  }
  uint8_t* q = a.q.data() + t * a.row_bytes;
  a.k->quantize_act(x, q, a.cols);
  if (a.kind == ActRows::Kind::kPacked) {
    packed_act_scales(a.type, q, a.nb, a.d.data() + t * a.nb, a.s.data() + t * a.nb, a.corr.data() + t * a.nb * 8);
  }
}

// dst row i = src row idx[i], for i in [i0, i1) (dst already sized).
void gather_range(const ActRows& src, const int32_t* idx, int64_t i0, int64_t i1, ActRows& dst) {
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = idx[i];
    if (src.kind == ActRows::Kind::kFloat) {
      std::memcpy(dst.f.data() + i * src.cols, src.f.data() + t * src.cols, sizeof(float) * src.cols);
      continue;
    }
    std::memcpy(dst.q.data() + i * src.row_bytes, src.q.data() + t * src.row_bytes, src.row_bytes);
    if (src.kind == ActRows::Kind::kPacked) {
      std::memcpy(dst.d.data() + i * src.nb, src.d.data() + t * src.nb, sizeof(float) * src.nb);
      std::memcpy(dst.s.data() + i * src.nb, src.s.data() + t * src.nb, sizeof(float) * src.nb);
      std::memcpy(dst.corr.data() + i * src.nb * 8, src.corr.data() + t * src.nb * 8, sizeof(int32_t) * src.nb * 8);
    }
  }
}

// dst row i = src row idx[i], i < m, split over the pool (pieces of about 64 KiB).
void gather(ThreadPool& pool, const ActRows& src, const int32_t* idx, int64_t m, ActRows& dst) {
  resize_rows(dst, m);
  const int64_t row = src.kind == ActRows::Kind::kFloat ? 4 * src.cols : src.row_bytes + src.nb * 40;
  pool.parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, row)),
                    [&](int64_t begin, int64_t end, int) { gather_range(src, idx, begin, end, dst); });
}

// One expert's matrix inside an all-experts weight.
struct ExpertWeight {
  const ops::WeightView* w = nullptr;
  int64_t rows = 0;  // per expert
};

// y[i * rows + r] for rows r of 16-row units [u0, u1) of expert e and activation rows
// [a0, a0 + m) of a (y: that expert's first pair).
void expert_rows(const ExpertWeight& ew, const ActRows& a, int64_t e, int64_t u0, int64_t u1, int64_t a0, int64_t m,
                 float* y) {
  const ops::WeightView& w = *ew.w;
  const int64_t R = ew.rows, r0 = u0 * kPackRows, r1 = std::min(R, u1 * kPackRows);
  switch (a.kind) {
    case ActRows::Kind::kPacked: {
      const auto& p = *static_cast<const PackedWeight*>(w.backend_data);
      PackedWeight pe;  // expert e's groups, not owned
      pe.type = p.type;
      pe.n_rows = R;
      pe.n_cols = p.n_cols;
      pe.n_groups = R / kPackRows;
      pe.nb = p.nb;
      pe.block_bytes = p.block_bytes;
      pe.base = const_cast<uint8_t*>(p.group(e * pe.n_groups));
      PackedAct pa;
      pa.xq = a.q.data() + a0 * a.row_bytes;
      pa.row_bytes = a.row_bytes;
      pa.nb = a.nb;
      pa.d = a.d.data() + a0 * a.nb;
      pa.s = a.s.data() + a0 * a.nb;
      pa.corr = a.corr.data() + a0 * a.nb * 8;
      a.pmm(pe, u0, u1, pa, m, y, R);
      return;
    }
    case ActRows::Kind::kTile:
      a.mm(w.n_cols, static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(e * R + r0) * w.row_bytes,
           w.row_bytes, r1 - r0, a.q.data() + a0 * a.row_bytes, static_cast<uint64_t>(a.row_bytes), m, y + r0, R);
      return;
    case ActRows::Kind::kDot:
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wrow = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(e * R + r) * w.row_bytes;
        for (int64_t t = 0; t < m; ++t) y[t * R + r] = a.k->vec_dot(w.n_cols, wrow, a.q.data() + (a0 + t) * a.row_bytes);
      }
      return;
    case ActRows::Kind::kFloat: {
      std::vector<float> row(static_cast<size_t>(w.n_cols));
      for (int64_t r = r0; r < r1; ++r) {
        ref::dequantize_row(w, e * R + r, row.data());
        for (int64_t t = 0; t < m; ++t) y[t * R + r] = ref::dot16(row.data(), a.f.data() + (a0 + t) * w.n_cols, w.n_cols);
      }
      return;
    }
  }
}

}  // namespace

struct MoeScratch {
  std::vector<float> logits, route_w, pair_w, gate, up, down;
  std::vector<int32_t> route_ids, pair_tok, count, offset, cursor, active;
  std::vector<int32_t> tok_pairs;  // [n, K]: each token's pairs, in pair (= expert) order
  ActRows x_gate, x_up, pairs_gate, pairs_up, h;
};

void CpuBackend::moe_ffn(const ops::MoeLayer& L, const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  const OpScope timer(op_times_.get(), "moe_ffn");
  if (!moe_) moe_ = std::make_shared<MoeScratch>();
  MoeScratch& s = *moe_;
  const int64_t E = L.n_embd, F = L.n_ff, X = L.n_expert, K = L.n_used;
  if (L.gate->n_rows != X * F || L.up->n_rows != X * F || L.down->n_rows != X * E || L.gate->n_cols != E ||
      L.down->n_cols != F) {
    fail(ErrorKind::kInternal, "cpu", "moe_ffn: expert weights of '" + L.gate->name + "' do not match the layer's shape");
  }
  if (L.shared_gate != nullptr) {  // (moe_takes_shared is false here: models run it as separate ops)
    fail(ErrorKind::kInternal, "cpu", "moe_ffn: a shared expert ('" + L.shared_gate->name + "') is not taken here");
  }

  // Routing, and the (token, expert) pairs grouped by expert.
  s.logits.resize(static_cast<size_t>(n * X));
  matmul(*L.router, x, n, s.logits.data());
  OpScope phase(op_times_.get(), "moe route, pairs");
  s.route_ids.resize(static_cast<size_t>(n * K));
  s.route_w.resize(static_cast<size_t>(n * K));
  pool_.parallel_for(n, std::max<int64_t>(1, 4096 / X), [&](int64_t begin, int64_t end, int) {
    ops::route_top_k_rows(s.logits.data(), begin, end, X, K, L.norm_weights, s.route_ids.data(), s.route_w.data());
  });
  s.count.assign(static_cast<size_t>(X), 0);
  for (const int32_t e : s.route_ids) ++s.count[e];
  s.offset.assign(static_cast<size_t>(X) + 1, 0);
  s.active.clear();
  for (int64_t e = 0; e < X; ++e) {
    s.offset[e + 1] = s.offset[e] + s.count[e];
    if (s.count[e] > 0) s.active.push_back(static_cast<int32_t>(e));
  }
  const int64_t P = n * K;
  s.pair_tok.resize(static_cast<size_t>(P));
  s.pair_w.resize(static_cast<size_t>(P));
  s.cursor.assign(s.offset.begin(), s.offset.end() - 1);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = s.route_ids[t * K + k];
      s.pair_tok[s.cursor[e]] = static_cast<int32_t>(t);
      s.pair_w[s.cursor[e]++] = s.route_w[t * K + k];
    }
  }

  // 1. Activations per token, then per pair.
  phase.next("moe act quantize, gather");
  const auto quantize_all = [&](ActRows& a, const float* rows, int64_t m) {
    resize_rows(a, m);
    pool_.parallel_for(m, act_grain(a.cols), [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) quantize_row(a, rows + t * a.cols, t);
    });
  };
  plan_for(*L.gate, reference_kernels_, s.x_gate);
  plan_for(*L.up, reference_kernels_, s.x_up);
  const bool shared_act = s.x_up.same_as(s.x_gate);
  quantize_all(s.x_gate, x, n);
  plan_for(*L.gate, reference_kernels_, s.pairs_gate);
  gather(pool_, s.x_gate, s.pair_tok.data(), P, s.pairs_gate);
  if (!shared_act) {
    quantize_all(s.x_up, x, n);
    plan_for(*L.up, reference_kernels_, s.pairs_up);
    gather(pool_, s.x_up, s.pair_tok.data(), P, s.pairs_up);
  }
  const ActRows& act_up = shared_act ? s.pairs_gate : s.pairs_up;

  // 2. Gate and up rows of every selected expert, in 16-row units.
  const int64_t n_active = static_cast<int64_t>(s.active.size());
  const int64_t uf = (F + kPackRows - 1) / kPackRows;
  s.gate.resize(static_cast<size_t>(P * F));
  s.up.resize(static_cast<size_t>(P * F));
  const ExpertWeight gate_w{L.gate, F}, up_w{L.up, F}, down_w{L.down, E};
  phase.next("moe gate/up experts");
  pool_.parallel_for(n_active * 2 * uf, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end;) {
      const int64_t i = u / (2 * uf), proj = (u % (2 * uf)) / uf, u0 = u % uf;
      const int64_t u1 = std::min(uf, u0 + (end - u));
      const int32_t e = s.active[i];
      const int64_t a0 = s.offset[e], m = s.count[e];
      if (proj == 0) expert_rows(gate_w, s.pairs_gate, e, u0, u1, a0, m, s.gate.data() + a0 * F);
      else expert_rows(up_w, act_up, e, u0, u1, a0, m, s.up.data() + a0 * F);
      u += u1 - u0;
    }
  });

  // 3. SwiGLU, quantized per pair for down.
  phase.stop();
  swiglu(s.gate.data(), s.up.data(), P * F, s.gate.data());
  OpScope down_phase(op_times_.get(), "moe down act quantize");
  plan_for(*L.down, reference_kernels_, s.h);
  quantize_all(s.h, s.gate.data(), P);

  // 4. Down rows of every selected expert.
  const int64_t ue = (E + kPackRows - 1) / kPackRows;
  s.down.resize(static_cast<size_t>(P * E));
  down_phase.next("moe down experts");
  pool_.parallel_for(n_active * ue, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end;) {
      const int64_t i = u / ue, u0 = u % ue, u1 = std::min(ue, u0 + (end - u));
      const int32_t e = s.active[i];
      expert_rows(down_w, s.h, e, u0, u1, s.offset[e], s.count[e], s.down.data() + s.offset[e] * E);
      u += u1 - u0;
    }
  });

  // 5. The weighted sum, expert by expert (the generic path's order of additions: fill
  // with 0, then scatter_add_rows of each active expert in ascending order), one task
  // per range of tokens: a token's pairs in pair order are its experts ascending.
  down_phase.next("moe combine");
  s.tok_pairs.resize(static_cast<size_t>(P));
  s.cursor.assign(static_cast<size_t>(n), 0);
  for (int64_t p = 0; p < P; ++p) {
    const int32_t t = s.pair_tok[p];
    s.tok_pairs[t * K + s.cursor[t]++] = static_cast<int32_t>(p);
  }
  pool_.parallel_for(n, std::max<int64_t>(1, 8192 / (E * K)), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* d = out + t * E;
      std::fill(d, d + E, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t p = s.tok_pairs[t * K + k];
        const float* src = s.down.data() + p * E;
        const float w = s.pair_w[p];
        for (int64_t j = 0; j < E; ++j) d[j] += w * src[j];
      }
    }
  });
}

}  // namespace hearth::cpu

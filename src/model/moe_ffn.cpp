#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/weights.h"
#include "ops/moe_route.h"

namespace hearth::model {
namespace {

const gguf::TensorInfo& need(const gguf::File& f, const std::string& name, std::vector<uint64_t> shape) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) fail(ErrorKind::kInvalidInput, "model", f.name() + ": tensor '" + name + "' is missing");
  if (t->shape != shape) {
    fail(ErrorKind::kInvalidInput, "model",
         f.name() + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " + shape_str(shape));
  }
  return *t;
}

// One view per expert of a [cols, rows, n_expert] tensor: expert e's rows are contiguous.
std::vector<ops::WeightView> slice_experts(ops::Backend& be, const gguf::TensorInfo& t, const std::string& name) {
  std::vector<ops::WeightView> out;
  const uint64_t n_expert = t.shape[2];
  const uint64_t per_expert = t.n_bytes / n_expert;
  for (uint64_t e = 0; e < n_expert; ++e) {
    ops::WeightView w;
    w.name = name + "[" + std::to_string(e) + "]";
    w.type = t.type;
    w.data = t.data + e * per_expert;
    w.n_cols = static_cast<int64_t>(t.shape[0]);
    w.n_rows = static_cast<int64_t>(t.shape[1]);
    w.row_bytes = per_expert / t.shape[1];
    out.push_back(be.prepare_weight(w));
  }
  return out;
}

// All experts of a [cols, rows, n_expert] tensor as one weight of rows * n_expert rows.
ops::WeightView whole_experts(ops::Backend& be, const gguf::TensorInfo& t, const std::string& name) {
  ops::WeightView w;
  w.name = name;
  w.type = t.type;
  w.data = t.data;
  w.n_cols = static_cast<int64_t>(t.shape[0]);
  w.n_rows = static_cast<int64_t>(t.shape[1] * t.shape[2]);
  w.row_bytes = t.n_bytes / (t.shape[1] * t.shape[2]);
  w.n_expert = static_cast<int64_t>(t.shape[2]);
  return be.prepare_weight(w);
}

}  // namespace

MoeWeights bind_moe(const gguf::File& f, ops::Backend& be, const std::string& p, const MoeParams& mp) {
  const auto E = static_cast<uint64_t>(mp.n_embd), F = static_cast<uint64_t>(mp.n_ff),
             X = static_cast<uint64_t>(mp.n_expert);
  MoeWeights w;
  const auto& router = need(f, p + "ffn_gate_inp.weight", {E, X});
  w.router.name = router.name;
  w.router.type = router.type;
  w.router.data = router.data;
  w.router.n_cols = static_cast<int64_t>(E);
  w.router.n_rows = static_cast<int64_t>(X);
  w.router.row_bytes = router.n_bytes / X;
  w.router = be.prepare_weight(w.router);
  const auto& gate = need(f, p + "ffn_gate_exps.weight", {E, F, X});
  const auto& up = need(f, p + "ffn_up_exps.weight", {E, F, X});
  const auto& down = need(f, p + "ffn_down_exps.weight", {F, E, X});
  if (be.fused_moe()) {
    w.fused = true;
    w.gate_all = whole_experts(be, gate, gate.name);
    w.up_all = whole_experts(be, up, up.name);
    w.down_all = whole_experts(be, down, down.name);
    return w;
  }
  w.gate = slice_experts(be, gate, gate.name);
  w.up = slice_experts(be, up, up.name);
  w.down = slice_experts(be, down, down.name);
  return w;
}

void route_top_k(const float* logits, int64_t n, const MoeParams& p, std::vector<int32_t>& ids,
                 std::vector<float>& weights) {
  ops::route_top_k(logits, n, p.n_expert, p.n_used, p.norm_weights, ids, weights);
}

namespace {

ops::MoeLayer moe_layer(const MoeWeights& w, const MoeParams& p, const SharedExpert* shared) {
  ops::MoeLayer layer;
  layer.router = &w.router;
  layer.gate = &w.gate_all;
  layer.up = &w.up_all;
  layer.down = &w.down_all;
  layer.n_expert = p.n_expert;
  layer.n_used = p.n_used;
  layer.n_embd = p.n_embd;
  layer.n_ff = p.n_ff;
  layer.norm_weights = p.norm_weights;
  if (shared != nullptr) {
    layer.shared_gate = shared->gate;
    layer.shared_up = shared->up;
    layer.shared_down = shared->down;
    layer.shared_inp = shared->inp;
    layer.n_ff_shared = shared->n_ff;
  }
  return layer;
}

}  // namespace

bool moe_takes_shared(ops::Backend& be, const MoeWeights& w, const MoeParams& p, const SharedExpert& shared,
                      int64_t n) {
  return w.fused && be.moe_takes_shared(moe_layer(w, p, &shared), n);
}

void moe_ffn(ops::Backend& be, const MoeWeights& w, const MoeParams& p, const float* x, int64_t n, float* out,
             const SharedExpert* shared, const MoeNormAfter* after) {
  if (shared != nullptr && !moe_takes_shared(be, w, p, *shared, n)) {
    fail(ErrorKind::kInternal, "moe_ffn", "the back-end does not take this layer's shared expert");
  }
  if (after != nullptr) {
    if (w.fused) {
      be.moe_ffn_add_rms_norm(moe_layer(w, p, shared), x, n, out, after->x_res, *after->norm, after->eps,
                              after->norm_out);
    } else {
      moe_ffn(be, w, p, x, n, out, shared);
      be.add_rms_norm(after->x_res, out, *after->norm, n, p.n_embd, after->eps, after->norm_out);
    }
    return;
  }
  if (w.fused) {
    be.moe_ffn(moe_layer(w, p, shared), x, n, out);
    return;
  }
  auto router = be.alloc(n * p.n_expert);
  be.matmul(w.router, x, n, router->data());
  std::vector<float> host(static_cast<size_t>(n * p.n_expert));
  be.copy_to_host(*router, 0, n * p.n_expert, host.data());
  std::vector<int32_t> ids;
  std::vector<float> weights;
  route_top_k(host.data(), n, p, ids, weights);

  // Group (token, weight) pairs by expert.
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(p.n_expert));
  std::vector<std::vector<float>> token_w(static_cast<size_t>(p.n_expert));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < p.n_used; ++k) {
      const int32_t e = ids[t * p.n_used + k];
      tokens[e].push_back(static_cast<int32_t>(t));
      token_w[e].push_back(weights[t * p.n_used + k]);
    }
  }
  be.fill(out, 0.0f, n * p.n_embd);
  auto xs = be.alloc(n * p.n_embd), gate = be.alloc(n * p.n_ff), up = be.alloc(n * p.n_ff),
       down = be.alloc(n * p.n_embd);
  for (int64_t e = 0; e < p.n_expert; ++e) {
    const auto m = static_cast<int64_t>(tokens[e].size());
    if (m == 0) continue;
    be.gather_rows(x, p.n_embd, tokens[e].data(), m, xs->data());
    be.matmul(w.gate[e], xs->data(), m, gate->data());
    be.matmul(w.up[e], xs->data(), m, up->data());
    be.swiglu(gate->data(), up->data(), m * p.n_ff, gate->data());
    be.matmul(w.down[e], gate->data(), m, down->data());
    be.scatter_add_rows(down->data(), p.n_embd, tokens[e].data(), token_w[e].data(), m, out);
  }
}

}  // namespace hearth::model

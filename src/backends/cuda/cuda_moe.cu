// CudaBackend::moe_ffn: the routed experts of a MoE layer without leaving the device
// for decode. The router's logits are turned into each token's experts and weights by
// one kernel (softmax, top-k with ties to the lower index, renormalisation); for up to
// kMaxFusedTokens tokens the selected experts' gate/up (+ SwiGLU) and down products
// run as one kernel each over all (token, expert) pairs (quant_cuda.h q8_moe_*; from
// moe_group_min_tokens_ tokens over the pairs grouped by expert on the device, each used
// expert read once), and a last kernel sums each token's experts in a fixed order. A
// shared expert (moe_takes_shared) is each decode token's last pair, on its own weights,
// weighted by sigmoid(its gate row . x) from the routing kernel: the eight separate ops of
// a shared expert become none (cuda.moe_shared=0: the model runs them). With
// moe_ffn_add_rms_norm that last kernel also adds the residual and applies the next norm.
// Prompts (more tokens) copy the routing to the host once per layer, sort the (token, expert) pairs by expert and run
// each projection as one grouped tensor-core product over all experts (quant_gemm_grouped;
// one matrix product per used expert for the types it lacks).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/quant_cuda.h"
#include "core/error.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

constexpr int kMaxPerLane = 16;  // experts per lane: n_expert <= 512
constexpr int kMaxUsed = 32;
constexpr int64_t kMaxFusedTokens = 64;

__device__ __forceinline__ float warp_max_f(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The shared expert's slot of the routing (moe_route_kernel): a token's last pair is expert
// n_expert (the shared one) with weight sigmoid(inp . x) (1 without inp).
struct SharedSlot {
  bool on = false;
  const float* x = nullptr;    // [n, n_embd]
  const float* inp = nullptr;  // [n_embd] f32, or null
  int64_t n_embd = 0;
};

// One warp per token: probabilities = softmax(logits); the n_used best (ties: lower
// index first), weights = their probabilities (divided by their sum when norm); with
// the shared slot, n_used + 1 pairs a token (the shared expert's last).
__global__ void moe_route_kernel(const float* __restrict__ logits, int n_expert, int n_used, bool norm,
                                 int32_t* __restrict__ ids, float* __restrict__ weights, SharedSlot shared) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int t = blockIdx.x, lane = threadIdx.x;
  const int stride = n_used + (shared.on ? 1 : 0);
  ids += static_cast<int64_t>(t) * stride;
  weights += static_cast<int64_t>(t) * stride;
  if (shared.on) {
    float g = 1.f;
    if (shared.inp != nullptr) {
      const float* xr = shared.x + static_cast<int64_t>(t) * shared.n_embd;
      float d = 0.f;
      for (int64_t c = lane; c < shared.n_embd; c += 32) d += xr[c] * shared.inp[c];
      g = sigmoid_f(warp_sum(d));
    }
    if (lane == 0) {
      ids[n_used] = n_expert;
      weights[n_used] = g;
    }
  }
  const float* l = logits + static_cast<int64_t>(t) * n_expert;
  float v[kMaxPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < n_expert ? l[e] : -INFINITY;
    mx = fmaxf(mx, v[i]);
  }
  mx = warp_max_f(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < n_expert ? expf(v[i] - mx) : 0.f;
    sum += v[i];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) v[i] /= sum;
  uint32_t taken = 0;
  float chosen = 0.f;
  for (int k = 0; k < n_used; ++k) {
    float best = -1.f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < n_expert && !((taken >> i) & 1u) && v[i] > best) {
        best = v[i];
        bi = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ob > best || (ob == best && oi < bi)) {
        best = ob;
        bi = oi;
      }
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    chosen += best;
    if (lane == 0) {
      ids[k] = bi;
      weights[k] = best;
    }
  }
  if (norm && lane == 0) {
    for (int k = 0; k < n_used; ++k) weights[k] /= chosen;
  }
}

// out[t, c] = sum over k < n_used (in order) of weights[t, k] * y[p, c], p the pair's row of
// y: pos[t * n_used + k] when pos is given (y in the pairs' sorted order), else t * n_used + k.
__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ pos,
                                   const float* __restrict__ weights, int64_t n, int n_used, int64_t n_embd,
                                   float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * n_embd;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / n_embd, c = i % n_embd;
    float s = 0.f;
    for (int k = 0; k < n_used; ++k) {
      const int64_t p = pos != nullptr ? static_cast<int64_t>(pos[t * n_used + k]) : t * n_used + k;
      s += weights[t * n_used + k] * y[p * n_embd + c];
    }
    out[i] = s;
  }
}

// Expert e's rows of a stacked weight as a weight of its own.
ops::WeightView expert_slice(const ops::WeightView& all, int64_t rows, int64_t e) {
  ops::WeightView w = all;
  w.name = all.name + "[" + std::to_string(e) + "]";
  w.n_rows = rows;
  const uint64_t off = static_cast<uint64_t>(e * rows) * all.row_bytes;
  w.data = static_cast<const uint8_t*>(all.data) + off;
  w.backend_data = static_cast<const uint8_t*>(all.backend_data) + off;
  return w;
}

}  // namespace

bool CudaBackend::moe_takes_shared(const ops::MoeLayer& L, int64_t n_tokens) const {
  // The shared expert as one more pair of each token in the 8-bit decode kernels: its
  // weights of the stacked experts' types and row lengths, one f32 gate row. (Not in the
  // deterministic mode, whose separate products are batch-invariant already.)
  // Up to moe_shared_max_tokens_ tokens on any of those kernels; more (to kMaxFusedTokens)
  // where the tensor-core ones take the batch: they give the shared expert's 8-pair tiles
  // blocks of their own, where the dp4a kernels ran its pairs as one long run.
  if (L.shared_gate == nullptr || L.shared_up == nullptr || L.shared_down == nullptr || L.gate == nullptr ||
      L.up == nullptr || L.down == nullptr || !q8_matvec_ || deterministic_ || n_tokens <= 0 ||
      moe_shared_max_tokens_ <= 0 || n_tokens > kMaxFusedTokens ||
      (n_tokens > moe_shared_max_tokens_ && !(moe_shared_mma_ && moe_mma_takes(L, n_tokens)))) {
    return false;
  }
  const auto same = [](const ops::WeightView& a, const ops::WeightView& b) {
    return a.type == b.type && a.row_bytes == b.row_bytes && a.n_cols == b.n_cols;
  };
  const bool inp_ok = L.shared_inp == nullptr ||
                      (L.shared_inp->type == GgmlType::F32 && L.shared_inp->n_cols == L.n_embd);
  return q8_matvec_supported(L.gate->type) && q8_matvec_supported(L.down->type) && L.up->type == L.gate->type &&
         L.up->row_bytes == L.gate->row_bytes && same(*L.shared_gate, *L.gate) && same(*L.shared_up, *L.gate) &&
         same(*L.shared_down, *L.down) && L.n_ff_shared == L.n_ff && L.shared_gate->n_rows == L.n_ff &&
         L.shared_up->n_rows == L.n_ff && L.shared_down->n_rows == L.n_embd && inp_ok &&
         L.n_expert + 1 <= 32 * kMaxPerLane && L.n_used + 1 <= kMaxUsed;
}

bool CudaBackend::moe_mma_takes(const ops::MoeLayer& L, int64_t n) const {
  return !deterministic_ && n >= moe_mma_min_tokens_ && n >= moe_group_min_tokens_ && n <= kMaxFusedTokens &&
         q8_moe_group_fits(n * (L.n_used + 1), L.n_expert + 1) &&
         q8_moe_mma_supported(L.gate->type, L.n_embd, L.gate->row_bytes) && L.up->type == L.gate->type &&
         L.up->row_bytes == L.gate->row_bytes && q8_moe_mma_supported(L.down->type, L.n_ff, L.down->row_bytes);
}

bool CudaBackend::moe_decode_q8(const ops::MoeLayer& L, int64_t n) const {
  return q8_matvec_ && q8_matvec_supported(L.gate->type) && L.up->type == L.gate->type &&
         L.up->row_bytes == L.gate->row_bytes && q8_matvec_supported(L.down->type) && n <= kMaxFusedTokens;
}

void CudaBackend::moe_ffn(const ops::MoeLayer& L, const float* x, int64_t n, float* out) {
  moe_ffn_impl(L, x, n, out, nullptr);
}

void CudaBackend::moe_ffn_add_rms_norm(const ops::MoeLayer& L, const float* x, int64_t n, float* out, float* x_res,
                                       const ops::WeightView& norm, float eps, float* norm_out) {
  // Decode: the kernel after the experts' products sums each token's pairs into out and
  // does add_rms_norm's residual add and norm (its arithmetic) in the same pass.
  if (!fuse_ || !moe_norm_ || deterministic_ || n <= 0 || !moe_decode_q8(L, n) || L.n_embd % 32 != 0 ||
      norm.type != GgmlType::F32 || !add_rms_norm_vec_ok(x_res, out, norm_out, norm, L.n_embd)) {
    moe_ffn(L, x, n, out);
    add_rms_norm(x_res, out, norm, n, L.n_embd, eps, norm_out);
    return;
  }
  const NormAfter after{x_res, &norm, eps, norm_out};
  moe_ffn_impl(L, x, n, out, &after);
}

void CudaBackend::moe_ffn_impl(const ops::MoeLayer& L, const float* x, int64_t n, float* out, const NormAfter* after) {
  OpTimer timer(rt_, after != nullptr ? "moe_ffn + add_rms_norm" : "moe_ffn");
  const int64_t X = L.n_expert, K = L.n_used, E = L.n_embd, F = L.n_ff;
  if (X <= 0 || X > 32 * kMaxPerLane || K <= 0 || K > std::min<int64_t>(X, kMaxUsed)) {
    fail(ErrorKind::kUnsupported, "cuda", "moe_ffn: " + std::to_string(X) + " experts, " + std::to_string(K) +
                                              " used (at most " + std::to_string(32 * kMaxPerLane) + " / " +
                                              std::to_string(kMaxUsed) + ")");
  }
  if (L.router->n_rows != X || L.gate->n_rows != X * F || L.up->n_rows != X * F || L.down->n_rows != X * E ||
      L.gate->n_cols != E || L.down->n_cols != F) {
    fail(ErrorKind::kInvalidInput, "cuda", "moe_ffn: expert weights do not match the layer's shape");
  }
  const bool shared = L.shared_gate != nullptr;
  if (shared && !moe_takes_shared(L, n)) {
    fail(ErrorKind::kInvalidInput, "cuda", "moe_ffn: the shared expert '" + L.shared_gate->name + "' is not taken for " +
                                               std::to_string(n) + " tokens (moe_takes_shared)");
  }
  if (n <= 0) return;
  // Decode batches (up to kMaxFusedTokens tokens: many streams) stay on the device; each
  // (token, expert) pair reads its expert's rows, so prompts (more tokens, the same experts
  // again and again) group the tokens of each expert instead.
  const bool q8_types = q8_matvec_ && q8_matvec_supported(L.gate->type) && L.up->type == L.gate->type &&
                        L.up->row_bytes == L.gate->row_bytes && q8_matvec_supported(L.down->type);
  if (deterministic_ && q8_types && n > kMaxFusedTokens) {
    // Deterministic: the decode path below (each (token, expert) pair on its own) in
    // batches it takes, never the grouped one, whose tiles depend on the other tokens.
    for (int64_t t0 = 0; t0 < n; t0 += kMaxFusedTokens) {
      moe_ffn(L, x + t0 * E, std::min(kMaxFusedTokens, n - t0), out + t0 * E);
    }
    return;
  }
  const bool q8 = q8_types && n <= kMaxFusedTokens;
  if (after != nullptr && !q8) fail(ErrorKind::kInternal, "cuda", "moe_ffn: the fused norm is for decode batches");
  // With a shared expert (decode): it is each token's last pair (expert X, its own
  // weights, weight sigmoid(inp . x)), so the same kernels run it with the routed ones.
  const int64_t S = shared ? 1 : 0, KS = K + S, XS = X + S;
  const int64_t pairs = n * KS;
  // Batches of moe_group_min_tokens_ or more: the pairs grouped by expert on the device, so
  // that an expert several tokens chose is read once (the same bits as pair by pair); from
  // moe_mma_min_tokens_ on, the grouped products on the int8 tensor cores (other bits than
  // the dp4a kernels', so never in deterministic mode).
  const bool group = q8 && n >= moe_group_min_tokens_ && q8_moe_group_fits(pairs, XS);
  const bool mma = group && moe_mma_takes(L, n);
  const size_t q8_bytes =
      q8 ? std::max({q8_scratch_bytes(E, n), q8_scratch_bytes(F, pairs),
                     mma ? std::max(q8_moe_mma_scratch_bytes(E, n), q8_moe_mma_scratch_bytes(F, pairs)) : size_t{0}})
         : 0;
  void* q8_tmp = q8 ? rt_.scratch(5, q8_bytes, "moe_ffn") : nullptr;
  // x quantized by the op before (the norm): taken before the router's product clears it.
  const bool x_ready = q8 && n <= kMaxMatvecTokens && take_q8_ready(x, n, E, q8_tmp);
  // Router logits, then (decode) the pairs' hidden and output rows: scratch at fixed
  // addresses (a recorded step reuses them); slot 8 is this op's alone.
  const auto pad = [](int64_t f) { return (f + 63) / 64 * 64; };
  const int64_t tmp_floats = pad(n * X) + (q8 ? pad(pairs * F) + pad(pairs * E) : 0);
  auto* logits = static_cast<float*>(rt_.scratch(8, sizeof(float) * static_cast<size_t>(tmp_floats), "moe_ffn"));
  matmul(*L.router, x, n, logits);
  const size_t route_bytes = (static_cast<size_t>(pairs) * 8 + 255) / 256 * 256;
  auto* route = static_cast<uint8_t*>(rt_.scratch(
      6, route_bytes + (group ? q8_moe_group_bytes(pairs, static_cast<int>(XS)) : 0), "moe_ffn"));
  auto* ids = reinterpret_cast<int32_t*>(route);
  auto* wts = reinterpret_cast<float*>(route + static_cast<size_t>(pairs) * 4);
  void* groups = group ? route + route_bytes : nullptr;
  const void* sh_gate = shared ? L.shared_gate->backend_data : nullptr;
  const void* sh_up = shared ? L.shared_up->backend_data : nullptr;
  const void* sh_down = shared ? L.shared_down->backend_data : nullptr;
  const float* sh_inp = shared && L.shared_inp != nullptr ? static_cast<const float*>(L.shared_inp->backend_data)
                                                          : nullptr;
  // After (decode): the norm's output quantized for the product after it (as add_rms_norm does).
  const float* norm_w = after != nullptr ? f32_values(*after->norm, E, "moe_ffn") : nullptr;
  if (norm_w != nullptr && (reinterpret_cast<uintptr_t>(norm_w) & 15) != 0) {
    fail(ErrorKind::kInternal, "cuda", "moe_ffn: norm weight values not 16-byte aligned");
  }
  void* norm_q8 = after != nullptr ? q8_ready_scratch(after->out, n, E) : nullptr;
  if (rt_.skip_launch()) {
    return;
  }
  const SharedSlot slot{shared, x, sh_inp, E};
  ::hearth::cuda::launch_pdl(moe_route_kernel, static_cast<unsigned>(n), 32, 0, stream_, logits, static_cast<int>(X),
                             static_cast<int>(K), L.norm_weights, ids, wts, slot);
  HEARTH_CUDA_LAUNCHED("moe_ffn");
  if (q8) {
    float* h = logits + pad(n * X);
    float* y = h + pad(pairs * F);
    if (group) {
      q8_moe_group(ids, pairs, static_cast<int>(XS), groups, stream_);
      HEARTH_CUDA_LAUNCHED("moe_ffn");
    }
    if (mma) {
      q8_moe_mma_gate_up(device_weight(*L.gate, "moe_ffn"), device_weight(*L.up, "moe_ffn"), F, n,
                         static_cast<int>(KS), x, h, q8_tmp, q8_bytes, stream_, groups, static_cast<int>(XS), sh_gate,
                         sh_up);
      HEARTH_CUDA_LAUNCHED("moe_ffn");
      q8_moe_mma_down(device_weight(*L.down, "moe_ffn"), E, pairs, h, y, q8_tmp, q8_bytes, stream_, groups,
                      static_cast<int>(XS), sh_down);
    } else {
      q8_moe_gate_up(device_weight(*L.gate, "moe_ffn"), device_weight(*L.up, "moe_ffn"), F, ids, n,
                     static_cast<int>(KS), x, h, q8_tmp, q8_bytes, stream_, groups, static_cast<int>(XS), sh_gate,
                     sh_up, x_ready);
      HEARTH_CUDA_LAUNCHED("moe_ffn");
      q8_moe_down(device_weight(*L.down, "moe_ffn"), E, ids, pairs, h, y, q8_tmp, q8_bytes, stream_, groups,
                  static_cast<int>(XS), sh_down);
    }
    HEARTH_CUDA_LAUNCHED("moe_ffn");
    if (after != nullptr) {
      launch_add_rms_norm(after->x_res, out, norm_w, n, E, after->eps, after->out, norm_q8, y, wts,
                          static_cast<int>(KS), out);
    } else {
      ::hearth::cuda::launch_pdl(moe_combine_kernel, grid_for(n * E), kThreads, 0, stream_, y, nullptr, wts, n,
                                 static_cast<int>(KS), E, out);
    }
    HEARTH_CUDA_LAUNCHED("moe_ffn");
    return;
  }
  moe_routed_on_host(L, x, n, ids, wts, out, timer);
}

void CudaBackend::moe_routed_on_host(const ops::MoeLayer& L, const float* x, int64_t n, const int32_t* ids,
                                     const float* wts, float* out, OpTimer& timer) {
  const int64_t X = L.n_expert, K = L.n_used, E = L.n_embd, F = L.n_ff;
  // Many tokens: the routing to the host, then each used expert over its tokens.
  std::vector<int32_t> h_ids(static_cast<size_t>(n * K));
  std::vector<float> h_w(static_cast<size_t>(n * K));
  rt_.flush_capture();  // pageable host memory: not in a graph
  HEARTH_CUDA_CHECK("moe_ffn", cudaMemcpyAsync(h_ids.data(), ids, 4 * h_ids.size(), cudaMemcpyDeviceToHost, stream_));
  HEARTH_CUDA_CHECK("moe_ffn", cudaMemcpyAsync(h_w.data(), wts, 4 * h_w.size(), cudaMemcpyDeviceToHost, stream_));
  rt_.wait("moe_ffn");
  if (!deterministic_ && grouped_moe_ok(L)) {
    timer.rename("moe_ffn grouped");
    moe_grouped(L, x, n, h_ids, h_w, out);
    return;
  }
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(X));
  std::vector<std::vector<float>> token_w(static_cast<size_t>(X));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = h_ids[t * K + k];
      tokens[e].push_back(static_cast<int32_t>(t));
      token_w[e].push_back(h_w[t * K + k]);
    }
  }
  fill(out, 0.0f, n * E);
  auto xs = alloc(n * E), gate = alloc(n * F), up = alloc(n * F), down = alloc(n * E);
  for (int64_t e = 0; e < X; ++e) {
    const auto m = static_cast<int64_t>(tokens[e].size());
    if (m == 0) continue;
    gather_rows(x, E, tokens[e].data(), m, xs->data());
    const ops::WeightView g = expert_slice(*L.gate, F, e), u = expert_slice(*L.up, F, e);
    const ops::WeightView* gu[] = {&g, &u};
    float* gu_out[] = {gate->data(), up->data()};
    matmul_multi(gu, 2, xs->data(), m, gu_out);
    swiglu(gate->data(), up->data(), m * F, gate->data());
    matmul(expert_slice(*L.down, E, e), gate->data(), m, down->data());
    scatter_add_rows(down->data(), E, tokens[e].data(), token_w[e].data(), m, out);
  }
}

bool CudaBackend::grouped_moe_ok(const ops::MoeLayer& L) const {
  return quant_gemm_supported(L.gate->type) && quant_gemm_supported(L.up->type) &&
         quant_gemm_supported(L.down->type) && L.n_embd % 32 == 0 && L.n_ff % 32 == 0;
}

void CudaBackend::moe_grouped(const ops::MoeLayer& L, const float* x, int64_t n, const std::vector<int32_t>& ids,
                              const std::vector<float>& wts, float* out) {
  const int64_t X = L.n_expert, K = L.n_used, E = L.n_embd, F = L.n_ff, P = n * K;
  // Pairs sorted by expert (tokens in order within an expert); pos: a pair's place.
  std::vector<int32_t> count(static_cast<size_t>(X), 0), start(static_cast<size_t>(X), 0);
  for (int32_t e : ids) ++count[e];
  int max_count = 0;
  for (int64_t e = 1; e < X; ++e) start[e] = start[e - 1] + count[e - 1];
  for (int64_t e = 0; e < X; ++e) max_count = std::max(max_count, count[e]);
  std::vector<int32_t> tok(static_cast<size_t>(P)), pos(static_cast<size_t>(P));
  std::vector<int32_t> next = start;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = ids[t * K + k];
      pos[t * K + k] = next[e];
      tok[next[e]++] = static_cast<int32_t>(t);
    }
  }
  // Tiles of up to `bn` pairs of one expert.
  const int bn = max_count <= 16 ? 16 : max_count <= 32 ? 32 : 64;
  std::vector<ExpertTile> tiles;
  for (int64_t e = 0; e < X; ++e) {
    for (int32_t f = 0; f < count[e]; f += bn) {
      tiles.push_back(ExpertTile{static_cast<int32_t>(e), start[e] + f, std::min(bn, count[e] - f)});
    }
  }
  const ExpertTile* d_tiles = rt_.stage_array(tiles.data(), static_cast<int64_t>(tiles.size()), "moe_ffn");
  const int32_t* d_pos = rt_.stage_array(pos.data(), P, "moe_ffn");
  const float* d_w = rt_.stage_array(wts.data(), P, "moe_ffn");
  auto xs = alloc(P * E), g = alloc(P * F), u = alloc(P * F), y = alloc(P * E);
  gather_rows(x, E, tok.data(), P, xs->data());
  const DeviceWeight dg = device_weight(*L.gate, "moe_ffn"), du = device_weight(*L.up, "moe_ffn"), dd = device_weight(*L.down, "moe_ffn");
  const size_t bytes = std::max(quant_gemm_grouped_scratch_bytes(dg, P), quant_gemm_grouped_scratch_bytes(dd, P));
  void* s = rt_.scratch(5, bytes, "moe_ffn");
  const int nt = static_cast<int>(tiles.size());
  quant_gemm_grouped(dg, F, d_tiles, nt, bn, xs->data(), P, g->data(), s, bytes, stream_);
  quant_gemm_grouped(du, F, d_tiles, nt, bn, xs->data(), P, u->data(), s, bytes, stream_);
  HEARTH_CUDA_LAUNCHED("moe_ffn");
  swiglu(g->data(), u->data(), P * F, g->data());
  quant_gemm_grouped(dd, E, d_tiles, nt, bn, g->data(), P, y->data(), s, bytes, stream_);
  HEARTH_CUDA_LAUNCHED("moe_ffn");
  ::hearth::cuda::launch_pdl(moe_combine_kernel, grid_for(n * E), kThreads, 0, stream_, y->data(), d_pos, d_w, n, static_cast<int>(K), E, out);
  HEARTH_CUDA_LAUNCHED("moe_ffn");
}

}  // namespace hearth::cuda

// CpuBackend operations of Gated DeltaNet layers (Qwen3.5, Qwen3-Next): the causal
// conv with its state, the gated delta rule (recurrent step for single tokens, the
// chunked form, chunks of 64, for prompts: linear in their length), the gated RMSNorm
// and the sigmoid gate. The plain double-precision oracle is ops/gated_deltanet_ref.h;
// tests/unit/backend_gdn_test.cpp compares these with it.
//
// Work split: the q/k normalisation and the gates are computed once per token and
// key/value head (parallel over tokens); the recurrence runs one task per (sequence,
// value head, slice of d_v columns: prompts only, see gdn_slices), each with its own
// part of the state, so tasks never share memory they write. Everything is f32 with
// sums in the order written (no fused multiply-adds). The kernels are gdn_kernels.h's,
// reached through the back-end's kernel table (kernel_table.h): the plain builds here,
// the instruction-set ones (the recurrent step vectorised, the chunked form on register
// tiles: gdn_x86.cpp, gdn_neon.cpp) with the plain builds' bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/gdn_kernels.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernel_table.h"
#include "core/error.h"

namespace hearth::cpu {
namespace {

using gdn::HeadTask;
using gdn::kChunk;

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

const float* f32_weight(const ops::WeightView& w, int64_t n, const char* what) {
  if (w.type != GgmlType::F32 || w.n_cols * w.n_rows != n) {
    fail(ErrorKind::kInvalidInput, "cpu",
         std::string(what) + " '" + w.name + "' must be F32 with " + std::to_string(n) + " values");
  }
  return static_cast<const float*>(w.data);
}

// How many d_v slices each prompt head's task is split into: the fewest (rounds of tasks
// over the threads + 1) times one task's work, the slice-independent part (the dot
// products and W, about 1.5 L^2 dk per chunk, done by every slice) plus its share of the
// rest (L^2 + 3 L dk per column). The + 1 stands for the tail (threads start and run at
// different speeds): on the 16-core Xeon, 32 heads run faster as 64 half-heads, 8
// threads faster with whole heads. Slices stay multiples of 16 columns.
int64_t gdn_slices(int64_t prompt_heads, int64_t threads, int64_t dk, int64_t dv) {
  if (prompt_heads <= 0 || threads <= 1) return 1;
  const double L = static_cast<double>(kChunk);
  const double shared = 1.5 * L * L * static_cast<double>(dk);
  const double per_col = L * L + 3.0 * L * static_cast<double>(dk);
  int64_t best = 1;
  double best_cost = 0.0;
  for (int64_t s = 1; s <= 8; s *= 2) {
    if (dv % (16 * s) != 0) break;
    const double rounds = static_cast<double>((prompt_heads * s + threads - 1) / threads + 1);
    const double cost = rounds * (shared + per_col * static_cast<double>(dv) / static_cast<double>(s));
    if (s == 1 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// This back-end runs the rows of a step with snapshots in passes (gdn_snapshots() is
// false): snapshots given to it are a caller's mistake.
void no_snapshots(const ops::GdnStates& states, const char* op) {
  if (states.n_snaps != 0) {
    fail(ErrorKind::kInternal, "cpu", std::string(op) + ": given " + std::to_string(states.n_snaps) +
                                          " state snapshots (this back-end takes none; the model runs passes)");
  }
}

}  // namespace

// The plain builds of the kernel table's SiLU and recurrent step (the SIMD builds give
// their bits).
void silu_row_plain(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ggml_order::silu_one(x[i]);
}
void gdn_recurrent_plain(const gdn::HeadTask& t, std::vector<float>& tmp) { gdn::recurrent_head<false>(t, tmp); }

void CpuBackend::ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w,
                               const ops::GdnStates& states, const ops::GdnSeq* seqs, int64_t n_seqs, float* out) {
  const OpScope timer(op_times_.get(), "ssm_conv_silu");
  no_snapshots(states, "ssm_conv_silu");
  const int64_t K = w.n_cols;
  if (w.type != GgmlType::F32 || w.n_rows != channels || K < 1) {
    fail(ErrorKind::kInvalidInput, "cpu", "conv weight '" + w.name + "' must be F32 [" + std::to_string(channels) +
                                              " rows of kernel taps]");
  }
  const auto* wt = static_cast<const float*>(w.data);
  const int64_t hist = K - 1;
  const auto silu_row = kernels_->silu_row;
  // One pass over channel ranges, every sequence inside (a decode step of many
  // sequences is one parallel call, not one per sequence).
  pool_.parallel_for(channels, 64, [&](int64_t begin, int64_t end, int) {
    const int64_t nc = end - begin;
    std::vector<float> taps(static_cast<size_t>(K * nc));  // [K, nc] the range's weights by tap
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t i = 0; i < K; ++i) taps[i * nc + c] = wt[(begin + c) * K + i];
    std::vector<const float*> rows(static_cast<size_t>(K));
    for (int64_t s = 0; s < n_seqs; ++s) {
      const ops::GdnSeq& q = seqs[s];
      const float* xs = x + q.first_row * channels;
      float* os = out + q.first_row * channels;
      const int64_t n = q.n_tokens;
      float* conv_state = states.conv + q.state_slot * states.slot_stride;
      // Row r of the state-prefixed sequence: r < hist from the state, else x.
      auto in_row = [&](int64_t r) { return r < hist ? conv_state + r * channels : xs + (r - hist) * channels; };
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < K; ++i) rows[i] = in_row(t + i) + begin;
        float* o = os + t * channels + begin;
        // acc = w_0 in_0 + w_1 in_1 + ... from 0, tap by tap (the same sums per channel).
        std::fill(o, o + nc, 0.0f);
        for (int64_t i = 0; i < K; ++i) {
          const float* tw = taps.data() + i * nc;
          const float* in = rows[i];
          for (int64_t c = 0; c < nc; ++c) o[c] += tw[c] * in[c];
        }
        silu_row(o, nc);
      }
      // The new state: the last hist rows of the prefixed input (read before written:
      // row r of the new state comes from prefixed row n + r >= r).
      for (int64_t r = 0; r < hist; ++r) {
        const float* src = in_row(n + r);
        for (int64_t c = begin; c < end; ++c) conv_state[r * channels + c] = src[c];
      }
    }
  });
}

void CpuBackend::gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                                 const ops::WeightView& dt_bias, const ops::GdnShape& sh,
                                 const ops::GdnStates& states, const ops::GdnSeq* seqs, int64_t n_seqs, float* o) {
  const OpScope timer(op_times_.get(), "gated_delta_net");
  no_snapshots(states, "gated_delta_net");
  const int64_t hk = sh.n_k_heads, hv = sh.n_v_heads, dk = sh.d_k, dv = sh.d_v;
  if (hk <= 0 || hv % hk != 0) fail(ErrorKind::kInvalidInput, "cpu", "value heads must be a multiple of key heads");
  const float* A = f32_weight(ssm_a, hv, "ssm_a");
  const float* dt = f32_weight(dt_bias, hv, "ssm_dt");
  const int64_t C = sh.conv_channels(), kd = sh.key_dim(), row = 2 * kd;
  int64_t n = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n = std::max<int64_t>(n, seqs[s].first_row + seqs[s].n_tokens);
  // Normalised q and k, v, and the gates, head by head ([head, token, d] and [head,
  // token]): a task's rows are then contiguous (the token-major input puts a head's
  // rows a whole conv row apart, which the prefetchers do not follow).
  gdn_qk_.resize(static_cast<size_t>(n * (row + sh.value_dim())));
  gdn_gates_.resize(static_cast<size_t>(2 * n * hv));
  float* qh = gdn_qk_.data();  // [hk, n, dk]
  float* kh = qh + n * kd;     // [hk, n, dk]
  float* vh = kh + n * kd;     // [hv, n, dv]
  float* g = gdn_gates_.data();  // [hv, n]
  float* beta = g + n * hv;      // [hv, n]
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  {
    const OpScope prepare_timer(op_times_.get(), "gdn q/k norm, gates");
    pool_.parallel_for(n, 4, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t hh = 0; hh < 2 * hk; ++hh) {  // q heads then k heads
          const float* src = qkv + t * C + hh * dk;
          float* dst = hh < hk ? qh + (hh * n + t) * dk : kh + ((hh - hk) * n + t) * dk;
          float ss = 0.0f;
          for (int64_t i = 0; i < dk; ++i) ss += src[i] * src[i];
          const float inv = 1.0f / std::sqrt(ss + sh.l2_eps) * (hh < hk ? scale : 1.0f);
          for (int64_t i = 0; i < dk; ++i) dst[i] = src[i] * inv;
        }
        for (int64_t h = 0; h < hv; ++h) {
          const float* src = qkv + t * C + 2 * kd + h * dv;
          std::copy(src, src + dv, vh + (h * n + t) * dv);
          g[h * n + t] = A[h] * softplus(a[t * hv + h] + dt[h]);
          beta[h * n + t] = sigmoid(b[t * hv + h]);
        }
      }
    });
  }
  const int64_t ratio = hv / hk;
  // The tiled prompt kernel splits a head's columns over tasks; the plain one takes whole heads.
  const KernelTable& kt = *kernels_;
  const bool tiled = kt.gdn_chunked != nullptr;
  int64_t prompt_heads = 0;
  for (int64_t s = 0; s < n_seqs; ++s) prompt_heads += seqs[s].n_tokens > 1 ? hv : 0;
  const int64_t slices = tiled ? gdn_slices(prompt_heads, pool_.n_threads(), dk, dv) : 1;
  const int64_t per_seq = hv * slices;
  gdn_scratch_.resize(static_cast<size_t>(pool_.n_threads()));
  const OpScope heads_timer(op_times_.get(), "gdn heads");
  pool_.parallel_for(n_seqs * per_seq, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t task = begin; task < end; ++task) {
      const ops::GdnSeq& sq = seqs[task / per_seq];
      const int64_t h = task % per_seq / slices, slice = task % slices;
      if (sq.n_tokens <= 0 || (sq.n_tokens == 1 && slice != 0)) continue;
      const int64_t khead = sh.v_tiled ? h % hk : h / ratio;
      const int64_t r0 = sq.first_row;
      const HeadTask t{qh + (khead * n + r0) * dk,
                       kh + (khead * n + r0) * dk,
                       vh + (h * n + r0) * dv,
                       g + h * n + r0,
                       beta + h * n + r0,
                       states.ssm + sq.state_slot * states.slot_stride + h * dk * dv,
                       o + r0 * sh.value_dim() + h * dv,
                       sq.n_tokens, dk, dv, sh.value_dim(), 1, dk, dv};
      std::vector<float>& buf = gdn_scratch_[static_cast<size_t>(thread)];
      if (sq.n_tokens == 1) {
        kt.gdn_recurrent(t, buf);
      } else if (!tiled) {
        [[maybe_unused]] const FlushSubnormals ftz;
        gdn::chunked_head<false>(t, buf);
      } else {
        [[maybe_unused]] const FlushSubnormals ftz;
        const int64_t y0 = dv * slice / slices, y1 = dv * (slice + 1) / slices;
        kt.gdn_chunked(t, y0, y1, buf);
      }
    }
  });
}

void CpuBackend::gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                                float eps, int64_t /*rows_per_token*/) {
  const OpScope timer(op_times_.get(), "gated_rms_norm");
  const float* wt = f32_weight(w, n, "gated norm weight");
  pool_.parallel_for(n_rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      float* xr = x + r * n;
      const float* zr = z + r * n;
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) xr[i] = xr[i] * inv * wt[i] * silu(zr[i]);
    }
  });
}

void CpuBackend::sigmoid_mul(float* x, const float* gate, int64_t n) {
  const OpScope timer(op_times_.get(), "sigmoid_mul");
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) x[i] *= sigmoid(gate[i]);
  });
}

void CpuBackend::sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) {
  const OpScope timer(op_times_.get(), "sigmoid_scale_rows");
  pool_.parallel_for(n_rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n_cols, 1)),
                     [&](int64_t begin, int64_t end, int) {
                       for (int64_t r = begin; r < end; ++r) {
                         const float s = sigmoid(gate[r]);
                         float* xr = x + r * n_cols;
                         for (int64_t c = 0; c < n_cols; ++c) xr[c] *= s;
                       }
                     });
}

}  // namespace hearth::cpu

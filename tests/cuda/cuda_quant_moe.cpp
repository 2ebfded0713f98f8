// cuda_quant_test: the routed experts' decode products (q8_moe_gate_up, q8_moe_down) with
// the pairs grouped by expert on the device (q8_moe_group) against the same products pair
// by pair: every output the same bits, for rows of 4 to 128 units (the grouped kernel's
// lane widths 4 / 8 / 16 / 32, two units a lane, and the rows it leaves to the per-pair
// kernel), experts chosen by one pair up to 40, more than 256 experts, and the per-pair
// outputs within kMatvecTol of the exact product with the quantized activations. Where the
// int8 tensor-core expert kernels (q8_moe_mma_*) take the shapes: their outputs against the
// exact products with Q8_K activations, a pair's outputs the same bits in half the batch,
// and the down rows staged whole or step by step the same bits.
#include <cstring>

#include "q8_ref.h"
#include "quant_test_common.h"
#include "core/tune.h"

namespace quant_test {
namespace {

struct MoeCase {
  GgmlType gate_type, down_type;
  int64_t n_embd, n_ff, n_expert, n_tokens;
  int n_used;
  bool crowd;  // one expert taken by most tokens (several passes of eight pairs)
};

std::vector<uint32_t> bits_of(const float* d, size_t n) {
  std::vector<float> v(n);
  CUDA_OK(cudaMemcpy(v.data(), d, sizeof(float) * n, cudaMemcpyDeviceToHost));
  std::vector<uint32_t> b(n);
  std::memcpy(b.data(), v.data(), sizeof(float) * n);
  return b;
}

// The tensor-core form (q8_moe_mma_*): gate / up outputs against silu(g) u of the exact
// products with the tokens as Q8_K, down outputs against the exact product with h as Q8_K
// (h_in: the dp4a kernels' per-pair h, the same input for both), and a pair's outputs the
// same bits when only the first half of the tokens is the batch.
void run_mma_case(const std::string& tag0, const MoeCase& c, const std::vector<int32_t>& ids,
                  const std::vector<float>& x, const hearth::cuda::DeviceWeight& gate,
                  const hearth::cuda::DeviceWeight& up, const hearth::cuda::DeviceWeight& down, const int32_t* d_ids,
                  const float* d_x, const float* h_in, cudaStream_t stream, Failures& fails) {
  using namespace hearth::cuda;
  const std::string tag = tag0 + " tensor cores";
  const int64_t X = c.n_expert, E = c.n_embd, F = c.n_ff, n = c.n_tokens, P = n * c.n_used;
  const size_t sb = std::max(q8_moe_mma_scratch_bytes(E, n), q8_moe_mma_scratch_bytes(F, P));
  void *d_s = nullptr, *d_groups = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb));
  CUDA_OK(cudaMalloc(&d_groups, q8_moe_group_bytes(P, static_cast<int>(X))));
  float *h[2], *y[2];
  for (int b = 0; b < 2; ++b) {
    CUDA_OK(cudaMalloc(&h[b], sizeof(float) * P * F));
    CUDA_OK(cudaMalloc(&y[b], sizeof(float) * P * E));
    CUDA_OK(cudaMemsetAsync(h[b], 0xff, sizeof(float) * P * F, stream));
    CUDA_OK(cudaMemsetAsync(y[b], 0xff, sizeof(float) * P * E, stream));
  }
  // b = 0: the whole batch; b = 1: its first half of the tokens (their pairs first).
  for (int b = 0; b < 2; ++b) {
    const int64_t nb = b == 0 ? n : std::max<int64_t>(1, n / 2), pb = nb * c.n_used;
    q8_moe_group(d_ids, pb, static_cast<int>(X), d_groups, stream);
    q8_moe_mma_gate_up(gate, up, F, nb, c.n_used, d_x, h[b], d_s, sb, stream, d_groups, static_cast<int>(X));
    q8_moe_mma_down(down, E, pb, h_in, y[b], d_s, sb, stream, d_groups, static_cast<int>(X));
    check_launch(stream);
  }
  // The down products again with every row tile staged step by step (the whole-row-tile
  // kernel off): the same bits.
  float* y_steps = nullptr;
  CUDA_OK(cudaMalloc(&y_steps, sizeof(float) * P * E));
  q8_moe_group(d_ids, P, static_cast<int>(X), d_groups, stream);
  {
    hearth::tune::Override rows_off(hearth::tune::kCudaMoeMmaRows, 0);
    q8_moe_mma_down(down, E, P, h_in, y_steps, d_s, sb, stream, d_groups, static_cast<int>(X));
  }
  check_launch(stream);
  const int64_t p_half = std::max<int64_t>(1, n / 2) * c.n_used;
  const auto h0 = bits_of(h[0], static_cast<size_t>(P * F)), h1 = bits_of(h[1], static_cast<size_t>(P * F));
  const auto y0 = bits_of(y[0], static_cast<size_t>(P * E)), y1 = bits_of(y[1], static_cast<size_t>(P * E));
  int64_t dh = 0, dy = 0;
  for (int64_t i = 0; i < p_half * F; ++i) dh += h0[i] != h1[i];
  for (int64_t i = 0; i < p_half * E; ++i) dy += y0[i] != y1[i];
  if (dh != 0 || dy != 0) {
    fails.add(tag + ": half the batch differs from the whole in " + std::to_string(dh) + " gate/up and " +
              std::to_string(dy) + " down outputs");
  }
  const auto ys = bits_of(y_steps, static_cast<size_t>(P * E));
  int64_t dsteps = 0;
  for (size_t i = 0; i < ys.size(); ++i) dsteps += ys[i] != y0[i];
  if (dsteps != 0) fails.add(tag + ": down staged step by step differs in " + std::to_string(dsteps) + " outputs");
  CUDA_OK(cudaFree(y_steps));
  std::vector<float> hv(static_cast<size_t>(P * F)), yv(static_cast<size_t>(P * E)), hin(static_cast<size_t>(P * F));
  std::memcpy(hv.data(), h0.data(), sizeof(float) * hv.size());
  std::memcpy(yv.data(), y0.data(), sizeof(float) * yv.size());
  CUDA_OK(cudaMemcpy(hin.data(), h_in, sizeof(float) * hin.size(), cudaMemcpyDeviceToHost));
  const std::vector<double> xq = q8k_values(x), hq = q8k_values(hin);
  auto host_bytes = [](const DeviceWeight& w) {
    std::vector<uint8_t> v(static_cast<size_t>(w.row_bytes * w.n_rows));
    CUDA_OK(cudaMemcpy(v.data(), w.data, v.size(), cudaMemcpyDeviceToHost));
    return v;
  };
  const std::vector<uint8_t> gb = host_bytes(gate), ub = host_bytes(up), db = host_bytes(down);
  std::vector<float> rg(static_cast<size_t>(E)), ru(static_cast<size_t>(E)), rd(static_cast<size_t>(F));
  double worst = 0;
  for (int64_t p = 0; p < P; p += std::max<int64_t>(1, P / 7)) {
    const int64_t e = ids[p], t = p / c.n_used;
    for (int64_t r = 0; r < F; r += 37) {
      hearth::dequantize_row_ref(gate.type, gb.data() + (e * F + r) * gate.row_bytes, rg.data(), E);
      hearth::dequantize_row_ref(up.type, ub.data() + (e * F + r) * up.row_bytes, ru.data(), E);
      double g = 0, u = 0, mg = 0, mu = 0;
      for (int64_t k = 0; k < E; ++k) {
        g += rg[k] * xq[t * E + k];
        u += ru[k] * xq[t * E + k];
        mg += std::fabs(rg[k] * xq[t * E + k]);
        mu += std::fabs(ru[k] * xq[t * E + k]);
      }
      const double ref = g / (1 + std::exp(-g)) * u;
      const double tol = 1.2 * kMatvecTol * (mg * std::fabs(u) + mu * (std::fabs(g) + 1));
      const double err = std::fabs(hv[p * F + r] - ref);
      worst = std::max(worst, err / (tol + 1e-30));
      if (!(err <= tol)) {
        fails.add(tag + ": gate/up pair " + std::to_string(p) + " row " + std::to_string(r) + " got " +
                  std::to_string(hv[p * F + r]) + " want " + std::to_string(ref));
        r = F;
        p = P;
      }
    }
    for (int64_t r = 0; r < E; r += 97) {
      hearth::dequantize_row_ref(down.type, db.data() + (e * E + r) * down.row_bytes, rd.data(), F);
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < F; ++k) {
        ref += rd[k] * hq[p * F + k];
        mag += std::fabs(rd[k] * hq[p * F + k]);
      }
      const double err = std::fabs(yv[p * E + r] - ref);
      worst = std::max(worst, err / (kMatvecTol * mag + 1e-30));
      if (!(err <= kMatvecTol * mag)) {
        fails.add(tag + ": down pair " + std::to_string(p) + " row " + std::to_string(r) + " got " +
                  std::to_string(yv[p * E + r]) + " want " + std::to_string(ref));
        r = E;
        p = P;
      }
    }
  }
  std::printf("  %s: worst error %.3f of the tolerance, half batch same bits: %s, row tiles whole / by step "
              "same bits: %s\n",
              tag.c_str(), worst, dh == 0 && dy == 0 ? "yes" : "no", dsteps == 0 ? "yes" : "no");
  for (int b = 0; b < 2; ++b) {
    CUDA_OK(cudaFree(h[b]));
    CUDA_OK(cudaFree(y[b]));
  }
  CUDA_OK(cudaFree(d_s));
  CUDA_OK(cudaFree(d_groups));
}

void run_moe_case(const MoeCase& c, std::mt19937_64& rng, cudaStream_t stream, Failures& fails) {
  using namespace hearth::cuda;
  const std::string tag = "moe " + type_name(c.gate_type) + "/" + type_name(c.down_type) + " E" +
                          std::to_string(c.n_embd) + " F" + std::to_string(c.n_ff) + " X" +
                          std::to_string(c.n_expert) + " n" + std::to_string(c.n_tokens);
  const int64_t X = c.n_expert, E = c.n_embd, F = c.n_ff, n = c.n_tokens, P = n * c.n_used;
  auto weight = [&](GgmlType t, int64_t rows, int64_t cols) {
    const std::vector<uint8_t> w = make_weights(t, rows, cols, false, rng);
    return DeviceWeight{t, device_copy(w), rows, cols, row_bytes_of(t, cols)};
  };
  const DeviceWeight gate = weight(c.gate_type, X * F, E), up = weight(c.gate_type, X * F, E);
  const DeviceWeight down = weight(c.down_type, X * E, F);
  // Each token's n_used distinct experts; with crowd, expert X - 1 is every token's first.
  std::vector<int32_t> ids(static_cast<size_t>(P));
  for (int64_t t = 0; t < n; ++t) {
    for (int k = 0; k < c.n_used; ++k) {
      int32_t e;
      bool dup;
      do {
        e = (c.crowd && k == 0) ? static_cast<int32_t>(X - 1) : static_cast<int32_t>(rng() % X);
        dup = false;
        for (int j = 0; j < k; ++j) dup = dup || ids[t * c.n_used + j] == e;
      } while (dup);
      ids[t * c.n_used + k] = e;
    }
  }
  std::vector<float> x(static_cast<size_t>(n * E));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : x) v = ud(rng);
  int32_t* d_ids = device_copy(ids);
  float* d_x = device_copy(x);
  const size_t sb = std::max(q8_scratch_bytes(E, n), q8_scratch_bytes(F, P));
  void *d_s = nullptr, *d_groups = nullptr;
  CUDA_OK(cudaMalloc(&d_s, sb));
  CUDA_OK(cudaMalloc(&d_groups, q8_moe_group_bytes(P, static_cast<int>(X))));
  float *h[2], *y[2];
  for (int g = 0; g < 2; ++g) {
    CUDA_OK(cudaMalloc(&h[g], sizeof(float) * P * F));
    CUDA_OK(cudaMalloc(&y[g], sizeof(float) * P * E));
    CUDA_OK(cudaMemsetAsync(h[g], 0xff, sizeof(float) * P * F, stream));
    CUDA_OK(cudaMemsetAsync(y[g], 0xff, sizeof(float) * P * E, stream));
  }
  // Pair by pair (g = 0), then grouped (g = 1); the down products both take the per-pair h.
  for (int g = 0; g < 2; ++g) {
    const void* groups = g == 1 ? d_groups : nullptr;
    if (g == 1) q8_moe_group(d_ids, P, static_cast<int>(X), d_groups, stream);
    q8_moe_gate_up(gate, up, F, d_ids, n, c.n_used, d_x, h[g], d_s, sb, stream, groups, static_cast<int>(X));
    q8_moe_down(down, E, d_ids, P, h[0], y[g], d_s, sb, stream, groups, static_cast<int>(X));
    check_launch(stream);
  }
  const auto h0 = bits_of(h[0], static_cast<size_t>(P * F)), h1 = bits_of(h[1], static_cast<size_t>(P * F));
  const auto y0 = bits_of(y[0], static_cast<size_t>(P * E)), y1 = bits_of(y[1], static_cast<size_t>(P * E));
  int64_t dh = 0, dy = 0;
  for (size_t i = 0; i < h0.size(); ++i) dh += h0[i] != h1[i];
  for (size_t i = 0; i < y0.size(); ++i) dy += y0[i] != y1[i];
  if (dh != 0 || dy != 0) {
    fails.add(tag + ": grouped differs from pair by pair in " + std::to_string(dh) + " gate/up and " +
              std::to_string(dy) + " down outputs");
  }
  // The per-pair down outputs of a few pairs against the exact product with the quantized h.
  std::vector<float> hv(static_cast<size_t>(P * F)), yv(static_cast<size_t>(P * E));
  std::memcpy(hv.data(), h0.data(), sizeof(float) * hv.size());
  std::memcpy(yv.data(), y0.data(), sizeof(float) * yv.size());
  const std::vector<double> hq = q8_values(hv);
  const uint64_t rb = row_bytes_of(c.down_type, F);
  std::vector<uint8_t> dbytes(static_cast<size_t>(rb * X * E));
  CUDA_OK(cudaMemcpy(dbytes.data(), down.data, dbytes.size(), cudaMemcpyDeviceToHost));
  std::vector<float> row(static_cast<size_t>(F));
  for (int64_t p = 0; p < P; p += std::max<int64_t>(1, P / 5)) {
    const int64_t e = ids[p];
    for (int64_t r = 0; r < E; r += 97) {
      hearth::dequantize_row_ref(c.down_type, dbytes.data() + (e * E + r) * rb, row.data(), F);
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < F; ++k) {
        ref += row[k] * hq[p * F + k];
        mag += std::fabs(row[k] * hq[p * F + k]);
      }
      if (!(std::fabs(yv[p * E + r] - ref) <= kMatvecTol * mag)) {
        fails.add(tag + ": down pair " + std::to_string(p) + " row " + std::to_string(r) + " got " +
                  std::to_string(yv[p * E + r]) + " want " + std::to_string(ref));
        r = E;
        p = P;
      }
    }
  }
  if (q8_moe_mma_supported(c.gate_type, E, gate.row_bytes) && q8_moe_mma_supported(c.down_type, F, down.row_bytes)) {
    run_mma_case(tag, c, ids, x, gate, up, down, d_ids, d_x, h[0], stream, fails);
  }
  for (int g = 0; g < 2; ++g) {
    CUDA_OK(cudaFree(h[g]));
    CUDA_OK(cudaFree(y[g]));
  }
  for (const DeviceWeight* w : {&gate, &up, &down}) CUDA_OK(cudaFree(const_cast<void*>(w->data)));
  CUDA_OK(cudaFree(d_s));
  CUDA_OK(cudaFree(d_groups));
  CUDA_OK(cudaFree(d_ids));
  CUDA_OK(cudaFree(d_x));
}

}  // namespace

void run_moe_group_cases(std::mt19937_64& rng, cudaStream_t stream, Failures& fails) {
  const MoeCase cases[] = {
      // The 35B-A3B's shape: gate/up 32 units a row, down 8.
      {GgmlType::Q4_K, GgmlType::Q6_K, 2048, 512, 256, 64, 8, false},
      {GgmlType::Q4_K, GgmlType::Q6_K, 2048, 512, 256, 16, 8, false},
      {GgmlType::Q4_K, GgmlType::Q6_K, 256, 1024, 16, 40, 4, true},   // 4 and 16 units; 40 pairs of one expert
      {GgmlType::Q5_K, GgmlType::Q4_K, 4096, 256, 8, 12, 2, false},   // 64 units (two a lane) and 4
      {GgmlType::Q4_K, GgmlType::Q6_K, 8192, 768, 4, 9, 2, true},     // 128 units: left to the per-pair kernel
      {GgmlType::Q8_0, GgmlType::Q4_0, 512, 256, 300, 33, 6, false},  // more than 256 experts
      {GgmlType::Q4_1, GgmlType::Q5_0, 1024, 512, 32, 64, 32, false}, // 2,048 pairs
      {GgmlType::Q4_K, GgmlType::Q6_K, 2048, 512, 512, 1, 8, false},
      // A Q3_K_M-like file's experts (Q3_K gate / up, Q4_K down) and Q2_K.
      {GgmlType::Q3_K, GgmlType::Q4_K, 2048, 512, 256, 64, 8, false},
      {GgmlType::Q2_K, GgmlType::Q3_K, 2048, 512, 64, 24, 8, false},
      // The tensor-core expert kernels' other forms: Q4_K down rows (whole row tiles), Q6_K
      // gate / up, down rows too long for a whole tile (step by step).
      {GgmlType::Q4_K, GgmlType::Q4_K, 2048, 512, 64, 24, 8, true},
      {GgmlType::Q6_K, GgmlType::Q6_K, 512, 1024, 32, 20, 4, false},
  };
  for (const MoeCase& c : cases) run_moe_case(c, rng, stream, fails);
}

}  // namespace quant_test

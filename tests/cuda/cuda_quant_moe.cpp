// cuda_quant_test: the routed experts' decode products (q8_moe_gate_up, q8_moe_down) with
// the pairs grouped by expert on the device (q8_moe_group) against the same products pair
// by pair: every output the same bits, for rows of 4 to 128 units (the grouped kernel's
// lane widths 4 / 8 / 16 / 32, two units a lane, and the rows it leaves to the per-pair
// kernel), experts chosen by one pair up to 40, more than 256 experts, and the per-pair
// outputs within kMatvecTol of the exact product with the quantized activations.
#include <cstring>

#include "quant_test_common.h"

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
  };
  for (const MoeCase& c : cases) run_moe_case(c, rng, stream, fails);
}

}  // namespace quant_test

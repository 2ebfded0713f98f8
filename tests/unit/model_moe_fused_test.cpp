// CpuBackend::moe_ffn (the fused expert path) against the model's generic expert path
// (one matmul per selected expert and projection, model/moe_ffn.cpp) on random weights:
// the outputs must be the same bits, for every weight type the experts come in, packed
// and unpacked, the plain reference kernels, one token (decode) and batches where
// experts get several tokens, and expert row counts that are not a multiple of the
// packed kernels' 16-row groups.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "model/moe_ffn.h"
#include "quant/quant_ref.h"

namespace {

using hearth::GgmlType;
using hearth::cpu::CpuBackend;
using hearth::ops::WeightView;
namespace model = hearth::model;
namespace test = hearth::test;

struct Shape {
  int64_t embd, ff, experts, used;
};

// The three expert tensors of one layer: expert e's rows after expert e - 1's.
struct ExpertTensors {
  test::QuantWeight router, gate, up, down;
};

ExpertTensors make_tensors(GgmlType gate_up, GgmlType down, const Shape& s, uint32_t seed) {
  ExpertTensors t;
  t.router = test::quantize_weight(GgmlType::F32, test::random_floats(s.experts * s.embd, seed, 0.5f), s.experts,
                                   s.embd);
  t.gate = test::quantize_weight(gate_up, test::random_floats(s.experts * s.ff * s.embd, seed + 1, 0.05f),
                                 s.experts * s.ff, s.embd);
  t.up = test::quantize_weight(gate_up, test::random_floats(s.experts * s.ff * s.embd, seed + 2, 0.05f),
                               s.experts * s.ff, s.embd);
  t.down = test::quantize_weight(down, test::random_floats(s.experts * s.embd * s.ff, seed + 3, 0.05f),
                                 s.experts * s.embd, s.ff);
  return t;
}

// One expert's rows of an all-experts tensor.
WeightView slice(const WeightView& all, int64_t e, int64_t n_expert) {
  WeightView w = all;
  w.n_rows = all.n_rows / n_expert;
  w.data = static_cast<const uint8_t*>(all.data) + static_cast<uint64_t>(e * w.n_rows) * all.row_bytes;
  w.name = all.name + "[" + std::to_string(e) + "]";
  return w;
}

model::MoeWeights bind(CpuBackend& be, const ExpertTensors& t, const Shape& s, bool fused) {
  model::MoeWeights w;
  w.router = be.prepare_weight(t.router.view);
  if (fused) {
    w.fused = true;
    WeightView g = t.gate.view, u = t.up.view, d = t.down.view;
    g.n_expert = u.n_expert = d.n_expert = s.experts;
    w.gate_all = be.prepare_weight(g);
    w.up_all = be.prepare_weight(u);
    w.down_all = be.prepare_weight(d);
    return w;
  }
  for (int64_t e = 0; e < s.experts; ++e) {
    w.gate.push_back(be.prepare_weight(slice(t.gate.view, e, s.experts)));
    w.up.push_back(be.prepare_weight(slice(t.up.view, e, s.experts)));
    w.down.push_back(be.prepare_weight(slice(t.down.view, e, s.experts)));
  }
  return w;
}

// Runs both paths on n random tokens; returns how many outputs differ.
void expect_same_bits(GgmlType gate_up, GgmlType down, const Shape& s, bool repack, bool reference) {
  const ExpertTensors t = make_tensors(gate_up, down, s, 7);
  CpuBackend fused_be(2, reference), generic_be(2, reference);
  fused_be.set_repack(repack);
  generic_be.set_repack(repack);
  generic_be.set_fused_moe(false);
  const model::MoeWeights wf = bind(fused_be, t, s, true), wg = bind(generic_be, t, s, false);
  ASSERT_TRUE(wf.fused);
  model::MoeParams p;
  p.n_expert = s.experts;
  p.n_used = s.used;
  p.n_embd = s.embd;
  p.n_ff = s.ff;
  // 600 tokens: routing and the weighted sum split over the threads too.
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{17}, reference ? int64_t{0} : int64_t{600}}) {
    if (n == 0) continue;
    const std::vector<float> x = test::random_floats(static_cast<size_t>(n * s.embd), 100 + static_cast<uint32_t>(n));
    std::vector<float> of(static_cast<size_t>(n * s.embd), -1.0f), og(of.size(), -2.0f);
    model::moe_ffn(fused_be, wf, p, x.data(), n, of.data());
    model::moe_ffn(generic_be, wg, p, x.data(), n, og.data());
    int64_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < of.size(); ++i) {
      differ += std::memcmp(&of[i], &og[i], sizeof(float)) != 0;
      nonzero += of[i] != 0.0f;
    }
    EXPECT_EQ(differ, 0) << hearth::ggml_type_name(gate_up) << "/" << hearth::ggml_type_name(down) << " ff " << s.ff
                         << " n " << n << (repack ? " packed" : "") << (reference ? " reference" : "") << ": e.g. "
                         << of[0] << " vs " << og[0];
    EXPECT_GT(nonzero, static_cast<int64_t>(of.size()) / 2);  // not a pair of empty outputs
  }
}

TEST(MoeFused, SameBitsAsTheGenericPath) {
  struct Case {
    GgmlType gate_up, down;
    Shape shape;
  };
  const Case cases[] = {
      // K types (packed on AVX-512 VNNI machines), the usual Q4_K + Q6_K down mix.
      {GgmlType::Q4_K, GgmlType::Q6_K, {256, 256, 8, 3}},
      {GgmlType::Q5_K, GgmlType::Q5_K, {256, 256, 6, 2}},
      // 32-blocks (packed / tiled kernels); 96 rows per expert: six 16-row groups.
      {GgmlType::Q4_0, GgmlType::Q8_0, {64, 96, 8, 2}},
      {GgmlType::Q4_1, GgmlType::Q4_1, {128, 64, 5, 2}},
      // 40 rows per expert: not whole 16-row groups, so never packed; f16 down rows.
      {GgmlType::Q8_0, GgmlType::F16, {64, 40, 8, 2}},
      // Dequantized rows (no quantized dot product for these types).
      {GgmlType::F32, GgmlType::Q3_K, {256, 256, 4, 2}},
  };
  for (const Case& c : cases) {
    if (!hearth::can_quantize(c.gate_up) || !hearth::can_quantize(c.down)) {
      ADD_FAILURE() << "no reference quantizer for " << hearth::ggml_type_name(c.gate_up) << " or "
                    << hearth::ggml_type_name(c.down);
      continue;
    }
    expect_same_bits(c.gate_up, c.down, c.shape, true, false);
    expect_same_bits(c.gate_up, c.down, c.shape, false, false);
    expect_same_bits(c.gate_up, c.down, c.shape, false, true);
  }
}

// Experts that not a single token picked stay out of the passes; a layer where every
// token picks the same experts (one expert holds all tokens) works the same.
TEST(MoeFused, ConcentratedRouting) {
  const Shape s{64, 32, 4, 2};
  ExpertTensors t = make_tensors(GgmlType::Q8_0, GgmlType::Q8_0, s, 11);
  // Router rows 0 and 1 large and positive, 2 and 3 negative: with positive inputs every
  // token picks experts 0 and 1.
  auto* r = reinterpret_cast<float*>(t.router.data.data());
  for (int64_t e = 0; e < s.experts; ++e) {
    for (int64_t c = 0; c < s.embd; ++c) r[e * s.embd + c] = e < 2 ? 1.0f + 0.01f * static_cast<float>(e) : -1.0f;
  }
  CpuBackend fb(2), gb(2);
  gb.set_fused_moe(false);
  const model::MoeWeights wf = bind(fb, t, s, true), wg = bind(gb, t, s, false);
  model::MoeParams p{s.experts, s.used, s.embd, s.ff, true};
  std::vector<float> x = test::random_floats(static_cast<size_t>(9 * s.embd), 5);
  for (float& v : x) v = std::abs(v);
  std::vector<float> of(x.size()), og(x.size());
  model::moe_ffn(fb, wf, p, x.data(), 9, of.data());
  model::moe_ffn(gb, wg, p, x.data(), 9, og.data());
  EXPECT_EQ(0, std::memcmp(of.data(), og.data(), sizeof(float) * of.size()));
}

}  // namespace

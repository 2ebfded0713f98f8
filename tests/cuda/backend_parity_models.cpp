// CUDA back-end parity, whole models: the tiny random Qwen3.5 dense / MoE / Qwen3-Next
// fixtures against transformers' logits and the CPU, random-weight Llama-family models
// against an independent double-precision forward, and decode steps captured as CUDA
// graphs against the same steps op by op (helpers: parity_common.h).
#include "core/error.h"
#include "parity_common.h"

namespace {

using namespace parity;

// ---------------------------------------------------------------- whole models

// The fixtures: under $HEARTH_SOURCE_DIR when set (a binary carried to another machine).
const std::string kQwenDir =
    std::string(std::getenv("HEARTH_SOURCE_DIR") ? std::getenv("HEARTH_SOURCE_DIR") : HEARTH_SOURCE_DIR) +
    "/tests/data/qwen35/";

int argmax(const float* x, int64_t n) { return static_cast<int>(std::max_element(x, x + n) - x); }

double margin(const float* x, int64_t n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

double max_abs(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct Greedy {
  std::vector<int> tokens;
  std::vector<double> margins;
  std::vector<std::vector<float>> logits;
};

Greedy greedy(model::CausalLm& m, model::KvCache& cache, const std::vector<int32_t>& prompt, int n) {
  Greedy g;
  const int64_t V = m.hparams().n_vocab;
  std::vector<float> lg = m.forward(cache, prompt, false);
  for (int i = 0; i < n; ++i) {
    g.logits.push_back(lg);
    g.tokens.push_back(argmax(lg.data(), V));
    g.margins.push_back(margin(lg.data(), V));
    lg = m.forward(cache, {g.tokens.back()}, false);
  }
  return g;
}

// Greedy continuations equal, or first different where the CPU's top two were within
// `near_tie` (then the two back-ends legitimately pick different tokens).
void expect_same_greedy(const Greedy& c, const Greedy& g, double near_tie, const std::string& what) {
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (c.tokens[i] != g.tokens[i]) {
      EXPECT_LE(c.margins[i], near_tie) << what << ": greedy differs at step " << i << " with CPU margin "
                                        << c.margins[i];
      std::cout << what << ": greedy differs at step " << i << " (near-tie, CPU margin " << c.margins[i] << ")\n";
      return;
    }
  }
}

class HybridFixture : public ::testing::TestWithParam<std::string> {};

// The GPU against transformers' recorded logits (1e-3, the CPU's bound) and the CPU.
TEST_P(HybridFixture, MatchesTransformersAndCpu) {
  NEED_GPU();
  const std::string name = GetParam();
  const hearth::gguf::File file = hearth::convert::open_model(kQwenDir + name);
  std::ifstream f(kQwenDir + name + ".json");
  const json rec = json::parse(f);
  const auto mg = model::load_causal_lm(file, gpu());
  const auto mc = model::load_causal_lm(file, cpu());
  const int64_t V = mg->hparams().n_vocab;
  double worst_tf = 0, worst_cpu = 0;
  for (const auto& pr : rec.at("prompts")) {
    const auto ids = pr.at("ids").get<std::vector<int32_t>>();
    model::KvCache cg(gpu(), mg->hparams(), 256, ops::KvType::F32), cc(cpu(), mc->hparams(), 256, ops::KvType::F32);
    const std::vector<float> full = mg->forward(cg, ids, true);
    const std::vector<float> fullc = mc->forward(cc, ids, true);
    worst_cpu = std::max(worst_cpu, max_abs(full.data(), fullc.data(), static_cast<int64_t>(full.size())));
    cg.clear();
    std::vector<float> dec;
    for (int32_t t : ids) {
      const auto lg = mg->forward(cg, {t}, false);
      dec.insert(dec.end(), lg.begin(), lg.end());
    }
    const auto& pos = pr.at("positions");
    for (size_t i = 0; i < pos.size(); ++i) {
      const int64_t p = pos[i];
      const auto want_p = pr.at("prefill_logits")[i].get<std::vector<float>>();
      const auto want_d = pr.at("decode_logits")[i].get<std::vector<float>>();
      const double dp = max_abs(&full[p * V], want_p.data(), V), dd = max_abs(&dec[p * V], want_d.data(), V);
      EXPECT_LE(dp, 1e-3) << name << " n=" << ids.size() << " pos " << p << " prefill";
      EXPECT_LE(dd, 1e-3) << name << " n=" << ids.size() << " pos " << p << " decode";
      worst_tf = std::max({worst_tf, dp, dd});
    }
    cg.clear();
    cc.clear();
    const Greedy gg = greedy(*mg, cg, ids, 16), gc = greedy(*mc, cc, ids, 16);
    EXPECT_EQ(gg.tokens, pr.at("greedy").get<std::vector<int>>()) << name << " n=" << ids.size();
    EXPECT_EQ(gg.tokens, gc.tokens) << name;
  }
  std::cout << "model " << name << ": GPU vs transformers max |diff| " << worst_tf << ", GPU vs CPU prefill logits "
            << worst_cpu << "\n";
}

INSTANTIATE_TEST_SUITE_P(Qwen35, HybridFixture, ::testing::Values("dense", "moe", "next"),
                         [](const auto& info) { return info.param; });

tiny::Spec llama_spec(const std::string& arch, GgmlType t, GgmlType t_out) {
  tiny::Spec s;
  s.name = arch;
  s.arch = arch;
  s.n_embd = 512;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 1024;
  s.n_layer = 3;
  s.n_vocab = 1000;
  s.t_embd = t;
  s.t_output = t_out;
  s.t_q = s.t_k = s.t_o = s.t_gate = s.t_up = t;
  s.t_v = s.t_down = t_out;
  s.neox = arch != "llama";
  s.biases = arch == "qwen2";
  s.qk_norm = arch == "qwen3" || arch == "qwen3moe";
  if (arch == "qwen3moe") {
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 256;
  }
  return s;
}

// Random-weight Llama-family models quantized like the GGUFs people run (Q4_K with
// Q6_K for V / down / output, as Q4_K_M; Q8_0; Q4_0; Q5_K; a qwen3moe with 8 experts),
// 40-token prompt then 24 greedy steps, f32 KV cache. Both back-ends against the
// independent double-precision forward pass of the same dequantized weights
// (tests/unit/model_tiny_builder.h), error relative to the largest logit: the GPU
// decodes with f32 activations (matrix-vector kernels): within 1e-3 at every decode
// step; the prompt's 1024-row gate / up and 1000-row output go through the f16 GEMM
// path: within 5e-3 at every prompt position. The CPU multiplies 8-bit activations and
// is reported. Greedy GPU = CPU up to a near-tie
// (CPU top-2 gap < 5 % of the largest logit).
TEST(CudaParity, LlamaFamilyModels) {
  NEED_GPU();
  struct Case {
    std::string arch;
    GgmlType t, t_out;
  };
  for (const Case& c : {Case{"llama", GgmlType::Q4_K, GgmlType::Q6_K}, Case{"llama", GgmlType::Q8_0, GgmlType::Q8_0},
                        Case{"qwen2", GgmlType::Q4_0, GgmlType::Q8_0}, Case{"qwen3", GgmlType::Q5_K, GgmlType::Q6_K},
                        Case{"qwen3moe", GgmlType::Q4_K, GgmlType::Q6_K}}) {
    const tiny::Spec s = llama_spec(c.arch, c.t, c.t_out);
    const auto built = tiny::parse(tiny::build_writer(s), s.name + ".gguf");
    const tiny::FloatForward oracle(*built->file, s);
    const std::string what = c.arch + " " + std::string(hearth::ggml_type_name(c.t)) + "/" +
                             std::string(hearth::ggml_type_name(c.t_out));
    std::vector<int32_t> prompt(40);
    std::mt19937 rng(3);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % s.n_vocab);
    Greedy runs[2];
    double errs[2][2] = {};
    for (int i = 0; i < 2; ++i) {
      ops::Backend& be = i == 0 ? gpu() : static_cast<ops::Backend&>(cpu());
      const auto m = model::load_causal_lm(*built->file, be);
      const int64_t V = m->hparams().n_vocab;
      model::KvCache cache(be, m->hparams(), 128, ops::KvType::F32);
      const auto all = m->forward(cache, prompt, true);
      cache.clear();
      runs[i] = greedy(*m, cache, prompt, 24);
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), runs[i].tokens.begin(), runs[i].tokens.end() - 1);
      const auto want = oracle.logits(seq);
      double scale = 0;
      for (const auto& row : want) {
        for (double v : row) scale = std::max(scale, std::abs(v));
      }
      auto diff = [&](const float* got, const std::vector<double>& w) {
        double d = 0;
        for (int64_t k = 0; k < V; ++k) d = std::max(d, std::abs(got[k] - w[static_cast<size_t>(k)]));
        return d / scale;
      };
      for (size_t t = 0; t < prompt.size(); ++t) errs[i][0] = std::max(errs[i][0], diff(&all[t * V], want[t]));
      for (size_t k = 0; k < runs[i].logits.size(); ++k) {
        errs[i][1] = std::max(errs[i][1], diff(runs[i].logits[k].data(), want[prompt.size() - 1 + k]));
      }
    }
    // Decode multiplies 8-bit activations for the quantized types (as the CPU does):
    // bounded like a quantized-activation forward, not like the f32 one. The MoE model's
    // experts take 8-bit activations in prompts too (few tokens per expert), and a
    // routing decision that flips on such rounding moves its logits far, for the CPU as
    // well: there the greedy agreement below and MoeFfnFused are the checks.
    // Q4_K prompts of up to 64 tokens take 8-bit activations as well (q8_gemm): bounded like decode.
    if (c.arch != "qwen3moe") {
      EXPECT_LE(errs[0][0], hearth::cuda::q8_gemm_supported(c.t) ? 3e-2 : 5e-3) << what << ": GPU prefill vs double forward";
      EXPECT_LE(errs[0][1], 3e-2) << what << ": GPU decode vs double forward";
    }
    double scale = 0;
    for (float v : runs[1].logits[0]) scale = std::max(scale, static_cast<double>(std::abs(v)));
    expect_same_greedy(runs[1], runs[0], 0.05 * scale, what);
    std::cout << "model " << what << ": vs double forward (relative to max |logit|): GPU prefill " << errs[0][0]
              << ", decode " << errs[0][1] << "; CPU prefill " << errs[1][0] << ", decode " << errs[1][1] << "\n";
  }
}

// The models the graph tests decode: dense and MoE llama-family shapes and the hybrid fixture.
struct GraphRun {
  std::string what;
  std::unique_ptr<hearth::gguf::File> file;  // when not in `keep`
  std::unique_ptr<model::CausalLm> m;
  bool host_routed = false;  // MoE routing read back by the host every layer (not graphable)
};
std::vector<GraphRun> graph_runs(std::vector<std::unique_ptr<tiny::Built>>& keep) {
  std::vector<GraphRun> runs;
  for (const auto& [arch, t, t_out] : {std::tuple{"llama", GgmlType::Q4_K, GgmlType::Q6_K},
                                       std::tuple{"qwen3moe", GgmlType::Q4_K, GgmlType::Q6_K}}) {
    const tiny::Spec s = llama_spec(arch, t, t_out);
    keep.push_back(tiny::parse(tiny::build_writer(s), s.name + ".gguf"));
    runs.push_back({arch, nullptr, model::load_causal_lm(*keep.back()->file, gpu()), false});
  }
  // The hybrid fixtures: dense (Gated DeltaNet and attention layers, recorded like the
  // others) and MoE (f32 experts routed through the host: never a graph).
  for (const auto& [name, host_routed] : {std::pair{"dense", false}, std::pair{"moe", true}}) {
    GraphRun hybrid{std::string("qwen35 ") + name + " fixture",
                    std::make_unique<hearth::gguf::File>(hearth::convert::open_model(kQwenDir + name)), nullptr,
                    host_routed};
    hybrid.m = model::load_causal_lm(*hybrid.file, gpu());
    runs.push_back(std::move(hybrid));
  }
  return runs;
}

// Decode steps recorded once as CUDA graphs and replayed (CudaBackend::set_graphs) give
// the logits of the same steps launched op by op, bit for bit (the same kernels on the
// same data): a Llama model (Q4_K / Q6_K), a qwen3moe one and the tiny Qwen3.5 dense
// fixture (Gated DeltaNet states, attention every fourth layer), greedy steps after a
// 40-token and after a 1-token prompt; almost every step must be a replay. The Qwen3.5
// MoE fixture (f32 experts routed through the host) must run op by op, recording once.
TEST(CudaParity, DecodeStepsAsGraphs) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  std::vector<std::unique_ptr<tiny::Built>> keep;
  std::vector<GraphRun> runs = graph_runs(keep);
  for (GraphRun& r : runs) {
    // 40 + 48 tokens cross the 64-key attention bucket (a new recording); 1 + 24 do not.
    for (const auto& [prompt_len, steps] : {std::pair{40, 48}, std::pair{1, 24}}) {
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      std::mt19937 rng(5);
      for (auto& tok : prompt) tok = static_cast<int32_t>(rng() % r.m->hparams().n_vocab);
      Greedy plain, graphed;
      {
        cuda->set_graphs(false);
        model::KvCache cache(gpu(), r.m->hparams(), 128, ops::KvType::F16);
        plain = greedy(*r.m, cache, prompt, steps);
      }
      const auto before = cuda->graph_stats();
      {
        cuda->set_graphs(true);
        model::KvCache cache(gpu(), r.m->hparams(), 128, ops::KvType::F16);
        graphed = greedy(*r.m, cache, prompt, steps);
      }
      const auto after = cuda->graph_stats();
      EXPECT_EQ(graphed.tokens, plain.tokens) << r.what;
      ASSERT_EQ(graphed.logits.size(), plain.logits.size());
      for (size_t k = 0; k < plain.logits.size(); ++k) {
        ASSERT_EQ(graphed.logits[k], plain.logits[k]) << r.what << " prompt " << prompt_len << ": step " << k;
      }
      const int64_t recorded = after.recorded - before.recorded, replayed = after.replayed - before.replayed;
      const int64_t retried = after.retried - before.retried, abandoned = after.abandoned - before.abandoned;
      std::cout << "graphs " << r.what << " prompt " << prompt_len << ": " << recorded << " recorded, " << replayed
                << " replayed, " << retried << " run again, " << abandoned << " cut short\n";
      if (r.host_routed) {
        // Its experts (f32 / f16) are routed through the host every layer: no step can be a
        // graph; one cut-short recording, then op by op (no recording attempt per step).
        EXPECT_EQ(replayed, 0) << r.what;
        EXPECT_LE(abandoned, 2) << r.what;
        continue;
      }
      // Every decode step but the first few (scratch growing) and one per bucket change is a replay.
      EXPECT_GE(replayed, steps - 6) << r.what;
      EXPECT_LE(retried, 2) << r.what;
      EXPECT_LE(recorded, 4) << r.what;
    }
  }
  cuda->set_graphs(true);
}

// Batched decode as graphs: four sequences of different lengths in one pool decode
// together, then three (a different step size: another recording), with a sequence's
// context crossing an attention bucket on the way; the logits equal the same steps op by op.
TEST(CudaParity, BatchedDecodeStepsAsGraphs) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  std::vector<std::unique_ptr<tiny::Built>> keep;
  std::vector<GraphRun> runs = graph_runs(keep);
  for (GraphRun& r : runs) {
    const int64_t V = r.m->hparams().n_vocab;
    auto run_all = [&](bool graphs) {
      cuda->set_graphs(graphs);
      const int64_t bs = 16;
      model::KvPool pool(gpu(), r.m->hparams(), ops::KvType::F16, bs, 64, 4);
      std::vector<model::SeqKv> kv(4);
      std::vector<int32_t> last(4);
      std::vector<float> out, lg;
      int32_t next_block = 0;
      std::mt19937 rng(11);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (pool.n_state_slots() > 0) {
          kv[i].state_slot = static_cast<int32_t>(3 - i);
          pool.clear_state(kv[i].state_slot);
        }
        for (int b = 0; b < 12; ++b) kv[i].blocks.push_back(next_block++);
        std::vector<int32_t> prompt(static_cast<size_t>(9 + 17 * i));  // 9, 26, 43, 60 tokens
        for (auto& tok : prompt) tok = static_cast<int32_t>(rng() % V);
        std::vector<model::BatchSeq> one{{&kv[i], prompt.data(), static_cast<int64_t>(prompt.size()), true}};
        r.m->forward_batch(pool, one, lg);
        last[i] = argmax(lg.data(), V);
        out.insert(out.end(), lg.begin(), lg.end());
      }
      for (int step = 0; step < 20; ++step) {
        const size_t n = step < 12 ? 4 : 3;
        std::vector<model::BatchSeq> batch;
        for (size_t i = 0; i < n; ++i) batch.push_back({&kv[i], &last[i], 1, true});
        r.m->forward_batch(pool, batch, lg);
        for (size_t i = 0; i < n; ++i) last[i] = argmax(lg.data() + i * V, V);
        out.insert(out.end(), lg.begin(), lg.end());
      }
      return out;
    };
    const std::vector<float> plain = run_all(false);
    const auto before = cuda->graph_stats();
    const std::vector<float> graphed = run_all(true);
    const auto after = cuda->graph_stats();
    ASSERT_EQ(graphed.size(), plain.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      ASSERT_EQ(graphed[k], plain[k]) << r.what << ": logit " << k << " (row " << k / V << ")";
    }
    std::cout << "batched graphs " << r.what << ": " << after.recorded - before.recorded << " recorded, "
              << after.replayed - before.replayed << " replayed, " << after.retried - before.retried
              << " run again, " << after.abandoned - before.abandoned << " cut short\n";
    if (!r.host_routed) {
      EXPECT_GE(after.replayed - before.replayed, 12) << r.what;
    }
  }
  cuda->set_graphs(true);
}

// --kv-type q8_0 on the GPU: a random-weight qwen3 (head_dim 64) and the hybrid Qwen3.5
// dense fixture, each with a q8_0 cache on the GPU against the same q8_0 cache on the
// CPU and against an f16 cache on the GPU: a 40-token prompt, then 24 greedy steps
// (prompt rows on the tensor-core kernel, which stages q8_0 rows as f16; decode rows on
// the scalar kernel, which reads them exactly as the CPU does). Bounds: largest
// |logit difference| relative to the largest logit, and greedy equal up to a near-tie.
// The GPU and the CPU already differ by up to 3e-2 each from an exact forward with f16 KV
// (LlamaFamilyModels: 8-bit activations in other orders); measured on an H200: qwen3
// Q8_0 3.5e-2 GPU vs CPU and 2.9e-2 q8_0 vs f16 on the GPU, the hybrid 6e-5 and 4e-3.
TEST(CudaParity, KvQ8OnCuda) {
  NEED_GPU();
  EXPECT_TRUE(gpu().supports_kv_type(ops::KvType::Q8_0));
  std::vector<std::unique_ptr<tiny::Built>> keep;
  const tiny::Spec s = llama_spec("qwen3", GgmlType::Q8_0, GgmlType::Q8_0);
  keep.push_back(tiny::parse(tiny::build_writer(s), s.name + ".gguf"));
  struct Run {
    std::string what;
    const hearth::gguf::File* file;
  };
  const hearth::gguf::File hybrid = hearth::convert::open_model(kQwenDir + "dense");
  const std::vector<Run> runs_of = {{"qwen3 Q8_0", &*keep.back()->file}, {"hybrid Qwen3.5 dense", &hybrid}};
  for (const Run& r : runs_of) {
    std::vector<int32_t> prompt(40);
    std::mt19937 rng(7);
    Greedy g[3];  // GPU q8_0, CPU q8_0, GPU f16
    std::unique_ptr<model::CausalLm> models[2];
    models[0] = model::load_causal_lm(*r.file, gpu());
    models[1] = model::load_causal_lm(*r.file, cpu());
    const int64_t V = models[0]->hparams().n_vocab;
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    for (int i = 0; i < 3; ++i) {
      ops::Backend& be = i == 1 ? static_cast<ops::Backend&>(cpu()) : gpu();
      model::KvCache cache(be, models[i == 1]->hparams(), 128, i == 2 ? ops::KvType::F16 : ops::KvType::Q8_0);
      g[i] = greedy(*models[i == 1], cache, prompt, 24);
    }
    double scale = 0, vs_cpu = 0, vs_f16 = 0;
    for (float v : g[1].logits[0]) scale = std::max(scale, static_cast<double>(std::abs(v)));
    // Teacher-forced comparisons only while the runs agree (after a near-tie they part).
    for (size_t k = 0; k < g[0].logits.size(); ++k) {
      vs_cpu = std::max(vs_cpu, max_abs(g[0].logits[k].data(), g[1].logits[k].data(), V) / scale);
      vs_f16 = std::max(vs_f16, max_abs(g[0].logits[k].data(), g[2].logits[k].data(), V) / scale);
      if (g[0].tokens[k] != g[1].tokens[k] || g[0].tokens[k] != g[2].tokens[k]) break;
    }
    EXPECT_LE(vs_cpu, 6e-2) << r.what << ": GPU q8_0 vs CPU q8_0";
    EXPECT_LE(vs_f16, 6e-2) << r.what << ": GPU q8_0 vs GPU f16";
    expect_same_greedy(g[1], g[0], 0.05 * scale, r.what + " q8_0 GPU vs CPU");
    std::cout << "kv q8_0 " << r.what << ": GPU vs CPU (q8_0) " << vs_cpu << ", GPU q8_0 vs GPU f16 " << vs_f16
              << " (relative to max |logit|)\n";
  }
}

}  // namespace

// The step description on the device (ops/step_desc.h, CudaBackend::begin_step): every
// decode step uploads its arena once, and a step replayed from its graph stages nothing
// per op (the staging ring is not touched) on every model, the hybrid fixture included:
// its Gated DeltaNet layers read each sequence's rows and state slot from the arena
// (StepDesc::gdn_seqs) and the slots' states at fixed addresses (KvPool::gdn_states).
// Sequence i runs in state slot 3 - i (a slot read as the sequence's index would show).
// Four sequences decode together: two greedy (argmax on the device), one drawn with a
// penalty (its reduce kind and penalty list read from the arena), one copied; the tokens
// and the copied row's logits equal the same steps op by op.
TEST(CudaParity, ReplayedDecodeStepsStageNothingPerOp) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  std::vector<std::unique_ptr<tiny::Built>> keep;
  std::vector<GraphRun> runs = graph_runs(keep);
  for (GraphRun& r : runs) {
    if (r.host_routed) continue;  // never a graph (DecodeStepsAsGraphs)
    const int64_t V = r.m->hparams().n_vocab;
    constexpr int kSteps = 16;
    struct Run {
      std::vector<int32_t> tokens;
      std::vector<float> copied;  // the copied row's logits, every step
      int64_t replayed = 0;
      int64_t worst_ring = 0;  // ring stagings of the worst replayed step
      int64_t uploads = 0, reads = 0;
    };
    auto run_all = [&](bool graphs) {
      cuda->set_graphs(graphs);
      Run out;
      model::KvPool pool(gpu(), r.m->hparams(), ops::KvType::F16, 16, 64, 4);
      std::vector<model::SeqKv> kv(4);
      std::vector<int32_t> last(4);
      std::vector<float> lg;
      int32_t next_block = 0;
      std::mt19937 rng(17);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (pool.n_state_slots() > 0) {
          kv[i].state_slot = static_cast<int32_t>(3 - i);
          pool.clear_state(kv[i].state_slot);
        }
        for (int b = 0; b < 8; ++b) kv[i].blocks.push_back(next_block++);
        // 5, 18, 31, 44 tokens: with 16 steps no context crosses the 64-key bucket.
        std::vector<int32_t> prompt(static_cast<size_t>(5 + 13 * i));
        for (auto& tok : prompt) tok = static_cast<int32_t>(rng() % V);
        std::vector<model::BatchSeq> one{{&kv[i], prompt.data(), static_cast<int64_t>(prompt.size()), true}};
        r.m->forward_batch(pool, one, lg);
        last[i] = argmax(lg.data(), V);
      }
      for (int step = 0; step < kSteps; ++step) {
        std::vector<model::BatchSeq> batch;
        batch.push_back({&kv[0], &last[0], 1, true, true});
        batch.push_back({&kv[1], &last[1], 1, true, true});
        model::BatchSeq drawn{&kv[2], &last[2], 1, true};
        drawn.draw = ops::RowReduce{ops::RowKind::kDraw, 1.25f, 0.1 + 0.05 * step, 40, 0.95f, 0.0f, 1, 1.3f};
        drawn.penalties = {{last[2], 1}};
        batch.push_back(drawn);
        batch.push_back({&kv[3], &last[3], 1, true});  // copied whole
        const auto g0 = cuda->graph_stats();
        const auto s0 = cuda->stage_stats();
        r.m->forward_batch(pool, batch, lg);
        const auto g1 = cuda->graph_stats();
        const auto s1 = cuda->stage_stats();
        out.uploads += s1.step_uploads - s0.step_uploads;
        out.reads += s1.step_reads - s0.step_reads;
        if (g1.replayed - g0.replayed == 1) {
          ++out.replayed;
          out.worst_ring = std::max(out.worst_ring, s1.ring - s0.ring);
        }
        const auto& picks = r.m->picks();
        for (size_t i = 0; i < 4; ++i) {
          const bool picked = i < 3 && i < picks.size() && picks[i].argmax >= 0;
          last[i] = picked ? picks[i].argmax : argmax(lg.data() + i * V, V);
          out.tokens.push_back(last[i]);
        }
        out.copied.insert(out.copied.end(), lg.begin() + 3 * V, lg.begin() + 4 * V);
      }
      return out;
    };
    const Run plain = run_all(false);
    const Run graphed = run_all(true);
    EXPECT_EQ(graphed.tokens, plain.tokens) << r.what;
    ASSERT_EQ(graphed.copied.size(), plain.copied.size());
    for (size_t k = 0; k < plain.copied.size(); ++k) {
      ASSERT_EQ(graphed.copied[k], plain.copied[k]) << r.what << ": copied row, logit " << k;
    }
    std::cout << "step description " << r.what << ": " << graphed.replayed << " of " << kSteps
              << " steps replayed, worst replayed step staged " << graphed.worst_ring << " arrays through the ring, "
              << graphed.uploads << " arenas uploaded, " << graphed.reads << " arrays read from them\n";
    EXPECT_EQ(graphed.uploads, kSteps) << r.what << ": one upload per step";
    EXPECT_EQ(plain.uploads, kSteps) << r.what << ": one upload per step (op by op too)";
    EXPECT_GT(graphed.reads, 0) << r.what;
    EXPECT_GE(graphed.replayed, kSteps - 6) << r.what << ": the test did not exercise the replays";
    EXPECT_EQ(graphed.worst_ring, 0) << r.what << ": a replayed step staged host arrays per op";
  }
  cuda->set_graphs(true);
}

// Steps of the same shape over different sequences: a recorded step must not keep
// anything of the step it was recorded from. Six sequences of one pool (block tables
// interleaved, so that no two are alike; on the hybrid fixture state slot 5 - i) decode
// four at a time, the four changing every step and taking other rows: step k runs
// sequences k, k + 1, k + 2, k + 3 (mod 6) in rows 0-3, so every step has the same
// counts (4 rows, 4 sequences, 3 copied rows) and the same attention bucket (all contexts
// stay under 64 keys) but other positions, KV slots, block tables and state slots. Row
// k mod 4 returns no logits (its sequence is fed its last token again): the output rows
// are 1-3 (read in place from row 1), 0, 2, 3 (gathered), 0, 1, 3, then 0-2 (in place
// from row 0), four keys taking turns. With graphs on, every step but the first of each
// key is a replay; the logits of every step equal the same steps op by op, bit for bit.
TEST(CudaParity, SameShapeStepsOverOtherSequencesReplayFreshData) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  std::vector<std::unique_ptr<tiny::Built>> keep;
  std::vector<GraphRun> runs = graph_runs(keep);
  for (GraphRun& r : runs) {
    if (r.host_routed) continue;  // never a graph (DecodeStepsAsGraphs)
    const int64_t V = r.m->hparams().n_vocab;
    constexpr int kSeqs = 6, kBatch = 4, kSteps = 24;
    struct Run {
      std::vector<float> logits;  // every step's three rows
      int64_t replayed = 0, retried = 0;
    };
    auto run_all = [&](bool graphs) {
      cuda->set_graphs(graphs);
      Run out;
      model::KvPool pool(gpu(), r.m->hparams(), ops::KvType::F16, 16, 32, kSeqs);
      std::vector<model::SeqKv> kv(kSeqs);
      std::vector<int32_t> last(kSeqs);
      std::vector<float> lg;
      std::mt19937 rng(23);
      for (int i = 0; i < kSeqs; ++i) {
        if (pool.n_state_slots() > 0) {
          kv[i].state_slot = kSeqs - 1 - i;
          pool.clear_state(kv[i].state_slot);
        }
        // Blocks i, i + 6, i + 12, ... in reverse: tables unlike each other and the identity.
        for (int b = 4; b-- > 0;) kv[i].blocks.push_back(i + kSeqs * b);
        std::vector<int32_t> prompt(static_cast<size_t>(3 + 5 * i));  // 3 .. 28 tokens
        for (auto& tok : prompt) tok = static_cast<int32_t>(rng() % V);
        std::vector<model::BatchSeq> one{{&kv[i], prompt.data(), static_cast<int64_t>(prompt.size()), true}};
        r.m->forward_batch(pool, one, lg);
        last[i] = argmax(lg.data(), V);
      }
      {
        // A first step of four rows, all returned (it grows the logits buffer; not counted).
        std::vector<model::BatchSeq> warm;
        for (int i = 0; i < kBatch; ++i) warm.push_back({&kv[i], &last[i], 1, true});
        r.m->forward_batch(pool, warm, lg);
        for (int i = 0; i < kBatch; ++i) last[i] = argmax(lg.data() + i * V, V);
        out.logits.insert(out.logits.end(), lg.begin(), lg.begin() + kBatch * V);
      }
      for (int step = 0; step < kSteps; ++step) {
        std::vector<model::BatchSeq> batch;
        std::vector<int> who;  // the sequences of the returned rows, in order
        for (int j = 0; j < kBatch; ++j) {
          const int i = (step + j) % kSeqs;
          const bool logits = j != step % kBatch;
          if (logits) who.push_back(i);
          batch.push_back({&kv[i], &last[i], 1, logits});  // copied whole
        }
        const auto g0 = cuda->graph_stats();
        r.m->forward_batch(pool, batch, lg);
        const auto g1 = cuda->graph_stats();
        out.replayed += g1.replayed - g0.replayed;
        out.retried += g1.retried - g0.retried;
        if (lg.size() != who.size() * static_cast<size_t>(V)) {
          ADD_FAILURE() << r.what << ": step " << step << " returned " << lg.size() / V << " rows";
          return out;
        }
        for (size_t j = 0; j < who.size(); ++j) last[who[j]] = argmax(lg.data() + j * V, V);
        out.logits.insert(out.logits.end(), lg.begin(), lg.end());
      }
      return out;
    };
    const Run plain = run_all(false);
    const Run graphed = run_all(true);
    ASSERT_EQ(graphed.logits.size(), plain.logits.size());
    for (size_t k = 0; k < plain.logits.size(); ++k) {
      const auto row = static_cast<int64_t>(k) / V;  // 4 of the first step, then 3 a step
      ASSERT_EQ(graphed.logits[k], plain.logits[k])
          << r.what << ": step " << (row < kBatch ? -1 : (row - kBatch) / 3) << ", returned row "
          << (row < kBatch ? row : (row - kBatch) % 3) << ", logit " << k % V;
    }
    std::cout << "same-shape steps over other sequences " << r.what << ": " << graphed.replayed << " of " << kSteps
              << " steps replayed, " << graphed.retried << " run again\n";
    EXPECT_GE(graphed.replayed, kSteps - 6) << r.what << ": the test did not exercise the replays";
  }
  cuda->set_graphs(true);
}

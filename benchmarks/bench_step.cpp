// The engine's decode step on its own: B sequences, each with its own prompt already in
// a shared KV pool, advance one token per forward_batch call, the way `hearth serve`'s
// step loop runs them (no HTTP, no sampling, no prompt processing in the timings). Batch
// sizes are interleaved repetition by repetition so machine drift hits all alike; the
// figures are medians of the per-step times.
//
// Usage: bench_step MODEL.gguf [--threads N] [--batch 1,2,4,8] [--rows 1,...] [--reps R] [--steps S]
//                             [--prompt P] [--kv f16|f32|q8_0] [--prefill L1,L2,...] [--chunk C]
//                             [--device cpu|cuda[:N]] [--deterministic 1] [--tune key=value,...]
// --rows R1,R2,...: each sequence's step has R rows, each with its logits and attending as
// a one-token step would (BatchSeq::decode_rows: a speculative verification of R - 1
// drafted tokens, as `hearth run --spec` and `hearth serve` build it); every (batch, rows)
// pair is timed, interleaved like the batch sizes. Default 1 (plain decode steps).
// Prints, per batch size (and row count): median and 10th-percentile step time, tokens/s
// (B / median step; rows not counted) and that speed over the first's, and with --rows
// the step time over the first's; the first steps after load (before
// anything else ran on the weights but the prompts) against the warm median; and with
// --prefill, prompt processing: a fresh sequence of L tokens fed in chunks of C (default:
// all at once, as `hearth serve` does up to its --prefill-chunk), median over R reps.
// --tune sets tuning keys as `hearth run --tune` does (`hearth info --tune` lists them).
// With --tune cpu.op_timing=1, the CPU back-end's per-operation table (all reps) of the
// decode steps and of each prefill length goes to stderr. On a GPU (--device cuda) each
// sequence asks for its next token's argmax only, as a greedy request of `hearth serve`
// does (the row is reduced on the device when the back-end can), and a step's time runs
// until its picks are on the host.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend_factory.h"
#include "backends/cpu/cpu_backend.h"
#include "bench/step_tokens.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/tune.h"
#include "format/gguf.h"
#include "model/causal_lm.h"

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    const int v = std::atoi(item.c_str());
    if (v <= 0) throw std::runtime_error("bad batch size '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) throw std::runtime_error("empty batch list");
  return out;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_step MODEL.gguf [--threads N] [--batch 1,2,4,8] [--rows 1,...] [--reps R] "
                         "[--steps S] "
                         "[--prompt P] [--kv f16|f32|q8_0] [--prefill L1,...] [--chunk C] [--device cpu|cuda[:N]] "
                         "[--deterministic 1] [--tune key=value,...]\n");
    return 2;
  }
  const std::string model_path = argv[1];
  int threads = hearth::physical_core_count(), reps = 10, steps = 16, prompt = 64;
  std::vector<int> batches = {1, 2, 4, 8};
  std::vector<int> rows_list = {1};
  hearth::ops::KvType kv_type = hearth::ops::KvType::F16;
  std::vector<int> prefills;
  int chunk = 0;
  std::string device = "cpu";
  bool deterministic = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--batch") batches = parse_list(v);
    else if (a == "--rows") rows_list = parse_list(v);
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--prompt") prompt = std::atoi(v.c_str());
    else if (a == "--kv")
      kv_type = v == "f32"    ? hearth::ops::KvType::F32
                : v == "q8_0" ? hearth::ops::KvType::Q8_0
                              : hearth::ops::KvType::F16;
    else if (a == "--prefill") prefills = parse_list(v);
    else if (a == "--chunk") chunk = std::atoi(v.c_str());
    else if (a == "--device") device = v;
    else if (a == "--deterministic") deterministic = v == "1";
    else if (a == "--tune") hearth::tune::apply(v);
    else throw std::runtime_error("unknown option " + a);
  }
  if (threads < 1 || reps < 1 || steps < 1 || prompt < 1) throw std::runtime_error("values must be positive");

  const hearth::gguf::File file = hearth::gguf::File::open(model_path);
  const std::unique_ptr<hearth::ops::Backend> owned = hearth::backends::make_backend(device, threads);
  hearth::ops::Backend& backend = *owned;
  if (!backend.set_deterministic(deterministic)) throw std::runtime_error("no batch-invariant kernels on " + device);
  auto* cpu = dynamic_cast<hearth::cpu::CpuBackend*>(owned.get());  // op timing and packing: the CPU's
  const bool argmax_only = cpu == nullptr;
  const auto model = hearth::model::load_causal_lm(file, backend);
  const hearth::model::Hparams& hp = model->hparams();
  const int max_b = *std::max_element(batches.begin(), batches.end());
  const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  constexpr int64_t kBlock = 16;
  const int64_t blocks_per_seq = (prompt + static_cast<int64_t>(steps) * max_rows + kBlock - 1) / kBlock;
  const int max_prefill = prefills.empty() ? 0 : *std::max_element(prefills.begin(), prefills.end());
  const int64_t prefill_blocks = (max_prefill + kBlock - 1) / kBlock;
  const bool recurrent = hp.n_recurrent_layers() > 0;
  if (recurrent && max_rows > 1) throw std::runtime_error("--rows above 1 is for attention-only models");
  hearth::model::KvPool pool(backend, hp, kv_type, kBlock, blocks_per_seq * max_b + prefill_blocks,
                             recurrent ? max_b + 1 : 0);

  // Each sequence gets its own prompt (no shared prefix), processed once; every
  // repetition then decodes from the end of it again (positions are simply reused).
  std::vector<hearth::model::SeqKv> seqs(static_cast<size_t>(max_b));
  std::vector<float> logits;
  for (int s = 0; s < max_b; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) seqs[s].blocks.push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    if ((hp.n_recurrent_layers() > 0)) seqs[s].state_slot = s;
    std::vector<int32_t> toks;
    for (int t = 0; t < prompt; ++t) toks.push_back(hearth::bench::step_prompt_token(s, t, hp.n_vocab));
    const std::vector<hearth::model::BatchSeq> one = {{&seqs[s], toks.data(), prompt, true}};
    model->forward_batch(pool, one, logits);
  }
  std::printf("bench_step: %s, %d threads, prompt %d, %d reps x %d steps\n", model_path.c_str(), threads, prompt, reps,
              steps);
  std::printf("backend: %s; %.1f MB of weights repacked\n", backend.name().c_str(),
              cpu != nullptr ? cpu->packed_bytes() / 1e6 : 0.0);
  std::vector<std::pair<int, int>> configs;  // (batch, rows)
  for (const int b : batches) {
    for (const int rw : rows_list) configs.emplace_back(b, rw);
  }
  std::map<std::pair<int, int>, std::vector<double>> ms;
  if (cpu != nullptr) cpu->reset_op_timing();  // the prompts above are not part of either table
  double decode_wall_ms = 0;
  for (int r = 0; r < reps; ++r) {
    for (const auto& [b, rw] : configs) {
      std::vector<int32_t> tok(static_cast<size_t>(b) * rw);
      for (int s = 0; s < b; ++s) seqs[s].n_past = prompt;
      for (int st = 0; st < steps; ++st) {
        std::vector<hearth::model::BatchSeq> batch;
        for (int s = 0; s < b; ++s) {
          for (int i = 0; i < rw; ++i) tok[s * rw + i] = 100 + (st * 31 + s * 17 + i * 7 + r) % 5000;
          hearth::model::BatchSeq one{&seqs[s], &tok[s * rw], rw, true, argmax_only};
          if (rw > 1) {
            one.n_logits = rw;
            one.decode_rows = true;
          }
          batch.push_back(one);
        }
        const auto t0 = std::chrono::steady_clock::now();
        model->forward_batch(pool, batch, logits);
        ms[{b, rw}].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        decode_wall_ms += ms[{b, rw}].back();
      }
    }
  }
  if (cpu != nullptr && cpu->op_timing()) cpu->print_op_timing("decode steps, all batch sizes and reps", decode_wall_ms);
  // The first configuration's first repetition ran right after load (and the prompts).
  const std::vector<double>& first = ms[configs[0]];
  std::vector<double> cold(first.begin(), first.begin() + std::min<size_t>(steps, 8));
  std::sort(cold.begin(), cold.end());
  double base = 0, base_ms = 0;
  for (const auto& cfg : configs) {
    std::vector<double>& t = ms[cfg];
    std::sort(t.begin(), t.end());
    const int b = cfg.first, rw = cfg.second;
    const double med = t[t.size() / 2], tps = b * 1000.0 / med;
    if (base == 0) {
      base = tps;
      base_ms = med;
    }
    if (rows_list.size() > 1 || rw > 1) {
      std::printf("batch %2d rows %2d: step median %7.2f ms (p10 %7.2f)  %8.1f tok/s  x%.2f  step x%.2f\n", b, rw, med,
                  t[t.size() / 10], tps, tps / base, med / base_ms);
    } else {
      std::printf("batch %2d: step median %7.2f ms (p10 %7.2f)  %8.1f tok/s  x%.2f\n", b, med, t[t.size() / 10], tps,
                  tps / base);
    }
    if (cfg == configs[0]) {
      std::printf("          first %zu steps after load: median %7.2f ms (%.2fx the warm median)\n", cold.size(),
                  cold[cold.size() / 2], cold[cold.size() / 2] / med);
    }
  }

  // Prompt processing: a fresh sequence (its own blocks and state slot) each repetition.
  hearth::model::SeqKv pre;
  for (int64_t b = 0; b < prefill_blocks; ++b) pre.blocks.push_back(static_cast<int32_t>(blocks_per_seq * max_b + b));
  if (recurrent) pre.state_slot = max_b;
  for (const int len : prefills) {
    std::vector<int32_t> toks;
    for (int t = 0; t < len; ++t) toks.push_back(hearth::bench::step_prefill_token(t, hp.n_vocab));
    const int step = chunk > 0 ? chunk : len;
    std::vector<double> t_ms;
    if (cpu != nullptr) cpu->reset_op_timing();
    for (int r = 0; r < reps; ++r) {
      pre.n_past = 0;
      if (recurrent) pool.clear_state(pre.state_slot);
      const auto t0 = std::chrono::steady_clock::now();
      for (int at = 0; at < len; at += step) {
        const int n = std::min(step, len - at);
        const std::vector<hearth::model::BatchSeq> one = {{&pre, toks.data() + at, n, at + n == len}};
        model->forward_batch(pool, one, logits);
      }
      t_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (cpu != nullptr && cpu->op_timing()) {
      double wall = 0;
      for (const double t : t_ms) wall += t;
      cpu->print_op_timing("prefill of " + std::to_string(len) + " tokens, " + std::to_string(reps) + " reps", wall);
    }
    std::sort(t_ms.begin(), t_ms.end());
    const double med = t_ms[t_ms.size() / 2];
    std::printf("prefill %5d tokens (chunks of %d): median %8.1f ms  %8.1f tok/s\n", len, step, med, len * 1000.0 / med);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: %s\n", e.what());
    return 1;
  }
}

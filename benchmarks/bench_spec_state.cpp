// The cost of rolling a hybrid model's Gated DeltaNet state back after a speculative
// verification (engine/serve_engine_spec.cpp), the two ways issue 41 names, on one sequence:
//   (b) what Hearth does: the verification of 1 + k rows runs the recurrence a row per pass
//       and copies the state after each of the first k rows into a checkpoint slot; a
//       partial acceptance copies one checkpoint back. Extra memory: k state slots per
//       running sequence; extra time: k state copies per verification (inside the step).
//   (a) the other way: one copy of the state before the step, and after a partial
//       acceptance of a drafted tokens a re-run of the 1 + a accepted rows from it (here a
//       whole forward pass of those rows, the simple form; re-running only the recurrence
//       would need each layer's recurrence inputs kept from the verification).
// Timed, alternating, medians over --reps: a one-token decode step; the verification step
// of 1 + k rows with its k checkpoints; k state copies alone; one state copy; a forward pass
// of 1 + a rows (a = k / 2: (a)'s re-run). Prints the state's size and both ways' memory per
// sequence.
//
// Usage: bench_spec_state MODEL(.gguf or HF folder) [--threads N] [--k 4] [--reps 15] [--prompt 256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_spec_state MODEL [--threads N] [--k 4] [--reps 15] [--prompt 256]\n");
    return 2;
  }
  int threads = 2, k = 4, reps = 15, n_prompt = 256;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = v;
    else if (a == "--k") k = v;
    else if (a == "--reps") reps = v;
    else if (a == "--prompt") n_prompt = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    gguf::File file = convert::open_model(argv[1]);
    cpu::CpuBackend backend(threads);
    std::unique_ptr<model::CausalLm> m = model::load_causal_lm(file, backend);
    const model::Hparams& hp = m->hparams();
    if (hp.n_recurrent_layers() == 0) fail(ErrorKind::kInvalidInput, "bench", "not a hybrid model");
    // Slots: 0 the sequence, 1 .. k checkpoints, k + 1 the state after the prompt (restored
    // before every timed operation).
    const int base = k + 1;
    model::KvCache cache(backend, hp, n_prompt + 2 * k + 8, ops::KvType::F16, k + 1);
    std::vector<int32_t> prompt;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back((i * 7919 + 13) % 30000);
    m->forward(cache, prompt, false);
    cache.pool().copy_state(0, base);
    const int64_t n_past = cache.n_past();
    auto restore = [&] {
      cache.seq().n_past = n_past;
      cache.pool().copy_state(base, 0);
    };
    std::vector<int32_t> rows;
    for (int i = 0; i <= k; ++i) rows.push_back(100 + 17 * i);
    std::vector<float> logits;
    auto verify = [&](int n, bool checkpoints) {
      model::BatchSeq b{&cache.seq(), rows.data(), n, true, true};
      b.n_logits = n;
      b.decode_rows = n > 1;
      if (checkpoints) {
        for (int j = 1; j < n; ++j) b.snaps.push_back({j, j});
      }
      m->forward_batch(cache.pool(), {b}, logits);
    };
    std::vector<double> t_one, t_verify, t_copies, t_copy, t_rerun;
    auto time = [&](std::vector<double>& out, const auto& f) {
      restore();
      const auto t0 = Clock::now();
      f();
      out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    };
    const int a = k / 2;
    for (int r = 0; r < reps + 2; ++r) {
      std::vector<double> sink;
      const bool warm = r >= 2;
      time(warm ? t_one : sink, [&] { verify(1, false); });
      time(warm ? t_verify : sink, [&] { verify(1 + k, true); });
      time(warm ? t_copies : sink, [&] {
        for (int j = 1; j <= k; ++j) cache.pool().copy_state(0, j);
      });
      time(warm ? t_copy : sink, [&] { cache.pool().copy_state(0, base); });
      time(warm ? t_rerun : sink, [&] { verify(1 + a, true); });
    }
    const double mib = static_cast<double>(model::KvPool::bytes_per_state(hp)) / (1 << 20);
    std::printf("model %s: %lld of %lld layers recurrent, state %.2f MiB per slot; k = %d drafted rows, %d threads, "
                "%d reps (medians)\n",
                argv[1], static_cast<long long>(hp.n_recurrent_layers()), static_cast<long long>(hp.n_layer), mib, k,
                threads, reps);
    std::printf("one-token step                 %8.3f ms\n", median(t_one));
    std::printf("verification, 1+%d rows (b)     %8.3f ms (includes its %d checkpoint copies)\n", k, median(t_verify),
                k);
    std::printf("%d state copies alone           %8.3f ms\n", k, median(t_copies));
    std::printf("1 state copy                   %8.3f ms\n", median(t_copy));
    std::printf("re-run of 1+%d rows (a)         %8.3f ms\n", a, median(t_rerun));
    std::printf("memory per running sequence: (b) %d checkpoints %.2f MiB; (a) 1 copy %.2f MiB\n", k, k * mib, mib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_spec_state: %s\n", e.what());
    return 1;
  }
  return 0;
}

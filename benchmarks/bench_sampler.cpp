// The sampler on one logits row of a large vocabulary (Qwen3.5's 248,320 entries by
// default): microseconds per sampled token for greedy decoding, the server's defaults
// (temperature 1, no ranking), top-k 40 + top-p 0.95 + min-p 0.05 at temperature 0.8, and
// top-p 0.95 alone; logits drawn from N(0, sigma) (a flat row: the hard case for top-p).
// Usage: bench_sampler [--vocab N] [--sigma S] [--reps R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/logit_scan.h"
#include "engine/sampler.h"

int main(int argc, char** argv) {
  size_t vocab = 248320;
  float sigma = 3.0f;
  int reps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--vocab") == 0) vocab = static_cast<size_t>(std::atoll(argv[i + 1]));
    if (std::strcmp(argv[i], "--sigma") == 0) sigma = static_cast<float>(std::atof(argv[i + 1]));
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  std::vector<float> row(vocab), work(vocab);
  std::mt19937 gen(1);
  std::normal_distribution<float> nd(0.0f, sigma);
  for (auto& x : row) x = nd(gen);
  using hearth::engine::SamplerParams;
  struct Mode {
    const char* name;
    SamplerParams p;
  };
  SamplerParams greedy, server, chat, top_p;
  server.temperature = 1.0f, server.top_k = 0, server.top_p = 1.0f, server.min_p = 0.0f;
  chat.temperature = 0.8f, chat.top_k = 40, chat.top_p = 0.95f, chat.min_p = 0.05f;
  top_p.temperature = 0.8f, top_p.top_k = 0, top_p.top_p = 0.95f, top_p.min_p = 0.0f;
  const Mode modes[] = {{"greedy", greedy}, {"server defaults (T 1)", server}, {"top-k 40 top-p .95 min-p .05", chat},
                        {"top-p .95 alone", top_p}};
  std::printf("vocab %zu, logits N(0, %.1f), %d samples each (the row copied before each, not timed)\n", vocab, sigma,
              reps);
  {
    double t = 0;
    int64_t sink = 0;
    for (int r = 0; r < reps; ++r) {
      const auto a = std::chrono::steady_clock::now();
      sink += hearth::engine::first_non_finite(row) + hearth::engine::argmax_first(row);
      t += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
    }
    std::printf("  %-30s %9.1f us  (%lld)\n", "non-finite check + argmax", t / reps, static_cast<long long>(sink));
  }
  for (const Mode& m : modes) {
    hearth::engine::Sampler s(m.p);
    double t = 0;
    int64_t sink = 0;
    for (int r = 0; r < reps; ++r) {
      work = row;
      const auto a = std::chrono::steady_clock::now();
      sink += s.sample(work, {});
      t += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
    }
    std::printf("  %-30s %9.1f us  (%lld)\n", m.name, t / reps, static_cast<long long>(sink));
  }
  return 0;
}

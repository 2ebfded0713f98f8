// Perplexity of a text file under a model, computed as llama.cpp's llama-perplexity
// computes it (its default mode), so the two can be set side by side: the whole text is
// tokenized once (with BOS where the vocabulary adds one), cut into chunks of --ctx
// tokens (the tail that does not fill a chunk is dropped), each chunk run on a fresh
// cache with its first token replaced by BOS (when the vocabulary adds one), and the
// tokens of each chunk's second half scored: position j in [ctx / 2, ctx - 1) predicts
// token j + 1; perplexity = exp(mean negative log-likelihood). Log-softmax in double.
// Used for docs/BENCHMARKS.md (KV cache types: --kv f16 / f32 / q8_0).
//
// Usage: perplexity MODEL.gguf TEXT_FILE [--ctx 512] [--kv f16|f32|q8_0] [--threads N] [--chunks N]
//                   [--tune key=value,...]
// Prints one line per chunk (the running estimate, as llama-perplexity) and a final
// line: "ppl <value> +/- <standard error> over <n> tokens".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/tune.h"
#include "format/gguf.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace {

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: perplexity MODEL.gguf TEXT_FILE [--ctx 512] [--kv f16|f32|q8_0] [--threads N] "
                         "[--chunks N] [--tune key=value,...]\n");
    return 2;
  }
  int64_t ctx = 512, max_chunks = -1;
  int threads = hearth::physical_core_count();
  hearth::ops::KvType kv = hearth::ops::KvType::F16;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--ctx") ctx = std::atoll(v.c_str());
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--chunks") max_chunks = std::atoll(v.c_str());
    else if (a == "--tune") hearth::tune::apply(v);
    else if (a == "--kv") {
      if (v == "f16") kv = hearth::ops::KvType::F16;
      else if (v == "f32") kv = hearth::ops::KvType::F32;
      else if (v == "q8_0") kv = hearth::ops::KvType::Q8_0;
      else throw std::runtime_error("--kv must be f16, f32 or q8_0");
    } else {
      throw std::runtime_error("unknown option " + a);
    }
  }
  if (ctx < 4) throw std::runtime_error("--ctx must be >= 4");
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot read ") + argv[2]);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  auto file = hearth::gguf::File::open(argv[1]);
  const auto tok = hearth::tokenizer::Tokenizer::from_gguf(file);
  hearth::cpu::CpuBackend backend(threads);
  const auto model = hearth::model::load_causal_lm(file, backend);
  const int64_t V = model->hparams().n_vocab;
  const std::vector<hearth::tokenizer::TokenId> ids = tok.encode(text);
  const bool bos = tok.vocab().add_bos && tok.vocab().bos != hearth::tokenizer::kNoToken;
  int64_t n_chunks = static_cast<int64_t>(ids.size()) / ctx;
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  if (n_chunks < 1) throw std::runtime_error("the text has fewer tokens than --ctx");
  std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, kv %s, %s\n", ids.size(),
               static_cast<long long>(n_chunks), static_cast<long long>(ctx), hearth::ops::kv_type_name(kv),
               backend.name().c_str());

  double nll = 0, nll2 = 0;
  int64_t count = 0;
  hearth::model::KvCache cache(backend, model->hparams(), ctx, kv);
  std::vector<float> logits;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * ctx, ids.begin() + (c + 1) * ctx);
    if (bos) chunk[0] = tok.vocab().bos;
    cache.clear();
    model->forward(cache, chunk, true, logits);
    for (int64_t j = ctx / 2; j < ctx - 1; ++j) {
      const float* row = logits.data() + j * V;
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double lp = static_cast<double>(row[ids[c * ctx + j + 1]]) - mx - std::log(sum);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    std::printf("[%lld] %.4f\n", static_cast<long long>(c + 1), std::exp(nll / static_cast<double>(count)));
    std::fflush(stdout);
  }
  // Standard error as llama-perplexity reports it: of the mean NLL, carried through exp.
  const double mean = nll / static_cast<double>(count);
  const double var = nll2 / static_cast<double>(count) - mean * mean;
  const double se = std::sqrt(std::max(0.0, var) / static_cast<double>(count - 1));
  const double ppl = std::exp(mean);
  std::printf("ppl %.4f +/- %.5f over %lld tokens (kv %s)\n", ppl, ppl * se, static_cast<long long>(count),
              hearth::ops::kv_type_name(kv));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perplexity: %s\n", e.what());
    return 1;
  }
}

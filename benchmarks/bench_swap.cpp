// What a preempted sequence costs `hearth serve` to bring back, both ways: recomputing its n
// positions (a prefill of n tokens in chunks of --chunk, as the scheduler re-admits it) against
// swapping its KV blocks out to host memory and back in (Backend::copy_to_host /
// copy_from_host over each layer's K and V of each block: the calls the engine's swap space
// makes, engine/serve_engine_swap.cpp). Medians over --reps repetitions, sizes interleaved.
//
// Usage: bench_swap MODEL.gguf [--threads N] [--sizes 128,512,2048] [--reps R] [--chunk C]
//                              [--kv f16|f32|q8_0] [--device cpu|cuda[:N]]
// Prints per size: the bytes swapped, median recompute time, median swap out + in time, and
// their ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_factory.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    const int v = std::atoi(item.c_str());
    if (v <= 0) throw std::runtime_error("bad size '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) throw std::runtime_error("empty size list");
  return out;
}

// A window on a pool layer's buffer for the back-end's copies.
class View final : public hearth::ops::Buffer {
 public:
  View(void* p, int64_t n) : p_(static_cast<float*>(p)), n_(n) {}
  float* data() override { return p_; }
  int64_t size() const override { return n_; }

 private:
  float* p_;
  int64_t n_;
};

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_swap MODEL.gguf [--threads N] [--sizes 128,512,2048] [--reps R] [--chunk C] "
                         "[--kv f16|f32|q8_0] [--device cpu|cuda[:N]]\n");
    return 2;
  }
  int threads = 2, reps = 5, chunk = 512;
  std::vector<int> sizes = {128, 512, 2048};
  hearth::ops::KvType kv_type = hearth::ops::KvType::F16;
  std::string device = "cpu";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--sizes") sizes = parse_list(v);
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--chunk") chunk = std::atoi(v.c_str());
    else if (a == "--kv")
      kv_type = v == "f32" ? hearth::ops::KvType::F32 : v == "q8_0" ? hearth::ops::KvType::Q8_0 : hearth::ops::KvType::F16;
    else if (a == "--device") device = v;
    else throw std::runtime_error("unknown option " + a);
  }
  if (threads < 1 || reps < 1 || chunk < 1) throw std::runtime_error("values must be positive");
  const hearth::gguf::File file = hearth::gguf::File::open(argv[1]);
  const std::unique_ptr<hearth::ops::Backend> backend = hearth::backends::make_backend(device, threads);
  const auto model = hearth::model::load_causal_lm(file, *backend);
  const hearth::model::Hparams& hp = model->hparams();
  constexpr int64_t kBlock = 16;
  const int max_n = *std::max_element(sizes.begin(), sizes.end());
  const int64_t n_blocks = (max_n + kBlock - 1) / kBlock;
  const bool recurrent = hp.n_recurrent_layers() > 0;
  hearth::model::KvPool pool(*backend, hp, kv_type, kBlock, n_blocks, recurrent ? 1 : 0);
  const uint64_t block_bytes = hearth::model::KvPool::bytes_per_block(hp, kv_type, kBlock);
  const int64_t n_layers = hp.n_kv_layers();
  const int64_t part = static_cast<int64_t>(block_bytes / (2 * static_cast<uint64_t>(n_layers)) / 4);  // floats
  const uint64_t state_bytes = recurrent ? static_cast<uint64_t>(pool.state_floats()) * 4 : 0;

  std::vector<int32_t> toks;
  for (int t = 0; t < max_n; ++t) toks.push_back(100 + (t * 104729) % (static_cast<int>(hp.n_vocab) - 200));
  hearth::model::SeqKv seq;
  for (int64_t b = 0; b < n_blocks; ++b) seq.blocks.push_back(static_cast<int32_t>(b));
  if (recurrent) seq.state_slot = 0;
  std::vector<float> logits;
  std::vector<uint8_t> host(static_cast<size_t>(n_blocks) * block_bytes + state_bytes);

  auto recompute = [&](int n) {
    seq.n_past = 0;
    if (recurrent) pool.clear_state(0);
    for (int at = 0; at < n; at += chunk) {
      const int k = std::min(chunk, n - at);
      const std::vector<hearth::model::BatchSeq> one = {{&seq, toks.data() + at, k, at + k == n}};
      model->forward_batch(pool, one, logits);
    }
  };
  // Out, then in, block by block and layer by layer, as the engine copies them.
  auto swap = [&](int n) {
    const int64_t nb = (n + kBlock - 1) / kBlock;
    for (int dir = 0; dir < 2; ++dir) {
      auto* dst = reinterpret_cast<float*>(host.data());
      for (int64_t b = 0; b < nb; ++b) {
        for (int64_t l = 0; l < n_layers; ++l) {
          const hearth::ops::KvLayer layer = pool.layer(l);
          View k(layer.k, part * n_blocks), v(layer.v, part * n_blocks);
          float* hk = dst + (b * n_layers + l) * 2 * part;
          if (dir == 0) {
            backend->copy_to_host(k, b * part, part, hk);
            backend->copy_to_host(v, b * part, part, hk + part);
          } else {
            backend->copy_from_host(hk, part, k, b * part);
            backend->copy_from_host(hk + part, part, v, b * part);
          }
        }
      }
      if (recurrent) {
        View s(pool.conv_state(0, 0), pool.state_floats());
        float* hs = reinterpret_cast<float*>(host.data() + static_cast<size_t>(n_blocks) * block_bytes);
        if (dir == 0) backend->copy_to_host(s, 0, pool.state_floats(), hs);
        else backend->copy_from_host(hs, pool.state_floats(), s, 0);
      }
    }
  };

  std::printf("bench_swap: %s, %s, %d threads, KV %s, prefill chunk %d, %d reps (medians)\n", argv[1],
              backend->name().c_str(), threads, hearth::ops::kv_type_name(kv_type), chunk, reps);
  std::vector<std::vector<double>> rec(sizes.size()), swp(sizes.size());
  recompute(std::min(max_n, 64));  // first touch of the weights and the pool
  swap(max_n);
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto t0 = Clock::now();
      recompute(sizes[i]);
      rec[i].push_back(ms_since(t0));
      t0 = Clock::now();
      swap(sizes[i]);
      swp[i].push_back(ms_since(t0));
    }
  }
  std::printf("%8s %12s %14s %16s %10s\n", "tokens", "swap bytes", "recompute ms", "swap out+in ms", "ratio");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>((sizes[i] + kBlock - 1) / kBlock) * block_bytes + state_bytes;
    const double a = median(rec[i]), b = median(swp[i]);
    std::printf("%8d %12llu %14.2f %16.3f %9.0fx\n", sizes[i], static_cast<unsigned long long>(bytes), a, b, a / b);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_swap: %s\n", e.what());
    return 1;
  }
}

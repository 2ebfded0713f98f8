// What a preempted sequence costs `hearth serve` to bring back, both ways: recomputing its n
// positions (a prefill of n tokens in chunks of --chunk, as the scheduler re-admits it) against
// swapping its KV blocks out to host memory and back in (Backend::copy_to_host /
// copy_from_host over each layer's K and V of each block: the calls the engine's swap space
// makes, engine/serve_engine_swap.cpp). Medians over --reps repetitions, sizes interleaved.
//
// With --disk DIR also the disk level (engine/serve_engine_swap_disk.cpp): the blocks copied
// out to one host buffer, written as a swap file by the KV disk tier's writer thread (the
// engine's KvDiskTier, in DIR), read back by its reader and copied in. The write is
// asynchronous in the server (no step waits for it) and is shown apart; a preempted sequence
// waits for the read and the copies. The read is timed twice: "cold", after the file's pages
// were written back and dropped from the page cache (fsync, POSIX_FADV_DONTNEED: the device's
// speed), and "warm", right after the write (the page cache's, what a server with free memory
// mostly sees).
//
// Usage: bench_swap MODEL.gguf [--threads N] [--sizes 128,512,2048] [--reps R] [--chunk C]
//                              [--kv f16|f32|q8_0] [--device cpu|cuda[:N]] [--disk DIR]
// Prints per size: the bytes swapped, median recompute time, median swap out + in time, and
// their ratio; with --disk, the disk level's medians and recompute / (copies + cold read).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend_factory.h"
#include "core/error.h"
#include "engine/kv_disk.h"
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
                         "[--kv f16|f32|q8_0] [--device cpu|cuda[:N]] [--disk DIR]\n");
    return 2;
  }
  int threads = 2, reps = 5, chunk = 512;
  std::vector<int> sizes = {128, 512, 2048};
  hearth::ops::KvType kv_type = hearth::ops::KvType::F16;
  std::string device = "cpu", disk_dir;
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
    else if (a == "--disk") disk_dir = v;
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
  // Out (dir 0) or in (dir 1), block by block and layer by layer, as the engine copies them.
  auto copy = [&](int n, int dir, uint8_t* buf) {
    const int64_t nb = (n + kBlock - 1) / kBlock;
    auto* dst = reinterpret_cast<float*>(buf);
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
      float* hs = reinterpret_cast<float*>(buf + static_cast<size_t>(nb) * block_bytes);
      if (dir == 0) backend->copy_to_host(s, 0, pool.state_floats(), hs);
      else backend->copy_from_host(hs, pool.state_floats(), s, 0);
    }
  };
  auto swap = [&](int n) {
    copy(n, 0, host.data());
    copy(n, 1, host.data());
  };
  auto swap_bytes = [&](int n) {
    return static_cast<uint64_t>((n + kBlock - 1) / kBlock) * block_bytes + state_bytes;
  };

  // The disk level, through the server's own tier.
  std::unique_ptr<hearth::engine::kvdisk::KvDiskTier> tier;
  if (!disk_dir.empty()) {
    hearth::engine::kvdisk::DiskConfig dc;
    dc.dir = disk_dir;
    dc.budget_bytes = 1ull << 30;
    dc.fingerprint = 0xbe9c5a9ull;
    dc.description = "bench_swap";
    dc.block_size = kBlock;
    dc.kv_payload_bytes = block_bytes;
    dc.state_payload_bytes = state_bytes;
    dc.queue_bytes = host.size() + 1;
    tier = std::make_unique<hearth::engine::kvdisk::KvDiskTier>(dc);
  }
  auto wait_swap = [&] {
    for (;;) {
      std::vector<hearth::engine::kvdisk::SwapResult> done = tier->take_swap_done();
      if (!done.empty()) {
        if (!done[0].ok) throw std::runtime_error("swap file: " + done[0].why);
        return std::move(done[0]);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };
  struct DiskTimes {
    double copies = 0, write = 0, cold = 0, warm = 0;
  };
  uint64_t next_id = 1;
  auto disk = [&](int n) {
    DiskTimes t;
    const std::vector<int32_t> seq_toks(toks.begin(), toks.begin() + n);
    for (int cold = 0; cold < 2; ++cold) {
      std::vector<uint8_t> payload(swap_bytes(n));
      auto t0 = Clock::now();
      copy(n, 0, payload.data());
      const double out_ms = ms_since(t0);
      const uint64_t id = next_id++;
      t0 = Clock::now();
      if (!tier->swap_write(id, seq_toks, std::move(payload))) throw std::runtime_error("the swap write was refused");
      wait_swap();
      const double write_ms = ms_since(t0);
      if (cold == 1) {
        const int fd = ::open(tier->swap_path(id).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw std::runtime_error("cannot open " + tier->swap_path(id));
        ::fsync(fd);
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
      t0 = Clock::now();
      tier->swap_read(id, seq_toks, swap_bytes(n));
      hearth::engine::kvdisk::SwapResult r = wait_swap();
      const double read_ms = ms_since(t0);
      t0 = Clock::now();
      copy(n, 1, r.payload.data());
      const double in_ms = ms_since(t0);
      (cold == 1 ? t.cold : t.warm) = read_ms;
      if (cold == 1) {
        t.copies = out_ms + in_ms;
        t.write = write_ms;
      }
    }
    return t;
  };

  std::printf("bench_swap: %s, %s, %d threads, KV %s, prefill chunk %d, %d reps (medians)\n", argv[1],
              backend->name().c_str(), threads, hearth::ops::kv_type_name(kv_type), chunk, reps);
  std::vector<std::vector<double>> rec(sizes.size()), swp(sizes.size());
  std::vector<std::vector<double>> d_copies(sizes.size()), d_write(sizes.size()), d_cold(sizes.size()),
      d_warm(sizes.size());
  recompute(std::min(max_n, 64));  // first touch of the weights and the pool
  swap(max_n);
  if (tier) disk(std::min(max_n, 64));
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto t0 = Clock::now();
      recompute(sizes[i]);
      rec[i].push_back(ms_since(t0));
      t0 = Clock::now();
      swap(sizes[i]);
      swp[i].push_back(ms_since(t0));
      if (tier) {
        const DiskTimes t = disk(sizes[i]);
        d_copies[i].push_back(t.copies);
        d_write[i].push_back(t.write);
        d_cold[i].push_back(t.cold);
        d_warm[i].push_back(t.warm);
      }
    }
  }
  std::printf("%8s %12s %14s %16s %10s\n", "tokens", "swap bytes", "recompute ms", "swap out+in ms", "ratio");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double a = median(rec[i]), b = median(swp[i]);
    std::printf("%8d %12llu %14.2f %16.3f %9.0fx\n", sizes[i], static_cast<unsigned long long>(swap_bytes(sizes[i])),
                a, b, a / b);
  }
  if (tier) {
    std::printf("disk level (%s): copies out + in, the file's write (writer thread, not waited for), its read "
                "cold and warm; ratio: recompute / (copies + cold read)\n",
                tier->swap_folder().c_str());
    std::printf("%8s %12s %14s %10s %10s %10s %12s %10s\n", "tokens", "swap bytes", "recompute ms", "copies ms",
                "write ms", "cold ms", "cold MB/s", "ratio");
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double a = median(rec[i]), c = median(d_copies[i]), cold = median(d_cold[i]);
      const uint64_t bytes = swap_bytes(sizes[i]);
      std::printf("%8d %12llu %14.2f %10.3f %10.3f %10.3f %12.0f %9.0fx   (warm read %.3f ms)\n", sizes[i],
                  static_cast<unsigned long long>(bytes), a, c, median(d_write[i]), cold,
                  static_cast<double>(bytes) / 1e6 / (cold / 1e3), a / (c + cold), median(d_warm[i]));
    }
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

// CUDA back-end: block copies beside the steps (Backend::copy_ranges_*_async on the copy
// streams, ordered against the compute stream by events) against the same work done
// synchronously, range by range, with copy_to_host / copy_from_host on the compute
// stream. Decode steps (CUDA graphs, replayed) run while:
//  - a download of a sequence's blocks is in flight, the next steps writing into its last
//    block (the download must hold the bytes from before them);
//  - an upload of other blocks runs over several rounds, then (after copy_fence) a
//    download of them over several rounds (the device lanes taking turns, the compute
//    stream waiting for the lane on the device);
//  - the first download's bytes are uploaded into a third sequence's blocks, which joins
//    the decoding once copy_done says the upload is in (or after copy_fence at the latest).
// The steps' logits, the downloads' bytes and the whole pool at the end must equal the
// synchronous run's bit for bit (the same kernels on the same data in the same batches).
// Shared set-up: parity_common.h.
#include <cstring>
#include <string>
#include <vector>

#include "parity_common.h"

namespace {

using namespace parity;

// A window on a pool layer's K or V buffer, for HostRange.
class View final : public ops::Buffer {
 public:
  View(void* p, int64_t n) : p_(static_cast<float*>(p)), n_(n) {}
  float* data() override { return p_; }
  int64_t size() const override { return n_; }

 private:
  float* p_;
  int64_t n_;
};

tiny::Spec copies_spec() {
  tiny::Spec s;
  s.name = "llama_copies";
  s.arch = "llama";
  s.n_embd = 512;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 1024;
  s.n_layer = 3;
  s.n_vocab = 1000;
  s.t_embd = s.t_q = s.t_k = s.t_o = s.t_gate = s.t_up = GgmlType::Q4_K;
  s.t_output = s.t_v = s.t_down = GgmlType::Q6_K;
  return s;
}

constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocks = 2048;        // 24 KiB a block: 48 MiB of pool
constexpr int64_t kOtherFirst = 200;     // blocks [200, 1700): the large upload and download
constexpr int64_t kOtherLast = 1700;
constexpr int kSteps = 14;
constexpr int kCJoins = 8;               // the step at which the copied sequence decodes too

struct CopyRun {
  std::vector<float> logits;                 // every step's, in order
  std::vector<uint8_t> first_download;       // sequence A's blocks 0-2 right after its prompt
  std::vector<uint8_t> big_download;         // blocks [kOtherFirst, kOtherLast) after the upload
  std::vector<uint8_t> pool;                 // every block at the end
  bool c_by_poll = false;                    // the copied sequence's upload was seen done by copy_done
};

CopyRun run_copies(model::CausalLm& m, bool async) {
  ops::Backend& be = gpu();
  const model::Hparams& hp = m.hparams();
  const int64_t V = hp.n_vocab;
  model::KvPool pool(be, hp, ops::KvType::F16, kBlockSize, kBlocks);
  pool.commit();  // zeros: rows a download reads before any step wrote them are the same in both runs
  const int64_t n_layers = hp.n_kv_layers();
  const uint64_t block_bytes = model::KvPool::bytes_per_block(hp, ops::KvType::F16, kBlockSize);
  const int64_t part = static_cast<int64_t>(block_bytes / (2 * static_cast<uint64_t>(n_layers)) / 4);  // floats
  std::vector<View> views;
  for (int64_t l = 0; l < n_layers; ++l) {
    views.emplace_back(pool.layer(l).k, part * kBlocks);
    views.emplace_back(pool.layer(l).v, part * kBlocks);
  }
  // Block b's bytes at host + i * block_bytes (each layer's K part, then its V part).
  auto ranges = [&](int64_t first, int64_t n, uint8_t* host) {
    std::vector<ops::HostRange> r;
    for (int64_t i = 0; i < n; ++i) {
      auto* h = reinterpret_cast<float*>(host + static_cast<size_t>(i) * block_bytes);
      for (size_t p = 0; p < views.size(); ++p) r.push_back({&views[p], (first + i) * part, part, h + p * part});
    }
    return r;
  };
  auto download = [&](int64_t first, int64_t n, std::vector<uint8_t>& out) -> ops::Backend::CopyId {
    out.assign(static_cast<size_t>(n) * block_bytes, 0xAB);
    const std::vector<ops::HostRange> r = ranges(first, n, out.data());
    if (async) return be.copy_ranges_to_host_async(r.data(), static_cast<int64_t>(r.size()));
    for (const ops::HostRange& x : r) be.copy_to_host(*x.buf, x.offset, x.n, x.host);
    return 0;
  };
  auto upload = [&](int64_t first, int64_t n, std::vector<uint8_t>& in) -> ops::Backend::CopyId {
    const std::vector<ops::HostRange> r = ranges(first, n, in.data());
    if (async) return be.copy_ranges_from_host_async(r.data(), static_cast<int64_t>(r.size()));
    for (const ops::HostRange& x : r) be.copy_from_host(x.host, x.n, *x.buf, x.offset);
    return 0;
  };

  CopyRun out;
  // A in blocks 0-3 (a 40-token prompt: its third block part full), B in 8-11, C (later,
  // A's copy) in 20-23.
  std::vector<model::SeqKv> kv(3);
  for (int64_t b = 0; b < 4; ++b) {
    kv[0].blocks.push_back(static_cast<int32_t>(b));
    kv[1].blocks.push_back(static_cast<int32_t>(8 + b));
    kv[2].blocks.push_back(static_cast<int32_t>(20 + b));
  }
  std::vector<int32_t> last(3);
  std::vector<float> lg;
  std::mt19937 rng(7);
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> prompt(s == 0 ? 40 : 23);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
    std::vector<model::BatchSeq> one{{&kv[s], prompt.data(), static_cast<int64_t>(prompt.size()), true}};
    m.forward_batch(pool, one, lg);
    last[s] = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    out.logits.insert(out.logits.end(), lg.begin(), lg.end());
  }
  // A's state now, for C: its blocks 0-2 (the steps below write A's block 2 from row 8 on).
  const ops::Backend::CopyId d1 = download(0, 3, out.first_download);
  const model::SeqKv a_at_copy = kv[0];
  const int32_t a_next = last[0];
  std::vector<uint8_t> other(static_cast<size_t>(kOtherLast - kOtherFirst) * block_bytes);
  {
    std::mt19937 bytes(11);
    for (auto& x : other) x = static_cast<uint8_t>(bytes());
  }
  ops::Backend::CopyId u1 = 0, d2 = 0, u2 = 0;
  std::vector<uint8_t> c_bytes;
  bool c_in = false;
  for (int step = 0; step < kSteps; ++step) {
    if (step == 1) u1 = upload(kOtherFirst, kOtherLast - kOtherFirst, other);
    if (step == 3) {
      if (async) be.copy_fence(u1);  // the download reads what the upload wrote
      d2 = download(kOtherFirst, kOtherLast - kOtherFirst, out.big_download);
    }
    if (step == 4) {
      // C gets A's blocks as they were after A's prompt (the download's bytes).
      if (async) be.copy_wait(d1);
      c_bytes = out.first_download;
      u2 = upload(20, 3, c_bytes);
      kv[2].n_past = a_at_copy.n_past;
      last[2] = a_next;
    }
    if (async && step > 4 && !c_in && be.copy_done(u2)) {
      c_in = true;
      out.c_by_poll = step <= kCJoins;
    }
    if (step == kCJoins && async && !c_in) be.copy_fence(u2);  // not seen done yet: the device waits
    std::vector<model::BatchSeq> batch;
    const int n = step >= kCJoins ? 3 : 2;
    for (int i = 0; i < n; ++i) batch.push_back({&kv[static_cast<size_t>(i)], &last[static_cast<size_t>(i)], 1, true});
    m.forward_batch(pool, batch, lg);
    for (int i = 0; i < n; ++i) {
      last[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(lg.begin() + i * V, lg.begin() + (i + 1) * V) -
                                                          (lg.begin() + i * V));
    }
    out.logits.insert(out.logits.end(), lg.begin(), lg.end());
    if (async) be.copy_done(d2);  // polled as the engine polls: finished when done, never waited for
  }
  if (async) be.copy_wait(std::max(u2, d2));
  // The whole pool, read range by range on the compute stream in both runs.
  out.pool.assign(static_cast<size_t>(kBlocks) * block_bytes, 0);
  for (const ops::HostRange& x : ranges(0, kBlocks, out.pool.data())) be.copy_to_host(*x.buf, x.offset, x.n, x.host);
  return out;
}

TEST(CudaParity, BlockCopiesBesideDecodeStepsMatchSynchronousCopies) {
  NEED_GPU();
  auto* cuda = dynamic_cast<hearth::cuda::CudaBackend*>(&gpu());
  ASSERT_NE(cuda, nullptr);
  cuda->set_graphs(true);
  const tiny::Spec s = copies_spec();
  const auto built = tiny::parse(tiny::build_writer(s), s.name + ".gguf");
  const auto m = model::load_causal_lm(*built->file, gpu());
  const CopyRun plain = run_copies(*m, false);
  const auto before = cuda->graph_stats();
  const CopyRun overlapped = run_copies(*m, true);
  const auto after = cuda->graph_stats();
  ASSERT_EQ(overlapped.logits.size(), plain.logits.size());
  for (size_t k = 0; k < plain.logits.size(); ++k) {
    ASSERT_EQ(overlapped.logits[k], plain.logits[k]) << "logit " << k << " (row " << k / s.n_vocab << ")";
  }
  EXPECT_TRUE(overlapped.first_download == plain.first_download) << "the download taken before the steps wrote A's block";
  ASSERT_EQ(overlapped.big_download.size(), plain.big_download.size());
  EXPECT_EQ(0, std::memcmp(overlapped.big_download.data(), plain.big_download.data(), plain.big_download.size()))
      << "the download of the uploaded blocks";
  ASSERT_EQ(overlapped.pool.size(), plain.pool.size());
  size_t first_diff = overlapped.pool.size();
  for (size_t i = 0; i < overlapped.pool.size() && first_diff == overlapped.pool.size(); ++i) {
    if (overlapped.pool[i] != plain.pool[i]) first_diff = i;
  }
  EXPECT_EQ(first_diff, overlapped.pool.size()) << "the pool at the end differs first at byte " << first_diff;
  std::cout << "block copies beside steps: " << after.replayed - before.replayed << " steps replayed, "
            << after.recorded - before.recorded << " recorded; the copied sequence's upload was "
            << (overlapped.c_by_poll ? "seen done by copy_done" : "fenced on the device") << " before it joined\n";
  EXPECT_GE(after.replayed - before.replayed, kSteps - 6) << "the decode steps should be graph replays";
}

// The contract's edges: ids increase, an empty copy is done, copy_done never waits and
// is true after copy_wait; a synchronous copy_ranges_from_host is visible to the next op.
TEST(CudaParity, BlockCopyIdsAndWaits) {
  NEED_GPU();
  ops::Backend& be = gpu();
  auto buf = be.alloc(1 << 20);
  std::vector<float> src = randn(1 << 20, 91), back(1 << 20, 0.0f);
  ops::HostRange up{buf.get(), 0, 1 << 20, src.data()};
  const ops::Backend::CopyId a = be.copy_ranges_from_host_async(&up, 1);
  ops::HostRange down{buf.get(), 0, 1 << 20, back.data()};
  be.copy_fence(a);
  const ops::Backend::CopyId b = be.copy_ranges_to_host_async(&down, 1);
  const ops::Backend::CopyId c = be.copy_ranges_to_host_async(nullptr, 0);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  be.copy_wait(c);
  EXPECT_TRUE(be.copy_done(a));
  EXPECT_TRUE(be.copy_done(c));
  EXPECT_EQ(0, std::memcmp(src.data(), back.data(), 4 * src.size()));
  std::vector<float> again = randn(1 << 20, 92), seen(1 << 20, 0.0f);
  ops::HostRange up2{buf.get(), 0, 1 << 20, again.data()};
  be.copy_ranges_from_host(&up2, 1);
  be.copy_to_host(*buf, 0, 1 << 20, seen.data());
  EXPECT_EQ(0, std::memcmp(again.data(), seen.data(), 4 * again.size()));
}

}  // namespace

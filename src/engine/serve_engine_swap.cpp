// Preemption by swapping (`hearth serve --kv-swap-bytes SIZE`). When the pool runs out
// of blocks the scheduler preempts its youngest running sequence; instead of dropping
// its KV and recomputing its prompt and output on re-admission, the engine may copy the
// sequence's blocks (and a hybrid model's recurrent state at that exact position) to a
// host swap space and copy them back at re-admission, after which it decodes on as if
// never interrupted.
//
// Which is cheaper is measured, not assumed: the engine keeps the prefill speed of its
// recent steps (tokens/s) and the bandwidth of its own block copies (bytes/s, from a
// calibration copy at start and then from every swap), and swaps a sequence of n_past
// positions when copying its bytes out and back in is estimated to take less than
// recomputing n_past tokens; also only while the swap space has room for it. Otherwise
// the sequence is recomputed (the scheduler's original path). The copies reuse the disk
// tier's block I/O (Backend::copy_to_host / copy_from_host on views of the pool), so
// every back-end and KV type works alike. A sequence the swap space has no room for may
// go to disk instead (--kv-disk with a swap share: serve_engine_swap_disk.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "engine/serve_engine.h"

namespace hearth::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Moving averages of measured speeds: recent steps count most (a machine's speed moves
// with load and context length), one odd step does not swing the decision.
double blend(double avg, double sample) { return avg <= 0 ? sample : 0.8 * avg + 0.2 * sample; }

// Steps of at least this many tokens measure the prefill speed; smaller ones (decode
// steps) only stand in until one has run.
constexpr int32_t kPrefillStepTokens = 16;

}  // namespace

bool swap_is_cheaper(uint64_t bytes, int64_t n_tokens, double copy_bytes_per_s, double prefill_tokens_per_s) {
  const double copy_s = copy_bytes_per_s > 0 ? 2.0 * static_cast<double>(bytes) / copy_bytes_per_s : 0.0;
  const double recompute_s = prefill_tokens_per_s > 0 ? static_cast<double>(n_tokens) / prefill_tokens_per_s
                                                      : std::numeric_limits<double>::infinity();
  return copy_s < recompute_s;
}

bool disk_swap_is_cheaper(uint64_t bytes, int64_t n_tokens, double copy_bytes_per_s, double read_bytes_per_s,
                          double prefill_tokens_per_s) {
  const auto b = static_cast<double>(bytes);
  const double copy_s = copy_bytes_per_s > 0 ? 2.0 * b / copy_bytes_per_s : 0.0;
  const double read_s = read_bytes_per_s > 0 ? b / read_bytes_per_s : 0.0;
  const double recompute_s = prefill_tokens_per_s > 0 ? static_cast<double>(n_tokens) / prefill_tokens_per_s
                                                      : std::numeric_limits<double>::infinity();
  return copy_s + read_s < recompute_s;
}

void SwapStats::add(const SwapStats& o) {
  swapped_out += o.swapped_out;
  swapped_in += o.swapped_in;
  bytes_out += o.bytes_out;
  bytes_in += o.bytes_in;
  recomputed += o.recomputed;
  recompute_no_room += o.recompute_no_room;
  recompute_cheaper += o.recompute_cheaper;
  bytes_held += o.bytes_held;
  capacity += o.capacity;
  seconds += o.seconds;
  copy_bytes_per_s = std::max(copy_bytes_per_s, o.copy_bytes_per_s);
  prefill_tokens_per_s = std::max(prefill_tokens_per_s, o.prefill_tokens_per_s);
  disk_out += o.disk_out;
  disk_in += o.disk_in;
  disk_bytes_out += o.disk_bytes_out;
  disk_bytes_in += o.disk_bytes_in;
  disk_fallbacks += o.disk_fallbacks;
  disk_bytes_held += o.disk_bytes_held;
  disk_capacity += o.disk_capacity;
  disk_read_bytes_per_s = std::max(disk_read_bytes_per_s, o.disk_read_bytes_per_s);
}

void ServeEngine::swap_init() {
  swap_disk_init();
  if (config_.kv_swap_bytes == 0 && swap_stats_.disk_capacity == 0) return;
  if (!init_block_copy()) {
    std::fprintf(stderr, "hearth: kv-swap: a KV block of this model is not whole floats per layer; swapping is off\n");
    return;
  }
  swap_stats_.capacity = config_.kv_swap_bytes;
  // A first bandwidth estimate before any swap: a few pool blocks copied out and back (the
  // pool holds nothing yet). Twice: the first pass also pays for first-touch page faults.
  const auto n = static_cast<BlockId>(std::min<int64_t>(config_.n_blocks, 8));
  std::vector<uint8_t> buf(static_cast<size_t>(n) * block_bytes_);
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = Clock::now();
    std::vector<BlockId> ids;
    std::vector<uint8_t*> at;
    for (BlockId b = 0; b < n; ++b) {
      ids.push_back(b);
      at.push_back(buf.data() + static_cast<size_t>(b) * block_bytes_);
    }
    read_blocks_to(ids.data(), n, at.data());
    write_blocks_from(ids.data(), n, at.data());
    const double s = seconds_since(t0);
    if (pass == 1 && s > 0) swap_stats_.copy_bytes_per_s = 2.0 * static_cast<double>(buf.size()) / s;
  }
  scheduler_.set_swap_policy([this](const SeqSlot& seq) { return swap_decide(seq); });
}

uint64_t ServeEngine::swap_bytes(int64_t n_past) const {
  const int64_t bs = config_.block_size;
  uint64_t b = static_cast<uint64_t>((n_past + bs - 1) / bs) * block_bytes_;
  if (scheduler_.config().recurrent) b += static_cast<uint64_t>(pool_.state_floats()) * 4;
  return b;
}

void ServeEngine::note_forward(int32_t n_tokens, double seconds) {
  if (n_tokens <= 0 || seconds <= 0) return;
  const double tps = n_tokens / seconds;
  if (n_tokens >= kPrefillStepTokens) {
    swap_stats_.prefill_tokens_per_s = blend(swap_stats_.prefill_tokens_per_s, tps);
  } else {
    small_step_tps_ = blend(small_step_tps_, tps);
  }
}

void ServeEngine::note_copy(uint64_t bytes, double seconds) {
  if (bytes == 0 || seconds <= 0) return;
  swap_stats_.copy_bytes_per_s = blend(swap_stats_.copy_bytes_per_s, static_cast<double>(bytes) / seconds);
}

bool ServeEngine::swap_decide(const SeqSlot& seq) {
  const uint64_t bytes = swap_bytes(seq.kv.n_past);
  const double tps = swap_stats_.prefill_tokens_per_s > 0 ? swap_stats_.prefill_tokens_per_s : small_step_tps_;
  if (swap_stats_.bytes_held + bytes > swap_stats_.capacity) {
    // No room in host memory: to disk, if there is room there and reading it back is cheaper.
    switch (swap_disk_decide(seq, bytes, tps)) {
      case DiskSwap::kSwap:
        return true;
      case DiskSwap::kRecomputeCheaper:
        ++swap_stats_.recompute_cheaper;
        return false;
      case DiskSwap::kNoRoom:
        break;
    }
    ++swap_stats_.recompute_no_room;
    return false;
  }
  // Copy out now and back in at re-admission, against prefilling n_past tokens again.
  if (!swap_is_cheaper(bytes, seq.kv.n_past, swap_stats_.copy_bytes_per_s, tps)) {
    ++swap_stats_.recompute_cheaper;
    return false;
  }
  swap_stats_.bytes_held += bytes;  // reserved now; the copy follows right after plan()
  return true;
}

void ServeEngine::swap_out(const StepPlan& plan) {
  for (const SwapCopy& c : plan.swap_out) {
    const auto t0 = Clock::now();
    auto found = swap_.find(c.seq);
    const bool to_disk = found != swap_.end() && found->second.disk;  // reserved on disk by swap_decide
    SwapEntry fresh;
    SwapEntry& e = to_disk ? found->second : fresh;
    e.bytes = swap_bytes(c.n_past);
    e.n_past = c.n_past;
    // To disk: one buffer, the blocks then the state, handed to the writer as it is.
    std::vector<uint8_t> state;
    if (c.state_slot >= 0) read_state(c.state_slot, state);
    const size_t kv_bytes = c.blocks.size() * block_bytes_;
    PendingCopy copy;
    copy.kind = PendingCopy::Kind::kSwapOut;
    copy.seq = c.seq;
    copy.to_disk = to_disk;
    copy.n_past = c.n_past;
    copy.kv.resize(kv_bytes + (to_disk ? state.size() : 0));
    if (to_disk) std::copy(state.begin(), state.end(), copy.kv.begin() + static_cast<std::ptrdiff_t>(kv_bytes));
    std::vector<uint8_t*> at;
    for (size_t i = 0; i < c.blocks.size(); ++i) at.push_back(copy.kv.data() + i * block_bytes_);
    // Downloaded beside the next steps (one batch of copies) into the PendingCopy's buffer;
    // swap_out_finished hands it to the entry or the disk writer once done.
    copy.id = read_blocks_async(c.blocks.data(), static_cast<int64_t>(c.blocks.size()), at.data());
    e.pending = copy.id;
    copies_.push_back(std::move(copy));
    const uint64_t moved = kv_bytes + state.size();
    const double s = seconds_since(t0);  // (the engine thread's part: all of it where copies complete at once)
    note_copy(moved, s);
    swap_stats_.seconds += s;
    if (to_disk) continue;  // counted when the writer takes it (swap_disk_out)
    e.state = std::move(state);
    swap_stats_.bytes_out += moved;
    ++swap_stats_.swapped_out;
    swap_[c.seq] = std::move(fresh);
  }
  copies_poll(false);  // a back-end whose copies complete at once: in place now
}

void ServeEngine::swap_out_finished(PendingCopy& c) {
  auto it = swap_.find(c.seq);
  if (it == swap_.end() || it->second.pending != c.id) return;  // the sequence ended meanwhile
  SwapEntry& e = it->second;
  e.pending = 0;
  if (c.to_disk) {
    swap_disk_out(c.seq, std::move(c.kv), c.n_past);
  } else {
    e.kv = std::move(c.kv);
  }
}

void ServeEngine::swap_in(const StepPlan& plan) {
  for (const SwapCopy& c : plan.swap_in) {
    auto it = swap_.find(c.seq);
    if (it == swap_.end() || it->second.stage != SwapEntry::Stage::kRam) {
      fail(ErrorKind::kInternal, "kv-swap", "sequence " + std::to_string(c.seq) + " has nothing in the swap space");
    }
    copies_wait(it->second.pending);  // its copy out is still running (rare: out and back in at once)
    const auto t0 = Clock::now();
    SwapEntry& e = it->second;
    uint64_t moved = 0;
    PendingCopy copy;
    copy.kind = PendingCopy::Kind::kSwapIn;
    copy.seq = c.seq;
    copy.kv = std::move(e.kv);  // the upload's source until it is done
    std::vector<uint8_t*> at;
    for (size_t i = 0; i < c.blocks.size(); ++i) {
      at.push_back(copy.kv.data() + (static_cast<size_t>(c.first) + i) * block_bytes_);
      moved += block_bytes_;
    }
    copy.id = write_blocks_async(c.blocks.data(), static_cast<int64_t>(c.blocks.size()), at.data());
    // This very step runs the sequence: it waits for the upload on the device.
    model_.backend().copy_fence(copy.id);
    copies_.push_back(std::move(copy));
    if (c.state_slot >= 0) {
      write_state(c.state_slot, e.state);
      moved += e.state.size();
    }
    const double s = seconds_since(t0);
    note_copy(moved, s);
    swap_stats_.seconds += s;
    swap_stats_.bytes_in += moved;
    ++swap_stats_.swapped_in;
    (e.disk ? swap_stats_.disk_bytes_held : swap_stats_.bytes_held) -= e.bytes;
    swap_.erase(it);
  }
  copies_poll(false);
}

void ServeEngine::swap_drop(uint64_t id) {
  auto it = swap_.find(id);
  if (it == swap_.end()) return;
  const SwapEntry& e = it->second;
  if (e.disk) {
    swap_stats_.disk_bytes_held -= e.bytes;
    // A file written, being written or read (the reader removes what it read; the
    // writer what is left); a write still queued is taken back.
    // (Not while its copy out runs: nothing was handed to the writer yet.)
    if (e.stage != SwapEntry::Stage::kRam && e.pending == 0 && disk_) disk_->swap_remove(id);
  } else {
    swap_stats_.bytes_held -= e.bytes;
  }
  swap_.erase(it);
}

}  // namespace hearth::engine

// The disk level of preemption by swapping (EngineConfig::kv_swap_disk_bytes, a share of
// the KV disk tier's --kv-disk-bytes). A preempted sequence that the host swap space has
// no room for goes to the tier's folder instead, when reading it back is estimated to
// cost less than recomputing it (disk_swap_is_cheaper: the measured copy bandwidth, the
// tier's measured read throughput and the engine's measured prefill speed).
//
// Out: its blocks (and a hybrid model's live state) are copied to one host buffer in the
// step that preempts it, as for the host swap space (the pool must be read before
// anything writes over it), and handed to the tier's writer thread: no step waits for
// the disk. In: when the scheduler could re-admit it (its blocks are free), it is gated
// and its file is read by the tier's reader while other requests run; the copy then
// sits in host memory like any swapped sequence and the next admission copies it back
// (swap_in). A file is private to its sequence: removed once read or when the sequence
// ends, never seen by prefix lookups (kv_disk.h).
//
// Faults: a write or read that fails (a full disk, an I/O error, a folder made
// read-only: the tier is then disabled, as for prefix files) or a file that fails its
// checks (corrupt, torn) sends the sequence back to be recomputed from its tokens, with
// a log line and hearth_kv_swap_disk_fallbacks_total: never a wrong output.
#include <cstdio>

#include "engine/serve_engine.h"

namespace hearth::engine {

void ServeEngine::swap_disk_init() {
  if (!disk_ || config_.kv_swap_disk_bytes == 0) return;
  if (disk_->swap_folder().empty()) return;  // logged by the tier
  swap_stats_.disk_capacity = config_.kv_swap_disk_bytes;
  scheduler_.set_swap_ready([this](SeqSlot& seq) { return swap_ready(seq); });
}

ServeEngine::DiskSwap ServeEngine::swap_disk_decide(const SeqSlot& seq, uint64_t bytes, double prefill_tps) {
  if (swap_stats_.disk_capacity == 0 || !disk_ || !disk_->enabled()) return DiskSwap::kNoRoom;
  if (swap_stats_.disk_bytes_held + bytes > swap_stats_.disk_capacity || !disk_->swap_room(bytes)) {
    return DiskSwap::kNoRoom;
  }
  swap_stats_.disk_read_bytes_per_s = disk_->read_bytes_per_s();
  if (!disk_swap_is_cheaper(bytes, seq.kv.n_past, swap_stats_.copy_bytes_per_s, swap_stats_.disk_read_bytes_per_s,
                            prefill_tps)) {
    return DiskSwap::kRecomputeCheaper;
  }
  // Reserved now; swap_out fills the entry right after plan().
  SwapEntry& e = swap_[seq.id];
  e = SwapEntry{};
  e.disk = true;
  e.stage = SwapEntry::Stage::kWriting;
  e.bytes = bytes;
  e.n_past = seq.kv.n_past;
  swap_stats_.disk_bytes_held += bytes;
  return DiskSwap::kSwap;
}

void ServeEngine::swap_disk_out(uint64_t id, std::vector<uint8_t> payload, int64_t n_past) {
  SeqSlot* seq = scheduler_.find(id);
  const uint64_t n = payload.size();
  if (seq == nullptr) {
    swap_drop(id);
    return;
  }
  std::vector<int32_t> tokens(seq->tokens.begin(), seq->tokens.begin() + n_past);
  if (!disk_->swap_write(id, std::move(tokens), std::move(payload))) {
    // The queue filled (or the tier was disabled) since the decision: recomputed after all.
    auto it = swap_.find(id);
    swap_stats_.disk_bytes_held -= it->second.bytes;
    swap_.erase(it);
    seq->swapped = false;
    seq->swap_n_past = 0;
    ++swap_stats_.recompute_no_room;
    return;
  }
  swap_stats_.bytes_out += n;
  ++swap_stats_.swapped_out;
  ++swap_stats_.disk_out;
}

bool ServeEngine::swap_ready(SeqSlot& seq) {
  auto it = swap_.find(seq.id);
  if (it == swap_.end() || !it->second.disk || it->second.stage == SwapEntry::Stage::kRam) return true;
  SwapEntry& e = it->second;
  e.resume = true;
  if (e.stage == SwapEntry::Stage::kOnDisk) swap_disk_read(seq.id);
  return false;  // gated until swap_poll has its copy (or gives up on it)
}

void ServeEngine::swap_disk_read(uint64_t id) {
  SwapEntry& e = swap_.at(id);
  const SeqSlot* seq = scheduler_.find(id);
  if (seq == nullptr) return;
  e.stage = SwapEntry::Stage::kReading;
  const uint64_t payload = swap_bytes(e.n_past);
  disk_->swap_read(id, std::vector<int32_t>(seq->tokens.begin(), seq->tokens.begin() + e.n_past), payload);
}

void ServeEngine::swap_fallback(uint64_t id, const std::string& why) {
  std::fprintf(stderr, "hearth: kv-swap: sequence %llu is recomputed, its disk swap failed: %s\n",
               static_cast<unsigned long long>(id), why.c_str());
  std::fflush(stderr);
  auto it = swap_.find(id);
  if (it != swap_.end()) {
    swap_stats_.disk_bytes_held -= it->second.bytes;
    swap_.erase(it);
  }
  ++swap_stats_.disk_fallbacks;
  if (SeqSlot* seq = scheduler_.find(id)) {
    // Back to the scheduler's original path: re-admitted from its tokens (nothing held).
    seq->swapped = false;
    seq->swap_n_past = 0;
    seq->gated = false;
  }
}

void ServeEngine::swap_poll() {
  if (!disk_ || swap_stats_.disk_capacity == 0) return;
  for (kvdisk::SwapResult& r : disk_->take_swap_done()) {
    auto it = swap_.find(r.id);
    if (it == swap_.end() || !it->second.disk) continue;  // the sequence ended meanwhile
    SwapEntry& e = it->second;
    if (!r.ok) {
      swap_fallback(r.id, r.why);
      continue;
    }
    if (!r.read) {
      e.stage = SwapEntry::Stage::kOnDisk;
      swap_stats_.disk_bytes_out += r.bytes;
      if (e.resume) swap_disk_read(r.id);
      continue;
    }
    // Read back and checked: in host memory now, the blocks then the state.
    const size_t state_bytes = scheduler_.config().recurrent ? static_cast<size_t>(pool_.state_floats()) * 4 : 0;
    const size_t kv_bytes = r.payload.size() - state_bytes;
    e.state.assign(r.payload.begin() + static_cast<std::ptrdiff_t>(kv_bytes), r.payload.end());
    r.payload.resize(kv_bytes);
    e.kv = std::move(r.payload);
    e.stage = SwapEntry::Stage::kRam;
    swap_stats_.disk_bytes_in += r.bytes;
    ++swap_stats_.disk_in;
    swap_stats_.seconds += r.seconds;
    swap_stats_.disk_read_bytes_per_s = disk_->read_bytes_per_s();
    if (SeqSlot* seq = scheduler_.find(r.id)) seq->gated = false;
  }
}

}  // namespace hearth::engine

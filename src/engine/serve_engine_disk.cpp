// The KV disk tier's side of the engine (see engine/kv_disk.h): what leaves the pool is
// copied to the host and queued for the writer; what a new request's prefix finds on
// disk is read by the tier's reader while the request waits (gated: others are admitted
// past it, no step waits), then put back into the pool as cached prefix blocks, so that
// the scheduler's admission finds it like any other cached prefix.
//
// The pool is reached only through the Backend interface (copy_to_host /
// copy_from_host over a view of the pool's buffers), so this works on every back-end and
// for every KV type: a block is the bytes the pool holds, layer by layer.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/tune.h"
#include "engine/kv_disk_fingerprint.h"
#include "engine/serve_engine.h"
#include "engine/serve_engine_live.h"

namespace hearth::engine {
namespace {

using kvdisk::Key;
using kvdisk::Kind;

// A window on back-end memory the engine does not own (a pool layer's K or V buffer, a
// state slot), for copy_to_host / copy_from_host.
class BufferView final : public ops::Buffer {
 public:
  BufferView(void* p, int64_t n_floats) : p_(static_cast<float*>(p)), n_(n_floats) {}
  float* data() override { return p_; }
  int64_t size() const override { return n_; }

 private:
  float* p_;
  int64_t n_;
};

}  // namespace

bool ServeEngine::init_block_copy() {
  if (block_bytes_ != 0) return true;
  const model::Hparams& hp = model_.hparams();
  const int64_t n_layers = hp.n_kv_layers();
  const uint64_t block_bytes = model::KvPool::bytes_per_block(hp, config_.kv_type, config_.block_size);
  if (n_layers <= 0 || block_bytes % (8 * static_cast<uint64_t>(n_layers)) != 0) return false;
  disk_part_bytes_ = block_bytes / (2 * static_cast<uint64_t>(n_layers));
  disk_layer_floats_ = static_cast<int64_t>(disk_part_bytes_ / 4) * config_.n_blocks;
  block_bytes_ = block_bytes;
  return true;
}

void ServeEngine::disk_init() {
  if (config_.kv_disk_dir.empty()) return;
  const model::Hparams& hp = model_.hparams();
  const uint64_t block_bytes = model::KvPool::bytes_per_block(hp, config_.kv_type, config_.block_size);
  if (!init_block_copy()) {
    fail(ErrorKind::kUnsupported, "kv-disk",
         "a KV block of " + std::to_string(block_bytes) + " bytes over " + std::to_string(hp.n_kv_layers()) +
             " layers is not whole floats per layer; --kv-disk cannot copy it");
  }
  kvdisk::FingerprintParts fp;
  fp.model = config_.kv_disk_model;
  fp.projector = config_.kv_disk_projector;
  fp.kv_type = ops::kv_type_name(config_.kv_type);
  fp.block_size = config_.block_size;
  fp.kv_block_bytes = block_bytes;
  fp.state_bytes = scheduler_.config().recurrent ? model::KvPool::bytes_per_state(hp) : 0;
  // The swap share of the budget (serve_engine_swap_disk.cpp) is not the prefix files'.
  if (config_.kv_swap_disk_bytes >= config_.kv_disk_bytes) {
    fail(ErrorKind::kInvalidInput, "kv-disk",
         "the disk swap share (" + std::to_string(config_.kv_swap_disk_bytes) + " bytes) must be smaller than the " +
             "disk budget (" + std::to_string(config_.kv_disk_bytes) + " bytes)");
  }
  kvdisk::DiskConfig dc;
  dc.dir = config_.kv_disk_dir;
  dc.budget_bytes = config_.kv_disk_bytes - config_.kv_swap_disk_bytes;
  dc.fingerprint = kvdisk::fingerprint(fp);
  dc.description = kvdisk::describe(fp, config_.kv_disk_model_name);
  dc.block_size = static_cast<uint32_t>(config_.block_size);
  dc.kv_payload_bytes = block_bytes;
  dc.state_payload_bytes = fp.state_bytes;
  dc.read_threads = static_cast<size_t>(tune::get(tune::kKvDiskThreads));
  disk_ = std::make_unique<kvdisk::KvDiskTier>(std::move(dc));
  disk_->set_on_done([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disk_ready_ = true;
    }
    cv_.notify_all();
  });
  blocks_.set_spill(true);
}

void ServeEngine::read_block(BlockId b, std::vector<uint8_t>& out) {
  out.resize(block_bytes_);
  read_block_to(b, out.data());
}

void ServeEngine::block_ranges(const BlockId* ids, int64_t n_ids, uint8_t* const* host,
                               std::vector<ops::HostRange>& out) {
  const int64_t n = static_cast<int64_t>(disk_part_bytes_ / 4);
  const int64_t n_layers = model_.hparams().n_kv_layers();
  views_.clear();
  views_.reserve(static_cast<size_t>(2 * n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    const ops::KvLayer layer = pool_.layer(l);
    views_.push_back(std::make_unique<BufferView>(layer.k, disk_layer_floats_));
    views_.push_back(std::make_unique<BufferView>(layer.v, disk_layer_floats_));
  }
  out.clear();
  out.reserve(static_cast<size_t>(n_ids * 2 * n_layers));
  for (int64_t i = 0; i < n_ids; ++i) {
    auto* h = reinterpret_cast<float*>(host[i]);
    for (int64_t part = 0; part < 2 * n_layers; ++part) {
      out.push_back({views_[static_cast<size_t>(part)].get(), ids[i] * n, n, h + part * n});
    }
  }
}

void ServeEngine::read_block_to(BlockId b, uint8_t* out) { read_blocks_to(&b, 1, &out); }

void ServeEngine::write_block_from(BlockId b, const uint8_t* in) {
  auto* p = const_cast<uint8_t*>(in);  // only read: the ranges' host side is the source
  write_blocks_from(&b, 1, &p);
}

void ServeEngine::read_blocks_to(const BlockId* ids, int64_t n_ids, uint8_t* const* out) {
  std::vector<ops::HostRange> ranges;
  block_ranges(ids, n_ids, out, ranges);
  model_.backend().copy_ranges_to_host(ranges.data(), static_cast<int64_t>(ranges.size()));
}

void ServeEngine::write_blocks_from(const BlockId* ids, int64_t n_ids, uint8_t* const* in) {
  std::vector<ops::HostRange> ranges;
  block_ranges(ids, n_ids, in, ranges);
  model_.backend().copy_ranges_from_host(ranges.data(), static_cast<int64_t>(ranges.size()));
}

void ServeEngine::read_state(int32_t slot, std::vector<uint8_t>& out) {
  const int64_t n = pool_.state_floats();
  out.resize(static_cast<size_t>(n) * 4);
  BufferView s(pool_.conv_state(slot, 0), n);
  model_.backend().copy_to_host(s, 0, n, reinterpret_cast<float*>(out.data()));
}

void ServeEngine::write_state(int32_t slot, std::span<const uint8_t> in) {
  const int64_t n = pool_.state_floats();
  BufferView s(pool_.conv_state(slot, 0), n);
  model_.backend().copy_from_host(reinterpret_cast<const float*>(in.data()), n, s, 0);
}

void ServeEngine::spill_pending() {
  if (!disk_) return;
  std::vector<Spill> spills = blocks_.take_spills();
  if (spills.empty() || !disk_->enabled()) return;
  const uint64_t kv_bytes = disk_part_bytes_ * 2 * static_cast<uint64_t>(model_.hparams().n_kv_layers());
  std::vector<int32_t> slots_seen;
  // The KV blocks first, in one batch of copies; then they are offered in order.
  std::vector<kvdisk::WriteJob> kv_jobs;
  std::vector<BlockId> kv_ids;
  std::vector<uint8_t*> kv_dst;
  std::vector<char> taken(spills.size(), 0);  // its KV block is among kv_jobs
  uint64_t queued = 0;
  for (size_t i = 0; i < spills.size(); ++i) {
    const Spill& s = spills[i];
    if (s.kv && disk_->wants(Key{s.hash, Kind::kKv}, queued + kv_bytes)) {
      kv_jobs.push_back({Kind::kKv, s.hash, s.parent_hash, s.tokens, std::vector<uint8_t>(block_bytes_)});
      kv_ids.push_back(s.block);
      taken[i] = 1;
      queued += kv_bytes;
    }
  }
  if (!kv_jobs.empty()) {
    // Downloaded beside the next steps; offered to the writer, in order, once done
    // (copy_finished). Moving the jobs keeps their payloads where the copy writes.
    for (kvdisk::WriteJob& job : kv_jobs) kv_dst.push_back(job.payload.data());
    PendingCopy c;
    c.kind = PendingCopy::Kind::kSpill;
    c.id = read_blocks_async(kv_ids.data(), static_cast<int64_t>(kv_ids.size()), kv_dst.data());
    c.jobs = std::move(kv_jobs);
    copies_.push_back(std::move(c));
  }
  for (size_t i = 0; i < spills.size(); ++i) {
    Spill& s = spills[i];
    if (taken[i]) {
      // queued above
    } else if (s.kv && !disk_->has(Key{s.hash, Kind::kKv})) {
      disk_->note_dropped();  // the write queue is full
    }
    if (s.snapshot < 0) continue;
    // A slot spilled twice before the copies that reuse it ran holds the first one's state.
    if (std::find(slots_seen.begin(), slots_seen.end(), s.snapshot) != slots_seen.end()) continue;
    slots_seen.push_back(s.snapshot);
    const uint64_t st_bytes = static_cast<uint64_t>(pool_.state_floats()) * 4;
    if (disk_->wants(Key{s.hash, Kind::kState}, st_bytes)) {
      kvdisk::WriteJob job{Kind::kState, s.hash, s.parent_hash, std::move(s.tokens), {}};
      read_state(s.snapshot, job.payload);
      disk_->offer(std::move(job));
    } else if (!disk_->has(Key{s.hash, Kind::kState})) {
      disk_->note_dropped();
    }
  }
  copies_poll(false);  // a back-end whose copies complete at once: offered now
}

void ServeEngine::disk_prefetch(SeqSlot& seq) {
  if (!disk_ || !disk_->enabled()) return;
  const int64_t bs = config_.block_size;
  const auto max_blocks = static_cast<int32_t>((static_cast<int64_t>(seq.tokens.size()) - 1) / bs);
  if (max_blocks <= 0) return;
  const PrefixProbe p = blocks_.probe_prefix(seq.tokens, max_blocks);
  const auto n = static_cast<int32_t>(p.hashes.size());
  const int32_t mem = p.n_matched;
  int32_t reach = mem;  // memory, then disk, block after block
  while (reach < n && disk_->on_disk(Key{p.hashes[static_cast<size_t>(reach)], Kind::kKv})) ++reach;
  auto parent = [&](int32_t i) { return i == 0 ? uint64_t{0} : p.hashes[static_cast<size_t>(i - 1)]; };
  kvdisk::ReadJob job;
  job.seq_id = seq.id;
  int32_t last = -1;  // the last block read
  if (!scheduler_.config().recurrent) {
    if (reach == mem) return;
    for (int32_t i = mem; i < reach; ++i) job.items.push_back({Kind::kKv, i, p.hashes[static_cast<size_t>(i)], parent(i)});
    seq.disk_from = mem;
    last = reach - 1;
  } else {
    // A hybrid model resumes from a snapshot: the deepest block reachable that has one
    // (in memory or on disk), with the KV blocks before it.
    int32_t mem_snap = -1;
    for (int32_t i = 0; i < mem; ++i) {
      if (p.snapshots[static_cast<size_t>(i)] >= 0) mem_snap = i;
    }
    int32_t d = -1;
    for (int32_t i = reach - 1; i > mem_snap; --i) {
      if (disk_->on_disk(Key{p.hashes[static_cast<size_t>(i)], Kind::kState})) {
        d = i;
        break;
      }
    }
    if (d < 0) return;
    for (int32_t i = mem; i <= d; ++i) job.items.push_back({Kind::kKv, i, p.hashes[static_cast<size_t>(i)], parent(i)});
    job.items.push_back({Kind::kState, d, p.hashes[static_cast<size_t>(d)], parent(d)});
    seq.disk_from = mem_snap + 1;
    last = d;
  }
  job.tokens.assign(seq.tokens.begin(), seq.tokens.begin() + (last + 1) * bs);
  seq.gated = true;
  seq.disk_loaded = true;
  disk_->read(std::move(job));
}

void ServeEngine::disk_install() {
  if (!disk_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disk_ready_ = false;
  }
  std::vector<kvdisk::ReadResult> done = disk_->take_done();
  const int64_t bs = config_.block_size;
  // A job comes in pieces (kv_disk.h): each is put into the pool as it comes, after the
  // blocks of the pieces before it, while the reader reads the next; the sequence waits
  // (gated) until the last.
  for (kvdisk::ReadResult& r : done) {
    const auto t_install = std::chrono::steady_clock::now();
    const std::vector<int32_t>& tokens = r.tokens();
    const auto n_blocks = static_cast<int32_t>(static_cast<int64_t>(tokens.size()) / bs);
    // The chain so far in memory (with the earlier pieces' blocks) is held while blocks
    // are put after it (an allocation could otherwise evict its head).
    PrefixMatch held = blocks_.match_prefix(tokens, n_blocks, false);
    std::vector<BlockId> chain = held.blocks;
    std::vector<uint64_t> hashes = held.hashes;
    bool kv_stopped = false;
    std::vector<BlockId> pending_ids;
    std::vector<uint8_t*> pending_src;
    for (size_t i = 0; i < r.items.size(); ++i) {
      const kvdisk::ReadItem& item = r.items[i];
      const auto b = static_cast<size_t>(item.block);
      if (item.kind == Kind::kKv) {
        if (kv_stopped || b < chain.size()) continue;  // in memory already (computed meanwhile)
        const uint64_t parent = chain.empty() ? 0 : hashes.back();
        if (b != chain.size() || parent != item.parent_hash) {
          kv_stopped = true;  // a gap: what follows is unreachable
          continue;
        }
        const BlockId id = blocks_.allocate();
        if (id == kNoBlock) {
          kv_stopped = true;  // every block in use: the rest is recomputed
          continue;
        }
        spill_pending();  // the block allocate() evicted may be `id` itself
        // Copied in one batch below: nothing runs on the pool before (the chain is held).
        pending_ids.push_back(id);
        pending_src.push_back(r.payload(i).data());
        const std::span<const int32_t> toks(tokens.data() + b * static_cast<size_t>(bs), static_cast<size_t>(bs));
        hashes.push_back(blocks_.commit_full(id, parent, toks));
        chain.push_back(id);
      } else {
        if (b >= chain.size() || blocks_.meta(chain[b]).snapshot >= 0) continue;
        const int32_t slot = scheduler_.adopt_snapshot(chain[b]);
        if (slot < 0) continue;
        spill_pending();  // the snapshot whose slot this was
        write_state(slot, r.payload(i));
      }
    }
    // Uploaded beside the next steps; the blocks stay held (the chain with them) and the
    // sequence gated until the copy is done (install_finished). The piece's memory is
    // the copy's source until then.
    PendingCopy c;
    c.kind = PendingCopy::Kind::kInstall;
    c.t0 = t_install;
    if (!pending_ids.empty()) {
      c.id = write_blocks_async(pending_ids.data(), static_cast<int64_t>(pending_ids.size()), pending_src.data());
    }
    c.blocks = std::move(pending_ids);
    c.held = std::move(chain);
    c.read = std::move(r);
    copies_.push_back(std::move(c));
  }
  copies_poll(false);  // a back-end whose copies complete at once: installed now
}

void ServeEngine::install_finished(PendingCopy& c) {
  kvdisk::ReadResult& r = c.read;
  // Released last first, like a finished sequence: the head stays cached longest.
  for (auto it = c.held.rbegin(); it != c.held.rend(); ++it) blocks_.release(*it);
  const auto now = std::chrono::steady_clock::now();
  const double install_s = std::chrono::duration<double>(now - c.t0).count();
  disk_->release(std::move(r.memory));  // the copies are done with it
  DiskHit& hit = disk_hits_[r.seq_id];
  hit.blocks += c.blocks.size();
  hit.bytes += r.bytes;
  hit.install_s += install_s;
  ++hit.pieces;
  if (!r.last) return;
  if (observer_ != nullptr) observer_->on_disk_read(r.seconds);
  // Where a disk hit's time goes: the read by the tier's threads, the copies into the
  // pool (beside the steps, overlapped with the read but for the last piece's), and
  // before the read, the request's wait for it; the prompt's remaining tokens are then
  // computed as usual.
  double before_ms = -1;  // from the request's arrival to the read's start
  if (auto it = live_.find(r.seq_id); it != live_.end()) {
    before_ms = std::chrono::duration<double, std::milli>(c.t0 - it->second->channel->created).count() -
                r.seconds * 1e3;
  }
  std::fprintf(stderr,
               "hearth: kv-disk: %zu blocks (%.1f MiB) read in %.3f s, put into the pool in %.3f s (%d pieces; "
               "the last %.3f s after the read), %.1f ms after the request arrived; %zu threads spent %.3f s "
               "opening, %.3f s %s, %.3f s checking\n",
               hit.blocks, static_cast<double>(hit.bytes) / (1 << 20), r.seconds, hit.install_s, hit.pieces, install_s,
               before_ms, r.threads, r.open_s, r.read_s, r.mapped ? "mapping" : "reading", r.check_s);
  disk_hits_.erase(r.seq_id);
  if (SeqSlot* seq = scheduler_.find(r.seq_id)) seq->gated = false;
}

void ServeEngine::disk_flush() {
  if (!disk_ || !disk_->enabled()) return;
  const auto t0 = std::chrono::steady_clock::now();
  spill_pending();
  copies_poll(true);  // every copy in flight finished (spills offered, hits installed)
  uint64_t n_kv = 0, n_state = 0;
  // KV blocks are copied out in batches of up to 256 (one wait each on a GPU).
  std::vector<kvdisk::WriteJob> batch;
  std::vector<BlockId> batch_ids;
  auto put_batch = [&] {
    std::vector<uint8_t*> dst;
    for (kvdisk::WriteJob& job : batch) dst.push_back(job.payload.data());
    read_blocks_to(batch_ids.data(), static_cast<int64_t>(batch_ids.size()), dst.data());
    for (kvdisk::WriteJob& job : batch) disk_->put(std::move(job));
    n_kv += batch.size();
    batch.clear();
    batch_ids.clear();
  };
  auto keep = [&](BlockId id) {
    const BlockMeta& m = blocks_.meta(id);
    if (!m.hashed || !disk_->enabled()) return;
    const bool queued = std::any_of(batch.begin(), batch.end(), [&](const kvdisk::WriteJob& j) { return j.hash == m.hash; });
    if (!queued && !disk_->has(Key{m.hash, Kind::kKv})) {
      batch.push_back({Kind::kKv, m.hash, m.parent_hash, m.tokens, std::vector<uint8_t>(block_bytes_)});
      batch_ids.push_back(id);
      if (batch.size() >= 256) put_batch();
    }
    if (m.snapshot >= 0 && !disk_->has(Key{m.hash, Kind::kState})) {
      kvdisk::WriteJob job{Kind::kState, m.hash, m.parent_hash, m.tokens, {}};
      read_state(m.snapshot, job.payload);
      disk_->put(std::move(job));
      ++n_state;
    }
  };
  // Least recently used first: the files' times then keep the memory tier's order.
  for (BlockId id : blocks_.cached_lru()) keep(id);
  for (BlockId id = 0; id < blocks_.n_blocks(); ++id) {
    if (blocks_.meta(id).ref > 0) keep(id);
  }
  if (!batch.empty()) put_batch();
  disk_->drain();
  if (n_kv + n_state > 0) {
    std::fprintf(stderr, "hearth: kv-disk: wrote %llu KV blocks and %llu state snapshots at shutdown in %.2f s\n",
                 static_cast<unsigned long long>(n_kv), static_cast<unsigned long long>(n_state),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

}  // namespace hearth::engine

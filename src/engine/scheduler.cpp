#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hearth::engine {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config_.max_seqs < 1) fail(ErrorKind::kInvalidInput, "scheduler", "max_seqs must be >= 1");
  if (config_.prefill_chunk < 1) fail(ErrorKind::kInvalidInput, "scheduler", "prefill_chunk must be >= 1");
  if (config_.recurrent) {
    for (int32_t i = config_.max_seqs; i-- > 0;) free_live_.push_back(i);
    for (int32_t i = config_.n_snapshots; i-- > 0;) free_snap_.push_back(config_.max_seqs + i);
    snap_block_.assign(static_cast<size_t>(config_.n_snapshots), kNoBlock);
  }
}

void Scheduler::add(std::unique_ptr<SeqSlot> seq) {
  if (seq->tokens.empty()) fail(ErrorKind::kInternal, "scheduler", "a sequence without tokens");
  if (config_.recurrent) {
    const int64_t bs = blocks_.block_size(), n = seq->n_prompt;
    std::vector<int32_t>& pts = seq->snapshot_points;
    auto add_point = [&](int64_t pos) {
      const int64_t a = pos / bs * bs;
      if (a > 0 && a < n) pts.push_back(static_cast<int32_t>(a));
    };
    // Message boundaries, thinned so that snapshots there hold few slots:
    // each kept one at least snapshot_gap tokens after the previous kept one.
    int64_t last = 0;
    for (int32_t b : seq->boundaries) {
      const int64_t a = b / bs * bs;
      if (a - last < config_.snapshot_gap) continue;
      add_point(a);
      last = a;
    }
    if (config_.snapshot_every > 0) {
      for (int64_t m = config_.snapshot_every; m < n; m += config_.snapshot_every) add_point(m);
    }
    add_point(n - 1);  // the last block boundary before the prompt's final token
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  }
  waiting_.push_back(std::move(seq));
}

int64_t Scheduler::cut_chunk(const SeqSlot& seq, int64_t n, std::vector<int32_t>& mids) const {
  if (!config_.recurrent) return n;
  const int64_t p0 = seq.kv.n_past;
  // A point at the chunk's end is snapshotted by commit(); those inside by the model.
  for (auto it = std::upper_bound(seq.snapshot_points.begin(), seq.snapshot_points.end(), p0);
       it != seq.snapshot_points.end() && *it < p0 + n; ++it) {
    if (static_cast<int32_t>(mids.size()) >= config_.max_step_snapshots) return *it - p0;
    mids.push_back(*it);
  }
  return n;
}

std::vector<model::StateSnap> Scheduler::take_step_snapshots(const SeqSlot& seq, const std::vector<int32_t>& mids) {
  std::vector<model::StateSnap> snaps;
  for (int32_t p : mids) {
    const int32_t slot = take_snapshot_slot();
    if (slot < 0) break;
    step_snaps_.push_back(slot);
    snaps.push_back({static_cast<int32_t>(p - seq.kv.n_past), slot});
  }
  return snaps;
}

bool Scheduler::attach_snapshot(SeqSlot& seq, int64_t p, int32_t slot) {
  const auto idx = static_cast<size_t>(p / blocks_.block_size() - 1);
  if (idx >= seq.hashes.size()) return false;
  const BlockId blk = seq.kv.blocks[idx];
  const BlockMeta& m = blocks_.meta(blk);
  if (!m.hashed || m.hash != seq.hashes[idx] || m.snapshot >= 0) return false;  // not ours, or kept already
  blocks_.attach_snapshot(blk, slot);
  snap_block_[static_cast<size_t>(slot - config_.max_seqs)] = blk;
  snap_lru_.push_back(slot);
  return true;
}

void Scheduler::reclaim_dropped() {
  for (int32_t slot : blocks_.take_dropped_snapshots()) {
    snap_block_[static_cast<size_t>(slot - config_.max_seqs)] = kNoBlock;
    snap_lru_.remove(slot);
    free_snap_.push_back(slot);
  }
}

void Scheduler::drop_snapshot(int32_t slot, bool spill) {
  BlockId& b = snap_block_[static_cast<size_t>(slot - config_.max_seqs)];
  if (b == kNoBlock) return;
  blocks_.detach_snapshot(b, spill);
  b = kNoBlock;
  snap_lru_.remove(slot);
  free_snap_.push_back(slot);
}

int32_t Scheduler::take_snapshot_slot() {
  reclaim_dropped();
  if (free_snap_.empty()) {
    if (snap_lru_.empty()) return -1;
    drop_snapshot(snap_lru_.front(), true);
  }
  const int32_t slot = free_snap_.back();
  free_snap_.pop_back();
  return slot;
}

int32_t Scheduler::adopt_snapshot(BlockId blk) {
  if (!config_.recurrent) return -1;
  const BlockMeta& m = blocks_.meta(blk);
  if (!m.hashed || m.snapshot >= 0 || m.ref <= 0) return -1;
  const int32_t slot = take_snapshot_slot();
  if (slot < 0) return -1;
  blocks_.attach_snapshot(blk, slot);
  snap_block_[static_cast<size_t>(slot - config_.max_seqs)] = blk;
  snap_lru_.push_back(slot);
  return slot;
}

SeqSlot* Scheduler::find(uint64_t id) const {
  for (const auto& s : running_) {
    if (s->id == id) return s.get();
  }
  for (const auto& s : waiting_) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

bool Scheduler::ensure_blocks(SeqSlot& seq, int64_t n_positions) {
  const int64_t bs = blocks_.block_size();
  while (seq.kv.capacity(bs) < n_positions) {
    const BlockId b = blocks_.allocate();
    if (b == kNoBlock) return false;
    seq.kv.blocks.push_back(b);
  }
  return true;
}

void Scheduler::release_all(SeqSlot& seq, bool forget) {
  // Last block first: the prefix's head is then the most recently cached and the last
  // to be evicted, so what stays cached stays reachable from the start.
  for (auto it = seq.kv.blocks.rbegin(); it != seq.kv.blocks.rend(); ++it) blocks_.release(*it, forget);
  seq.kv.blocks.clear();
  seq.kv.n_past = 0;
  seq.hashes.clear();
  if (seq.kv.state_slot >= 0) {
    free_live_.push_back(seq.kv.state_slot);
    seq.kv.state_slot = -1;
  }
  seq.decode_snapshot = -1;  // stays with its block, in the cache
}

void Scheduler::preempt(size_t index, StepPlan& plan) {
  std::unique_ptr<SeqSlot> seq = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  // Swapped: the engine copies its blocks and state slot out after plan(). Releasing
  // them here only hands them back; nothing writes over them before that copy.
  if (swap_policy_ && seq->kv.n_past > 0 && swap_policy_(*seq)) {
    const int64_t bs = blocks_.block_size();
    SwapCopy c;
    c.seq = seq->id;
    c.n_past = seq->kv.n_past;
    c.state_slot = seq->kv.state_slot;
    c.blocks.assign(seq->kv.blocks.begin(), seq->kv.blocks.begin() + (c.n_past + bs - 1) / bs);
    plan.swap_out.push_back(std::move(c));
    seq->swapped = true;
    seq->swap_n_past = seq->kv.n_past;
  }
  release_all(*seq);
  ++seq->n_preempted;
  waiting_.push_front(std::move(seq));
}

StepPlan Scheduler::plan() {
  StepPlan plan;
  // Slots of a plan that never reached commit() (its forward pass failed) come back.
  for (int32_t slot : step_snaps_) free_snap_.push_back(slot);
  step_snaps_.clear();
  int64_t prefill_budget = config_.prefill_chunk;
  std::vector<int32_t> mids;
  // Running sequences, oldest first. A sequence that cannot get a block preempts the
  // youngest running one (which is later in this loop, so not planned yet).
  for (size_t i = 0; i < running_.size(); ++i) {
    SeqSlot& seq = *running_[i];
    const int64_t pending = seq.pending();
    if (pending <= 0) continue;  // finished but not yet removed: nothing to run
    // Decoding: the one token left is a sampled one. The last token of a prompt (or
    // of a recompute) is still prefill and counts against the budget.
    const bool decoding = pending == 1 && static_cast<int64_t>(seq.tokens.size()) > seq.n_prompt;
    mids.clear();
    const int64_t n = decoding ? 1 : cut_chunk(seq, std::min(pending, prefill_budget), mids);
    if (n <= 0) continue;  // prefill budget spent: continues next step
    // A draft runs only where its blocks come free without preempting anything.
    int32_t n_draft = 0;
    if (decoding && !seq.draft.empty()) {
      const auto d = static_cast<int64_t>(seq.draft.size());
      if (ensure_blocks(seq, seq.kv.n_past + 1 + d)) {
        n_draft = static_cast<int32_t>(d);
      } else {
        rollback(seq, seq.kv.n_past);
      }
    }
    if (n_draft == 0) seq.draft.clear();
    bool preempted_self = false;
    while (!ensure_blocks(seq, seq.kv.n_past + n)) {
      const size_t victim = running_.size() - 1;
      plan.preempted.push_back(running_[victim]->id);
      preempt(victim, plan);
      if (victim == i) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    if (!decoding) prefill_budget -= n;
    plan.items.push_back({&seq, static_cast<int32_t>(n + n_draft),
                          seq.kv.n_past + n == static_cast<int64_t>(seq.tokens.size()), n_draft,
                          take_step_snapshots(seq, mids)});
  }
  // Admissions, in arrival order, while there is room and prefill budget.
  // A sequence gated by a disk read is passed over (it keeps its place).
  auto next_waiting = [&] {
    return std::find_if(waiting_.begin(), waiting_.end(), [](const auto& w) { return !w->gated; });
  };
  for (auto wit = next_waiting();
       wit != waiting_.end() && static_cast<int32_t>(running_.size()) < config_.max_seqs && prefill_budget > 0;
       wit = next_waiting()) {
    SeqSlot& seq = **wit;
    const int64_t bs = blocks_.block_size();
    mids.clear();
    if (seq.swapped) {
      int64_t n = 0;
      const SwapAdmit a = admit_swapped(seq, prefill_budget, plan, mids, n);
      if (a == SwapAdmit::kWait) break;     // waits for blocks, keeping arrival order
      if (a == SwapAdmit::kGated) continue;  // its copy comes back from disk meanwhile
      seq.order = next_order_++;
      prefill_budget -= n;
      running_.push_back(std::move(*wit));
      waiting_.erase(wit);
      plan.items.push_back({&seq, static_cast<int32_t>(n), seq.kv.n_past + n == static_cast<int64_t>(seq.tokens.size()),
                            0, take_step_snapshots(seq, mids)});
      continue;
    }
    // Reuse cached full blocks, leaving at least the last token to compute.
    const auto max_blocks = static_cast<int32_t>((static_cast<int64_t>(seq.tokens.size()) - 1) / bs);
    // Statistics only once the admission succeeds: a head of queue that waits for
    // blocks would otherwise count its query again at every step.
    PrefixMatch match = blocks_.match_prefix(seq.tokens, max_blocks, false);
    seq.kv.blocks = match.blocks;
    seq.hashes = match.hashes;
    int32_t snap = -1;
    if (config_.recurrent) {
      // Resume from the deepest matched block whose end state was kept; the matched
      // blocks after it are let go (their KV is recomputed with the state).
      size_t keep = seq.kv.blocks.size();
      while (keep > 0 && blocks_.meta(seq.kv.blocks[keep - 1]).snapshot < 0) --keep;
      if (keep > 0) snap = blocks_.meta(seq.kv.blocks[keep - 1]).snapshot;
      for (size_t j = seq.kv.blocks.size(); j-- > keep;) blocks_.release(seq.kv.blocks[j]);
      seq.kv.blocks.resize(keep);
      seq.hashes.resize(keep);
    }
    seq.kv.n_past = static_cast<int64_t>(seq.kv.blocks.size()) * bs;
    const int64_t n = cut_chunk(seq, std::min(seq.pending(), prefill_budget), mids);
    if (!ensure_blocks(seq, seq.kv.n_past + n)) {
      release_all(seq);  // wait for blocks to come free; keep arrival order
      break;
    }
    if (config_.recurrent) {
      seq.kv.state_slot = free_live_.back();
      free_live_.pop_back();
      plan.state_before.push_back({snap, seq.kv.state_slot});
      if (snap >= 0) {  // most recently used
        snap_lru_.remove(snap);
        snap_lru_.push_back(snap);
      }
    }
    if (!seq.admitted) {
      seq.n_cached = static_cast<int32_t>(std::min<int64_t>(seq.kv.n_past, seq.n_prompt));
      seq.admitted = true;
      if (seq.disk_loaded) seq.n_disk = std::max<int32_t>(0, seq.n_cached - seq.disk_from * static_cast<int32_t>(bs));
    }
    // The hit is what was matched (kv.n_past), not the blocks just allocated for the chunk.
    blocks_.record_prefix_query(seq.tokens.size(), static_cast<uint64_t>(seq.kv.n_past));
    seq.order = next_order_++;
    prefill_budget -= n;
    running_.push_back(std::move(*wit));
    waiting_.erase(wit);
    plan.items.push_back({&seq, static_cast<int32_t>(n), seq.kv.n_past + n == static_cast<int64_t>(seq.tokens.size()),
                          0, take_step_snapshots(seq, mids)});
  }
  return plan;
}

Scheduler::SwapAdmit Scheduler::admit_swapped(SeqSlot& seq, int64_t budget, StepPlan& plan, std::vector<int32_t>& mids,
                                               int64_t& n) {
  const int64_t bs = blocks_.block_size();
  const int64_t np = seq.swap_n_past;
  // Its full blocks still cached in memory are taken as they are (no copy); the rest
  // come back from the swap space into fresh blocks. A hybrid model's state comes back
  // too, so no snapshot is needed at the end of the matched blocks.
  PrefixMatch match = blocks_.match_prefix(seq.tokens, static_cast<int32_t>(np / bs), false);
  seq.kv.blocks = match.blocks;
  seq.hashes = match.hashes;
  const auto first = static_cast<int32_t>(seq.kv.blocks.size());
  seq.kv.n_past = np;
  const bool decoding = seq.pending() == 1 && static_cast<int64_t>(seq.tokens.size()) > seq.n_prompt;
  n = decoding ? 1 : cut_chunk(seq, std::min<int64_t>(seq.pending(), budget), mids);
  if (swap_ready_) {
    // Its copy is asked for only once its blocks are there (counted, not yet taken: a
    // gated sequence must not evict cached blocks for nothing).
    const int64_t need = (np + n + bs - 1) / bs - static_cast<int64_t>(seq.kv.blocks.size());
    const bool room = blocks_.n_free() >= need;
    if (!room || !swap_ready_(seq)) {
      release_all(seq);
      mids.clear();
      if (!room) return SwapAdmit::kWait;
      if (seq.swapped) seq.gated = true;  // (else: the engine gave up its copy; admitted to recompute)
      return SwapAdmit::kGated;
    }
  }
  if (!ensure_blocks(seq, np + n)) {
    release_all(seq);
    mids.clear();
    return SwapAdmit::kWait;
  }
  if (config_.recurrent) {
    seq.kv.state_slot = free_live_.back();
    free_live_.pop_back();
  }
  SwapCopy c;
  c.seq = seq.id;
  c.first = first;
  c.n_past = np;
  c.state_slot = seq.kv.state_slot;
  c.blocks.assign(seq.kv.blocks.begin() + first, seq.kv.blocks.begin() + (np + bs - 1) / bs);
  plan.swap_in.push_back(std::move(c));
  seq.swapped = false;
  return SwapAdmit::kAdmitted;
}

std::vector<StateOp> Scheduler::commit(const StepPlan& plan) {
  std::vector<StateOp> ops;
  step_snaps_.clear();  // every planned inside snapshot is attached or given back below
  if (config_.recurrent) reclaim_dropped();
  for (const StepItem& item : plan.items) {
    SeqSlot& seq = *item.seq;
    hash_known_blocks(seq);
    if (!config_.recurrent) continue;
    // The snapshots the model took inside the chunk (oldest first in the LRU order).
    for (const model::StateSnap& sn : item.snaps) {
      const int64_t p = seq.kv.n_past - item.n_tokens + sn.after;
      if (!attach_snapshot(seq, p, sn.slot)) free_snap_.push_back(sn.slot);
    }
    // A snapshot of the state at this block boundary, if it is a snapshot point (or
    // the sequence is past its prompt: the rolling decode snapshot). Not after a verified
    // draft: the live state is at its last drafted row, which may be rejected (the
    // engine rolls the state back to the last accepted token).
    if (item.n_draft > 0) continue;
    const int32_t slot = boundary_snapshot(seq, seq.kv.n_past);
    if (slot >= 0) ops.push_back({seq.kv.state_slot, slot});
  }
  return ops;
}

void Scheduler::hash_known_blocks(SeqSlot& seq) {
  const int64_t bs = blocks_.block_size();
  // Only blocks of known tokens: a step's drafted rows are not verified yet (their
  // blocks are hashed once accepted).
  const int64_t known = std::min<int64_t>(seq.kv.n_past, static_cast<int64_t>(seq.tokens.size()));
  while (static_cast<int64_t>(seq.hashes.size() + 1) * bs <= known) {
    const size_t b = seq.hashes.size();
    const uint64_t parent = b == 0 ? 0 : seq.hashes.back();
    const std::span<const int32_t> toks(seq.tokens.data() + b * static_cast<size_t>(bs), static_cast<size_t>(bs));
    seq.hashes.push_back(blocks_.commit_full(seq.kv.blocks[b], parent, toks));
  }
}

int32_t Scheduler::boundary_snapshot(SeqSlot& seq, int64_t p) {
  const int64_t bs = blocks_.block_size();
  if (p == 0 || p % bs != 0 || seq.kv.state_slot < 0) return -1;
  const auto idx = static_cast<size_t>(p / bs - 1);
  if (idx >= seq.hashes.size()) return -1;
  const BlockId blk = seq.kv.blocks[idx];
  const BlockMeta& m = blocks_.meta(blk);
  if (!m.hashed || m.hash != seq.hashes[idx] || m.snapshot >= 0) return -1;  // not ours, or kept already
  const bool decode_point = p >= seq.n_prompt;
  if (!decode_point && !std::binary_search(seq.snapshot_points.begin(), seq.snapshot_points.end(), p)) return -1;
  if (decode_point && seq.decode_snapshot >= 0) {
    // Only if the slot still holds that snapshot (it may have been evicted and reused).
    if (snap_block_[static_cast<size_t>(seq.decode_snapshot - config_.max_seqs)] == seq.decode_block) {
      drop_snapshot(seq.decode_snapshot);
    }
    seq.decode_snapshot = -1;
  }
  const int32_t slot = take_snapshot_slot();
  if (slot < 0) return -1;
  attach_snapshot(seq, p, slot);
  if (decode_point) {
    seq.decode_snapshot = slot;
    seq.decode_block = blk;
  }
  return slot;
}

int32_t Scheduler::accepted_snapshot(SeqSlot& seq, int64_t from) {
  hash_known_blocks(seq);
  if (!config_.recurrent) return -1;
  const int64_t bs = blocks_.block_size();
  const int64_t boundary = seq.kv.n_past / bs * bs;
  if (boundary <= from) return -1;  // no boundary crossed by this step
  reclaim_dropped();
  return boundary_snapshot(seq, boundary);
}

void Scheduler::rollback(SeqSlot& seq, int64_t n_past) {
  const int64_t bs = blocks_.block_size();
  if (n_past > seq.kv.n_past || n_past < static_cast<int64_t>(seq.hashes.size()) * bs) {
    fail(ErrorKind::kInternal, "scheduler", "rollback to " + std::to_string(n_past) + " of a sequence at " +
                                                std::to_string(seq.kv.n_past));
  }
  seq.kv.n_past = n_past;
  // Keep the block the next position falls in (the next step writes it).
  const auto keep = static_cast<size_t>(n_past / bs + 1);
  while (seq.kv.blocks.size() > keep) {
    blocks_.release(seq.kv.blocks.back(), true);
    seq.kv.blocks.pop_back();
  }
}

std::unique_ptr<SeqSlot> Scheduler::finish(uint64_t id, bool forget_blocks) {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->id == id) {
      std::unique_ptr<SeqSlot> seq = std::move(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      release_all(*seq, forget_blocks);
      return seq;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      std::unique_ptr<SeqSlot> seq = std::move(*it);
      waiting_.erase(it);
      release_all(*seq, forget_blocks);
      return seq;
    }
  }
  return nullptr;
}

}  // namespace hearth::engine

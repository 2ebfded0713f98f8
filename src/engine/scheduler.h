// The continuous-batching scheduler of `hearth serve`: which sequences run in the
// next step and with how many tokens, and which KV blocks they hold. No model, no
// sampling (the engine does those), so its decisions are unit-tested alone.
//
// Every step: each running sequence that is decoding gets its one token; sequences
// still reading their prompt get chunks of at most prefill_chunk tokens in total per
// step (oldest first), so streams keep flowing while a long prompt is prefilled;
// then waiting sequences are admitted in arrival order while fewer than max_seqs
// run and the prefill budget lasts. On admission a sequence takes the longest cached
// prefix of its tokens from the block manager (always leaving at least one token to
// compute, whose logits are needed). When a step needs a block and none is free, the
// most recently admitted running sequence is preempted: its blocks are released
// (full ones stay cached for reuse) and it goes back to the front of the queue, to
// be recomputed from its tokens (prompt and the text generated so far).
// A sequence marked gated (its prefix is being read back from the KV disk tier) is
// passed over by admission until the engine clears the mark; later arrivals go first.
//
// Hybrid (recurrent) models: a sequence's Gated DeltaNet state cannot be rewound, so
// reusing a cached prefix needs the state at that prefix's end. Each running sequence
// holds a live state slot (0 .. max_seqs-1); snapshots of it are copied into snapshot
// slots (max_seqs ..) at block boundaries and attached to the block ending there,
// living and dying with it (LRU over snapshots when the slots run out). Snapshot
// points: the aligned position at or before each message boundary the engine marks
// (chat-template control tokens; thinned to one per snapshot_gap tokens), every snapshot_every tokens, the prompt's last
// block boundary before its final token, and, while decoding, each block boundary (a
// rolling one: the sequence's previous decode snapshot is dropped). A prefill chunk
// takes up to max_step_snapshots points inside it as snapshots within the step
// (StepItem::snaps: the model copies the state when its recurrence reaches them, so a
// point costs no step of its own) and is cut to end at the next point. On admission a sequence resumes from the deepest
// matched block that has a snapshot (its later matched blocks are let go) or from a
// cleared state. The state copies are the engine's to do: StepPlan::state_before
// before the forward pass, commit()'s result right after it.
//
// Speculative decoding: a decoding sequence with a draft (SeqSlot::draft) runs it after
// its pending token when blocks for it can be had without preempting anything (else the
// draft is dropped for the step). commit() hashes only blocks of known tokens, never
// drafted ones, and takes no state snapshot after a step with a draft (the live state is
// then at the last drafted row; the engine rolls it back to the last accepted one from
// its own per-row checkpoints, serve_engine_spec.cpp); rollback() then forgets the
// rejected rows and their blocks, and accepted_snapshot() moves the rolling decode
// snapshot to a boundary the accepted tokens crossed (the engine copies that row's state).
//
// Swapping (set_swap_policy): a preempted sequence the policy accepts keeps its KV
// (and, hybrid models, its live recurrent state) in the engine's host swap space
// instead of being recomputed: StepPlan::swap_out names the pool blocks and state slot
// to copy out (before anything writes over them), and its re-admission allocates blocks
// again (taking the full blocks still cached in memory as they are) and lists in
// StepPlan::swap_in those to copy back, after which it goes on from the same position.
// With a readiness check (set_swap_ready: the engine's copy may be on disk), a swapped
// sequence whose blocks would be there is first asked about: not ready, it is gated
// (passed over, keeping its place) until the engine has read its copy back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "model/batch_layout.h"
#include "model/kv_cache.h"

namespace hearth::engine {

struct SchedulerConfig {
  int32_t max_seqs = 8;          // sequences running at once
  int32_t prefill_chunk = 512;   // prompt tokens per step, all sequences together
  bool recurrent = false;        // hybrid model: state slots and snapshots (see above)
  int32_t n_snapshots = 0;       // snapshot slots (ids max_seqs ..)
  int32_t snapshot_every = 2048; // also snapshot long prompts at multiples of this
  int32_t snapshot_gap = 512;    // message boundaries closer than this to the previous one are skipped
  int32_t max_step_snapshots = 4;  // snapshot points inside one prefill chunk (0: chunks end at every point)
};

// A recurrent-state copy for the engine: src < 0 clears dst.
struct StateOp {
  int32_t src = -1;
  int32_t dst = -1;
};

// The scheduler's view of one sequence.
struct SeqSlot {
  uint64_t id = 0;
  std::vector<int32_t> tokens;   // every known token: the prompt, then what was generated
  int32_t n_prompt = 0;
  model::SeqKv kv;               // block table and positions computed
  std::vector<uint64_t> hashes;  // chain hash of each registered full block, in order
  int32_t n_cached = 0;          // prompt tokens reused from the cache at first admission
  bool admitted = false;         // admitted at least once
  int32_t n_preempted = 0;
  uint64_t order = 0;            // admission order (preemption picks the largest)
  std::vector<int32_t> boundaries;  // recurrent: prompt positions where messages start
  std::vector<int32_t> snapshot_points;  // recurrent: aligned positions (set by add())
  int32_t decode_snapshot = -1;  // recurrent: its rolling decode snapshot slot ...
  BlockId decode_block = kNoBlock;  // ... and the block it was attached to
  // KV disk tier: a gated sequence waits (is not admitted) while its prefix's blocks are
  // read back from disk; others are admitted past it. disk_from: blocks of its prompt
  // the memory tier alone would have given it when the read was planned (n_disk is what
  // its first admission reused beyond that, once disk blocks were put back).
  bool gated = false;
  bool disk_loaded = false;
  int32_t disk_from = 0;
  int32_t n_disk = 0;
  // Swapped out at preemption: positions [0, swap_n_past) and the state there are in the
  // engine's swap space; the next admission copies them back instead of recomputing.
  bool swapped = false;
  int64_t swap_n_past = 0;
  // Speculative decoding: tokens proposed to follow the pending one (set by the engine
  // before plan(); a decoding sequence's step then runs them after it, and the engine
  // rolls back what it rejects with rollback()). Never part of `tokens` or of any hash.
  std::vector<int32_t> draft;
  // Tokens still to compute: a decoding sequence has exactly one (its last sample).
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - kv.n_past; }
};

struct StepItem {
  SeqSlot* seq = nullptr;
  int32_t n_tokens = 0;          // tokens[kv.n_past, kv.n_past + n_tokens) run this step
  bool logits = false;           // reaches the last known token: sample after it
  // Speculative decoding: the step runs the pending token and then seq->draft's first
  // n_draft tokens (n_tokens = 1 + n_draft), each row with logits.
  int32_t n_draft = 0;
  // Recurrent models: snapshots inside the chunk (after < n_tokens), into slots taken
  // by plan(); commit() attaches them to their blocks (or gives the slots back).
  std::vector<model::StateSnap> snaps = {};
};

// Pool blocks (and a live state slot) of one sequence to copy to or from the swap space.
// blocks[i] holds the sequence's logical block first + i; positions [0, n_past).
struct SwapCopy {
  uint64_t seq = 0;
  std::vector<BlockId> blocks;
  int32_t first = 0;
  int64_t n_past = 0;
  int32_t state_slot = -1;  // hybrid models: the live slot (the state at n_past)
};

struct StepPlan {
  std::vector<StepItem> items;
  std::vector<uint64_t> preempted;  // ids sent back to the queue this step
  // Swapping: copy swap_out to the host first (the pool still holds it: nothing wrote
  // since plan()), then swap_in into the pool, both before the forward pass.
  std::vector<SwapCopy> swap_out, swap_in;
  std::vector<StateOp> state_before;  // recurrent: apply before the forward pass
  int32_t n_tokens() const {
    int32_t n = 0;
    for (const auto& i : items) n += i.n_tokens;
    return n;
  }
  bool empty() const { return items.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  // Queues a new sequence (tokens and n_prompt set).
  void add(std::unique_ptr<SeqSlot> seq);
  // Plans the next step (allocating the blocks it needs). Pointers stay valid until
  // the sequence is finished.
  StepPlan plan();
  // After the forward pass advanced each item's kv.n_past: registers the blocks that
  // became full for prefix reuse. Returns the snapshot copies (recurrent models) to
  // do before the next forward pass.
  std::vector<StateOp> commit(const StepPlan& plan);
  // Removes a sequence (running or waiting), releasing its blocks. forget_blocks: its
  // blocks that no other sequence holds are freed, not kept for prefix reuse (a failed
  // sequence's KV may be corrupt).
  std::unique_ptr<SeqSlot> finish(uint64_t id, bool forget_blocks = false);
  // Speculative decoding: the sequence's KV ends at n_past (< the positions the step
  // computed; the rows after it held rejected drafted tokens); blocks past the one that
  // position n_past falls in go back to the pool.
  void rollback(SeqSlot& seq, int64_t n_past);
  // Then (hybrid models): the blocks the accepted tokens filled are registered, and when the
  // step crossed a block boundary (after `from`, the position before the step) the rolling
  // decode snapshot moves to the last one crossed: returns the snapshot slot the engine
  // copies the state at that boundary into now (-1: none).
  int32_t accepted_snapshot(SeqSlot& seq, int64_t from);

  const std::vector<std::unique_ptr<SeqSlot>>& running() const { return running_; }
  const std::deque<std::unique_ptr<SeqSlot>>& waiting() const { return waiting_; }
  SeqSlot* find(uint64_t id) const;
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }
  int32_t n_state_slots() const { return config_.recurrent ? config_.max_seqs + config_.n_snapshots : 0; }
  int32_t n_snapshots_held() const { return static_cast<int32_t>(snap_lru_.size()); }
  // KV disk tier: a snapshot slot for block `blk` (hashed, held, without a snapshot),
  // attached to it as the most recently used; -1 when no slot can be had. The caller
  // writes the state into the slot (after copying out what BlockManager::take_spills
  // says was evicted to make room).
  int32_t adopt_snapshot(BlockId blk);
  // Asked when a sequence with positions computed is preempted: true to swap it out
  // (the engine has reserved the room), false to recompute it. None: always recompute.
  using SwapPolicy = std::function<bool(const SeqSlot&)>;
  void set_swap_policy(SwapPolicy policy) { swap_policy_ = std::move(policy); }
  // Asked when a swapped-out sequence could be re-admitted (its blocks are free): true
  // when its swapped copy is in host memory; false gates it (the engine clears the gate
  // when the copy is back, or clears `swapped` to have it recomputed). None: always ready.
  using SwapReady = std::function<bool(SeqSlot&)>;
  void set_swap_ready(SwapReady ready) { swap_ready_ = std::move(ready); }

 private:
  bool ensure_blocks(SeqSlot& seq, int64_t n_positions);
  void release_all(SeqSlot& seq, bool forget = false);
  void preempt(size_t running_index, StepPlan& plan);
  // Admission of a swapped-out sequence: blocks for its swapped positions and its next
  // chunk (n tokens, at most budget; inside snapshot points in mids), the swap_in copy added to plan.
  // kWait (nothing held) when the blocks are not there; kGated (nothing held) when the
  // swap_ready check said its copy is not in memory yet.
  enum class SwapAdmit { kAdmitted, kWait, kGated };
  SwapAdmit admit_swapped(SeqSlot& seq, int64_t budget, StepPlan& plan, std::vector<int32_t>& mids, int64_t& n);
  // The chunk of at most n tokens from kv.n_past, cut at the snapshot point after the
  // ones it takes inside (appended to mids, absolute positions).
  int64_t cut_chunk(const SeqSlot& seq, int64_t n, std::vector<int32_t>& mids) const;
  // Slots for a chunk's inside snapshots (plan()); a point without a free slot is skipped.
  std::vector<model::StateSnap> take_step_snapshots(const SeqSlot& seq, const std::vector<int32_t>& mids);
  // Attaches snapshot slot `slot` (holding the state at position p) to the block ending
  // at p when that block is the sequence's own and has none yet; false otherwise.
  bool attach_snapshot(SeqSlot& seq, int64_t p, int32_t slot);
  // Registers the full blocks of known tokens the sequence has computed.
  void hash_known_blocks(SeqSlot& seq);
  // The snapshot at block boundary p (a snapshot point, or past the prompt: the rolling
  // decode snapshot), attached to its block: the slot to copy the state into (-1: none).
  int32_t boundary_snapshot(SeqSlot& seq, int64_t p);
  void resume_from_snapshot(SeqSlot& seq, StepPlan& plan);
  int32_t take_snapshot_slot();
  // spill: the snapshot leaves memory for lack of slots (the disk tier may keep it),
  // not because a newer one replaced it.
  void drop_snapshot(int32_t slot, bool spill = false);
  void reclaim_dropped();

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::vector<std::unique_ptr<SeqSlot>> running_;  // in admission order
  std::deque<std::unique_ptr<SeqSlot>> waiting_;
  uint64_t next_order_ = 0;
  // Recurrent models.
  std::vector<int32_t> free_live_, free_snap_;
  std::vector<BlockId> snap_block_;  // per snapshot slot (index slot - max_seqs): its block or kNoBlock
  std::list<int32_t> snap_lru_;      // held snapshot slots, least recently used first
  std::vector<int32_t> step_snaps_;  // slots planned for inside snapshots, until commit()
  SwapPolicy swap_policy_;
  SwapReady swap_ready_;
};

}  // namespace hearth::engine

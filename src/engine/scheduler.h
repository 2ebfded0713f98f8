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
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "model/kv_cache.h"

namespace hearth::engine {

struct SchedulerConfig {
  int32_t max_seqs = 8;          // sequences running at once
  int32_t prefill_chunk = 512;   // prompt tokens per step, all sequences together
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
  // Tokens still to compute: a decoding sequence has exactly one (its last sample).
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - kv.n_past; }
};

struct StepItem {
  SeqSlot* seq = nullptr;
  int32_t n_tokens = 0;          // tokens[kv.n_past, kv.n_past + n_tokens) run this step
  bool logits = false;           // reaches the last known token: sample after it
};

struct StepPlan {
  std::vector<StepItem> items;
  std::vector<uint64_t> preempted;  // ids sent back to the queue this step
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
  // became full for prefix reuse.
  void commit(const StepPlan& plan);
  // Removes a sequence (running or waiting), releasing its blocks.
  std::unique_ptr<SeqSlot> finish(uint64_t id);

  const std::vector<std::unique_ptr<SeqSlot>>& running() const { return running_; }
  const std::deque<std::unique_ptr<SeqSlot>>& waiting() const { return waiting_; }
  SeqSlot* find(uint64_t id) const;
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  bool ensure_blocks(SeqSlot& seq, int64_t n_positions);
  void release_all(SeqSlot& seq);
  void preempt(size_t running_index);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::vector<std::unique_ptr<SeqSlot>> running_;  // in admission order
  std::deque<std::unique_ptr<SeqSlot>> waiting_;
  uint64_t next_order_ = 0;
};

}  // namespace hearth::engine

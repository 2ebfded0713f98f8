#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace hearth::engine {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config_.max_seqs < 1) fail(ErrorKind::kInvalidInput, "scheduler", "max_seqs must be >= 1");
  if (config_.prefill_chunk < 1) fail(ErrorKind::kInvalidInput, "scheduler", "prefill_chunk must be >= 1");
}

void Scheduler::add(std::unique_ptr<SeqSlot> seq) {
  if (seq->tokens.empty()) fail(ErrorKind::kInternal, "scheduler", "a sequence without tokens");
  waiting_.push_back(std::move(seq));
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

void Scheduler::release_all(SeqSlot& seq) {
  // Last block first: the prefix's head is then the most recently cached and the last
  // to be evicted, so what stays cached stays reachable from the start.
  for (auto it = seq.kv.blocks.rbegin(); it != seq.kv.blocks.rend(); ++it) blocks_.release(*it);
  seq.kv.blocks.clear();
  seq.kv.n_past = 0;
  seq.hashes.clear();
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<SeqSlot> seq = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  release_all(*seq);
  ++seq->n_preempted;
  waiting_.push_front(std::move(seq));
}

StepPlan Scheduler::plan() {
  StepPlan plan;
  int64_t prefill_budget = config_.prefill_chunk;
  // Running sequences, oldest first. A sequence that cannot get a block preempts the
  // youngest running one (which is later in this loop, so not planned yet).
  for (size_t i = 0; i < running_.size(); ++i) {
    SeqSlot& seq = *running_[i];
    const int64_t pending = seq.pending();
    if (pending <= 0) continue;  // finished but not yet removed: nothing to run
    // Decoding: the one token left is a sampled one. The last token of a prompt (or
    // of a recompute) is still prefill and counts against the budget.
    const bool decoding = pending == 1 && static_cast<int64_t>(seq.tokens.size()) > seq.n_prompt;
    const int64_t n = decoding ? 1 : std::min(pending, prefill_budget);
    if (n <= 0) continue;  // prefill budget spent: continues next step
    bool preempted_self = false;
    while (!ensure_blocks(seq, seq.kv.n_past + n)) {
      const size_t victim = running_.size() - 1;
      plan.preempted.push_back(running_[victim]->id);
      preempt(victim);
      if (victim == i) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    if (!decoding) prefill_budget -= n;
    plan.items.push_back({&seq, static_cast<int32_t>(n), seq.kv.n_past + n == static_cast<int64_t>(seq.tokens.size())});
  }
  // Admissions, in arrival order, while there is room and prefill budget.
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.max_seqs && prefill_budget > 0) {
    SeqSlot& seq = *waiting_.front();
    const int64_t bs = blocks_.block_size();
    // Reuse cached full blocks, leaving at least the last token to compute.
    const auto max_blocks = static_cast<int32_t>((static_cast<int64_t>(seq.tokens.size()) - 1) / bs);
    // Statistics only once the admission succeeds: a head of queue that waits for
    // blocks would otherwise count its query again at every step.
    PrefixMatch match = blocks_.match_prefix(seq.tokens, max_blocks, false);
    seq.kv.blocks = match.blocks;
    seq.hashes = match.hashes;
    seq.kv.n_past = static_cast<int64_t>(match.blocks.size()) * bs;
    const int64_t n = std::min(seq.pending(), prefill_budget);
    if (!ensure_blocks(seq, seq.kv.n_past + n)) {
      release_all(seq);  // wait for blocks to come free; keep arrival order
      break;
    }
    if (!seq.admitted) {
      seq.n_cached = static_cast<int32_t>(std::min<int64_t>(seq.kv.n_past, seq.n_prompt));
      seq.admitted = true;
    }
    blocks_.record_prefix_query(seq.tokens.size(), static_cast<uint64_t>(match.blocks.size()) * bs);
    seq.order = next_order_++;
    prefill_budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.items.push_back({&seq, static_cast<int32_t>(n), seq.kv.n_past + n == static_cast<int64_t>(seq.tokens.size())});
  }
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  const int64_t bs = blocks_.block_size();
  for (const StepItem& item : plan.items) {
    SeqSlot& seq = *item.seq;
    while (static_cast<int64_t>(seq.hashes.size() + 1) * bs <= seq.kv.n_past) {
      const size_t b = seq.hashes.size();
      const uint64_t parent = b == 0 ? 0 : seq.hashes.back();
      const std::span<const int32_t> toks(seq.tokens.data() + b * static_cast<size_t>(bs), static_cast<size_t>(bs));
      seq.hashes.push_back(blocks_.commit_full(seq.kv.blocks[b], parent, toks));
    }
  }
}

std::unique_ptr<SeqSlot> Scheduler::finish(uint64_t id) {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->id == id) {
      std::unique_ptr<SeqSlot> seq = std::move(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      release_all(*seq);
      return seq;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      std::unique_ptr<SeqSlot> seq = std::move(*it);
      waiting_.erase(it);
      release_all(*seq);
      return seq;
    }
  }
  return nullptr;
}

}  // namespace hearth::engine

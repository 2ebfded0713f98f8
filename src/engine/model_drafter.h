// Drafting with a draft model (--spec draft --draft-model REF): a smaller model with the
// target's vocabulary proposes each sequence's next tokens, greedily, one step at a time.
// It keeps its own KV for every sequence it drafts for (one region of n_ctx positions per
// slot, n_slots slots): before drafting, the sequence's tokens after what its region already
// holds (its longest common prefix with them: what a rejected draft left behind is
// forgotten) go through the draft model, then k one-token steps give k tokens. All the
// sequences of a step draft together, in batched passes. A greedy draft is a point mass, so
// the target verifies it as it does a prompt-lookup draft (serve_engine_spec.cpp: greedy
// acceptance, or rejection sampling with the sampler's own draw), and the output is the
// output without speculation whatever the draft model proposes. The draft model needs no
// recurrent state (attention only) and the target's n_vocab.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/causal_lm.h"
#include "model/kv_cache.h"

namespace hearth::engine {

class ModelDrafter {
 public:
  // Throws Error(kInvalidInput) when `draft` cannot draft for a model of n_vocab tokens.
  // chunk: catch-up tokens per sequence and pass at most (a new prompt's prefill).
  ModelDrafter(model::CausalLm& draft, int64_t n_vocab, int64_t n_ctx, int32_t n_slots, ops::KvType kv_type,
               int64_t chunk);
  struct Job {
    uint64_t id = 0;                  // the sequence (its region is kept between calls)
    std::span<const int32_t> tokens;  // its tokens so far (prompt, generated)
    int32_t k = 0;                    // tokens wanted (0: none)
    std::vector<int32_t> out;         // the draft (fewer than k when no region or room was free)
  };
  void draft(std::vector<Job>& jobs);
  // The sequence ended: its region is free.
  void forget(uint64_t id);
  // Why `draft` cannot draft for a model of n_vocab tokens (empty: it can).
  static std::string unsuitable(model::CausalLm& draft, int64_t n_vocab);

 private:
  struct Slot {
    uint64_t id = 0;
    bool used = false;
    model::SeqKv kv;
    std::vector<int32_t> tokens;  // what its KV holds, in order
  };
  model::CausalLm& model_;
  int64_t n_ctx_, chunk_;
  std::unique_ptr<model::KvPool> pool_;
  std::vector<Slot> slots_;
  std::vector<float> logits_;
};

}  // namespace hearth::engine

#include "engine/model_drafter.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "engine/logit_scan.h"

namespace hearth::engine {

std::string ModelDrafter::unsuitable(model::CausalLm& draft, int64_t n_vocab) {
  const model::Hparams& hp = draft.hparams();
  if (hp.n_recurrent_layers() > 0) {
    return "the draft model has recurrent (Gated DeltaNet) layers; it must be attention-only";
  }
  if (hp.n_vocab != n_vocab) {
    return "the draft model's vocabulary has " + std::to_string(hp.n_vocab) + " tokens, the model's " +
           std::to_string(n_vocab) + " (they must be the same vocabulary)";
  }
  return {};
}

ModelDrafter::ModelDrafter(model::CausalLm& draft, int64_t n_vocab, int64_t n_ctx, int32_t n_slots,
                           ops::KvType kv_type, int64_t chunk)
    : model_(draft), n_ctx_(n_ctx), chunk_(std::max<int64_t>(1, chunk)) {
  if (const std::string why = unsuitable(draft, n_vocab); !why.empty()) fail(ErrorKind::kInvalidInput, "spec", why);
  if (n_slots < 1 || n_ctx < 2) fail(ErrorKind::kInvalidInput, "spec", "a draft model needs a slot and a context");
  const int64_t bs = model::KvCache::kBlockSize, per = (n_ctx + bs - 1) / bs;
  pool_ = std::make_unique<model::KvPool>(draft.backend(), draft.hparams(), kv_type, bs, per * n_slots);
  slots_.resize(static_cast<size_t>(n_slots));
  for (int32_t s = 0; s < n_slots; ++s) {
    std::vector<int32_t>& blocks = slots_[static_cast<size_t>(s)].kv.blocks;
    for (int64_t b = 0; b < per; ++b) blocks.push_back(static_cast<int32_t>(s * per + b));
  }
}

void ModelDrafter::forget(uint64_t id) {
  for (Slot& s : slots_) {
    if (s.used && s.id == id) {
      s.used = false;
      s.tokens.clear();
      s.kv.n_past = 0;
    }
  }
}

void ModelDrafter::draft(std::vector<Job>& jobs) {
  // Each job's slot: its own, else a free one, else one no job of this call holds.
  std::vector<Slot*> at(jobs.size(), nullptr);
  auto in_jobs = [&](uint64_t id) {
    return std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.k > 0 && j.id == id; });
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].out.clear();
    if (jobs[i].k <= 0 || jobs[i].tokens.empty()) continue;
    for (Slot& s : slots_) {
      if (s.used && s.id == jobs[i].id) at[i] = &s;
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (at[i] != nullptr || jobs[i].k <= 0 || jobs[i].tokens.empty()) continue;
    for (Slot& s : slots_) {
      if (!s.used || !in_jobs(s.id)) {
        s.id = jobs[i].id;
        s.used = true;
        s.tokens.clear();
        s.kv.n_past = 0;
        at[i] = &s;
        break;
      }
    }
  }
  // What each region keeps: the common prefix with the job's tokens, less the last token
  // (its logits are needed). Jobs whose tokens and draft would not fit draft nothing.
  std::vector<int64_t> next(jobs.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (at[i] == nullptr) continue;
    Slot& s = *at[i];
    const std::span<const int32_t> t = jobs[i].tokens;
    if (static_cast<int64_t>(t.size()) + jobs[i].k > n_ctx_) {
      at[i] = nullptr;
      continue;
    }
    const size_t keep = std::mismatch(s.tokens.begin(), s.tokens.end(), t.begin(), t.end()).first - s.tokens.begin();
    s.tokens.resize(std::min(keep, t.size() - 1));
    s.kv.n_past = static_cast<int64_t>(s.tokens.size());
    next[i] = s.kv.n_past;
  }
  // Catch-up passes (chunks of at most chunk_ tokens per job); the last one of each job
  // gives its first drafted token. Then one-token steps for the rest of the drafts.
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  std::vector<model::BatchSeq> batch;
  std::vector<size_t> who;
  std::vector<std::vector<int32_t>> input(jobs.size());
  for (;;) {
    batch.clear();
    who.clear();
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (at[i] == nullptr) continue;
      const std::span<const int32_t> t = jobs[i].tokens;
      const int64_t have = at[i]->kv.n_past;
      if (have < static_cast<int64_t>(t.size())) {  // catching up
        const int64_t n = std::min<int64_t>(chunk_, static_cast<int64_t>(t.size()) - have);
        input[i].assign(t.begin() + have, t.begin() + have + n);
        const bool last = have + n == static_cast<int64_t>(t.size());
        batch.push_back(model::BatchSeq{&at[i]->kv, input[i].data(), n, last, true});
      } else {  // the next drafted token's step (a job with all its tokens left the loop)
        input[i].assign(1, jobs[i].out.back());
        batch.push_back(model::BatchSeq{&at[i]->kv, input[i].data(), 1, true, true});
      }
      who.push_back(i);
    }
    if (batch.empty()) break;
    model_.forward_batch(*pool_, batch, logits_);
    const std::vector<ops::ArgmaxRow>& picks = model_.picks();
    size_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const size_t i = who[b];
      Slot& s = *at[i];
      s.tokens.insert(s.tokens.end(), input[i].begin(), input[i].end());
      if (!batch[b].logits) continue;
      int32_t tok = -1;
      if (picks.size() > row && picks[row].argmax >= 0 && picks[row].bad < 0) {
        tok = picks[row].argmax;
      } else if (picks.empty()) {
        const std::span<const float> lg(logits_.data() + row * n_vocab, n_vocab);
        if (first_non_finite(lg) < 0) tok = static_cast<int32_t>(argmax_first(lg));
      }
      ++row;
      if (tok < 0) {  // a non-finite row: no draft (the target decides alone)
        at[i] = nullptr;
        continue;
      }
      jobs[i].out.push_back(tok);
      if (static_cast<int32_t>(jobs[i].out.size()) >= jobs[i].k) at[i] = nullptr;  // done
    }
  }
}

}  // namespace hearth::engine

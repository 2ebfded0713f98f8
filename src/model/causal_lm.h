// What the engine needs of a model, whatever its architecture: a forward pass for one
// sequence with its own cache (`hearth run`, tests) and a batched pass over many
// sequences sharing a KV pool (continuous batching). Llama-family models
// (llama_model.h) and the hybrid Gated DeltaNet models (hybrid_model.h) implement it;
// load_causal_lm picks one from the file's architecture.
#pragma once

#include <memory>
#include <vector>

#include "format/gguf.h"
#include "model/batch_layout.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "ops/backend.h"

namespace hearth::model {

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const Hparams& hparams() const = 0;
  virtual ops::Backend& backend() = 0;
  // Whether image embeddings and 3-D (mRoPE) positions can go in (Qwen3.5's language model).
  virtual bool takes_images() const { return false; }

  // Runs n tokens at positions cache.n_past() .. and appends them to the cache,
  // writing the logits of the last token ([n_vocab]), or of every token ([n,
  // n_vocab]) when all_logits, into `logits` (resized; its capacity is reused).
  // Throws Error when the context is full.
  // last (not with all_logits): how the last token's row is needed: kArgmax only its
  // argmax, kDraw only a draw from it (ops::RowReduce); picks() then holds the result when
  // the back-end computed it on the device (logits left unwritten; a draw it left undone
  // has argmax -1 and the row written).
  // media: the sequence's images (its prompt's 3-D positions and image embeddings; models
  // without image input throw Error(kUnsupported) when a step has image rows).
  void forward(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>& logits,
               const ops::RowReduce& last = {}, std::span<const ops::PenaltyToken> penalties = {},
               const SeqMedia* media = nullptr);
  std::vector<float> forward(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits = false) {
    std::vector<float> out;
    forward(cache, tokens, all_logits, out);
    return out;
  }

  // One pass over many sequences sharing `pool`: `logits` gets one [n_vocab] row per
  // sequence with logits = true, in order. Each sequence's results are the ones it
  // would get alone.
  void forward_batch(KvPool& pool, const std::vector<BatchSeq>& seqs, std::vector<float>& logits);
  // After a forward: one entry per logits row when the back-end reduced the argmax-only
  // rows on the device (their logits rows were not written), else empty.
  const std::vector<ops::ArgmaxRow>& picks() const { return lay_.picks; }

 protected:
  // The layers over the step laid out in lay_ (at least one token); writes the logits of
  // its output rows to `out`. Positions advance in the callers above.
  virtual void run(KvPool& pool, std::vector<float>& out) = 0;
  // run() as one back-end step (Backend::begin_step), again if the back-end asks.
  void run_step(KvPool& pool, std::vector<float>& out);
  BatchLayout lay_;
};

// The model for `file`'s architecture (which must outlive it), bound for `backend`.
// Throws Error naming the file and tensor when one is missing or malformed.
std::unique_ptr<CausalLm> load_causal_lm(const gguf::File& file, ops::Backend& backend);

}  // namespace hearth::model

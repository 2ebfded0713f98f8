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

// One sequence of a pass of the MTP block (CausalLm::forward_mtp): n rows at positions
// pos0 .. pos0 + n - 1 of kv's block table (its own KV layer), row i taking the token
// after position pos0 + i and the final hidden state at that position: rows hid_row0 ..
// of the last forward (kMain: all its rows are kept while MTP is on) or of the last
// forward_mtp's output (kMtp: chaining a draft on the one before).
struct MtpSeq {
  const SeqKv* kv = nullptr;
  int64_t pos0 = 0;
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  enum class From { kMain, kMtp } from = From::kMain;
  int64_t hid_row0 = 0;
  bool logits = false;       // its last row's logits (as forward_batch returns them)
  bool argmax_only = false;  // ... only their argmax (picks())
};

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

  // Multi-token prediction with the model's own MTP block (Qwen3.5's, where the file has
  // one: Hparams::n_nextn). enable_mtp() binds it (its weights are not loaded before) and
  // must come before any KV pool is made for the model: pools then hold its attention as
  // one more KV layer (Hparams::mtp_kv), and every forward keeps the final hidden state of
  // all its rows for forward_mtp. Throws Error(kUnsupported) naming the file without one.
  virtual bool has_mtp() const { return false; }
  virtual void enable_mtp();
  bool mtp_enabled() const { return hparams().mtp_kv; }
  // A pass of the MTP block over the sequences: logits (or picks) of those asking, in
  // order, as forward_batch's. Writes their rows of the MTP KV layer; positions do not
  // advance (the caller keeps the MTP block's own count).
  void forward_mtp(KvPool& pool, const std::vector<MtpSeq>& seqs, std::vector<float>& logits);
  // Rows row0 .. row0 + n - 1 of the final hidden states kept (MtpSeq's sources: the last
  // forward's with kMain, the last forward_mtp's with kMtp) to host memory ([n, n_embd]).
  virtual void copy_hidden(MtpSeq::From from, int64_t row0, int64_t n, float* out);

 protected:
  // The layers over the step laid out in lay_ (at least one token); writes the logits of
  // its output rows to `out`. Positions advance in the callers above.
  virtual void run(KvPool& pool, std::vector<float>& out) = 0;
  // The MTP block over the step laid out in lay_ (forward_mtp).
  virtual void run_mtp(KvPool& pool, const std::vector<MtpSeq>& seqs, std::vector<float>& out);
  // run() (or run_mtp()) as one back-end step (Backend::begin_step), again if the back-end asks.
  void run_step(KvPool& pool, std::vector<float>& out, const std::vector<MtpSeq>* mtp = nullptr);
  BatchLayout lay_;
  std::vector<SeqKv> mtp_kv_;  // forward_mtp's sequences at their MTP positions
};

// The model for `file`'s architecture (which must outlive it), bound for `backend`.
// Throws Error naming the file and tensor when one is missing or malformed.
std::unique_ptr<CausalLm> load_causal_lm(const gguf::File& file, ops::Backend& backend);

}  // namespace hearth::model

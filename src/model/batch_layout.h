// The host-side layout of one forward pass, shared by every model: the tokens of all
// sequences one after another, their positions, the KV rows they are written to, the
// attention sequences (first row, length, block table), the recurrent state slot of
// each sequence and which rows return logits. Built from a single cache or from a
// batch of sequences sharing a pool; the model then runs its layers over it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "ops/backend.h"
#include "ops/step_desc.h"

namespace hearth::model {

// One sequence of a batched forward pass: n_tokens new tokens at positions
// kv->n_past .., appended to its cache (and, for hybrid models, run through the
// recurrent state in slot kv->state_slot). The caller has given kv enough blocks.
// Hybrid models: after `after` of this step's tokens (0 < after < n_tokens), a copy of
// the sequence's recurrent state goes to state slot `slot` (a snapshot inside a prefill
// chunk, so the chunk need not end there; the same state as a chunk cut at that point).
struct StateSnap {
  int32_t after = 0;
  int32_t slot = -1;
};

// What an image-bearing sequence (Qwen-VL models) adds to its tokens: the 3-D RoPE
// position of each prompt row, the shift of the rows after the prompt, and the rows whose
// input embedding is an image's (the vision encoder's output) instead of the token's.
struct SeqMedia {
  std::vector<int32_t> pos3;  // [n_prompt, 3]: (t, h, w) of each prompt row
  int32_t tail_shift = 0;     // row r >= n_prompt: position r + tail_shift on every axis
  struct Span {
    int64_t first_row = 0;        // sequence row of its first token
    int64_t n_rows = 0;
    const float* embd = nullptr;  // [n_rows, n_embd], host memory
  };
  std::vector<Span> spans;
  int64_t n_prompt() const { return static_cast<int64_t>(pos3.size() / 3); }
};

struct BatchSeq {
  SeqKv* kv = nullptr;
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
  bool logits = false;  // return the logits of its last token (and see n_logits)
  // Only the argmax of that row is needed (greedy decoding with nothing that reads the
  // logits): where the back-end computes it on the device the row itself does not
  // cross to the host (BatchLayout::picks).
  bool argmax_only = false;
  std::vector<StateSnap> snaps = {};
  // Else, when draw.kind is not kCopy: only a draw (kDraw: its parameters and uniform
  // number, engine::Sampler::drawable) or the argmax (kArgmax) of the row after the
  // penalties of draw.n_penalty (the first tokens of `penalties`) is needed.
  ops::RowReduce draw = {};
  std::vector<ops::PenaltyToken> penalties = {};
  const SeqMedia* media = nullptr;  // images in the prompt (null: text only)
  // With logits: the rows of its last n_logits tokens are returned (speculative
  // verification: a row per drafted token; all reduced alike, so more than one only
  // with argmax_only or a kCopy draw).
  int64_t n_logits = 1;
  // Each of its rows attends as a one-token sequence of its own, at its position, to the
  // keys up to it (those of this step's earlier rows included): the arithmetic of
  // decoding the tokens one step at a time, so a speculative verification's rows give bit
  // for bit the logits those steps would (a multi-row sequence may take a blocked
  // attention kernel that sums in another order). A sequence with recurrent state must
  // then snapshot it after every row (snaps after 1, 2, .. n_tokens - 1): its recurrence
  // runs a row per pass, the one-token recurrent step (a several-token sequence may take
  // the chunked form, which sums in another order), and the snapshots are the states at
  // each row, to roll back to.
  bool decode_rows = false;
};

struct BatchLayout {
  std::vector<int32_t> tokens, positions, slots, out_rows;
  // Multi-axis RoPE positions [n_tokens, 3], filled only for a step with image rows
  // (otherwise every token's three positions are equal and `positions` holds them).
  std::vector<int32_t> pos3;
  // Step rows whose input embedding is given: rows row .. row + n of the step take
  // data ([n, n_embd], host memory) instead of their token's embedding.
  struct EmbdRows {
    int64_t row = 0, n = 0;
    const float* data = nullptr;
  };
  std::vector<EmbdRows> embd_rows;
  std::vector<ops::AttentionSeq> attn_seqs;
  std::vector<int32_t> state_slots;  // per attention sequence (-1: none)
  // The recurrence's view (hybrid models): one per sequence of the step, its rows, state
  // slot and snapshots inside the step (a decode_rows sequence is one here though its
  // rows are attention sequences of their own).
  struct RecSeq {
    int64_t first_row = 0, n_tokens = 0;
    int32_t slot = -1;
    std::vector<StateSnap> snaps;
  };
  std::vector<RecSeq> rec;
  bool has_snaps = false;
  // Per output row: how the back-end returns it (copy, argmax, draw); after the step, picks holds those
  // rows' argmax (ops::Backend::fetch_rows) when the back-end computed them, else it is
  // empty and every row's logits were copied.
  std::vector<ops::RowReduce> reduce;
  std::vector<ops::PenaltyToken> penalties;  // kMaxPenaltyTokens per output row (ops::Backend::fetch_rows)
  std::vector<ops::ArgmaxRow> picks;
  // The same arrays in one arena (ops/step_desc.h), filled by single() / batch(): the model
  // passes it to Backend::begin_step and hands the operations its pointers, which a
  // back-end with device memory reads where it uploaded the arena.
  ops::StepDesc desc;
  // Mixed into the step's launch key by fill_desc: a pass of another part of the model
  // (the MTP block) must not replay a recording of the model's own step of the same shape.
  uint64_t key_salt = 0;

  // One sequence with its own cache. Throws Error when the context would overflow.
  // last: how its last row is returned (ignored with all_logits: every row copied), with
  // last.n_penalty tokens of `penalties`.
  void single(KvCache& cache, const std::vector<int32_t>& new_tokens, bool all_logits, const ops::RowReduce& last = {},
              std::span<const ops::PenaltyToken> penalties = {}, const SeqMedia* media = nullptr);
  // Many sequences sharing a pool (sequences with no tokens are skipped). Throws
  // Error(kInternal) when a sequence lacks the blocks for its positions.
  void batch(const KvPool& pool, const std::vector<BatchSeq>& seqs);
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // The width of the rows of embd_rows' data (the model's n_embd; set by the model).
  void set_embd_width(int64_t n_embd) { embd_width_ = n_embd; }

 private:
  // A sequence's media for its step rows first .. first + n (sequence rows n_past ..).
  void add_media(const SeqMedia* media, int64_t first, int64_t n_past, int64_t n);
  void finish_media();
  void fill_desc(const KvPool& pool);
  int64_t embd_width_ = 0;
  bool media_rows_ = false;
  std::vector<int32_t> media_pos_;  // (step row, t, h, w) of the rows with media
};

// Grows `logits` (capacity `rows` rows of n_vocab floats) to hold `need` rows.
void reserve_logits(ops::Backend& be, std::unique_ptr<ops::Buffer>& logits, int64_t& rows, int64_t need,
                    int64_t n_vocab);

// The tail every model shares: the output rows' final norm and output projection,
// copied to `out` ([rows, n_vocab]; the rows of which only the argmax is needed reduced to
// lay.picks where the back-end does that on the device). x: [n, n_embd] hidden states; cur: scratch of at
// least rows * n_embd floats; logits: a buffer of at least rows * n_vocab floats (may be
// null when no row asks for logits).
void output_logits(ops::Backend& be, BatchLayout& lay, float* x, float* cur, const ops::WeightView& norm,
                   const ops::WeightView& output, float eps, int64_t n_embd, int64_t n_vocab, ops::Buffer* logits,
                   std::vector<float>& out);

}  // namespace hearth::model

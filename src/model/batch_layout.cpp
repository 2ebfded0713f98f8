#include "model/batch_layout.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hearth::model {

namespace {

// A row's penalty tokens into its slot of the layout's list (rows offer at most
// kMaxPenaltyTokens; more are sampled on the host from a copied row).
void set_penalties(const ops::RowReduce& r, std::span<const ops::PenaltyToken> pens, ops::PenaltyToken* slot) {
  if (r.n_penalty <= 0) return;
  if (r.n_penalty > ops::kMaxPenaltyTokens || static_cast<size_t>(r.n_penalty) > pens.size()) {
    fail(ErrorKind::kInternal, "model", "a row with " + std::to_string(r.n_penalty) + " penalty tokens (at most " +
                                            std::to_string(ops::kMaxPenaltyTokens) + ")");
  }
  std::copy(pens.begin(), pens.begin() + r.n_penalty, slot);
}

}  // namespace

void BatchLayout::add_media(const SeqMedia* media, int64_t first, int64_t n_past, int64_t n) {
  if (media == nullptr) return;
  const int64_t n_prompt = media->n_prompt();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = n_past + i;
    int32_t p[3];
    for (int a = 0; a < 3; ++a)
      p[a] = r < n_prompt ? media->pos3[static_cast<size_t>(r * 3 + a)] : static_cast<int32_t>(r + media->tail_shift);
    positions[static_cast<size_t>(first + i)] = p[0];
    if (p[1] != p[0] || p[2] != p[0]) media_rows_ = true;
    media_pos_.insert(media_pos_.end(), {static_cast<int32_t>(first + i), p[0], p[1], p[2]});
  }
  for (const SeqMedia::Span& sp : media->spans) {
    const int64_t lo = std::max(sp.first_row, n_past), hi = std::min(sp.first_row + sp.n_rows, n_past + n);
    if (lo >= hi) continue;
    embd_rows.push_back({first + (lo - n_past), hi - lo, sp.embd + (lo - sp.first_row) * embd_width_});
    // The rows' token ids are not read (their embeddings are given): any valid id will do.
    std::fill(tokens.begin() + first + (lo - n_past), tokens.begin() + first + (hi - n_past), 0);
  }
}

void BatchLayout::finish_media() {
  // Only a step with image rows needs the 3-D positions; otherwise `positions` says it all.
  pos3.clear();
  if (media_rows_) {
    pos3.resize(positions.size() * 3);
    for (size_t i = 0; i < positions.size(); ++i) pos3[i * 3] = pos3[i * 3 + 1] = pos3[i * 3 + 2] = positions[i];
    for (size_t j = 0; j < media_pos_.size(); j += 4)
      for (int a = 0; a < 3; ++a) pos3[static_cast<size_t>(media_pos_[j]) * 3 + a] = media_pos_[j + 1 + a];
  }
  media_pos_.clear();
  media_rows_ = false;
}

void BatchLayout::fill_desc(const KvPool& pool) {
  // The launch key: the pool (its KV layers' and states' addresses), and the snapshots'
  // points and slots (the copies between the passes name them).
  uint64_t key = reinterpret_cast<uintptr_t>(&pool);
  if (key_salt != 0) key = (key ^ key_salt) * 0x100000001b3ull;
  for (size_t s = 0; s < rec.size(); ++s) {
    for (const StateSnap& sn : rec[s].snaps) {
      for (const uint64_t v : {static_cast<uint64_t>(s), static_cast<uint64_t>(sn.after), static_cast<uint64_t>(sn.slot)})
        key = (key ^ v) * 0x100000001b3ull;
    }
  }
  desc.assign(ops::StepDesc::Inputs{tokens, positions, slots, attn_seqs, pool.block_size(), state_slots, out_rows,
                                    reduce, penalties, pos3, key});
}

void BatchLayout::single(KvCache& cache, const std::vector<int32_t>& new_tokens, bool all_logits,
                         const ops::RowReduce& last, std::span<const ops::PenaltyToken> pens, const SeqMedia* media) {
  const auto n = static_cast<int64_t>(new_tokens.size());
  SeqKv& seq = cache.seq();
  if (seq.n_past + n > cache.n_ctx()) {
    fail(ErrorKind::kResource, "model", "context is full: " + std::to_string(seq.n_past) + " + " +
                                            std::to_string(n) + " tokens exceed the context size " +
                                            std::to_string(cache.n_ctx()));
  }
  tokens.assign(new_tokens.begin(), new_tokens.end());
  attn_seqs.assign(1, ops::AttentionSeq{0, n, seq.n_past, seq.blocks.data()});
  state_slots.assign(1, seq.state_slot);
  rec.assign(1, RecSeq{0, n, seq.state_slot, {}});
  has_snaps = false;
  positions.resize(static_cast<size_t>(n));
  slots.resize(static_cast<size_t>(n));
  const BlockMapHost map{seq.blocks.data(), cache.pool().block_size()};
  for (int64_t i = 0; i < n; ++i) {
    positions[i] = static_cast<int32_t>(seq.n_past + i);
    slots[i] = map.slot(seq.n_past + i);
  }
  embd_rows.clear();
  add_media(media, 0, seq.n_past, n);
  finish_media();
  out_rows.clear();
  for (int64_t i = all_logits ? 0 : n - 1; i < n; ++i) out_rows.push_back(static_cast<int32_t>(i));
  reduce.assign(out_rows.size(), all_logits ? ops::RowReduce{} : last);
  penalties.assign(out_rows.size() * ops::kMaxPenaltyTokens, ops::PenaltyToken{});
  if (!all_logits) set_penalties(reduce.back(), pens, penalties.data() + (out_rows.size() - 1) * ops::kMaxPenaltyTokens);
  fill_desc(cache.pool());
}

void BatchLayout::batch(const KvPool& pool, const std::vector<BatchSeq>& seqs) {
  tokens.clear();
  positions.clear();
  slots.clear();
  out_rows.clear();
  reduce.clear();
  penalties.clear();
  attn_seqs.clear();
  state_slots.clear();
  rec.clear();
  has_snaps = false;
  embd_rows.clear();
  for (const BatchSeq& b : seqs) {
    if (b.n_tokens <= 0) continue;
    SeqKv& kv = *b.kv;
    if (kv.n_past + b.n_tokens > kv.capacity(pool.block_size())) {
      fail(ErrorKind::kInternal, "model", "a sequence of the batch has " + std::to_string(kv.blocks.size()) +
                                              " KV blocks, too few for " +
                                              std::to_string(kv.n_past + b.n_tokens) + " positions");
    }
    const auto first = static_cast<int64_t>(tokens.size());
    if (b.decode_rows && b.n_tokens > 1) {
      // With recurrent state: a snapshot after every row (the recurrence runs a row per pass).
      bool every_row = static_cast<int64_t>(b.snaps.size()) == b.n_tokens - 1;
      for (size_t i = 0; every_row && i < b.snaps.size(); ++i) {
        every_row = b.snaps[i].after == static_cast<int32_t>(i + 1);
      }
      if ((kv.state_slot >= 0 ? !every_row : !b.snaps.empty()) || b.media != nullptr) {
        fail(ErrorKind::kInternal, "model",
             "rows attended one by one in a sequence with images, or with recurrent state but not a snapshot after "
             "every row");
      }
      for (int64_t i = 0; i + 1 < b.n_tokens; ++i) {
        attn_seqs.push_back(ops::AttentionSeq{first + i, 1, kv.n_past + i, kv.blocks.data()});
        state_slots.push_back(-1);  // (the recurrence reads `rec`, never these)
      }
      attn_seqs.push_back(ops::AttentionSeq{first + b.n_tokens - 1, 1, kv.n_past + b.n_tokens - 1, kv.blocks.data()});
    } else {
      attn_seqs.push_back(ops::AttentionSeq{first, b.n_tokens, kv.n_past, kv.blocks.data()});
    }
    state_slots.push_back(kv.state_slot);
    int32_t prev = 0;
    for (const StateSnap& sn : b.snaps) {
      if (sn.after <= prev || sn.after >= b.n_tokens || sn.slot < 0 || sn.slot == kv.state_slot) {
        fail(ErrorKind::kInternal, "model", "a state snapshot after " + std::to_string(sn.after) + " of " +
                                                std::to_string(b.n_tokens) + " tokens (slot " +
                                                std::to_string(sn.slot) + ") is out of order or range");
      }
      prev = sn.after;
    }
    rec.push_back(RecSeq{first, b.n_tokens, kv.state_slot, b.snaps});
    has_snaps = has_snaps || !b.snaps.empty();
    const BlockMapHost map{kv.blocks.data(), pool.block_size()};
    for (int64_t i = 0; i < b.n_tokens; ++i) {
      tokens.push_back(b.tokens[i]);
      positions.push_back(static_cast<int32_t>(kv.n_past + i));
      slots.push_back(map.slot(kv.n_past + i));
    }
    add_media(b.media, first, kv.n_past, b.n_tokens);
    if (b.logits) {
      if (b.n_logits < 1 || b.n_logits > b.n_tokens ||
          (b.n_logits > 1 && !b.argmax_only && b.draw.kind != ops::RowKind::kCopy)) {
        fail(ErrorKind::kInternal, "model", "a sequence of " + std::to_string(b.n_tokens) + " tokens asks for " +
                                                std::to_string(b.n_logits) + " logits rows that cannot be returned so");
      }
      for (int64_t r = b.n_tokens - b.n_logits; r < b.n_tokens; ++r) {
        out_rows.push_back(static_cast<int32_t>(first + r));
        if (b.argmax_only) {
          reduce.push_back({ops::RowKind::kArgmax});
        } else {
          reduce.push_back(b.draw);
        }
        penalties.resize(penalties.size() + ops::kMaxPenaltyTokens);
        set_penalties(reduce.back(), b.penalties, penalties.data() + penalties.size() - ops::kMaxPenaltyTokens);
      }
    }
  }
  finish_media();
  fill_desc(pool);
}

void reserve_logits(ops::Backend& be, std::unique_ptr<ops::Buffer>& logits, int64_t& rows, int64_t need,
                    int64_t n_vocab) {
  if (need <= rows) return;
  logits.reset();  // free first: the peak never holds both sizes
  logits = be.alloc(need * n_vocab);
  rows = need;
}

void output_logits(ops::Backend& be, BatchLayout& lay, float* x, float* cur, const ops::WeightView& norm,
                   const ops::WeightView& output, float eps, int64_t E, int64_t n_vocab, ops::Buffer* logits,
                   std::vector<float>& out) {
  const auto rows = static_cast<int64_t>(lay.out_rows.size());
  lay.picks.clear();
  if (rows == 0) {
    out.clear();
    return;
  }
  // The output rows, gathered (a contiguous tail, the common case, needs no gather).
  const float* last = x;
  const bool contiguous = lay.out_rows.back() - lay.out_rows.front() + 1 == rows;
  if (contiguous) {
    last = x + static_cast<int64_t>(lay.out_rows.front()) * E;
  } else {
    be.gather_rows(x, E, lay.desc.out_rows(), rows, cur);
    last = cur;  // rms_norm may work in place
  }
  be.rms_norm(last, norm, rows, E, eps, cur);
  if (logits == nullptr) fail(ErrorKind::kInternal, "model", "no logits buffer for " + std::to_string(rows) + " rows");
  be.matmul(output, cur, rows, logits->data());
  out.resize(static_cast<size_t>(rows * n_vocab));
  // Through fetch_rows whether or not a row is greedy now (the back-end's step must not
  // depend on it: CUDA graphs are recorded per step size).
  if (be.device_argmax() && lay.reduce.size() == static_cast<size_t>(rows)) {
    lay.picks.assign(static_cast<size_t>(rows), ops::ArgmaxRow{});
    be.fetch_rows(*logits, rows, n_vocab, lay.desc.reduce(), lay.desc.penalties(), out.data(), lay.picks.data());
    return;
  }
  be.copy_to_host(*logits, 0, rows * n_vocab, out.data());
}

}  // namespace hearth::model

// One model step described once: every per-step array the operations read (tokens,
// positions, KV slots, the attention sequences with their block tables, the row ->
// sequence map, each sequence's recurrent state slot, the output rows and how each is returned),
// laid out in one host arena at offsets that depend only on the step's counts.
// model::BatchLayout fills it; the model passes it to Backend::begin_step and then
// hands the operations pointers into it (tokens(), positions(), attn_seqs(), ...). A
// back-end that keeps device memory uploads the arena in one copy per step and reads
// those arrays there (CUDA: CudaBackend::begin_step); the CPU reads them where they are.
//
// Layout (each section 16-byte aligned, in this order): tokens, positions, slots,
// row_seq [n_tokens] int32; seqs [n_seqs] StepSeq; gdn [n_seqs] GdnSeq (rows and state slot);
// out_rows [n_out] int32; reduce [n_out] RowReduce; penalties [n_out *
// kMaxPenaltyTokens] PenaltyToken; pos3 [3 n_tokens] int32 (steps with image rows
// only, else empty); tables [n_table] int32 last. So a step with the same counts (a
// decode step of the same batch) has every section at the same offset whatever its
// contents and however long its block tables grow (vLLM's per-step attention metadata
// plays the same part: fixed buffers, refilled each step, that recorded graphs read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace hearth::ops {

// One attention sequence of a step as the device reads it (int32 fields: a step holds
// fewer than 2^31 rows, positions and table entries).
struct StepSeq {
  int32_t first_row = 0;  // its first row of the step
  int32_t n_tokens = 0;   // its rows
  int32_t pos0 = 0;       // position of its first row
  int32_t table_off = 0;  // its block table: tables()[table_off .. table_off + n_blocks)
  int32_t n_blocks = 0;   // blocks covering positions < pos0 + n_tokens
};

class StepDesc {
 public:
  // What a step is made of (host arrays, copied by assign). seqs' block tables must
  // cover positions < pos0 + n_tokens in blocks of block_size; pos3 is empty or
  // [n_tokens, 3]; state_slots has one entry per sequence (-1: none); reduce has one per
  // output row and penalties kMaxPenaltyTokens per output row (or none at all).
  // (A pointer and a count: this header is also compiled as CUDA C++17, without std::span.)
  template <class T>
  struct Array {
    const T* ptr = nullptr;
    size_t n = 0;
    Array() = default;
    Array(const T* p, size_t count) : ptr(p), n(count) {}
    Array(const std::vector<T>& v) : ptr(v.data()), n(v.size()) {}  // NOLINT: implicit by design
    size_t size() const { return n; }
    bool empty() const { return n == 0; }
    const T* data() const { return ptr; }
    const T& operator[](size_t i) const { return ptr[i]; }
  };
  struct Inputs {
    Array<int32_t> tokens, positions, slots;
    Array<AttentionSeq> seqs;
    int64_t block_size = 16;
    Array<int32_t> state_slots, out_rows;
    Array<RowReduce> reduce;
    Array<PenaltyToken> penalties;
    Array<int32_t> pos3;
    // What the step's launches depend on besides its arrays and counts (a back-end that
    // records steps keys the recordings on it): the KV pool it runs over, state
    // snapshots inside the step (their copies name slots). 0: nothing.
    uint64_t launch_key = 0;
  };
  // Lays a step out (throws Error(kInternal) on inconsistent inputs). Pointers from an
  // earlier assign are invalid after it; serial() changes.
  void assign(const Inputs& in);
  void clear() { assign(Inputs{}); }

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_seqs() const { return n_seqs_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_table() const { return n_table_; }
  int64_t block_size() const { return block_size_; }  // of the block tables
  // +1 at every assign (of any StepDesc): what a back-end keys its per-step caches on.
  uint64_t serial() const { return serial_; }
  uint64_t launch_key() const { return launch_key_; }  // Inputs::launch_key

  const int32_t* tokens() const { return at<int32_t>(off_.tokens); }
  const int32_t* positions() const { return at<int32_t>(off_.positions); }
  const int32_t* slots() const { return at<int32_t>(off_.slots); }
  const int32_t* row_seq() const { return at<int32_t>(off_.row_seq); }  // per row: its sequence
  const StepSeq* seqs() const { return at<StepSeq>(off_.seqs); }
  // The sequences as the Gated DeltaNet ops take them: their rows and state slots (-1: none).
  const GdnSeq* gdn_seqs() const { return at<GdnSeq>(off_.gdn); }
  const int32_t* out_rows() const { return at<int32_t>(off_.out_rows); }
  const RowReduce* reduce() const { return at<RowReduce>(off_.reduce); }
  // kMaxPenaltyTokens per output row (zeros past each row's n_penalty).
  const PenaltyToken* penalties() const { return at<PenaltyToken>(off_.penalties); }
  const int32_t* pos3() const { return has_pos3_ ? at<int32_t>(off_.pos3) : nullptr; }
  const int32_t* tables() const { return at<int32_t>(off_.tables); }
  // The sequences as Backend::attention takes them, their block tables inside the arena.
  const AttentionSeq* attn_seqs() const { return attn_seqs_.data(); }

  // The arena: size() bytes at data(), the arrays above at their offsets.
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  size_t size() const { return size_; }
  // Whether [p, p + n) lies inside the arena, and p's offset there.
  bool holds(const void* p, size_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return size_ > 0 && b >= data() && b + n <= data() + size_;
  }
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const uint8_t*>(p) - data()); }

  struct Offsets {
    size_t tokens = 0, positions = 0, slots = 0, row_seq = 0, seqs = 0, gdn = 0, out_rows = 0, reduce = 0,
           penalties = 0, pos3 = 0, tables = 0;
  };
  const Offsets& offsets() const { return off_; }
  static constexpr size_t kAlign = 16;

 private:
  template <class T>
  const T* at(size_t off) const {
    return reinterpret_cast<const T*>(data() + off);
  }
  std::vector<uint64_t> words_;  // the arena (8-byte aligned storage; RowReduce holds a double)
  size_t size_ = 0;
  Offsets off_;
  int64_t n_tokens_ = 0, n_seqs_ = 0, n_out_ = 0, n_table_ = 0, block_size_ = 16;
  bool has_pos3_ = false;
  uint64_t serial_ = 0, launch_key_ = 0;
  std::vector<AttentionSeq> attn_seqs_;
};

}  // namespace hearth::ops

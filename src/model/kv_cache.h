// KV memory of the Llama-family model, paged: a pool of fixed-size blocks per layer
// (one allocation, committed as it is written) and, per sequence, a block table
// mapping its logical blocks to pool blocks. Which blocks a sequence gets is the
// engine's business (engine/block_manager.h); the model only reads and writes the
// rows the tables name.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/hparams.h"
#include "ops/backend.h"

namespace hearth::model {

class KvPool {
 public:
  // block_size must be a power of two. Hybrid models also get n_state_slots slots of
  // recurrent state (conv + delta-rule state of every Gated DeltaNet layer, f32),
  // zeroed; a sequence names its slot in SeqKv::state_slot.
  KvPool(ops::Backend& backend, const Hparams& hp, ops::KvType type, int64_t block_size, int64_t n_blocks,
         int64_t n_state_slots = 0);
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  // Writes zeros over the whole pool (K and V of every block) so that its memory is
  // committed now rather than as blocks are first used: resident memory is then flat
  // from the start (`hearth serve --kv-commit`).
  void commit();
  ops::KvType type() const { return type_; }
  ops::KvLayer layer(int64_t l) const;  // l: KV layer index (Hparams::kv_index)
  // Bytes of one block across all layers (K and V): q8_0 rows take 34 bytes per 32
  // values (f16: 64), so the same memory holds 64 / 34 = 1.88x the tokens.
  static uint64_t bytes_per_block(const Hparams& hp, ops::KvType type, int64_t block_size);
  // Throws Error(kUnsupported) where this back-end or model cannot keep a cache of this
  // type: a back-end without it (CUDA has no q8_0 kernels yet), or q8_0 with a head_dim
  // that is not a multiple of 32 (a q8_0 block must not straddle two heads). The
  // constructor checks it; the CLI calls it (without a back-end: the model's part)
  // before sizing anything.
  static void check_kv_type(const Hparams& hp, ops::KvType type, const ops::Backend* backend = nullptr);

  // Recurrent state slots (hybrid models; none otherwise).
  int64_t n_state_slots() const { return n_slots_; }
  int64_t state_floats() const;  // per slot
  static uint64_t bytes_per_state(const Hparams& hp);
  // Slot s's state of the r-th recurrent layer (back-end memory).
  float* conv_state(int64_t s, int64_t r) const;
  float* ssm_state(int64_t s, int64_t r) const;
  // Every slot's state of the r-th recurrent layer, as the Gated DeltaNet ops take them
  // (the slots are one allocation, state_floats() apart: slot s at conv_state(s, r)).
  ops::GdnStates gdn_states(int64_t r) const;
  void clear_state(int64_t s);
  void copy_state(int64_t src, int64_t dst);
  // Only the r-th recurrent layer's state (conv and delta rule).
  void copy_layer_state(int64_t src, int64_t dst, int64_t r);

 private:
  float* slot(int64_t s) const;
  ops::Backend* backend_;
  ops::KvType type_;
  int64_t block_size_, n_blocks_, n_kv_dim_;
  std::vector<std::unique_ptr<ops::Buffer>> k_, v_;  // per KV layer
  int64_t n_rec_layers_ = 0, conv_floats_ = 0, ssm_floats_ = 0;
  int64_t n_slots_ = 0;
  std::unique_ptr<ops::Buffer> states_;  // [n_slots_][state_floats()]
};

// One sequence's place in a pool: the pool blocks holding its positions in order, and
// how many positions are filled.
struct SeqKv {
  std::vector<int32_t> blocks;
  int64_t n_past = 0;
  int32_t state_slot = -1;  // hybrid models: its recurrent state slot in the pool
  int64_t capacity(int64_t block_size) const { return static_cast<int64_t>(blocks.size()) * block_size; }
};

// Logical position -> pool row through a block table (host side, for the slots).
struct BlockMapHost {
  const int32_t* blocks;
  int64_t block_size;
  int32_t slot(int64_t pos) const {
    return static_cast<int32_t>(static_cast<int64_t>(blocks[pos / block_size]) * block_size + pos % block_size);
  }
};

// A single sequence with a pool of its own, sized for n_ctx positions (`hearth run`,
// tests): its block table is simply 0, 1, 2, ...
class KvCache {
 public:
  // Hybrid models: the sequence's state is slot 0; spare_state_slots more (1 ..) are for
  // the caller (speculative decoding's per-row checkpoints, engine/generator.cpp).
  KvCache(ops::Backend& backend, const Hparams& hp, int64_t n_ctx, ops::KvType type = ops::KvType::F32,
          int64_t spare_state_slots = 0);
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return seq_.n_past; }
  void clear();  // forgets every position (and zeroes the recurrent state)
  KvPool& pool() { return pool_; }
  SeqKv& seq() { return seq_; }
  // Bytes of cache memory for n_ctx positions of this model.
  static uint64_t bytes_needed(const Hparams& hp, int64_t n_ctx, ops::KvType type = ops::KvType::F32);
  static constexpr int64_t kBlockSize = 16;

 private:
  int64_t n_ctx_;
  KvPool pool_;
  SeqKv seq_;
};

}  // namespace hearth::model

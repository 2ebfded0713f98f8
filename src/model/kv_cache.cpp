#include "model/kv_cache.h"

#include "core/error.h"

namespace hearth::model {

KvPool::KvPool(ops::Backend& backend, const Hparams& hp, ops::KvType type, int64_t block_size, int64_t n_blocks,
               int64_t n_state_slots)
    : backend_(&backend), type_(type), block_size_(block_size), n_blocks_(n_blocks), n_kv_dim_(hp.n_embd_kv()) {
  if (block_size <= 0 || (block_size & (block_size - 1)) != 0) {
    fail(ErrorKind::kInvalidInput, "kv", "block size " + std::to_string(block_size) + " is not a power of two");
  }
  if (n_blocks <= 0) fail(ErrorKind::kInvalidInput, "kv", "the KV pool needs at least one block");
  check_kv_type(hp, type, &backend);
  const int64_t floats = (n_blocks * block_size * ops::kv_row_bytes(type, n_kv_dim_) + 3) / 4;
  for (int64_t l = 0; l < hp.n_kv_layers(); ++l) {
    k_.push_back(backend.alloc_lazy(floats));
    v_.push_back(backend.alloc_lazy(floats));
  }
  n_rec_layers_ = hp.n_recurrent_layers();
  conv_floats_ = hp.gdn.conv_state_floats();
  ssm_floats_ = hp.gdn.ssm_state_floats();
  if (n_rec_layers_ > 0 && n_state_slots > 0) {
    n_slots_ = n_state_slots;
    states_ = backend.alloc_lazy(n_state_slots * state_floats());
    for (int64_t s = 0; s < n_state_slots; ++s) clear_state(s);
  }
}

void KvPool::commit() {
  for (auto* bufs : {&k_, &v_}) {
    for (const auto& b : *bufs) backend_->fill(b->data(), 0.0f, b->size());
  }
}

int64_t KvPool::state_floats() const { return n_rec_layers_ * (conv_floats_ + ssm_floats_); }

uint64_t KvPool::bytes_per_state(const Hparams& hp) {
  return static_cast<uint64_t>(hp.n_recurrent_layers()) *
         static_cast<uint64_t>(hp.gdn.conv_state_floats() + hp.gdn.ssm_state_floats()) * 4u;
}

float* KvPool::slot(int64_t s) const {
  if (s < 0 || s >= n_state_slots()) {
    fail(ErrorKind::kInternal, "kv", "state slot " + std::to_string(s) + " out of range (" +
                                         std::to_string(n_state_slots()) + " slots)");
  }
  return states_->data() + s * state_floats();
}

float* KvPool::conv_state(int64_t s, int64_t r) const { return slot(s) + r * (conv_floats_ + ssm_floats_); }

float* KvPool::ssm_state(int64_t s, int64_t r) const { return conv_state(s, r) + conv_floats_; }

void KvPool::clear_state(int64_t s) { backend_->fill(slot(s), 0.0f, state_floats()); }

void KvPool::copy_state(int64_t src, int64_t dst) {
  if (src != dst) backend_->copy(slot(src), state_floats(), slot(dst));
}

ops::GdnStates KvPool::gdn_states(int64_t r) const {
  if (n_slots_ == 0) fail(ErrorKind::kInternal, "kv", "the pool holds no recurrent state slots");
  return ops::GdnStates{conv_state(0, r), ssm_state(0, r), state_floats()};
}

void KvPool::copy_layer_state(int64_t src, int64_t dst, int64_t r) {
  if (src != dst) backend_->copy(conv_state(src, r), conv_floats_ + ssm_floats_, conv_state(dst, r));
}

ops::KvLayer KvPool::layer(int64_t l) const {
  return ops::KvLayer{k_[static_cast<size_t>(l)]->data(), v_[static_cast<size_t>(l)]->data(), type_, block_size_,
                      n_kv_dim_};
}

uint64_t KvPool::bytes_per_block(const Hparams& hp, ops::KvType type, int64_t block_size) {
  return static_cast<uint64_t>(hp.n_kv_layers()) * 2u * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(ops::kv_row_bytes(type, hp.n_embd_kv()));
}

void KvPool::check_kv_type(const Hparams& hp, ops::KvType type, const ops::Backend* backend) {
  if (backend != nullptr && !backend->supports_kv_type(type)) {
    fail(ErrorKind::kUnsupported, "kv",
         "--kv-type " + std::string(ops::kv_type_name(type)) + " is not supported by the " + backend->name() +
             " back-end; use --kv-type f16 or f32");
  }
  if (type == ops::KvType::Q8_0 && hp.n_kv_layers() > 0 && hp.head_dim % ops::kQ8Block != 0) {
    fail(ErrorKind::kUnsupported, "kv",
         "--kv-type q8_0 needs a head dimension that is a multiple of " + std::to_string(ops::kQ8Block) +
             "; this model's head_dim is " + std::to_string(hp.head_dim) + " (use --kv-type f16 or f32)");
  }
}

namespace {
int64_t blocks_for(int64_t n_ctx) { return (n_ctx + KvCache::kBlockSize - 1) / KvCache::kBlockSize; }
}  // namespace

KvCache::KvCache(ops::Backend& backend, const Hparams& hp, int64_t n_ctx, ops::KvType type, int64_t spare_state_slots)
    : n_ctx_(n_ctx),
      pool_(backend, hp, type, kBlockSize, blocks_for(n_ctx), hp.n_recurrent_layers() > 0 ? 1 + spare_state_slots : 0) {
  seq_.blocks.resize(static_cast<size_t>(blocks_for(n_ctx)));
  for (size_t i = 0; i < seq_.blocks.size(); ++i) seq_.blocks[i] = static_cast<int32_t>(i);
  if (pool_.n_state_slots() > 0) seq_.state_slot = 0;
}

void KvCache::clear() {
  seq_.n_past = 0;
  if (seq_.state_slot >= 0) pool_.clear_state(seq_.state_slot);
}

uint64_t KvCache::bytes_needed(const Hparams& hp, int64_t n_ctx, ops::KvType type) {
  return static_cast<uint64_t>(blocks_for(n_ctx)) * KvPool::bytes_per_block(hp, type, kBlockSize) +
         KvPool::bytes_per_state(hp);
}

}  // namespace hearth::model

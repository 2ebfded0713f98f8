#include "model/kv_cache.h"

#include "core/error.h"

namespace hearth::model {

KvPool::KvPool(ops::Backend& backend, const Hparams& hp, ops::KvType type, int64_t block_size, int64_t n_blocks)
    : type_(type), block_size_(block_size), n_blocks_(n_blocks), n_kv_dim_(hp.n_embd_kv()) {
  if (block_size <= 0 || (block_size & (block_size - 1)) != 0) {
    fail(ErrorKind::kInvalidInput, "kv", "block size " + std::to_string(block_size) + " is not a power of two");
  }
  if (n_blocks <= 0) fail(ErrorKind::kInvalidInput, "kv", "the KV pool needs at least one block");
  const int64_t elems = n_blocks * block_size * n_kv_dim_;
  const int64_t floats = (elems * ops::kv_type_size(type) + 3) / 4;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    k_.push_back(backend.alloc_lazy(floats));
    v_.push_back(backend.alloc_lazy(floats));
  }
}

ops::KvLayer KvPool::layer(int64_t l) const {
  return ops::KvLayer{k_[static_cast<size_t>(l)]->data(), v_[static_cast<size_t>(l)]->data(), type_, block_size_,
                      n_kv_dim_};
}

uint64_t KvPool::bytes_per_block(const Hparams& hp, ops::KvType type, int64_t block_size) {
  return static_cast<uint64_t>(hp.n_layer) * 2u * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(hp.n_embd_kv()) * static_cast<uint64_t>(ops::kv_type_size(type));
}

namespace {
int64_t blocks_for(int64_t n_ctx) { return (n_ctx + KvCache::kBlockSize - 1) / KvCache::kBlockSize; }
}  // namespace

KvCache::KvCache(ops::Backend& backend, const Hparams& hp, int64_t n_ctx, ops::KvType type)
    : n_ctx_(n_ctx), pool_(backend, hp, type, kBlockSize, blocks_for(n_ctx)) {
  seq_.blocks.resize(static_cast<size_t>(blocks_for(n_ctx)));
  for (size_t i = 0; i < seq_.blocks.size(); ++i) seq_.blocks[i] = static_cast<int32_t>(i);
}

uint64_t KvCache::bytes_needed(const Hparams& hp, int64_t n_ctx, ops::KvType type) {
  return static_cast<uint64_t>(blocks_for(n_ctx)) * KvPool::bytes_per_block(hp, type, kBlockSize);
}

}  // namespace hearth::model

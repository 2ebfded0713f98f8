// The fingerprint that keeps the KV disk tier's files of one model, KV type and block
// size apart from every other's (the folder name under --kv-disk DIR, and a field of
// every file's header).
//
// The model's part is a hash of the file's content, cheap enough to compute at every
// start: every metadata key and value (hyper-parameters, RoPE settings, tokenizer),
// every tensor's name, type, shape and size, the file size, and the first and the last
// MiB of the tensor data (in the tensor table's order). Two files that agree on all of
// that but differ in weights elsewhere would share a fingerprint: a re-quantization or
// a fine-tune changes the tensor types or the first and last MiB in practice, but an
// edit of only the middle of one tensor would not be seen. A path, a modification time
// or a copy of the file changes nothing (the same model, found again).
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace hearth::engine::kvdisk {

uint64_t model_identity(const gguf::File& file);

struct FingerprintParts {
  uint64_t model = 0;
  uint64_t projector = 0;        // the vision tower's file (image rows' KV depend on it), 0: none
  std::string kv_type;           // ops::kv_type_name
  int64_t block_size = 16;
  uint64_t kv_block_bytes = 0;   // one block's payload (a layout check as much as anything)
  uint64_t state_bytes = 0;      // one snapshot's payload (hybrid models)
};
uint64_t fingerprint(const FingerprintParts& p);
// For the folder's ABOUT file and the start-up log line.
std::string describe(const FingerprintParts& p, const std::string& model_name);

}  // namespace hearth::engine::kvdisk

#include "engine/kv_disk_fingerprint.h"

#include <algorithm>
#include <cstring>

#include "engine/kv_disk_format.h"

namespace hearth::engine::kvdisk {
namespace {

// A 64-bit hash fed with bytes in pieces: 8 bytes at a time into a multiply-xorshift
// state, finished with splitmix64's finalizer. Not for adversaries: it only tells
// model files apart.
class Hasher {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      buf_ |= static_cast<uint64_t>(p[i]) << (8 * fill_);
      if (++fill_ == 8) flush();
    }
    len_ += n;
  }
  void u64(uint64_t v) { bytes(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t done() {
    if (fill_ > 0) flush();
    uint64_t z = h_ ^ len_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  void flush() {
    h_ = (h_ ^ buf_) * 0x9e3779b97f4a7c15ull;
    h_ ^= h_ >> 29;
    buf_ = 0;
    fill_ = 0;
  }
  uint64_t h_ = 0x6a09e667f3bcc909ull, buf_ = 0, len_ = 0;
  int fill_ = 0;
};

void hash_value(Hasher& h, const gguf::Value& v) {
  h.u64(static_cast<uint64_t>(v.type));
  switch (v.type) {
    case gguf::ValueType::STRING:
      h.str(v.str);
      break;
    case gguf::ValueType::ARRAY:
      h.u64(static_cast<uint64_t>(v.elem_type));
      h.u64(v.arr.size());
      for (const gguf::Value& e : v.arr) hash_value(h, e);
      break;
    case gguf::ValueType::FLOAT32:
    case gguf::ValueType::FLOAT64: {
      uint64_t bits = 0;
      std::memcpy(&bits, &v.f64, 8);
      h.u64(bits);
      break;
    }
    default:
      h.u64(v.u64);
      h.u64(static_cast<uint64_t>(v.i64));
  }
}

}  // namespace

uint64_t model_identity(const gguf::File& file) {
  Hasher h;
  h.u64(file.file_size());
  h.u64(file.metadata().size());
  for (const gguf::KeyValue& kv : file.metadata()) {
    h.str(kv.key);
    hash_value(h, kv.value);
  }
  const auto& tensors = file.tensors();
  h.u64(tensors.size());
  for (const gguf::TensorInfo& t : tensors) {
    h.str(t.name);
    h.u64(static_cast<uint64_t>(t.type));
    h.u64(t.shape.size());
    for (uint64_t d : t.shape) h.u64(d);
    h.u64(t.n_bytes);
  }
  // The first MiB of tensor data, tensor after tensor, then the last MiB backwards.
  constexpr uint64_t kSample = 1u << 20;
  uint64_t left = kSample;
  for (size_t i = 0; i < tensors.size() && left > 0; ++i) {
    const uint64_t n = std::min(left, tensors[i].n_bytes);
    if (tensors[i].data != nullptr) h.bytes(tensors[i].data, n);
    left -= n;
  }
  left = kSample;
  for (size_t i = tensors.size(); i-- > 0 && left > 0;) {
    const uint64_t n = std::min(left, tensors[i].n_bytes);
    if (tensors[i].data != nullptr) h.bytes(tensors[i].data + (tensors[i].n_bytes - n), n);
    left -= n;
  }
  return h.done();
}

uint64_t fingerprint(const FingerprintParts& p) {
  Hasher h;
  h.str("hearth-kv-disk");
  h.u64(kFormatVersion);
  h.u64(p.model);
  h.u64(p.projector);
  h.str(p.kv_type);
  h.u64(static_cast<uint64_t>(p.block_size));
  h.u64(p.kv_block_bytes);
  h.u64(p.state_bytes);
  return h.done();
}

std::string describe(const FingerprintParts& p, const std::string& model_name) {
  std::string s = "model " + model_name + " (content hash " + hex64(p.model) + ")";
  if (p.projector != 0) s += ", vision tower " + hex64(p.projector);
  s += ", KV type " + p.kv_type + ", " + std::to_string(p.block_size) + "-token blocks of " +
       std::to_string(p.kv_block_bytes) + " bytes";
  if (p.state_bytes > 0) s += ", state snapshots of " + std::to_string(p.state_bytes) + " bytes";
  return s;
}

}  // namespace hearth::engine::kvdisk

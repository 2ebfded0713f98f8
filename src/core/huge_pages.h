// Anonymous memory for the large, long-lived arrays that the kernels stream through (the
// packed weights, the KV pool): mapped 2 MiB-aligned and advised for transparent huge
// pages, so that walking tens of megabytes needs one TLB entry per 2 MiB instead of per
// 4 KiB page. On Linux with THP in "madvise" mode (the common default) this is what
// turns them on; elsewhere the advice is skipped and the memory is plain. Pages are
// committed on first write, as with any anonymous mapping, and read as zeros until then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hearth {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class HugeRegion {
 public:
  HugeRegion() = default;
  // A region of at least `bytes` (rounded up to 2 MiB), or an empty one if the mapping
  // fails (the caller then falls back to the heap).
  static HugeRegion map(size_t bytes);
  ~HugeRegion();
  HugeRegion(HugeRegion&& o) noexcept;
  HugeRegion& operator=(HugeRegion&& o) noexcept;
  HugeRegion(const HugeRegion&) = delete;
  HugeRegion& operator=(const HugeRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void release();
  void* mapping_ = nullptr;  // what mmap returned (data_ is its first 2 MiB boundary)
  size_t mapping_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Many allocations that live as long as the arena, carved one after another (64-byte
// aligned) from huge-page regions of chunk_bytes (more for a larger request). Memory is
// zero until written; a chunk's unused tail is never touched and costs no resident
// memory. Returns nullptr when no region can be mapped.
class HugeArena {
 public:
  explicit HugeArena(size_t chunk_bytes = size_t{64} << 20) : chunk_bytes_(chunk_bytes) {}
  uint8_t* alloc(size_t bytes);

 private:
  size_t chunk_bytes_;
  std::vector<HugeRegion> chunks_;
  size_t used_ = 0;  // in the last chunk
};

}  // namespace hearth

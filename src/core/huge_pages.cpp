#include "core/huge_pages.h"

#include <algorithm>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define HEARTH_HAVE_MMAP 1
#endif

namespace hearth {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

HugeRegion HugeRegion::map(size_t bytes) {
  HugeRegion r;
#if defined(HEARTH_HAVE_MMAP)
  if (bytes == 0) return r;
  const size_t size = round_up(bytes, kHugePageBytes);
  // One extra huge page of slack to find a 2 MiB boundary inside the mapping.
  const size_t mapped = size + kHugePageBytes;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return r;
  const auto start = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = round_up(start, kHugePageBytes);
#if defined(MADV_HUGEPAGE)
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  r.mapping_ = m;
  r.mapping_bytes_ = mapped;
  r.data_ = reinterpret_cast<uint8_t*>(aligned);
  r.size_ = size;
#else
  (void)bytes;
#endif
  return r;
}

void HugeRegion::release() {
#if defined(HEARTH_HAVE_MMAP)
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
#endif
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  data_ = nullptr;
  size_ = 0;
}

HugeRegion::~HugeRegion() { release(); }

HugeRegion::HugeRegion(HugeRegion&& o) noexcept
    : mapping_(std::exchange(o.mapping_, nullptr)),
      mapping_bytes_(std::exchange(o.mapping_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

HugeRegion& HugeRegion::operator=(HugeRegion&& o) noexcept {
  if (this != &o) {
    release();
    mapping_ = std::exchange(o.mapping_, nullptr);
    mapping_bytes_ = std::exchange(o.mapping_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

uint8_t* HugeArena::alloc(size_t bytes) {
  const size_t need = round_up(std::max<size_t>(bytes, 1), 64);
  if (chunks_.empty() || used_ + need > chunks_.back().size()) {
    HugeRegion r = HugeRegion::map(std::max(need, chunk_bytes_));
    if (!r) return nullptr;
    chunks_.push_back(std::move(r));
    used_ = 0;
  }
  uint8_t* p = chunks_.back().data() + used_;
  used_ += need;
  return p;
}

}  // namespace hearth

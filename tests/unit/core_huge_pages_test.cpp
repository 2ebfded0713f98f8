// The huge-page regions and arena behind the packed weights and the KV pool.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <utility>

#include "core/huge_pages.h"

namespace {

using hearth::HugeArena;
using hearth::HugeRegion;
using hearth::kHugePageBytes;

TEST(HugeRegion, AlignedZeroedWritableAndMovable) {
  HugeRegion r = HugeRegion::map(3 * kHugePageBytes + 5);
  ASSERT_TRUE(r);  // anonymous mappings work on every machine the tests run on
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(r.size(), 4 * kHugePageBytes);  // rounded up to whole huge pages
  for (size_t i = 0; i < r.size(); i += 4096) ASSERT_EQ(r.data()[i], 0) << i;
  std::memset(r.data(), 0x5a, r.size());
  EXPECT_EQ(r.data()[r.size() - 1], 0x5a);
  uint8_t* p = r.data();
  HugeRegion moved = std::move(r);
  EXPECT_FALSE(r);  // NOLINT(bugprone-use-after-move): the moved-from region is empty
  EXPECT_EQ(moved.data(), p);
  HugeRegion other = HugeRegion::map(1);
  other = std::move(moved);  // unmaps its own region, takes the other
  EXPECT_EQ(other.data(), p);
  EXPECT_FALSE(HugeRegion::map(0));
}

TEST(HugeArena, DisjointAlignedZeroedAllocationsAcrossChunks) {
  HugeArena arena(kHugePageBytes);  // small chunks: a third allocation needs a new one
  std::set<std::pair<uintptr_t, uintptr_t>> spans;
  for (const size_t n : {size_t{100}, size_t{1} << 20, size_t{3} << 20, size_t{1}, size_t{64}, size_t{900} << 10}) {
    uint8_t* p = arena.alloc(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    for (size_t i = 0; i < n; i += 512) ASSERT_EQ(p[i], 0) << n << " at " << i;
    std::memset(p, 0xff, n);
    const auto b = reinterpret_cast<uintptr_t>(p);
    for (const auto& [lo, hi] : spans) EXPECT_TRUE(b + n <= lo || b >= hi) << "overlap for " << n;
    spans.insert({b, b + n});
  }
}

}  // namespace

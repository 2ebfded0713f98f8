// CpuBackend row movement used by routed experts, against index arithmetic done by hand.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"

TEST(CpuBackendRows, GatherPicksRowsInOrder) {
  hearth::cpu::CpuBackend be(2);
  const int64_t n = 5;
  std::vector<float> src(4 * n);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const std::vector<int32_t> ids = {3, 0, 3};
  std::vector<float> dst(ids.size() * n, -1.0f);
  be.gather_rows(src.data(), n, ids.data(), static_cast<int64_t>(ids.size()), dst.data());
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(dst[r * n + j], src[ids[r] * n + j]) << r << "," << j;
  }
}

TEST(CpuBackendRows, ScatterAddWeightsAndAccumulates) {
  hearth::cpu::CpuBackend be(2);
  const int64_t n = 3;
  std::vector<float> dst(4 * n);
  be.fill(dst.data(), 1.0f, static_cast<int64_t>(dst.size()));
  const std::vector<float> src = {1, 2, 3, 10, 20, 30};
  const std::vector<int32_t> ids = {2, 0};
  const std::vector<float> w = {0.5f, 2.0f};
  be.scatter_add_rows(src.data(), n, ids.data(), w.data(), 2, dst.data());
  be.scatter_add_rows(src.data(), n, ids.data(), w.data(), 1, dst.data());  // row 2 again
  const std::vector<float> want = {21, 41, 61, 1, 1, 1, 2, 3, 4, 1, 1, 1};
  EXPECT_EQ(dst, want);
}

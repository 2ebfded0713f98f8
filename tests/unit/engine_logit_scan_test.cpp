#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/logit_scan.h"

using hearth::engine::argmax_first;
using hearth::engine::first_non_finite;

namespace {

int64_t plain_first_non_finite(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}
int64_t plain_argmax(const std::vector<float>& v) {
  return v.empty() ? -1 : std::max_element(v.begin(), v.end()) - v.begin();
}

}  // namespace

// Against the plain loops: random rows of many lengths (blocks and tails), with planted
// NaNs and infinities, ties of the largest value across and inside blocks, -0 / +0.
TEST(LogitScan, MatchesThePlainLoops) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  int checked = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{2047}, size_t{2048}, size_t{2049}, size_t{4096},
                   size_t{49152}, size_t{248320}}) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<float> v(n);
      for (auto& x : v) x = nd(rng);
      if (n > 0) {
        std::uniform_int_distribution<size_t> at(0, n - 1);
        switch (trial % 6) {
          case 1: v[at(rng)] = nan; break;
          case 2: v[at(rng)] = -inf; v[at(rng)] = inf; break;
          case 3: {  // the largest value twice (maybe in different blocks)
            const size_t a = at(rng), b = at(rng);
            v[a] = v[b] = 100.0f;
            break;
          }
          case 4:  // every value non-positive, the largest a zero of either sign
            for (auto& x : v) x = -std::fabs(x) - 1.0f;
            v[at(rng)] = -0.0f;
            v[at(rng)] = 0.0f;
            break;
          case 5:  // all equal
            std::fill(v.begin(), v.end(), 1.5f);
            break;
          default: break;
        }
      }
      EXPECT_EQ(first_non_finite(v), plain_first_non_finite(v)) << "n=" << n << " trial " << trial;
      EXPECT_EQ(argmax_first(v), plain_argmax(v)) << "n=" << n << " trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 108);
}

// A planted difference is found: the largest value moved by one position moves the answer.
TEST(LogitScan, FollowsTheLargestValue) {
  std::vector<float> v(10000, -1.0f);
  for (size_t at : {size_t{0}, size_t{2047}, size_t{2048}, size_t{9999}}) {
    std::fill(v.begin(), v.end(), -1.0f);
    v[at] = 3.0f;
    EXPECT_EQ(argmax_first(v), static_cast<int64_t>(at));
    v[at] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(first_non_finite(v), static_cast<int64_t>(at));
  }
}

// exp_shifted against std::exp (relative 2e-6), zero for -inf and far below the top,
// exactly 1 at the shift, for lengths with and without a tail block.
TEST(LogitScan, ExpShiftedMatchesStdExp) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 6.0f);
  for (size_t n : {size_t{1}, size_t{100}, size_t{2048}, size_t{5000}}) {
    std::vector<float> v(n), out(n, -1.0f);
    for (auto& x : v) x = nd(rng);
    if (n > 2) {  // a masked token and one far below the top
      v[0] = -std::numeric_limits<float>::infinity();
      v[1] = -200.0f;
    }
    const float top = *std::max_element(v.begin(), v.end());
    for (float scale : {1.0f, 1.0f / 0.7f}) {
      hearth::engine::exp_shifted(v, top, scale, out.data());
      for (size_t i = 0; i < n; ++i) {
        const float t = (v[i] - top) * scale;
        const double want = std::exp(static_cast<double>(t));
        if (t < -87.0f) {
          EXPECT_EQ(out[i], 0.0f) << "i=" << i;
        } else {
          EXPECT_NEAR(out[i], want, 2e-6 * want) << "i=" << i << " x=" << v[i];
        }
        if (v[i] == top) {
          EXPECT_EQ(out[i], 1.0f);
        }
        // One value at a time: the same bits (a back-end repeats this arithmetic).
        const float one = hearth::engine::exp_shifted_one(v[i], top, scale);
        EXPECT_EQ(std::memcmp(&one, &out[i], sizeof one), 0) << "i=" << i << " x=" << v[i];
      }
    }
  }
}

// Backend::fetch_rows (the engine's greedy rows reduced where the logits are; here the
// default implementation through the CPU back-end): the argmax rows get argmax_first's
// index and first_non_finite's, the other rows are copied bit for bit, and the argmax
// rows of the destination are left as they were.
TEST(LogitScan, FetchRowsReducesArgmaxRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  hearth::cpu::CpuBackend be(1);
  be.set_argmax_rows(true);
  ASSERT_TRUE(be.device_argmax());
  const int64_t rows = 7, cols = 4099;
  std::vector<float> host(static_cast<size_t>(rows * cols));
  for (auto& x : host) x = nd(rng);
  host[1 * cols + 100] = host[1 * cols + 3000] = 50.0f;  // a tie: the first wins
  host[2 * cols + 17] = nan;                               // non-finite rows
  host[3 * cols + 4000] = -inf;
  host[4 * cols + 5] = inf;
  host[4 * cols + 9] = nan;
  auto buf = be.alloc(rows * cols);
  be.copy_from_host(host.data(), rows * cols, *buf, 0);
  // Row 5 asks for a draw, which the CPU leaves to the host sampler: copied, no token.
  const std::vector<uint8_t> argmax_only = {1, 1, 1, 1, 1, 0, 1};
  std::vector<hearth::ops::RowReduce> reduce;
  for (uint8_t a : argmax_only) {
    reduce.push_back({a != 0 ? hearth::ops::RowKind::kArgmax : hearth::ops::RowKind::kDraw, 1.0f, 0.5});
  }
  std::vector<float> dst(host.size(), -7.0f);
  std::vector<hearth::ops::ArgmaxRow> picks(rows);
  be.fetch_rows(*buf, rows, cols, reduce.data(), nullptr, dst.data(), picks.data());
  EXPECT_EQ(be.argmax_rows_fetched(), 6);
  EXPECT_EQ(be.draw_rows_fetched(), 1);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(host.begin() + r * cols, host.begin() + (r + 1) * cols);
    if (argmax_only[r] == 0) {
      EXPECT_EQ(0, std::memcmp(dst.data() + r * cols, row.data(), sizeof(float) * cols)) << "row " << r;
      EXPECT_EQ(picks[r].argmax, -1) << "row " << r;
      continue;
    }
    const int64_t bad = first_non_finite(row);
    EXPECT_EQ(picks[r].bad, bad) << "row " << r;
    if (bad >= 0) {
      EXPECT_EQ(picks[r].bad_nan, std::isnan(row[bad]) ? 1 : 0) << "row " << r;
    } else {
      EXPECT_EQ(picks[r].argmax, argmax_first(row)) << "row " << r;
    }
  }
  EXPECT_EQ(picks[1].argmax, 100);
  EXPECT_EQ(picks[2].bad, 17);
  EXPECT_EQ(picks[4].bad, 5);
  EXPECT_EQ(picks[4].bad_nan, 0);
}

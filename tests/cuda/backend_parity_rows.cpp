// CUDA back-end parity, the step's output rows (CudaBackend::fetch_rows): greedy rows
// reduced to their argmax, temperature draws (whole rows, top-k / top-p / min-p) and rows
// with penalties decided on the device, each against the host's scan or engine::Sampler
// on the same row (cuda_argmax.cu, cuda_draw.cuh). Shared set-up: parity_common.h.
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "engine/logit_scan.h"
#include "engine/row_reduce.h"
#include "engine/sampler.h"
#include "parity_common.h"

namespace {

using namespace parity;
namespace engine = hearth::engine;

// fetch_rows on the GPU (greedy rows reduced by a kernel) against the host scan of the
// base implementation: the same argmax (first of equal values) and first non-finite
// index for every argmax row, the other rows copied bit for bit, argmax rows untouched.
TEST(CudaParity, FetchRowsArgmax) {
  NEED_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t cols : {int64_t{248320}, int64_t{128256}, int64_t{4099}, int64_t{33}}) {
    const int64_t rows = 9;
    auto v = randn(static_cast<size_t>(rows * cols), 91, 4.0f);
    v[1 * cols + cols / 3] = v[1 * cols + cols - 1] = 60.0f;  // ties: the first wins
    v[2 * cols + 7] = nan;
    v[3 * cols + cols - 1] = -inf;
    v[4 * cols + 5] = inf;
    v[4 * cols + 9] = nan;
    v[6 * cols + 0] = v[6 * cols + 1] = 70.0f;
    Both b(v);
    const std::vector<uint8_t> argmax_only = {1, 1, 1, 1, 1, 0, 1, 0, 1};
    std::vector<ops::RowReduce> reduce;
    for (uint8_t a : argmax_only) reduce.push_back({a != 0 ? ops::RowKind::kArgmax : ops::RowKind::kCopy});
    std::vector<float> dc(v.size(), -5.0f), dg(v.size(), -5.0f);
    std::vector<ops::ArgmaxRow> pc(rows), pg(rows);
    cpu().ops::Backend::fetch_rows(*b.c, rows, cols, reduce.data(), nullptr, dc.data(), pc.data());
    ASSERT_TRUE(gpu().device_argmax());
    gpu().fetch_rows(*b.g, rows, cols, reduce.data(), nullptr, dg.data(), pg.data());
    for (int64_t r = 0; r < rows; ++r) {
      const std::string what = "cols " + std::to_string(cols) + " row " + std::to_string(r);
      if (argmax_only[r] == 0) {
        EXPECT_EQ(0, std::memcmp(dg.data() + r * cols, v.data() + r * cols, sizeof(float) * cols)) << what;
        continue;
      }
      EXPECT_EQ(dg[static_cast<size_t>(r * cols)], -5.0f) << what << ": an argmax row was written";
      EXPECT_EQ(pg[r].bad, pc[r].bad) << what;
      EXPECT_EQ(pg[r].bad_nan, pc[r].bad_nan) << what;
      if (pc[r].bad < 0) {
        EXPECT_EQ(pg[r].argmax, pc[r].argmax) << what;
      }
    }
    EXPECT_EQ(pg[1].argmax, cols / 3);
    EXPECT_EQ(pg[6].argmax, 0);
  }
}

// Temperature draws over whole rows (fetch_rows, RowKind::kDraw) give the token the host
// sampler draws from the same row with the same uniform number, for every row: rows of
// the 248k and 128k vocabularies and odd widths, flat and peaked, several temperatures,
// u near 0 and 1; a non-finite row reports its first bad value; argmax and copied rows
// in the same call keep their meaning.
TEST(CudaParity, FetchRowsDraw) {
  NEED_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int drawn = 0;
  for (int64_t cols : {int64_t{248320}, int64_t{128256}, int64_t{4099}, int64_t{1024}, int64_t{33}}) {
    const int64_t rows = 12;
    auto v = randn(static_cast<size_t>(rows * cols), 93, 3.0f);
    for (int64_t i = 0; i < cols; ++i) v[static_cast<size_t>(2 * cols + i)] *= 0.01f;  // nearly flat
    v[static_cast<size_t>(3 * cols + cols / 2)] = 40.0f;                              // one dominant token
    v[static_cast<size_t>(5 * cols + cols - 1)] = nan;                                // non-finite
    v[static_cast<size_t>(7 * cols + 3)] = -std::numeric_limits<float>::infinity();  // a masked token
    Both b(v);
    const double us[] = {0.0, 0.3, 0.999999, 0.5, 0.7, 0.0001, 0.25, 0.9, 0.61, 0.42, 0.05, 0.83};
    const float temps[] = {1.0f, 0.7f, 1.0f, 0.3f, 1.5f, 1.0f, 0.01f, 2.0f, 1.0f, 0.9f, 1.1f, 0.5f};
    std::vector<ops::RowReduce> reduce(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) reduce[r] = {ops::RowKind::kDraw, 1.0f / temps[r], us[r]};
    reduce[10] = {ops::RowKind::kArgmax};
    reduce[11] = {ops::RowKind::kCopy};
    std::vector<float> dg(v.size(), -5.0f);
    std::vector<ops::ArgmaxRow> pg(rows);
    gpu().fetch_rows(*b.g, rows, cols, reduce.data(), nullptr, dg.data(), pg.data());
    for (int64_t r = 0; r < rows; ++r) {
      const std::string what = "cols " + std::to_string(cols) + " row " + std::to_string(r);
      std::vector<float> row(v.begin() + r * cols, v.begin() + (r + 1) * cols);
      if (reduce[r].kind == ops::RowKind::kCopy) {
        EXPECT_EQ(0, std::memcmp(dg.data() + r * cols, row.data(), sizeof(float) * cols)) << what;
        continue;
      }
      const int64_t bad = engine::first_non_finite(row);
      if (bad >= 0 && std::isnan(row[static_cast<size_t>(bad)])) {
        EXPECT_EQ(pg[r].bad, bad) << what;
        continue;
      }
      if (reduce[r].kind == ops::RowKind::kArgmax) {
        EXPECT_EQ(pg[r].argmax, engine::argmax_first(row)) << what;
        continue;
      }
      if (bad >= 0) {  // an infinity: reported like a NaN
        EXPECT_EQ(pg[r].bad, bad) << what;
        continue;
      }
      engine::SamplerParams sp;
      sp.temperature = temps[r];
      sp.top_k = 0;
      sp.top_p = 1.0f;
      sp.min_p = 0.0f;
      engine::Sampler s(sp);
      ASSERT_TRUE(s.drawable());
      EXPECT_EQ(s.draw_scale(), reduce[r].scale);
      EXPECT_EQ(pg[r].bad, -1) << what;
      EXPECT_EQ(pg[r].argmax, s.sample(row, {}, us[r])) << what << " u " << us[r] << " temperature " << temps[r];
      EXPECT_EQ(dg[static_cast<size_t>(r * cols)], -5.0f) << what << ": a drawn row was written";
      ++drawn;
    }
  }
  std::cout << "fetch_rows draws compared with the host sampler: " << drawn << "\n";
}

// Draws with top-k, top-p and min-p (fetch_rows, RowKind::kDraw with its filters) give
// the token the host sampler draws with the same parameters and uniform number; a row the
// device leaves undecided (too many candidates) comes back whole, with argmax -1. Rows
// peaked like a trained model's and flat like a random one's.
TEST(CudaParity, FetchRowsFilteredDraw) {
  NEED_GPU();
  struct Filter {
    int32_t top_k;
    float top_p, min_p, temperature;
  };
  const Filter filters[] = {
      {40, 1.0f, 0.0f, 0.8f},  {20, 0.8f, 0.0f, 0.7f},  {0, 0.95f, 0.0f, 1.0f},  {0, 0.5f, 0.0f, 0.6f},
      {0, 1.0f, 0.05f, 1.0f},  {0, 0.9f, 0.1f, 1.2f},   {1000, 1.0f, 0.02f, 1.0f}, {2500, 1.0f, 0.0f, 1.0f},
      {0, 1.0f, 0.5f, 0.9f},   {50, 0.95f, 0.05f, 0.3f}, {1, 1.0f, 0.0f, 1.0f},   {0, 0.99f, 0.0f, 2.0f},
      {64, 0.9f, 0.0f, 1.0f},  {0, 1.0f, 1e-6f, 1.0f},  {7, 0.3f, 0.3f, 0.5f},   {0, 0.7f, 0.0f, 0.01f},
  };
  const int64_t rows = static_cast<int64_t>(std::size(filters));
  int drawn = 0, left = 0;
  for (int64_t cols : {int64_t{248320}, int64_t{151936}, int64_t{4099}, int64_t{1024}, int64_t{33}}) {
    for (int shape = 0; shape < 2; ++shape) {
      // shape 0: peaked (a few tokens far above the rest), 1: nearly flat
      auto v = randn(static_cast<size_t>(rows * cols), 71 + static_cast<uint64_t>(shape), shape == 0 ? 1.5f : 0.3f);
      if (shape == 0) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int j = 0; j < 6; ++j) v[static_cast<size_t>(r * cols + (r * 977 + j * 131) % cols)] += 20.0f - 2.0f * j;
        }
        // exact ties at the top and around the k-th rank
        v[static_cast<size_t>(12 * cols + 5)] = v[static_cast<size_t>(12 * cols + 9)] = 30.0f;
      }
      Both b(v);
      std::vector<ops::RowReduce> reduce(static_cast<size_t>(rows));
      std::vector<double> us(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const Filter& f = filters[r];
        us[static_cast<size_t>(r)] = std::fmod(0.137 + 0.311 * static_cast<double>(r + shape), 1.0);
        reduce[r] = {ops::RowKind::kDraw, 1.0f / f.temperature, us[static_cast<size_t>(r)], f.top_k, f.top_p, f.min_p};
      }
      std::vector<float> dg(v.size(), -5.0f);
      std::vector<ops::ArgmaxRow> pg(rows);
      gpu().fetch_rows(*b.g, rows, cols, reduce.data(), nullptr, dg.data(), pg.data());
      for (int64_t r = 0; r < rows; ++r) {
        const Filter& f = filters[r];
        const std::string what = "cols " + std::to_string(cols) + " shape " + std::to_string(shape) + " row " +
                                 std::to_string(r);
        std::vector<float> row(v.begin() + r * cols, v.begin() + (r + 1) * cols);
        engine::SamplerParams sp;
        sp.temperature = f.temperature;
        sp.top_k = f.top_k;
        sp.top_p = f.top_p;
        sp.min_p = f.min_p;
        engine::Sampler s(sp);
        ASSERT_TRUE(s.drawable());
        ASSERT_EQ(s.draw_scale(), reduce[r].scale);
        const int32_t want = s.sample(row, {}, us[static_cast<size_t>(r)]);
        EXPECT_EQ(pg[r].bad, -1) << what;
        if (pg[r].argmax < 0) {  // left to the host: the row came back whole
          EXPECT_EQ(0, std::memcmp(dg.data() + r * cols, v.data() + r * cols, sizeof(float) * cols)) << what;
          ++left;
          continue;
        }
        EXPECT_EQ(pg[r].argmax, want) << what << " top_k " << f.top_k << " top_p " << f.top_p << " min_p "
                                      << f.min_p << " temperature " << f.temperature;
        ++drawn;
      }
    }
  }
  std::cout << "filtered draws on the device equal to the host sampler: " << drawn << ", left to the host: " << left
            << "\n";
  EXPECT_GE(drawn, 100);  // most of the 160 rows are decided on the device
}

// Rows with repetition / presence / frequency penalties (fetch_rows with their token
// counts): greedy rows give the host sampler's penalized argmax, draws its token; a row
// left to the host comes back with the penalties applied, bit for bit as the host applies them.
TEST(CudaParity, FetchRowsPenalized) {
  NEED_GPU();
  int checked = 0, left = 0, changed = 0;
  for (int64_t cols : {int64_t{248320}, int64_t{4099}, int64_t{33}}) {
    const int64_t rows = 10;
    auto v = randn(static_cast<size_t>(rows * cols), 57, 1.5f);
    std::vector<ops::RowReduce> reduce(static_cast<size_t>(rows));
    std::vector<ops::PenaltyToken> pens(static_cast<size_t>(rows) * ops::kMaxPenaltyTokens);
    std::vector<engine::SamplerParams> params(static_cast<size_t>(rows));
    std::vector<std::vector<int32_t>> histories(static_cast<size_t>(rows));
    std::vector<double> us(static_cast<size_t>(rows));
    std::mt19937 gen(11);
    for (int64_t r = 0; r < rows; ++r) {
      engine::SamplerParams& sp = params[static_cast<size_t>(r)];
      sp.temperature = r % 2 == 0 ? 0.0f : 0.8f;
      sp.top_k = r % 4 == 1 ? 40 : 0;
      sp.top_p = r % 4 == 3 ? 0.9f : 1.0f;
      sp.min_p = 0.0f;
      sp.repeat_penalty = r < 4 ? 1.3f : 1.0f;
      sp.frequency_penalty = r % 3 == 0 ? 0.7f : 0.0f;
      sp.presence_penalty = r >= 6 ? 1.5f : (r < 4 ? 0.0f : 0.4f);
      // A history that repeats the row's likely tokens (so the penalties change the answer).
      std::vector<int32_t>& h = histories[static_cast<size_t>(r)];
      std::vector<float> row(v.begin() + r * cols, v.begin() + (r + 1) * cols);
      const auto top = static_cast<int32_t>(engine::argmax_first(row));
      for (int j = 0; j < 50; ++j) {
        h.push_back(j % 3 == 0 ? top : static_cast<int32_t>(gen() % static_cast<uint32_t>(cols)));
      }
      v[static_cast<size_t>(r * cols + (top + 1) % cols)] = v[static_cast<size_t>(r * cols + top)] - 1e-3f;
      h.push_back(-1);  // a token outside the row: ignored
      // The row as the engine offers it (engine::offered_row: the counts, the draw's number).
      sp.seed = 100 + static_cast<uint64_t>(r);
      engine::Sampler s(sp);
      std::vector<ops::PenaltyToken> mine;
      const ops::RowReduce rr = engine::offered_row(s, h, mine, true);
      ASSERT_EQ(rr.n_penalty, static_cast<int32_t>(mine.size()));
      ASSERT_GT(rr.n_penalty, 0);
      std::copy(mine.begin(), mine.end(), pens.begin() + r * ops::kMaxPenaltyTokens);
      reduce[static_cast<size_t>(r)] = rr;
      us[static_cast<size_t>(r)] = rr.u;
    }
    Both b(v);
    std::vector<float> dg(v.size(), -5.0f);
    std::vector<ops::ArgmaxRow> pg(rows);
    gpu().fetch_rows(*b.g, rows, cols, reduce.data(), pens.data(), dg.data(), pg.data());
    for (int64_t r = 0; r < rows; ++r) {
      const std::string what = "cols " + std::to_string(cols) + " row " + std::to_string(r);
      std::vector<float> row(v.begin() + r * cols, v.begin() + (r + 1) * cols);
      const auto& h = histories[static_cast<size_t>(r)];
      engine::Sampler s(params[static_cast<size_t>(r)]);
      ASSERT_TRUE(s.has_penalties()) << what;
      EXPECT_EQ(pg[r].bad, -1) << what;
      EXPECT_EQ(pg[r].penalized, 1) << what;
      std::vector<float> host = row;
      const int32_t want = s.sample(host, h, us[static_cast<size_t>(r)]);  // penalizes `host` in place
      if (pg[r].argmax < 0) {  // left to the host: the penalized row came back
        EXPECT_EQ(0, std::memcmp(dg.data() + r * cols, host.data(), sizeof(float) * cols)) << what;
        ++left;
        continue;
      }
      EXPECT_EQ(pg[r].argmax, want) << what;
      // Greedy rows whose answer the penalties changed (so the check above can fail).
      if (params[static_cast<size_t>(r)].temperature <= 0.0f && want != engine::argmax_first(row)) ++changed;
      ++checked;
    }
  }
  std::cout << "penalized rows equal to the host sampler: " << checked << " (greedy answers the penalties changed: "
            << changed << "), left to the host: " << left << "\n";
  EXPECT_GE(checked, 25);
  EXPECT_GE(changed, 6);
}

// copy_ranges_to_host / copy_ranges_from_host (the KV disk tier's block I/O: the copies
// beside the steps of cuda_host_copy.cu, waited for): many small ranges of two buffers, and
// one range longer than several 16 MiB rounds, land where one copy_to_host /
// copy_from_host per range puts them.
TEST(CudaParity, CopyRangesMatchSingleCopies) {
  NEED_GPU();
  const int64_t big = (int64_t{80} << 20) / 4;  // 80 MiB: a round of its own, larger than the bounce cap
  auto a = randn(static_cast<size_t>(big + 4096), 301, 1.0f);
  auto b = randn(4096 * 33, 302, 1.0f);
  Both ba(a), bb(b);
  std::vector<ops::HostRange> to;
  std::vector<std::vector<float>> got;
  struct R { ops::Buffer* buf; int64_t off, n; };
  std::vector<R> rs;
  for (int64_t i = 0; i < 300; ++i) rs.push_back({i % 2 ? bb.g.get() : ba.g.get(), (i * 977) % 4000, 1 + (i * 131) % 96});
  rs.push_back({ba.g.get(), 7, big});
  for (int64_t i = 0; i < 40; ++i) rs.push_back({bb.g.get(), 4096 * (i % 33), 4096});
  got.resize(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    got[i].assign(static_cast<size_t>(rs[i].n), -1.0f);
    to.push_back({rs[i].buf, rs[i].off, rs[i].n, got[i].data()});
  }
  gpu().copy_ranges_to_host(to.data(), static_cast<int64_t>(to.size()));
  for (size_t i = 0; i < rs.size(); ++i) {
    const std::vector<float>& src = rs[i].buf == ba.g.get() ? a : b;
    ASSERT_EQ(0, std::memcmp(got[i].data(), src.data() + rs[i].off, sizeof(float) * rs[i].n)) << "range " << i;
  }
  // Back: every range written with new values (later ranges win where they overlap, as
  // in order), compared with the same writes done one by one into a second pair.
  Both ca(a), cb(b);
  std::vector<ops::HostRange> from;
  for (size_t i = 0; i < rs.size(); ++i) {
    for (float& x : got[i]) x = -x * 0.5f + static_cast<float>(i);
    ops::Buffer* twin = rs[i].buf == ba.g.get() ? ca.g.get() : cb.g.get();
    gpu().copy_from_host(got[i].data(), rs[i].n, *twin, rs[i].off);
    from.push_back({rs[i].buf, rs[i].off, rs[i].n, got[i].data()});
  }
  gpu().copy_ranges_from_host(from.data(), static_cast<int64_t>(from.size()));
  for (auto [x, y, n] : {std::tuple{ba.g.get(), ca.g.get(), ba.n}, std::tuple{bb.g.get(), cb.g.get(), bb.n}}) {
    std::vector<float> hx(static_cast<size_t>(n)), hy(static_cast<size_t>(n));
    gpu().copy_to_host(*x, 0, n, hx.data());
    gpu().copy_to_host(*y, 0, n, hy.data());
    EXPECT_EQ(0, std::memcmp(hx.data(), hy.data(), sizeof(float) * n));
  }
}

// A disk hit's shape: thousands of disjoint block ranges (2-64 KiB, some not a whole
// number of float4s, some at odd offsets) over several upload rounds, so the rounds go
// through the scatter kernel and the upload worker's two pinned lanes take turns;
// compared with one copy per range.
TEST(CudaParity, CopyRangesScatterManyBlocks) {
  NEED_GPU();
  const int64_t layer = int64_t{24} << 20 >> 2;  // 24 MiB of floats per "layer"
  auto a = randn(static_cast<size_t>(layer), 311, 1.0f);
  auto b = randn(static_cast<size_t>(layer), 312, 1.0f);
  Both ba(a), bb(b), ca(a), cb(b);
  std::vector<std::vector<float>> src;
  std::vector<ops::HostRange> from;
  int64_t at_a = 0, at_b = 3;  // b's ranges start one float past a 16-byte boundary
  for (int64_t i = 0; i < 3000; ++i) {
    const int64_t n = 512 * (1 + i % 32) - (i % 7 == 0 ? 1 : 0);
    const bool on_a = i % 2 == 0;
    int64_t& at = on_a ? at_a : at_b;
    if (at + n > layer) break;
    src.push_back(randn(static_cast<size_t>(n), static_cast<uint32_t>(400 + i), 2.0f));
    from.push_back({on_a ? ba.g.get() : bb.g.get(), at, n, src.back().data()});
    gpu().copy_from_host(src.back().data(), n, on_a ? *ca.g : *cb.g, at);
    at += n + (i % 3);  // gaps of 0-2 floats stay as they were
  }
  ASSERT_GT(from.size(), 1000u);
  gpu().copy_ranges_from_host(from.data(), static_cast<int64_t>(from.size()));
  for (auto [x, y] : {std::pair{ba.g.get(), ca.g.get()}, std::pair{bb.g.get(), cb.g.get()}}) {
    std::vector<float> hx(static_cast<size_t>(layer)), hy(static_cast<size_t>(layer));
    gpu().copy_to_host(*x, 0, layer, hx.data());
    gpu().copy_to_host(*y, 0, layer, hy.data());
    EXPECT_EQ(0, std::memcmp(hx.data(), hy.data(), sizeof(float) * static_cast<size_t>(layer)));
  }
}

}  // namespace

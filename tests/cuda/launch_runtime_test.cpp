// The CUDA back-end's launch runtime (src/backends/cuda/launch_runtime.h) on its own:
// staging through the ring (offsets, what reaches the device), the grow-only scratch
// slots and their accounting, and a described step recorded as a graph, replayed with
// new host values, retried when it stages other sizes than its recording and recorded
// anew. The "kernels" here are device-to-device copies on the runtime's stream (a graph
// records them as it records kernels). Its own runtime on device 0, beside the parity
// tests' back-end.
#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "backends/cuda/launch_runtime.h"
#include "ops/step_desc.h"
#include "parity_common.h"

namespace {

using hearth::cuda::LaunchRuntime;
namespace ops = hearth::ops;

std::vector<int32_t> read_back(const int32_t* dev, size_t n) {
  std::vector<int32_t> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), dev, sizeof(int32_t) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST(LaunchRuntime, StagesThroughTheRing) {
  NEED_GPU();
  LaunchRuntime rt(0);
  std::vector<int32_t> a(1000), b(10);
  std::iota(a.begin(), a.end(), 7);
  std::iota(b.begin(), b.end(), -3);
  const int32_t* da = rt.stage_array(a.data(), static_cast<int64_t>(a.size()), "test");
  const int32_t* db = rt.stage_array(b.data(), static_cast<int64_t>(b.size()), "test");
  // Each staging at the next 256-byte boundary of the ring: 4000 bytes take 4096.
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(db) - reinterpret_cast<const uint8_t*>(da), 4096);
  a.assign(a.size(), 0);  // the ring holds its own copy
  rt.synchronize();
  std::vector<int32_t> want_a(1000);
  std::iota(want_a.begin(), want_a.end(), 7);
  EXPECT_EQ(read_back(da, 1000), want_a);
  EXPECT_EQ(read_back(db, 10), b);
  EXPECT_EQ(rt.stage_stats().ring, 2);
  EXPECT_EQ(rt.stage_stats().step_reads, 0);
}

TEST(LaunchRuntime, ScratchGrowsOnlyAndIsCounted) {
  NEED_GPU();
  LaunchRuntime rt(0);
  const uint64_t base = rt.memory_used();
  void* s = rt.scratch(2, size_t{1} << 20, "test");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(rt.memory_used(), base + (uint64_t{1} << 20));
  EXPECT_EQ(rt.scratch(2, 1000, "test"), s);  // smaller: the same memory
  EXPECT_EQ(rt.scratch(2, size_t{1} << 20, "test"), s);
  rt.scratch(2, size_t{2} << 20, "test");  // grown: the old slot freed
  EXPECT_EQ(rt.memory_used(), base + (uint64_t{2} << 20));
  EXPECT_GE(rt.memory_peak(), rt.memory_used());
  rt.scratch(3, 4096, "test");  // another slot, counted apart
  EXPECT_EQ(rt.memory_used(), base + (uint64_t{2} << 20) + 4096);
}

// One decode-like step: its tokens read from the uploaded step arena, `extra` staged
// through the ring, both copied to dst on the stream (skipped when the step is a replay:
// the graph has the copies); the step ends, then dst is read back.
struct StepRun {
  StepRun(LaunchRuntime& r, ops::StepDesc& d, int32_t* out) : rt(r), desc(d), dst(out) {}
  LaunchRuntime& rt;
  ops::StepDesc& desc;
  int32_t* dst;

  void begin(int32_t token) {
    tokens = {token, token + 1};
    positions = {0, 0};
    slots = {0, 1};
    ops::StepDesc::Inputs in;
    in.tokens = tokens;
    in.positions = positions;
    in.slots = slots;
    desc.assign(in);
    rt.begin_step(desc, {}, 64, true);
  }
  void run_ops(const std::vector<int32_t>& extra) {
    const int32_t* d_tok = rt.stage_array(desc.tokens(), 2, "test");
    const int32_t* d_extra = rt.stage_array(extra.data(), static_cast<int64_t>(extra.size()), "test");
    if (!rt.skip_launch()) {
      ASSERT_EQ(cudaMemcpyAsync(dst, d_tok, 2 * sizeof(int32_t), cudaMemcpyDeviceToDevice, rt.stream()), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(dst + 2, d_extra, extra.size() * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                rt.stream()),
                cudaSuccess);
    }
    rt.end_step();
    rt.synchronize();
  }
  std::vector<int32_t> got(size_t n_extra) { return read_back(dst, 2 + n_extra); }

  std::vector<int32_t> tokens, positions, slots;
};

std::vector<int32_t> expect(int32_t token, const std::vector<int32_t>& extra) {
  std::vector<int32_t> v{token, token + 1};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

TEST(LaunchRuntime, StepRecordedReplayedRetried) {
  NEED_GPU();
  LaunchRuntime rt(0);
  rt.set_graphs(true);
  int32_t* dst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), 64 * sizeof(int32_t)), cudaSuccess);
  ops::StepDesc desc;
  StepRun run{rt, desc, dst};
  const std::vector<int32_t> e4a{1, 2, 3, 4}, e4b{40, 30, 20, 10}, e6{5, 6, 7, 8, 9, 10};

  // First step of its key: recorded (and launched at its end).
  run.begin(100);
  run.run_ops(e4a);
  EXPECT_EQ(run.got(4), expect(100, e4a));
  EXPECT_EQ(rt.graph_stats().recorded, 1);
  EXPECT_EQ(rt.graph_stats().replayed, 0);
  EXPECT_EQ(rt.stage_stats().step_uploads, 1);
  EXPECT_EQ(rt.stage_stats().step_reads, 1);
  EXPECT_EQ(rt.stage_stats().ring, 1);

  // Same key, new values: replayed; the tokens come from the new arena, the staged array
  // at the recorded offset.
  run.begin(200);
  run.run_ops(e4b);
  EXPECT_EQ(run.got(4), expect(200, e4b));
  EXPECT_EQ(rt.graph_stats().recorded, 1);
  EXPECT_EQ(rt.graph_stats().replayed, 1);

  // Same key, another staged size: not the recording. StepRetry before anything ran; the
  // caller runs the step again (without a new begin_step), op by op.
  run.begin(300);
  EXPECT_THROW(run.run_ops(e6), ops::StepRetry);
  EXPECT_EQ(rt.graph_stats().retried, 1);
  run.run_ops(e6);
  EXPECT_EQ(run.got(6), expect(300, e6));
  EXPECT_EQ(rt.graph_stats().replayed, 1);

  // The next step of the key is recorded anew, the one after replays that recording.
  run.begin(400);
  run.run_ops(e6);
  EXPECT_EQ(run.got(6), expect(400, e6));
  EXPECT_EQ(rt.graph_stats().recorded, 2);
  run.begin(500);
  run.run_ops(std::vector<int32_t>{11, 12, 13, 14, 15, 16});
  EXPECT_EQ(run.got(6), expect(500, {11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(rt.graph_stats().replayed, 2);

  // A wait inside a replayed step: the next op's skip_launch throws StepRetry.
  run.begin(600);
  rt.stage_array(desc.tokens(), 2, "test");
  rt.stage_array(e6.data(), 6, "test");
  rt.wait("test");
  EXPECT_THROW(rt.skip_launch(), ops::StepRetry);
  EXPECT_EQ(rt.graph_stats().retried, 2);
  run.run_ops(e6);  // again, op by op
  EXPECT_EQ(run.got(6), expect(600, e6));

  // Off: every step op by op, nothing recorded or replayed.
  rt.set_graphs(false);
  const auto before = rt.graph_stats();
  run.begin(700);
  run.run_ops(e4a);
  EXPECT_EQ(run.got(4), expect(700, e4a));
  EXPECT_EQ(rt.graph_stats().recorded, before.recorded);
  EXPECT_EQ(rt.graph_stats().replayed, before.replayed);
  cudaFree(dst);
}

}  // namespace

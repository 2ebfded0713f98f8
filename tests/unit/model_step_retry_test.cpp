// The step-retry protocol that CUDA graph replay relies on (ops/backend.h, StepRetry):
// a back-end may throw ops::StepRetry part-way through a model step, having run nothing
// of it, and CausalLm::run_step then runs the whole step again. That is only correct if
// a model's step changes no host state before its last operation. Checked here on real
// models on the CPU back-end: a wrapper runs the first attempt "dry" (no operation
// executes; reads from the device return zeros) and throws at operation k, the second
// attempt runs for real; the logits of a prompt and of decode steps, single and batched,
// must be bit-identical to plain runs, for several k in every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "format/gguf.h"
#include "model/causal_lm.h"

namespace {

namespace model = hearth::model;
namespace ops = hearth::ops;

// Forwards to a CPU back-end; when armed, the next step's first attempt executes nothing
// and throws StepRetry at its throw_at-th operation.
class RetryOnce final : public ops::Backend {
 public:
  explicit RetryOnce(ops::Backend& inner) : in_(inner) {}
  void arm(int throw_at) { throw_at_ = throw_at; }
  int retries() const { return retries_; }
  int ops_this_step() const { return count_; }  // operations seen since begin_step

  std::string name() const override { return "retry-once(" + in_.name() + ")"; }
  bool supports_weight(hearth::GgmlType t) const override { return in_.supports_weight(t); }
  ops::WeightView prepare_weight(const ops::WeightView& w) override { return in_.prepare_weight(w); }
  std::unique_ptr<ops::Buffer> alloc(int64_t n) override { return in_.alloc(n); }
  std::unique_ptr<ops::Buffer> alloc_lazy(int64_t n) override { return in_.alloc_lazy(n); }
  void begin_step(int64_t n_tokens) override {
    dry_ = throw_at_ > 0;
    count_ = 0;
    in_.begin_step(n_tokens);
  }
  void copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) override {
    if (op()) {
      for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
      return;
    }
    in_.copy_to_host(src, offset, n, dst);
  }
  void copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) override {
    if (!op()) in_.copy_from_host(src, n, dst, offset);
  }
  void get_rows(const ops::WeightView& t, const int32_t* ids, int64_t n, float* out) override {
    if (!op()) in_.get_rows(t, ids, n, out);
  }
  void matmul(const ops::WeightView& w, const float* x, int64_t n, float* y) override {
    if (!op()) in_.matmul(w, x, n, y);
  }
  void matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                    float* const* ys) override {
    if (!op()) in_.matmul_multi(ws, n, x, n_tokens, ys);
  }
  void add_bias(float* x, const ops::WeightView& b, int64_t n) override {
    if (!op()) in_.add_bias(x, b, n);
  }
  void rms_norm(const float* x, const ops::WeightView& w, int64_t rows, int64_t n, float eps, float* y) override {
    if (!op()) in_.rms_norm(x, w, rows, n, eps, y);
  }
  void add_rms_norm(float* x, const float* y, const ops::WeightView& w, int64_t rows, int64_t n, float eps,
                    float* out) override {
    if (!op()) in_.add_rms_norm(x, y, w, rows, n, eps, out);
  }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const ops::RopeParams& p) override {
    if (!op()) in_.rope(x, n_tokens, n_heads, head_dim, pos, p);
  }
  void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                const ops::KvLayer& cache) override {
    if (!op()) in_.store_kv(k, v, n_tokens, n_kv_dim, slots, cache);
  }
  void rope_store_kv(float* q, float* k, const float* v, int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
                     int64_t head_dim, const int32_t* pos, const ops::RopeParams& p, const int32_t* slots,
                     const ops::KvLayer& cache) override {
    if (!op()) in_.rope_store_kv(q, k, v, n_tokens, n_head, n_head_kv, head_dim, pos, p, slots, cache);
  }
  void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) override {
    if (!op()) in_.attention(q, cache, seqs, n_seqs, n_head, n_head_kv, head_dim, scale, out);
  }
  void ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnStates& st,
                     const ops::GdnSeq* seqs, int64_t n_seqs, float* out) override {
    if (!op()) in_.ssm_conv_silu(x, channels, w, st, seqs, n_seqs, out);
  }
  void gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                       const ops::WeightView& dt_bias, const ops::GdnShape& shape, const ops::GdnStates& st,
                       const ops::GdnSeq* seqs, int64_t n_seqs, float* o) override {
    if (!op()) in_.gated_delta_net(qkv, a, b, ssm_a, dt_bias, shape, st, seqs, n_seqs, o);
  }
  void gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t rows, int64_t n, float eps,
                      int64_t rows_per_token = 1) override {
    if (!op()) in_.gated_rms_norm(x, z, w, rows, n, eps, rows_per_token);
  }
  void sigmoid_mul(float* x, const float* g, int64_t n) override {
    if (!op()) in_.sigmoid_mul(x, g, n);
  }
  void sigmoid_scale_rows(float* x, const float* g, int64_t rows, int64_t cols) override {
    if (!op()) in_.sigmoid_scale_rows(x, g, rows, cols);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override {
    if (!op()) in_.swiglu(g, u, n, out);
  }
  void add(float* x, const float* y, int64_t n) override {
    if (!op()) in_.add(x, y, n);
  }
  void copy(const float* src, int64_t n, float* dst) override {
    if (!op()) in_.copy(src, n, dst);
  }
  void fill(float* dst, float v, int64_t n) override {
    if (!op()) in_.fill(dst, v, n);
  }
  void gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) override {
    if (!op()) in_.gather_rows(src, n, ids, n_ids, dst);
  }
  void scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* w, int64_t n_ids,
                        float* dst) override {
    if (!op()) in_.scatter_add_rows(src, n, ids, w, n_ids, dst);
  }
  bool fused_moe() const override { return in_.fused_moe(); }
  void moe_ffn(const ops::MoeLayer& layer, const float* x, int64_t n, float* out) override {
    if (!op()) in_.moe_ffn(layer, x, n, out);
  }

 private:
  // True: skip the operation (a dry attempt); throws at the armed operation.
  bool op() {
    ++count_;
    if (!dry_) return false;
    if (count_ == throw_at_) {
      dry_ = false;
      throw_at_ = 0;
      ++retries_;
      throw ops::StepRetry();
    }
    return true;
  }
  ops::Backend& in_;
  int throw_at_ = 0, count_ = 0, retries_ = 0;
  bool dry_ = false;
};

struct Run {
  std::vector<std::vector<float>> single, batched;
  std::vector<int> ops;  // operations per step
};

// A 7-token prompt and 4 greedy steps alone, then two sequences decoding together in one
// pool for 3 steps; throw_at(step) arms the wrapper before each step (0: never).
template <class Arm>
Run run_model(model::CausalLm& m, RetryOnce& be, Arm throw_at) {
  Run r;
  const int64_t V = m.hparams().n_vocab;
  int step = 0;
  {
    model::KvCache cache(be, m.hparams(), 64, ops::KvType::F32);
    std::vector<int32_t> toks = {1, 5, 9, 14, 2, 7, 3};
    for (int i = 0; i < 5; ++i) {
      be.arm(throw_at(step++));
      std::vector<float> lg = m.forward(cache, toks, false);
      r.ops.push_back(be.ops_this_step());
      r.single.push_back(lg);
      int best = 0;
      for (int64_t v = 1; v < V; ++v) best = lg[v] > lg[best] ? static_cast<int>(v) : best;
      toks = {best};
    }
  }
  model::KvPool pool(be, m.hparams(), ops::KvType::F32, 16, 8, 2);
  std::vector<model::SeqKv> kv(2);
  for (size_t i = 0; i < kv.size(); ++i) {
    if (pool.n_state_slots() > 0) {
      kv[i].state_slot = static_cast<int32_t>(i);
      pool.clear_state(kv[i].state_slot);
    }
    for (int b = 0; b < 4; ++b) kv[i].blocks.push_back(static_cast<int32_t>(4 * i + b));
  }
  std::vector<int32_t> a = {4, 8, 15, 16, 23}, b = {42, 7};
  for (int i = 0; i < 3; ++i) {
    std::vector<model::BatchSeq> batch{{&kv[0], a.data(), static_cast<int64_t>(a.size()), true},
                                       {&kv[1], b.data(), static_cast<int64_t>(b.size()), true}};
    be.arm(throw_at(step++));
    std::vector<float> lg;
    m.forward_batch(pool, batch, lg);
    r.ops.push_back(be.ops_this_step());
    r.batched.push_back(lg);
    a = {static_cast<int32_t>(10 + i)};
    b = {static_cast<int32_t>(20 + i)};
  }
  return r;
}

void check_model(const hearth::gguf::File& file, const std::string& what) {
  hearth::cpu::CpuBackend cpu(1);
  RetryOnce be(cpu);
  const auto m = model::load_causal_lm(file, be);
  const Run plain = run_model(*m, be, [](int) { return 0; });
  // Throw early (the embeddings), in the first layers, in the middle and at the step's
  // last operation (the logits' read-back), a different operation in each step.
  for (const int base : {1, 3, 17, -1, 0}) {
    const int retries_before = be.retries();
    const Run again = run_model(*m, be, [&](int step) {
      const int n = plain.ops[static_cast<size_t>(step)];
      if (base == -1) return n;         // the last
      if (base == 0) return n / 2 + step;  // the middle
      return std::min(n, base + 2 * step);
    });
    ASSERT_EQ(again.single.size(), plain.single.size());
    for (size_t i = 0; i < plain.single.size(); ++i) {
      EXPECT_EQ(again.single[i], plain.single[i]) << what << ": step " << i << " retried at op " << base + 2 * i;
    }
    for (size_t i = 0; i < plain.batched.size(); ++i) {
      EXPECT_EQ(again.batched[i], plain.batched[i]) << what << ": batched step " << i;
    }
    EXPECT_EQ(be.retries() - retries_before, 8) << what << ": every step should have been retried once";
  }
}

TEST(StepRetry, RerunStepsGiveTheSameLogitsLlama) {
  const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
  ASSERT_TRUE(p != nullptr && *p) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  const auto file = hearth::gguf::File::open(p);
  check_model(file, "default model");
}

TEST(StepRetry, RerunStepsGiveTheSameLogitsHybrid) {
  for (const std::string name : {"dense", "moe"}) {
    const auto file = hearth::convert::open_model(std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/" + name);
    check_model(file, "qwen35 " + name + " fixture");
  }
}

}  // namespace

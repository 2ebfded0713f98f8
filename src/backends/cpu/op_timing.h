// Per-operation wall time of the CPU back-end (cpu.op_timing=1), the CPU
// counterpart of the CUDA back-end's cuda.op_timing table: calls and time per
// operation name, printed sorted by time. Operations that run inside another one (the
// router's matmul inside moe_ffn, a matmul's activation quantization, the phases of
// attention or of the delta rule) are counted apart, under the outermost operation
// open at the time, so the top-level rows add up to the time spent in the back-end.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hearth::cpu {

struct OpTimeRow {
  std::string op;
  std::string within;  // the outermost operation it ran inside; empty: top level
  int64_t calls = 0;
  int64_t ns = 0;
};

class OpTimes {
 public:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Opens `op` (a string that lives as long as this table, e.g. a literal); returns the
  // outer operation to hand back to close().
  const char* open(const char* op) {
    const char* outer = current_;
    if (current_ == nullptr) current_ = op;
    return outer;
  }
  // Closes `op` opened at t0_ns; outer: what open() returned.
  void close(const char* op, const char* outer, int64_t t0_ns);

  // Rows in the order first seen.
  const std::vector<OpTimeRow>& rows() const { return rows_; }
  bool dirty() const { return dirty_; }
  void reset();
  // The table: top-level operations by time, each followed by what ran inside it.
  // wall_ms > 0: the wall time the caller measured over the same span, for an
  // "outside the back-end" row (host work between the operations).
  void print(std::FILE* out, const std::string& title, double wall_ms);

 private:
  std::vector<OpTimeRow> rows_;
  std::vector<const char*> keys_op_, keys_within_;  // rows_[i] was first seen as these pointers
  const char* current_ = nullptr;  // the outermost operation open now
  bool dirty_ = false;             // rows added since the last print or reset
};

// Times one operation into t (nothing when t is null: timing off costs one branch).
class OpScope {
 public:
  OpScope(OpTimes* t, const char* op) : t_(t), op_(op) {
    if (t_ != nullptr) {
      outer_ = t_->open(op);
      t0_ns_ = OpTimes::now_ns();
    }
  }
  ~OpScope() {
    if (t_ != nullptr) t_->close(op_, outer_, t0_ns_);
  }
  // Closes this operation and opens `op` in its place (the phases of one operation).
  void next(const char* op) {
    if (t_ == nullptr) return;
    t_->close(op_, outer_, t0_ns_);
    op_ = op;
    outer_ = t_->open(op);
    t0_ns_ = OpTimes::now_ns();
  }
  // Closes it now (the destructor then does nothing).
  void stop() {
    if (t_ != nullptr) t_->close(op_, outer_, t0_ns_);
    t_ = nullptr;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpTimes* t_;
  const char* op_;
  const char* outer_ = nullptr;
  int64_t t0_ns_ = 0;
};

}  // namespace hearth::cpu

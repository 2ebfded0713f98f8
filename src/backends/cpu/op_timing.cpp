#include "backends/cpu/op_timing.h"

#include <algorithm>
#include <cstring>

namespace hearth::cpu {

void OpTimes::close(const char* op, const char* outer, int64_t t0_ns) {
  const int64_t dt = now_ns() - t0_ns;
  if (outer == nullptr) current_ = nullptr;
  dirty_ = true;
  // Literals of one translation unit share their address: compare pointers first.
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (keys_op_[i] == op && keys_within_[i] == outer) {
      rows_[i].calls += 1;
      rows_[i].ns += dt;
      return;
    }
  }
  const std::string within = outer != nullptr ? outer : "";
  for (auto& r : rows_) {
    if (r.op == op && r.within == within) {
      r.calls += 1;
      r.ns += dt;
      return;
    }
  }
  rows_.push_back({op, within, 1, dt});
  keys_op_.push_back(op);
  keys_within_.push_back(outer);
}

void OpTimes::reset() {
  rows_.clear();
  keys_op_.clear();
  keys_within_.clear();
  dirty_ = false;
}

void OpTimes::print(std::FILE* out, const std::string& title, double wall_ms) {
  dirty_ = false;
  std::vector<const OpTimeRow*> top;
  int64_t total = 0;
  for (const auto& r : rows_) {
    if (r.within.empty()) {
      top.push_back(&r);
      total += r.ns;
    }
  }
  const auto by_time = [](const OpTimeRow* a, const OpTimeRow* b) { return a->ns > b->ns; };
  std::sort(top.begin(), top.end(), by_time);
  std::fprintf(out, "hearth: CPU op timing%s%s: %.1f ms in the back-end", title.empty() ? "" : " - ", title.c_str(),
               total / 1e6);
  if (wall_ms > 0) std::fprintf(out, " of %.1f ms measured", wall_ms);
  std::fprintf(out, "\n  %-34s %8s %10s %10s %7s\n", "op", "calls", "total ms", "us/call", "share");
  const double all = wall_ms > 0 ? wall_ms * 1e6 : static_cast<double>(total);
  const auto line = [&](const char* indent, const std::string& name, int64_t calls, int64_t ns) {
    const std::string label = indent + name;
    std::fprintf(out, "  %-34s %8lld %10.2f %10.1f %6.1f%%\n", label.c_str(), static_cast<long long>(calls), ns / 1e6,
                 calls > 0 ? ns / 1e3 / calls : 0.0, all > 0 ? 100.0 * ns / all : 0.0);
  };
  for (const OpTimeRow* t : top) {
    line("", t->op, t->calls, t->ns);
    std::vector<const OpTimeRow*> inner;
    for (const auto& r : rows_) {
      if (r.within == t->op) inner.push_back(&r);
    }
    std::sort(inner.begin(), inner.end(), by_time);
    for (const OpTimeRow* r : inner) line("  . ", r->op, r->calls, r->ns);
  }
  if (wall_ms > 0) line("", "(outside the back-end)", 0, static_cast<int64_t>(wall_ms * 1e6) - total);
  std::fflush(out);
}

}  // namespace hearth::cpu

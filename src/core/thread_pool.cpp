#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/tune.h"

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or about spin_micros have passed (yielding in the second half, so a
// preempted peer thread on a busy machine gets the core); returns done().
template <class Done>
bool spin_until(Done done, int spin_micros) {
  if (spin_micros <= 0) return done();
  const auto t_end = Clock::now() + std::chrono::microseconds(spin_micros);
  const auto t_yield = Clock::now() + std::chrono::microseconds(spin_micros / 2);
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      const auto now = Clock::now();
      if (now >= t_end) return done();
      if (now >= t_yield) std::this_thread::yield();
    }
  }
}

// pool.spin_us (default 200; 0: sleep at once).
int spin_micros() { return static_cast<int>(tune::get(tune::kPoolSpinUs)); }

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int idx) {
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    const int64_t begin = c * chunk_;
    if (begin >= n_) return;
    const int64_t end = std::min(n_, begin + chunk_);
    try {
      (*job_)(begin, end, idx);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int idx) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, spin_micros())) {
      // Asleep: the caller sees sleepers_ > 0 (both seq_cst) and notifies; a bump that
      // came before the wait makes wait() return at once.
      sleepers_.fetch_add(1);
      while (generation_.load() == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_chunks(idx);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_asleep_.load()) pending_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  if (n_threads_ == 1 || n_grains == 1) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  job_ = &fn;
  n_ = n;
  // About four chunks per thread, claimed dynamically.
  const int64_t n_chunks = std::min<int64_t>(n_grains, 4 * static_cast<int64_t>(n_threads_));
  chunk_ = (n_grains + n_chunks - 1) / n_chunks * grain;
  next_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job fields above
  if (sleepers_.load() > 0) generation_.notify_all();
  run_chunks(0);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, spin_micros())) {
    caller_asleep_.store(true);
    for (int p = pending_.load(); p != 0; p = pending_.load()) pending_.wait(p);
    caller_asleep_.store(false);
  }
  job_ = nullptr;
  std::exception_ptr err = std::exchange(error_, nullptr);
  if (err) std::rethrow_exception(err);
}

int physical_core_count() {
  // Count distinct (physical id, core id) pairs; fall back to hardware_concurrency.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "physical id") phys = std::atoi(line.c_str() + colon + 1);
    if (key == "core id") cores.emplace(phys, std::atoi(line.c_str() + colon + 1));
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace hearth

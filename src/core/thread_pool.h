// A fixed pool of worker threads for data-parallel kernels. parallel_for splits
// [0, n) into contiguous chunks (about four per thread, each a multiple of the grain)
// that the threads claim from a shared counter (the caller's thread takes part), so a
// thread slowed down by another program does not hold the others back; it returns
// when all are done. One parallel_for at a time per pool: calls from
// several threads are serialised by a mutex.
//
// Hand-off: a forward pass issues hundreds of parallel_for calls per token, each a few
// microseconds long. Workers and the caller first spin on a generation counter /
// pending count for pool.spin_us microseconds (default 200), then sleep in a futex
// wait (std::atomic::wait); the caller makes the wake-up system call only when a worker
// is asleep; no mutex or condition variable per job. Measured on the 2-core benchmark
// machine (docs/BENCHMARKS.md): idle, spinning doubles decode speed (54-58 vs 23-28
// tok/s); oversubscribed by other processes, it is 3x slower (11.7 vs 33-35 tok/s), as
// llama.cpp's always-spinning pool is there. --tune pool.spin_us=0 sleeps at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread: n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(begin, end, thread_idx) over chunks covering [0, n); chunks are multiples of
  // `grain` (except the last). Exceptions thrown by fn are rethrown here (the first one).
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int idx);
  void run_chunks(int idx);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex error_mutex_;
  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers wait for a change
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait
  std::atomic<bool> caller_asleep_{false};
  std::atomic<bool> stop_{false};
  // The job of the current generation (written before generation_ is bumped).
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<int64_t> next_{0};  // next unclaimed chunk index
  std::exception_ptr error_;
};

// Physical cores of this machine (hyper-threads not counted); at least 1.
int physical_core_count();

}  // namespace hearth

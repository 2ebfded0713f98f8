// A fixed pool of worker threads for data-parallel kernels. parallel_for splits
// [0, n) into contiguous chunks, one per thread (the caller's thread takes part),
// and returns when all are done. One parallel_for at a time per pool: calls from
// several threads are serialised by a mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
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
  void run_chunk(int idx);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  // The job of the current generation.
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::exception_ptr error_;
};

// Physical cores of this machine (hyper-threads not counted); at least 1.
int physical_core_count();

}  // namespace hearth

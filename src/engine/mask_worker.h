// One background thread that runs a job while the engine thread does something else:
// the grammar masks of a step are computed while that step's forward pass runs (the
// masks depend only on tokens already accepted). One job at a time; start() and wait()
// are called from one thread (the engine's).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace hearth::engine {

class MaskWorker {
 public:
  MaskWorker();
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Hands `job` to the thread and returns at once. A job still running is waited for first.
  void start(std::function<void()> job);
  // Blocks until the job handed over last has finished; rethrows what it threw. No-op
  // when there is none.
  void wait();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool busy_ = false;  // a job was handed over and has not been waited for
  bool done_ = true;
  bool quit_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace hearth::engine

#include "engine/mask_worker.h"

#include <utility>

namespace hearth::engine {

MaskWorker::MaskWorker() : thread_([this] { run(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::start(std::function<void()> job) {
  try {
    wait();
  } catch (...) {
    // The previous job's failure was not collected; the new job starts clean.
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    busy_ = true;
    done_ = false;
    error_ = nullptr;
  }
  cv_.notify_all();
}

void MaskWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!busy_) return;
  cv_.wait(lock, [this] { return done_; });
  busy_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void MaskWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || (busy_ && !done_ && job_); });
    if (quit_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace hearth::engine

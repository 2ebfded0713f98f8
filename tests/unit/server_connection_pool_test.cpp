// ConnectionPool: one thread per connection up to a cap; over the cap a job runs at once
// on the caller's thread, flagged, so that it can answer 503 and close.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "server/guarded_http.h"

using hearth::server::ConnectionPool;

TEST(ConnectionPool, OverTheCapRunsInlineFlagged) {
  ConnectionPool pool(2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> started{0}, flagged_in_pool{0};
  for (int i = 0; i < 2; ++i) {
    pool.enqueue([&, gate] {
      if (ConnectionPool::over_capacity()) ++flagged_in_pool;
      ++started;
      gate.wait();
    });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (started < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(started, 2);
  // Both places are taken: the third job runs here, now, with the flag set.
  const auto caller = std::this_thread::get_id();
  bool inline_flagged = false;
  std::thread::id ran_on;
  pool.enqueue([&] {
    inline_flagged = ConnectionPool::over_capacity();
    ran_on = std::this_thread::get_id();
  });
  EXPECT_TRUE(inline_flagged);
  EXPECT_EQ(ran_on, caller);
  EXPECT_FALSE(ConnectionPool::over_capacity());  // reset after the job
  release.set_value();
  // Places free again: a job runs on a pool thread, not flagged.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::promise<std::pair<bool, std::thread::id>> p;
    auto f = p.get_future();
    pool.enqueue([&p] {
      p.set_value({ConnectionPool::over_capacity(), std::this_thread::get_id()});
    });
    const auto [flagged, id] = f.get();
    if (!flagged) {
      EXPECT_NE(id, caller);
      break;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(5));  // the first jobs are still finishing
  }
  pool.shutdown();
  EXPECT_EQ(flagged_in_pool, 0);
}

TEST(ConnectionPool, ShutdownRunsQueuedJobsAndJoins) {
  std::atomic<int> done{0};
  {
    ConnectionPool pool(8);
    for (int i = 0; i < 8; ++i)
      pool.enqueue([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++done;
      });
    pool.shutdown();
    EXPECT_EQ(done, 8);
  }
  EXPECT_EQ(done, 8);
}

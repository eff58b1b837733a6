#include "kernels/cpu/panel_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::kernels {
namespace {

// Every index of every job is visited exactly once, across many back-to-back
// jobs of changing sizes (a worker late from one job must not touch the
// next), with the chunk bounds asked for.
TEST(PanelPoolTest, VisitsEveryIndexOnceAcrossManyJobs) {
  for (int threads : {1, 2, 3, 8}) {
    PanelPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t n = 1 + (job * 7919) % 97, chunk = 1 + job % 5;
      std::vector<std::atomic<int>> visits(n);
      std::atomic<bool> bad_range{false};
      pool.Run(n, chunk, [&](int64_t begin, int64_t end) {
        if (begin < 0 || end > n || end <= begin || end - begin > chunk ||
            begin % chunk != 0) {
          bad_range = true;
        }
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
      });
      ASSERT_FALSE(bad_range) << "threads " << threads << " job " << job;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(visits[i].load(), 1)
            << "threads " << threads << " job " << job << " index " << i;
      }
    }
  }
}

TEST(PanelPoolTest, EmptyJobsReturnAtOnce) {
  PanelPool pool(2);
  int calls = 0;
  pool.Run(0, 4, [&](int64_t, int64_t) { ++calls; });
  pool.Run(-3, 4, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// Workers share the load when they are free: with 2 hands, long chunks run
// on two threads.
TEST(PanelPoolTest, WorkersTakeChunks) {
  PanelPool pool(2);
  std::atomic<int> distinct{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int attempt = 0; attempt < 50 && distinct.load() == 0; ++attempt) {
    pool.Run(8, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) distinct = 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  EXPECT_EQ(distinct.load(), 1) << "no chunk ever ran on a worker";
}

// Parked between jobs (as after every forward pass), the workers sleep and
// the next Run wakes them: every job is still complete, and a worker still
// takes chunks after a park that certainly put it to sleep. Parks racing
// with jobs from another thread change nothing either.
TEST(PanelPoolTest, ParkedWorkersWakeForTheNextJob) {
  PanelPool pool(3);
  std::atomic<bool> stop{false};
  std::thread parker([&] {
    while (!stop.load()) pool.Park();
  });
  for (int job = 0; job < 500; ++job) {
    const int64_t n = 1 + job % 37;
    std::vector<std::atomic<int>> visits(n);
    pool.Run(n, 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
    });
    pool.Park();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i].load(), 1) << job;
  }
  stop = true;
  parker.join();

  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> distinct{0};
  for (int attempt = 0; attempt < 50 && distinct.load() == 0; ++attempt) {
    pool.Park();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // asleep
    pool.Run(8, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) distinct = 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  EXPECT_EQ(distinct.load(), 1) << "no chunk ran on a worker after a park";
}

// Run from several threads at once: serialized, each job complete.
TEST(PanelPoolTest, ConcurrentCallersAreSerialized) {
  PanelPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int job = 0; job < 200; ++job) {
        pool.Run(10, 3, [&](int64_t begin, int64_t end) {
          total.fetch_add(end - begin);
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 10);
}

}  // namespace
}  // namespace lookahead::kernels

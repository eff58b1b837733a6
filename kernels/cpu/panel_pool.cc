#include "kernels/cpu/panel_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

namespace lookahead::kernels {
namespace {

// How long an idle worker polls for the next job before it sleeps: longer
// than the gaps between a pass's kernels (norms, attention: tens of us),
// short enough to give a shared core back soon after a pass.
constexpr auto kSpin = std::chrono::microseconds(1000);
// Pauses (~30-140 ns each) the caller spends waiting for a worker's last
// chunk before it yields its core.
constexpr int kCallerSpins = 2000;
// Chunk counts and indices are 16-bit fields of next_.
constexpr uint64_t kMaxChunks = 0xffff;

}  // namespace

PanelPool::PanelPool(int threads, bool pin) {
  std::vector<int> cores;
  cpu_set_t allowed;
  if (pin && sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cores.push_back(c);
    }
  }
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
    if (!cores.empty()) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cores[i % cores.size()], &one);
      pthread_setaffinity_np(workers_.back().native_handle(), sizeof(one),
                             &one);
    }
  }
}

PanelPool::~PanelPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void PanelPool::Work(uint32_t generation) {
  uint64_t cur = next_.load(std::memory_order_acquire);
  while (true) {
    if (static_cast<uint32_t>(cur >> 32) != generation) return;
    const int64_t chunks = static_cast<int64_t>((cur >> 16) & kMaxChunks);
    const int64_t index = static_cast<int64_t>(cur & kMaxChunks);
    if (index >= chunks) return;
    if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;
    }
    const int64_t chunk = chunk_.load(std::memory_order_relaxed);
    const int64_t begin = index * chunk;
    (*fn_.load(std::memory_order_relaxed))(
        begin, std::min(n_.load(std::memory_order_relaxed), begin + chunk));
    unfinished_.fetch_sub(1, std::memory_order_acq_rel);
    cur = next_.load(std::memory_order_acquire);
  }
}

void PanelPool::WorkerLoop() {
  uint32_t seen = 0;
  while (true) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    // The clock is read every kClockEvery pauses (~2-9 us), not each one.
    constexpr int kClockEvery = 64;
    for (int spins = 1; published_.load(std::memory_order_acquire) == seen &&
                        !parked_.load(std::memory_order_acquire);
         ++spins) {
      if (spins % kClockEvery == 0 &&
          std::chrono::steady_clock::now() >= spin_until) {
        break;
      }
      _mm_pause();
    }
    if (published_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      --sleeping_;
      if (stop_) return;
    }
    seen = published_.load(std::memory_order_acquire);
    Work(seen);
  }
}

void PanelPool::Park() { parked_.store(true, std::memory_order_release); }

void PanelPool::Run(int64_t n, int64_t chunk,
                    const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>({chunk, 1,
                             (n + static_cast<int64_t>(kMaxChunks) - 1) /
                                 static_cast<int64_t>(kMaxChunks)});
  std::lock_guard<std::mutex> run_lock(run_mu_);
  const int64_t chunks = (n + chunk - 1) / chunk;  // <= kMaxChunks
  fn_.store(&fn, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  chunk_.store(chunk, std::memory_order_relaxed);
  unfinished_.store(chunks, std::memory_order_relaxed);
  uint32_t generation;
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = ++generation_;
    parked_.store(false, std::memory_order_relaxed);
    next_.store(static_cast<uint64_t>(generation) << 32 |
                    static_cast<uint64_t>(chunks) << 16,
                std::memory_order_release);
    published_.store(generation, std::memory_order_release);
    notify = sleeping_ > 0;
  }
  if (notify) wake_.notify_all();
  Work(generation);
  // Only chunks a worker claimed are left: wait for them, yielding the core
  // if that worker seems descheduled.
  for (int spins = 0; unfinished_.load(std::memory_order_acquire) > 0;
       ++spins) {
    if (spins < kCallerSpins) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace lookahead::kernels

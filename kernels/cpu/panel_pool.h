// PanelPool: runs a kernel's independent chunks of work on the caller and a
// few worker threads, for passes made of many short kernels.
//
// The caller always works too, claiming chunks from a shared counter, so a
// worker that is descheduled (another process on the core) or asleep only
// means fewer hands, never a wait for it: under contention a pass degrades
// to one thread instead of convoying as OpenMP barriers do (measured: two
// test processes on 2 cores, OpenMP's spinning made one 50x slower). Workers
// spin briefly between chunks of work (a decode pass calls ~200 kernels
// back to back), then sleep.
//
// Thread-safe: Run may be called from any thread; calls are serialized.
#ifndef LOOKAHEAD_KERNELS_CPU_PANEL_POOL_H_
#define LOOKAHEAD_KERNELS_CPU_PANEL_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lookahead::kernels {

class PanelPool {
 public:
  // threads >= 1 hands, the caller included (threads - 1 workers). With
  // `pin`, worker i is pinned to the (i mod n)-th of the n cores this
  // process may run on (counting from the second, the first being left to
  // the caller), so the OS never stacks two workers on one core or migrates
  // a warm one; a failed pin is ignored.
  explicit PanelPool(int threads, bool pin = false);
  ~PanelPool();  // Joins the workers.
  PanelPool(const PanelPool&) = delete;
  PanelPool& operator=(const PanelPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in ranges of at most `chunk` (>= 1),
  // each exactly once, and returns when all have returned. fn must not
  // call Run.
  void Run(int64_t n, int64_t chunk,
           const std::function<void(int64_t, int64_t)>& fn);

  // No job follows soon (a forward pass just ended): idle workers sleep now
  // instead of spinning out their poll, so a core shared with the process's
  // other threads (gRPC, a co-located client or draft service) is given
  // back at once. The next Run wakes them; nothing else changes.
  void Park();

 private:
  // Claims and runs chunks of job `generation` until none is left.
  void Work(uint32_t generation);
  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // Serializes Run.

  // The current job. Written by Run before it publishes the job in `next_`;
  // read only after claiming one of its chunks (the job cannot end, nor the
  // next one start, before that chunk is done). Atomic (relaxed) so that
  // the writes race with nothing.
  std::atomic<const std::function<void(int64_t, int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, chunk_{0};
  // generation (32 bits) | chunk count (16) | next unclaimed chunk (16). A
  // claim is a CAS on the whole word and checks the count it read with it,
  // so a worker late from an older job can never claim in a newer one.
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> unfinished_{0};  // Chunks claimed or not, not done.

  std::mutex mu_;
  std::condition_variable wake_;
  uint32_t generation_ = 0;  // Guarded by mu_; mirrors next_'s high bits.
  int sleeping_ = 0;         // Guarded by mu_.
  bool stop_ = false;        // Guarded by mu_.
  std::atomic<uint32_t> published_{0};  // Latest generation, for spinning.
  std::atomic<bool> parked_{false};     // Park() since the last Run.
};

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_PANEL_POOL_H_

// WeightArena: one anonymous mapping that holds a model's weights, asked to
// be backed by 2 MiB pages (madvise(MADV_HUGEPAGE): Linux transparent huge
// pages in "madvise" or "always" mode).
//
// A decode pass streams every weight once (~92-124 MiB for the embedded
// model). In 4 KiB pages that is ~30000 TLB misses a pass, each a page walk
// (two-dimensional in a VM); in 2 MiB pages ~60. On the 2-core VM a
// one-token pass got ~10% faster (engine_bench, 8 interleaved pairs). Where
// the kernel gives no huge pages the arena is plain memory.
//
// The mapping reserves address space only: pages are committed as weights
// are written. Allocate hands out pieces that keep the arena alive.
// Thread-compatible (Allocate is for loading, on one thread).
#ifndef LOOKAHEAD_ENGINE_MODEL_WEIGHT_ARENA_H_
#define LOOKAHEAD_ENGINE_MODEL_WEIGHT_ARENA_H_

#include <cstdint>
#include <memory>

namespace lookahead::engine {

class WeightArena : public std::enable_shared_from_this<WeightArena> {
 public:
  // Room for `capacity` bytes. Null if the mapping fails (callers fall back
  // to their own memory).
  static std::shared_ptr<WeightArena> Create(int64_t capacity);
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // n bytes, 64-byte aligned, zeroed, valid while the result (or the arena)
  // lives; null once the arena is full.
  std::shared_ptr<uint8_t> Allocate(int64_t n);

  // Bytes of the arena the kernel backs with huge pages now (from
  // /proc/self/smaps; 0 where it cannot tell).
  int64_t HugePageBytes() const;

 private:
  WeightArena() = default;

  void* map_ = nullptr;
  int64_t map_bytes_ = 0;
  uint8_t* base_ = nullptr;  // 2 MiB aligned, inside the mapping
  int64_t capacity_ = 0;
  int64_t used_ = 0;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_WEIGHT_ARENA_H_

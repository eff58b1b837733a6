#include "engine/model/weight_arena.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>

namespace lookahead::engine {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kAlign = 64;

}  // namespace

std::shared_ptr<WeightArena> WeightArena::Create(int64_t capacity) {
  if (capacity <= 0) return nullptr;
  const int64_t rounded = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  // One huge page more than needed, so a 2 MiB-aligned start fits inside.
  const int64_t bytes = rounded + kHugePage;
  void* map = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  std::shared_ptr<WeightArena> arena(new WeightArena());
  arena->map_ = map;
  arena->map_bytes_ = bytes;
  const uintptr_t start = reinterpret_cast<uintptr_t>(map);
  arena->base_ = reinterpret_cast<uint8_t*>(
      (start + kHugePage - 1) & ~static_cast<uintptr_t>(kHugePage - 1));
  arena->capacity_ = rounded;
  // Advice only: without transparent huge pages this fails, and the arena
  // is ordinary memory.
  madvise(arena->base_, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  return arena;
}

WeightArena::~WeightArena() {
  if (map_ != nullptr) munmap(map_, static_cast<size_t>(map_bytes_));
}

std::shared_ptr<uint8_t> WeightArena::Allocate(int64_t n) {
  if (n < 0 || n > capacity_ - used_) return nullptr;
  uint8_t* p = base_ + used_;
  used_ += (n + kAlign - 1) / kAlign * kAlign;
  // Aliases the arena: the piece keeps it alive.
  return std::shared_ptr<uint8_t>(shared_from_this(), p);
}

int64_t WeightArena::HugePageBytes() const {
  FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(map_);
  const uintptr_t hi = lo + static_cast<uintptr_t>(map_bytes_);
  char line[512];
  bool inside = false;
  int64_t total = 0;
  while (std::fgets(line, sizeof(line), smaps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char dash = 0;
    if (std::sscanf(line, "%lx%c%lx", &begin, &dash, &end) == 3 &&
        dash == '-') {
      inside = begin < hi && end > lo;
      continue;
    }
    long long kb = 0;
    if (inside && std::sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) {
      total += kb * 1024;
    }
  }
  std::fclose(smaps);
  return total;
}

}  // namespace lookahead::engine

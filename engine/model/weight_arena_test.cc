#include "engine/model/weight_arena.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

TEST(WeightArenaTest, PiecesAreAlignedDisjointZeroedAndKeepTheArenaAlive) {
  std::shared_ptr<WeightArena> arena = WeightArena::Create(4 << 20);
  ASSERT_NE(arena, nullptr);
  std::vector<std::shared_ptr<uint8_t>> pieces;
  for (int64_t n : {1, 100, 64, 1 << 20, 3}) {
    std::shared_ptr<uint8_t> p = arena->Allocate(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p.get()[i], 0) << n << " " << i;
    std::memset(p.get(), 0xAB, static_cast<size_t>(n));
    pieces.push_back(p);
  }
  // Writing each piece left the others' bytes alone.
  for (size_t k = 0; k + 1 < pieces.size(); ++k) {
    EXPECT_LT(pieces[k].get(), pieces[k + 1].get());
  }
  EXPECT_EQ(pieces[1].get() - pieces[0].get(), 64);
  EXPECT_EQ(pieces[2].get() - pieces[1].get(), 128);
  // The pieces hold the mapping after the last handle to the arena goes.
  std::weak_ptr<WeightArena> weak = arena;
  arena.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(pieces[3].get()[(1 << 20) - 1], 0xAB);
  pieces.clear();
  EXPECT_TRUE(weak.expired());
}

TEST(WeightArenaTest, FullArenaAnswersNull) {
  // Capacity rounds up to one 2 MiB page.
  std::shared_ptr<WeightArena> arena = WeightArena::Create(1000);
  ASSERT_NE(arena, nullptr);
  EXPECT_NE(arena->Allocate(2 << 20), nullptr);
  EXPECT_EQ(arena->Allocate(1), nullptr);
  EXPECT_EQ(arena->Allocate(-1), nullptr);
  EXPECT_EQ(WeightArena::Create(0), nullptr);
}

TEST(WeightArenaTest, HugePageBytesNeverExceedTheMapping) {
  std::shared_ptr<WeightArena> arena = WeightArena::Create(8 << 20);
  ASSERT_NE(arena, nullptr);
  std::shared_ptr<uint8_t> p = arena->Allocate(8 << 20);
  ASSERT_NE(p, nullptr);
  std::memset(p.get(), 1, 8 << 20);
  // Whether the kernel gives huge pages depends on its settings and free
  // memory, but they can never exceed the mapping (8 MiB rounded up to 2 MiB
  // pages, plus the 2 MiB slack for alignment), and with THP off there are
  // none: the count is this mapping's, not the process's.
  const int64_t huge = arena->HugePageBytes();
  EXPECT_LE(huge, int64_t{10} << 20);
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(mode, modes);
  if (modes.find("[never]") != std::string::npos) {
    EXPECT_EQ(huge, 0);
  }
}

}  // namespace
}  // namespace lookahead::engine

#include "engine/model/tree_mask.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using ::testing::HasSubstr;

// Oracle: walk parent pointers.
bool IsAncestorOrSelf(const std::vector<int32_t>& parents, int j, int i) {
  for (int k = i; k >= 0; k = parents[k]) {
    if (k == j) return true;
  }
  return false;
}

TEST(TreeLayoutTest, RandomTreesMatchParentWalk) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 70);
    std::vector<int32_t> parents(n);
    for (int i = 0; i < n; ++i) {
      parents[i] = static_cast<int32_t>(rng() % (i + 1)) - 1;  // [-1, i)
    }
    auto layout = TreeLayout::Build(parents);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->size(), n);
    for (int i = 0; i < n; ++i) {
      int depth = 0;
      for (int k = parents[i]; k >= 0; k = parents[k]) ++depth;
      EXPECT_EQ(layout->depths()[i], depth);
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(layout->Allowed(i, j), IsAncestorOrSelf(parents, j, i))
            << "trial " << trial << " i=" << i << " j=" << j;
      }
    }
  }
}

TEST(TreeLayoutTest, ChainIsCausal) {
  std::vector<int32_t> chain = {-1, 0, 1, 2, 3};
  auto layout = TreeLayout::Build(chain);
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->IsChain());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(layout->depths()[i], i);
    for (int j = 0; j < 5; ++j) EXPECT_EQ(layout->Allowed(i, j), j <= i);
  }
  auto star = TreeLayout::Build(std::vector<int32_t>{-1, 0, 0, 0});
  ASSERT_TRUE(star.ok());
  EXPECT_FALSE(star->IsChain());
  EXPECT_THAT(star->depths(), ::testing::ElementsAre(0, 1, 1, 1));
  EXPECT_FALSE(star->Allowed(2, 1));
  EXPECT_TRUE(star->Allowed(2, 0));
}

TEST(TreeLayoutTest, BadParents) {
  auto empty = TreeLayout::Build({});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("no nodes"));
  auto forward = TreeLayout::Build(std::vector<int32_t>{-1, 1});
  EXPECT_EQ(forward.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(forward.status().message(), HasSubstr("node 1 has parent 1"));
  auto below = TreeLayout::Build(std::vector<int32_t>{-2});
  EXPECT_THAT(below.status().message(), HasSubstr("node 0 has parent -2"));
  auto far = TreeLayout::Build(std::vector<int32_t>{-1, 0, 7});
  EXPECT_THAT(far.status().message(), HasSubstr("node 2 has parent 7"));
}

TEST(PackedTreeMaskTest, RandomMasksRoundTrip) {
  std::mt19937 rng(9);
  for (int cols : {0, 1, 63, 64, 65, 127, 128, 130, 200}) {
    for (int rows : {0, 1, 7, 64}) {
      std::vector<uint8_t> dense(static_cast<size_t>(rows) * cols);
      for (uint8_t& b : dense) b = rng() % 3 == 0 ? 1 : 0;
      auto packed = PackedTreeMask::Pack(dense, rows, cols);
      ASSERT_TRUE(packed.ok()) << packed.status();
      EXPECT_EQ(packed->words_per_row(), (cols + 63) / 64);
      EXPECT_EQ(packed->words().size(),
                static_cast<size_t>(rows) * packed->words_per_row());
      EXPECT_EQ(packed->Unpack(), dense) << rows << "x" << cols;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          ASSERT_EQ(packed->Get(r, c), dense[r * cols + c] != 0);
        }
        // Padding bits of the last word stay zero.
        if (cols % 64 != 0) {
          const uint64_t last = packed->words()[r * packed->words_per_row() +
                                                packed->words_per_row() - 1];
          EXPECT_EQ(last >> (cols % 64), 0u);
        }
      }
    }
  }
}

TEST(PackedTreeMaskTest, FromLayoutMatchesDense) {
  std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, -1, 6};
  auto layout = TreeLayout::Build(parents);
  ASSERT_TRUE(layout.ok());
  PackedTreeMask packed = PackedTreeMask::FromLayout(*layout);
  EXPECT_EQ(packed.Unpack(), layout->dense());
  // Bit layout is LSB first: row 3 = {0, 1, 3}.
  EXPECT_EQ(packed.words()[3], 0b1011u);
}

TEST(PackedTreeMaskTest, WrongSizeIsError) {
  std::vector<uint8_t> dense(10, 1);
  auto packed = PackedTreeMask::Pack(dense, 3, 4);
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(packed.status().message(), HasSubstr("10 bytes is not (3, 4)"));
  EXPECT_FALSE(PackedTreeMask::Pack(dense, -2, -5).ok());
}

}  // namespace
}  // namespace lookahead::engine

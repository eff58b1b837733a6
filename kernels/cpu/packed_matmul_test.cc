#include "kernels/cpu/packed_matmul.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lookahead::kernels {
namespace {

std::vector<float> Random(int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(size);
  for (float& f : v) f = normal(rng);
  return v;
}

std::vector<PackedIsa> SupportedIsas() {
  std::vector<PackedIsa> isas;
  if (BestPackedIsa() >= PackedIsa::kAvx2) isas.push_back(PackedIsa::kAvx2);
  if (BestPackedIsa() >= PackedIsa::kAvx512) isas.push_back(PackedIsa::kAvx512);
  return isas;
}

// y (m, n) = x (m, k) · w (k, n) through the kernel; panels split in two
// calls as threads would.
std::vector<float> Multiply(PackedIsa isa, const std::vector<float>& x,
                            int64_t m, const std::vector<float>& w, int64_t k,
                            int64_t n) {
  const int64_t p = PanelWidth(isa), panels = (n + p - 1) / p;
  std::vector<float> packed(panels * k * p);
  PackWeight(w.data(), k, n, p, packed.data());
  std::vector<float> padded(m * panels * p, NAN);
  PackedMatmul(isa, x.data(), m, k, packed.data(), 0, panels / 2,
               padded.data(), panels * p);
  PackedMatmul(isa, x.data(), m, k, packed.data(), panels / 2, panels,
               padded.data(), panels * p);
  std::vector<float> y(m * n);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&y[r * n], &padded[r * panels * p], n * sizeof(float));
  }
  return y;
}

TEST(PackedMatmulTest, PanelWidths) {
  EXPECT_EQ(PanelWidth(PackedIsa::kNone), 0);
  EXPECT_EQ(PanelWidth(PackedIsa::kAvx2), 32);
  EXPECT_EQ(PanelWidth(PackedIsa::kAvx512), 64);
}

TEST(PackedMatmulTest, PackLaysOutPanelsAndZeroPads) {
  const int64_t k = 3, n = 5, p = 4;
  std::vector<float> w(k * n);
  for (int64_t i = 0; i < k * n; ++i) w[i] = static_cast<float>(i + 1);
  std::vector<float> packed(2 * k * p, -1.0f);
  PackWeight(w.data(), k, n, p, packed.data());
  for (int64_t panel = 0; panel < 2; ++panel) {
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t c = 0; c < p; ++c) {
        const int64_t col = panel * p + c;
        EXPECT_EQ(packed[(panel * k + j) * p + c], col < n ? w[j * n + col] : 0)
            << "panel " << panel << " row " << j << " col " << c;
      }
    }
  }
}

// The contract, bit for bit: y[r][c] is fmaf(x[r][j], w[j][c], acc) for
// j = 0..k-1 from 0.
TEST(PackedMatmulTest, EqualsSequentialFmaExactly) {
  if (SupportedIsas().empty()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  for (PackedIsa isa : SupportedIsas()) {
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                           {7, 576, 960},
                           {16, 33, 70},
                           {13, 1536, 64},
                           {64, 5, 129}}) {
      SCOPED_TRACE(testing::Message() << "isa " << static_cast<int>(isa)
                                      << " m=" << m << " k=" << k
                                      << " n=" << n);
      const std::vector<float> x = Random(m * k, 1), w = Random(k * n, 2);
      const std::vector<float> y = Multiply(isa, x, m, w, k, n);
      int64_t mismatches = 0;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          float acc = 0.0f;
          for (int64_t j = 0; j < k; ++j) {
            acc = std::fmaf(x[r * k + j], w[j * n + c], acc);
          }
          mismatches += std::memcmp(&acc, &y[r * n + c], sizeof acc) != 0;
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// A row's result does not depend on how many rows share the call, nor on
// which register block (full or tail) it lands in.
TEST(PackedMatmulTest, RowsAreIndependentOfTheBatch) {
  if (SupportedIsas().empty()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  const int64_t k = 96, n = 200, rows = 20;
  const std::vector<float> x = Random(rows * k, 3), w = Random(k * n, 4);
  for (PackedIsa isa : SupportedIsas()) {
    const std::vector<float> all = Multiply(isa, x, rows, w, k, n);
    for (int64_t m = 1; m <= rows; ++m) {
      // The last of the first m rows, computed with m - 1 others.
      const std::vector<float> some = Multiply(isa, x, m, w, k, n);
      const std::vector<float> one(x.begin() + (m - 1) * k,
                                   x.begin() + m * k);
      const std::vector<float> alone = Multiply(isa, one, 1, w, k, n);
      EXPECT_EQ(0, std::memcmp(&some[(m - 1) * n], alone.data(),
                               n * sizeof(float)))
          << "isa " << static_cast<int>(isa) << " m=" << m;
      EXPECT_EQ(0, std::memcmp(&all[(m - 1) * n], alone.data(),
                               n * sizeof(float)))
          << "isa " << static_cast<int>(isa) << " row " << m - 1;
    }
  }
}

}  // namespace
}  // namespace lookahead::kernels

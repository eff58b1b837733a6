// Tests for kernels/cpu/int8_matmul: Q4_0, Q4_1 and Q8_0 on every Int8Isa
// this CPU runs, against
//  - a reference written here from the GGUF block layout (not the packed
//    one) and the header's sum, bit for bit: it checks the packer too;
//  - a float64 matmul over the dequantized weights and the unquantized x
//    (stated tolerance: int8 activations are lossy, not wrong);
//  - itself: each row alone vs inside a batch (row invariance), and any
//    split of the columns.
// Plus the quantizer's contract on zero, NaN and Inf blocks.
#include "kernels/cpu/int8_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/dequant.h"
#include "gtest/gtest.h"

namespace lookahead::kernels {
namespace {

using engine::GgmlType;

constexpr QuantType kTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1,
                                QuantType::kQ8_0};

std::string Name(QuantType type) {
  return std::string(engine::TypeName(static_cast<GgmlType>(type)));
}

std::vector<Int8Isa> Isas() {
  std::vector<Int8Isa> isas;
  static bool said = false;
  for (Int8Isa isa : {Int8Isa::kScalar, Int8Isa::kAvx2, Int8Isa::kAvx512Vnni}) {
    if (BestInt8Isa() >= isa) {
      isas.push_back(isa);
    } else if (!said) {
      std::cout << "[ SKIPPED  ] " << Int8IsaName(isa) << ": not on this CPU\n";
    }
  }
  said = true;
  return isas;
}

// n rows of k values of `type`, random codes and moderate random scales.
std::vector<uint8_t> RandomWeights(QuantType type, int64_t k, int64_t n,
                                   std::mt19937& rng) {
  const int64_t block = QuantRowBytes(type, 32);
  std::vector<uint8_t> w(n * QuantRowBytes(type, k));
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t at = 0; at < static_cast<int64_t>(w.size()); at += block) {
    for (int64_t i = 0; i < block; ++i) w[at + i] = rng() & 0xFF;
    const uint16_t d = engine::FloatToHalf(scale(rng));
    std::memcpy(&w[at], &d, 2);
    if (type == QuantType::kQ4_1) {
      const uint16_t m = engine::FloatToHalf(scale(rng) * 8);
      std::memcpy(&w[at + 2], &m, 2);
    }
  }
  return w;
}

std::vector<float> RandomActivations(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  // An outlier channel, as LLM activations have, and an all-zero block.
  for (int64_t r = 0; r < m; ++r) {
    x[r * k + 5] *= 40.0f;
    if (k >= 64) std::fill(&x[r * k + 32], &x[r * k + 64], 0.0f);
  }
  return x;
}

std::vector<uint8_t> Quantize(const std::vector<float>& x, int64_t m,
                              int64_t k) {
  std::vector<uint8_t> xq(m * Int8RowBytes(k) + 4);
  QuantizeInt8Rows(Int8Isa::kScalar, x.data(), m, k, xq.data());
  for (Int8Isa isa : Isas()) {
    std::vector<uint8_t> again(xq.size());
    QuantizeInt8Rows(isa, x.data(), m, k, again.data());
    EXPECT_EQ(again, xq) << "quantized bytes differ on isa "
                         << static_cast<int>(isa);
  }
  return xq;
}

// The header's sum, from the GGUF layout: element j of a Q4 block is
// qs[j] & 15 (j < 16) or qs[j - 16] >> 4.
float Reference(QuantType type, const uint8_t* xrow, int64_t k,
                const uint8_t* wrow) {
  const int64_t nb = k / 32;
  const int8_t* q = reinterpret_cast<const int8_t*>(xrow);
  const float* d = reinterpret_cast<const float*>(xrow + 2 * k);
  const float* ds = d + nb;
  const int32_t* sum = reinterpret_cast<const int32_t*>(ds + nb);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wrow + b * QuantRowBytes(type, 32);
    uint16_t h;
    std::memcpy(&h, blk, 2);
    const float dw = engine::HalfToFloat(h);
    int32_t p = 0;
    for (int j = 0; j < 32; ++j) {
      int32_t qw;
      if (type == QuantType::kQ8_0) {
        qw = static_cast<int8_t>(blk[2 + j]);
      } else {
        const uint8_t* qs = blk + (type == QuantType::kQ4_1 ? 4 : 2);
        qw = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
      }
      p += qw * q[32 * b + j];
    }
    if (type == QuantType::kQ4_0) p -= 8 * sum[b];
    acc = std::fma(static_cast<float>(p), dw * d[b], acc);
    if (type == QuantType::kQ4_1) {
      std::memcpy(&h, blk + 2, 2);
      acc = std::fma(engine::HalfToFloat(h), ds[b], acc);
    }
  }
  return acc;
}

struct Shape {
  int64_t m, k, n;
};
constexpr Shape kShapes[] = {{1, 32, 16},  {3, 64, 40},    {4, 576, 960},
                             {9, 576, 33}, {17, 1536, 64}, {70, 128, 48}};

TEST(Int8Matmul, EqualsTheReferenceBitForBitOnEveryIsa) {
  std::mt19937 rng(7);
  for (QuantType type : kTypes) {
    for (const Shape& s : kShapes) {
      const std::vector<uint8_t> w = RandomWeights(type, s.k, s.n, rng);
      std::vector<uint8_t> packed(Int8PackedBytes(type, s.k, s.n));
      PackInt8Weights(type, w.data(), s.k, s.n, packed.data());
      const std::vector<uint8_t> xq =
          Quantize(RandomActivations(s.m, s.k, rng), s.m, s.k);
      for (Int8Isa isa : Isas()) {
        std::vector<float> y(s.m * s.n, -1.0f);
        Int8Matmul(isa, type, xq.data(), s.m, s.k, packed.data(), 0, s.n,
                   y.data(), s.n);
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t c = 0; c < s.n; ++c) {
            const float want =
                Reference(type, xq.data() + r * Int8RowBytes(s.k), s.k,
                          w.data() + c * QuantRowBytes(type, s.k));
            ASSERT_EQ(std::memcmp(&y[r * s.n + c], &want, 4), 0)
                << Name(type) << " isa " << static_cast<int>(isa) << " m "
                << s.m << " k " << s.k << " n " << s.n << " at (" << r << ", "
                << c << "): " << y[r * s.n + c] << " vs " << want;
          }
        }
      }
    }
  }
}

TEST(Int8Matmul, CloseToTheFloatMatmul) {
  std::mt19937 rng(11);
  const int64_t m = 5, k = 576, n = 64;
  for (QuantType type : kTypes) {
    const std::vector<uint8_t> w = RandomWeights(type, k, n, rng);
    std::vector<uint8_t> packed(Int8PackedBytes(type, k, n));
    PackInt8Weights(type, w.data(), k, n, packed.data());
    const std::vector<float> x = RandomActivations(m, k, rng);
    const std::vector<uint8_t> xq = Quantize(x, m, k);
    std::vector<float> y(m * n);
    Int8Matmul(BestInt8Isa(), type, xq.data(), m, k, packed.data(), 0, n,
               y.data(), n);
    std::vector<float> wrow(k);
    double err2 = 0, ref2 = 0;
    for (int64_t c = 0; c < n; ++c) {
      ASSERT_TRUE(engine::Dequantize(static_cast<GgmlType>(type),
                                     w.data() + c * QuantRowBytes(type, k), k,
                                     wrow.data())
                      .ok());
      for (int64_t r = 0; r < m; ++r) {
        double ref = 0;
        for (int64_t j = 0; j < k; ++j) ref += double(x[r * k + j]) * wrow[j];
        err2 += (y[r * n + c] - ref) * (y[r * n + c] - ref);
        ref2 += ref * ref;
      }
    }
    // Per-block int8 keeps ~7 bits of each block; the outlier channel
    // coarsens its block's other 31 values 40-fold. Measured: a relative
    // RMS error of 1.0-1.3e-2 here (a dropped min term or a wrong scale
    // gives > 0.5).
    EXPECT_LT(std::sqrt(err2 / ref2), 3e-2) << Name(type);
    EXPECT_GT(ref2, 0.0) << Name(type);
  }
}

TEST(Int8Matmul, RowInvariantAndSplitInvariant) {
  std::mt19937 rng(13);
  const int64_t m = 11, k = 576, n = 80;
  for (QuantType type : kTypes) {
    const std::vector<uint8_t> w = RandomWeights(type, k, n, rng);
    std::vector<uint8_t> packed(Int8PackedBytes(type, k, n));
    PackInt8Weights(type, w.data(), k, n, packed.data());
    const std::vector<float> x = RandomActivations(m, k, rng);
    const std::vector<uint8_t> xq = Quantize(x, m, k);
    for (Int8Isa isa : Isas()) {
      std::vector<float> all(m * n);
      Int8Matmul(isa, type, xq.data(), m, k, packed.data(), 0, n, all.data(),
                 n);
      for (int64_t r = 0; r < m; ++r) {
        // Row r alone, quantized alone, in column pieces of 7 (splits that
        // cut tiles).
        const std::vector<float> one(x.begin() + r * k,
                                     x.begin() + (r + 1) * k);
        const std::vector<uint8_t> oq = Quantize(one, 1, k);
        std::vector<float> y(n, -1.0f);
        for (int64_t c = 0; c < n; c += 7) {
          Int8Matmul(isa, type, oq.data(), 1, k, packed.data(), c,
                     std::min<int64_t>(n, c + 7), y.data(), n);
        }
        ASSERT_EQ(std::memcmp(y.data(), &all[r * n], 4 * n), 0)
            << Name(type) << " row " << r;
      }
    }
  }
}

TEST(Int8Matmul, LeavesColumnsOutsideTheRangeAlone) {
  std::mt19937 rng(17);
  const int64_t k = 64, n = 48;
  const std::vector<uint8_t> w = RandomWeights(QuantType::kQ4_1, k, n, rng);
  std::vector<uint8_t> packed(Int8PackedBytes(QuantType::kQ4_1, k, n));
  PackInt8Weights(QuantType::kQ4_1, w.data(), k, n, packed.data());
  const std::vector<uint8_t> xq = Quantize(RandomActivations(2, k, rng), 2, k);
  for (Int8Isa isa : Isas()) {
    std::vector<float> y(2 * (n + 3), 42.0f);
    Int8Matmul(isa, QuantType::kQ4_1, xq.data(), 2, k, packed.data(), 5, 37,
               y.data(), n + 3);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < n + 3; ++c) {
        const bool inside = c >= 5 && c < 37;
        EXPECT_EQ(y[r * (n + 3) + c] == 42.0f, !inside) << r << ", " << c;
      }
    }
  }
}

TEST(QuantizeInt8Rows, ZeroNanAndInfBlocksQuantizeToZero) {
  const int64_t k = 128;
  std::vector<float> x(k, 0.0f);
  for (int j = 32; j < 64; ++j) x[j] = j - 48.0f;  // block 1: -16 .. 15
  x[64] = std::nanf("");
  x[65] = 3.0f;                                    // block 2: NaN + 3
  x[96] = INFINITY;                                // block 3: Inf
  x[97] = 1.0f;
  const std::vector<uint8_t> xq = Quantize(x, 1, k);
  const int8_t* q = reinterpret_cast<const int8_t*>(xq.data());
  const uint8_t* u = xq.data() + k;
  const float* d = reinterpret_cast<const float*>(xq.data() + 2 * k);
  const int32_t* sum = reinterpret_cast<const int32_t*>(d + 2 * (k / 32));
  EXPECT_EQ(d[0], 0.0f);
  EXPECT_EQ(sum[0], 0);
  EXPECT_EQ(d[1], 16.0f / 127.0f);
  EXPECT_EQ(q[32], -127);  // the largest |x| maps to 127
  EXPECT_EQ(q[32 + 24], std::nearbyint(8.0f * (127.0f / 16.0f)));
  EXPECT_EQ(q[64], 0);      // NaN
  EXPECT_EQ(q[65], 127);    // the block's largest finite value
  EXPECT_EQ(d[3], 0.0f);    // an Inf block is dropped whole
  EXPECT_EQ(q[97], 0);
  int32_t s1 = 0;
  for (int j = 32; j < 64; ++j) {
    s1 += q[j];
    EXPECT_EQ(u[j], q[j] + 128);
    EXPECT_LE(std::abs(q[j]), 127);
  }
  EXPECT_EQ(sum[1], s1);
}

}  // namespace
}  // namespace lookahead::kernels

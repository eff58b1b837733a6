// Tests for kernels/cpu/quant_matmul: every weight type on every ISA this
// CPU runs, against
//  - engine/gguf's Dequantize for the weight values themselves (bit for bit:
//    one-hot rows of x read the weights back through the kernel);
//  - a float64 matmul over the dequantized weights (stated tolerance);
//  - the scalar reference, bit for bit (the sum order is part of the
//    contract, the same on every ISA);
//  - itself: each row alone vs inside batches of 7..300 (row invariance).
// Weights are random bytes with block scales drawn partly from the extremes
// of a half (largest, subnormal, zero, negative).
#include "kernels/cpu/quant_matmul.h"

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

using engine::FloatToBf16;
using engine::FloatToHalf;
using engine::GgmlType;

constexpr QuantType kTypes[] = {
    QuantType::kF32,  QuantType::kF16,  QuantType::kBF16, QuantType::kQ4_0,
    QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
    QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K,
    QuantType::kQ6_K,
};

std::string Name(QuantType type) {
  return std::string(engine::TypeName(static_cast<GgmlType>(type)));
}

std::string Name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "AVX2";
    case QuantIsa::kAvx512:
      return "AVX-512";
  }
  return "?";
}

// Every ISA this CPU runs, scalar first; says which are skipped.
std::vector<QuantIsa> Isas() {
  std::vector<QuantIsa> isas;
  for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (BestQuantIsa() >= isa) {
      isas.push_back(isa);
    } else {
      std::cout << "[ SKIPPED  ] " << Name(isa) << ": not on this CPU\n";
    }
  }
  return isas;
}

// A block scale: a quarter of them from a half's extremes.
uint16_t RandomScale(std::mt19937& rng) {
  static constexpr uint16_t kExtremes[] = {
      0x7BFF,  // 65504, the largest half
      0xFBFF,  // -65504
      0x0001,  // 2^-24, the smallest subnormal
      0x03FF,  // the largest subnormal
      0x0400,  // the smallest normal
      0x0000,  // +0
      0x8000,  // -0
  };
  if (rng() % 4 == 0) return kExtremes[rng() % std::size(kExtremes)];
  std::uniform_real_distribution<float> mag(-10.0f, 2.0f);
  const float v = std::exp2(mag(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return FloatToHalf(v);
}

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof(v)); }

// A plain weight value: mostly N(0, 1), some extremes of each format.
float RandomValue(QuantType type, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  if (rng() % 8 != 0) return normal(rng);
  switch (type) {
    case QuantType::kF16: {
      static constexpr float kHalf[] = {65504.0f, -65504.0f, 5.9604645e-8f,
                                        6.1e-5f,  0.0f,      -0.0f};
      return kHalf[rng() % std::size(kHalf)];
    }
    default: {
      static constexpr float kWide[] = {1e30f,  -1e30f, 1e-30f,
                                        1e-40f, 0.0f,   -0.0f};
      return kWide[rng() % std::size(kWide)];
    }
  }
}

// n rows of k weights of `type`: random bytes with random scales.
std::vector<uint8_t> RandomWeights(QuantType type, int64_t n, int64_t k,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t row_bytes = QuantRowBytes(type, k);
  std::vector<uint8_t> w(n * row_bytes);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bytes = QuantRowBytes(type, QuantBlockSize(type));
  for (int64_t i = 0; i < n * k / QuantBlockSize(type); ++i) {
    uint8_t* b = w.data() + i * bytes;
    switch (type) {
      case QuantType::kF32: {
        const float v = RandomValue(type, rng);
        std::memcpy(b, &v, sizeof(v));
        break;
      }
      case QuantType::kF16:
        PutU16(b, FloatToHalf(RandomValue(type, rng)));
        break;
      case QuantType::kBF16:
        PutU16(b, FloatToBf16(RandomValue(type, rng)));
        break;
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
      case QuantType::kQ8_0:
        PutU16(b, RandomScale(rng));
        break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1:
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        PutU16(b, RandomScale(rng));
        PutU16(b + 2, RandomScale(rng));
        break;
      case QuantType::kQ2_K:
        PutU16(b + 80, RandomScale(rng));
        PutU16(b + 82, RandomScale(rng));
        break;
      case QuantType::kQ3_K:
        PutU16(b + 108, RandomScale(rng));
        break;
      case QuantType::kQ6_K:
        PutU16(b + 208, RandomScale(rng));
        break;
    }
  }
  return w;
}

std::vector<float> RandomX(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(m * k);
  for (float& f : x) f = normal(rng);
  return x;
}

// W (n, k) as engine/gguf decodes it.
std::vector<float> Dequantized(QuantType type, const std::vector<uint8_t>& w,
                               int64_t n, int64_t k) {
  std::vector<float> out(n * k);
  const absl::Status status = engine::Dequantize(static_cast<GgmlType>(type),
                                                 w.data(), n * k, out.data());
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

// y (m, n) through the kernel, columns in three calls as threads would split
// them; y's padding (ldy = n + 3) must stay untouched.
std::vector<float> Multiply(QuantIsa isa, QuantType type, const float* x,
                            int64_t m, int64_t k, const std::vector<uint8_t>& w,
                            int64_t n) {
  const int64_t ldy = n + 3;
  std::vector<float> padded(m * ldy, NAN);
  const int64_t cut1 = n / 3, cut2 = n - n / 4;
  QuantMatmul(isa, type, x, m, k, w.data(), 0, cut1, padded.data(), ldy);
  QuantMatmul(isa, type, x, m, k, w.data(), cut2, n, padded.data(), ldy);
  QuantMatmul(isa, type, x, m, k, w.data(), cut1, cut2, padded.data(), ldy);
  std::vector<float> y(m * n);
  int64_t touched = 0;
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&y[r * n], &padded[r * ldy], n * sizeof(float));
    for (int64_t c = n; c < ldy; ++c)
      touched += !std::isnan(padded[r * ldy + c]);
  }
  EXPECT_EQ(touched, 0) << "wrote past column n";
  return y;
}

// K values per type: one block and several (plain types: a partial group
// of 16 too); for some types of each kind, over 1024, the kernels' chunk.
std::vector<int64_t> Ks(QuantType type) {
  std::vector<int64_t> ks;
  switch (QuantBlockSize(type)) {
    case 1:
      ks = {1, 37, 96};
      break;
    case 32:
      ks = {32, 96};
      break;
    default:
      ks = {256, 512};
      break;
  }
  if (type == QuantType::kF32) ks.push_back(1040);
  if (type == QuantType::kQ4_1 || type == QuantType::kQ5_0) ks.push_back(1056);
  if (type == QuantType::kQ5_K || type == QuantType::kQ3_K) ks.push_back(1280);
  return ks;
}

TEST(QuantMatmulTest, TypesAndRowBytesMatchGguf) {
  int supported = 0;
  for (uint32_t id = 0; id < 64; ++id) supported += IsQuantType(id);
  EXPECT_EQ(supported, static_cast<int>(std::size(kTypes)));
  for (QuantType type : kTypes) {
    SCOPED_TRACE(Name(type));
    const auto ggml = static_cast<GgmlType>(type);
    EXPECT_TRUE(IsQuantType(static_cast<uint32_t>(type)));
    EXPECT_TRUE(engine::CanDequantize(ggml));
    EXPECT_EQ(QuantBlockSize(type), engine::BlockSize(ggml));
    for (int64_t blocks : {0, 1, 3, 18}) {
      const int64_t k = blocks * QuantBlockSize(type);
      EXPECT_EQ(QuantRowBytes(type, k), *engine::RowBytes(ggml, k));
    }
  }
  EXPECT_FALSE(IsQuantType(static_cast<uint32_t>(GgmlType::kQ8_1)));
  EXPECT_FALSE(IsQuantType(static_cast<uint32_t>(GgmlType::kQ8_K)));
  EXPECT_EQ(BestQuantIsa(), BestQuantIsa());
}

// x = I (k rows): y[j][n] is weight (n, j) as the kernel decoded it, plus
// zeros. It must be Dequantize's value bit for bit (a -0 weight reads back
// as +0: -0 + +0 is +0). All k rows at once (weights decoded to a buffer)
// and 3 at a time (decoded in registers).
TEST(QuantMatmulTest, WeightValuesAreDequantizeBitForBit) {
  for (QuantIsa isa : Isas()) {
    for (QuantType type : kTypes) {
      for (int64_t k : Ks(type)) {
        SCOPED_TRACE(Name(isa) + " " + Name(type) + " k=" + std::to_string(k));
        const int64_t n = 7;
        const std::vector<uint8_t> w = RandomWeights(type, n, k, 11 + k);
        const std::vector<float> ref = Dequantized(type, w, n, k);
        std::vector<float> eye(k * k, 0.0f);
        for (int64_t j = 0; j < k; ++j) eye[j * k + j] = 1.0f;
        std::vector<float> all = Multiply(isa, type, eye.data(), k, k, w, n);
        std::vector<float> by3(k * n);
        for (int64_t j = 0; j < k; j += 3) {
          const int64_t m = std::min<int64_t>(3, k - j);
          QuantMatmul(isa, type, &eye[j * k], m, k, w.data(), 0, n, &by3[j * n],
                      n);
        }
        for (const std::vector<float>* y : {&all, &by3}) {
          int64_t mismatches = 0;
          for (int64_t j = 0; j < k; ++j) {
            for (int64_t c = 0; c < n; ++c) {
              const float got = (*y)[j * n + c], want = ref[c * k + j];
              const bool same = (got == 0.0f && want == 0.0f) ||
                                std::memcmp(&got, &want, sizeof got) == 0;
              if (!same && ++mismatches <= 3) {
                ADD_FAILURE() << "weight (" << c << ", " << j << "): kernel "
                              << got << ", Dequantize " << want;
              }
            }
          }
          EXPECT_EQ(mismatches, 0) << (y == &all ? "all rows" : "3 rows");
        }
      }
    }
  }
}

// Against float64 over Dequantize's weights: |y - ref| <= tol * sum |x w|
// with tol = (k/16 + 5) * 2^-23, twice the bound of the contract's sum
// (16 lanes of ceil(k/16) fmas, then 4 adds, unit roundoff 2^-24), plus
// 4k * 2^-149 for products that underflow. And bit for bit the scalar
// reference's result, for every m, every ISA and split columns.
TEST(QuantMatmulTest, MatchesFloat64AndScalarBitForBit) {
  const std::vector<QuantIsa> isas = Isas();
  constexpr int64_t kMaxRows = 300;
  for (QuantType type : kTypes) {
    for (int64_t k : Ks(type)) {
      for (int64_t n : {1, 3, 33, 577}) {
        if (k > 1024 && n > 33) continue;  // time: the scalar and float64
        SCOPED_TRACE(Name(type) + " k=" + std::to_string(k) +
                     " n=" + std::to_string(n));
        const std::vector<uint8_t> w =
            RandomWeights(type, n, k, static_cast<uint32_t>(k * 1000 + n));
        const std::vector<float> wf = Dequantized(type, w, n, k);
        const std::vector<float> x = RandomX(kMaxRows, k, 7);
        const double tol = (k / 16 + 5) * std::ldexp(1.0, -23);
        const double floor = 4.0 * k * std::ldexp(1.0, -149);
        // The scalar reference, all rows at once.
        const std::vector<float> expected =
            Multiply(QuantIsa::kScalar, type, x.data(), kMaxRows, k, w, n);
        int64_t far = 0;
        for (int64_t r = 0; r < kMaxRows; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            double ref = 0.0, mag = 0.0;
            for (int64_t j = 0; j < k; ++j) {
              const double p =
                  static_cast<double>(x[r * k + j]) * wf[c * k + j];
              ref += p;
              mag += std::fabs(p);
            }
            const double err = std::fabs(expected[r * n + c] - ref);
            if (!(err <= tol * mag + floor) && ++far <= 3) {
              ADD_FAILURE()
                  << "y[" << r << ", " << c << "] = " << expected[r * n + c]
                  << ", float64 " << ref << " (|x||w| " << mag << ")";
            }
          }
        }
        EXPECT_EQ(far, 0);
        for (QuantIsa isa : isas) {
          for (int64_t m : {1, 2, 5, 16, 64, 300}) {
            if (isa == QuantIsa::kScalar && m != 1) continue;
            const std::vector<float> y =
                Multiply(isa, type, x.data(), m, k, w, n);
            EXPECT_EQ(0, std::memcmp(y.data(), expected.data(),
                                     m * n * sizeof(float)))
                << Name(isa) << " m=" << m;
          }
        }
      }
    }
  }
}

// Each row alone (m = 1) and inside batches of 7, 16, 64, 300 rows, in
// order or shuffled among rows of NaN, inf and huge values: bit for bit.
TEST(QuantMatmulTest, RowsAreBitIdenticalAloneAndInBatches) {
  constexpr int64_t kPool = 300, n = 37;
  for (QuantIsa isa : Isas()) {
    for (QuantType type : kTypes) {
      // Two blocks; plain types 45 values (a partial group of 16 last).
      const int64_t k =
          QuantBlockSize(type) == 1 ? 45 : 2 * QuantBlockSize(type);
      SCOPED_TRACE(Name(isa) + " " + Name(type));
      const std::vector<uint8_t> w = RandomWeights(type, n, k, 5);
      const std::vector<float> pool = RandomX(kPool, k, 6);
      std::vector<float> alone(kPool * n);
      for (int64_t r = 0; r < kPool; ++r) {
        QuantMatmul(isa, type, &pool[r * k], 1, k, w.data(), 0, n,
                    &alone[r * n], n);
      }
      std::mt19937 rng(9);
      for (int64_t m : {7, 16, 64, 300}) {
        for (bool shuffled : {false, true}) {
          // source[i]: the pool row at batch row i, or -1 for garbage.
          std::vector<int64_t> source(m);
          std::vector<float> x(m * k);
          for (int64_t i = 0; i < m; ++i) {
            source[i] = shuffled ? (rng() % 5 == 0 ? -1 : rng() % kPool) : i;
            for (int64_t j = 0; j < k; ++j) {
              static constexpr float kGarbage[] = {NAN, INFINITY, -3e38f, 0.0f};
              x[i * k + j] = source[i] >= 0 ? pool[source[i] * k + j]
                                            : kGarbage[(i + j) % 4];
            }
          }
          const std::vector<float> y =
              Multiply(isa, type, x.data(), m, k, w, n);
          int64_t differ = 0;
          for (int64_t i = 0; i < m; ++i) {
            if (source[i] < 0 || std::memcmp(&y[i * n], &alone[source[i] * n],
                                             n * sizeof(float)) == 0) {
              continue;
            }
            if (++differ <= 3) {
              ADD_FAILURE() << "m=" << m << " shuffled=" << shuffled
                            << ": batch row " << i << " (pool row " << source[i]
                            << ") differs from it alone";
            }
          }
          EXPECT_EQ(differ, 0) << "m=" << m << " shuffled=" << shuffled;
        }
      }
    }
  }
}

TEST(QuantMatmulTest, EmptyCalls) {
  const std::vector<uint8_t> w = RandomWeights(QuantType::kQ4_1, 4, 32, 1);
  const std::vector<float> x = RandomX(2, 32, 2);
  for (QuantIsa isa : Isas()) {
    std::vector<float> y(2 * 4, NAN);
    QuantMatmul(isa, QuantType::kQ4_1, x.data(), 0, 32, w.data(), 0, 4,
                y.data(), 4);
    QuantMatmul(isa, QuantType::kQ4_1, x.data(), 2, 32, w.data(), 3, 3,
                y.data(), 4);
    for (float f : y) EXPECT_TRUE(std::isnan(f)) << Name(isa);
    // k = 0: empty sums, +0, in the range only.
    QuantMatmul(isa, QuantType::kQ4_1, x.data(), 2, 0, w.data(), 1, 3, y.data(),
                4);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 4; ++c) {
        const float f = y[r * 4 + c];
        if (c == 1 || c == 2) {
          EXPECT_TRUE(f == 0.0f && !std::signbit(f)) << Name(isa);
        } else {
          EXPECT_TRUE(std::isnan(f)) << Name(isa);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lookahead::kernels

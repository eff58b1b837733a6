// Tests for kernels/cpu/int8_matmul: every type it computes (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) on every Int8Isa this CPU runs,
// against
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

constexpr QuantType kTypes[] = {
    QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
    QuantType::kQ8_0, QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K,
    QuantType::kQ5_K, QuantType::kQ6_K};

bool IsK(QuantType type) { return QuantBlockSize(type) == 256; }

// k rounded up to what `type` takes (a multiple of 256 for the K types).
int64_t KFor(QuantType type, int64_t k) {
  return IsK(type) ? (k + 255) / 256 * 256 : k;
}

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

void PutHalf(float v, uint8_t* at) {
  const uint16_t h = engine::FloatToHalf(v);
  std::memcpy(at, &h, 2);
}

// n rows of k values of `type`: random codes and sub-block scales, moderate
// random block scales.
std::vector<uint8_t> RandomWeights(QuantType type, int64_t k, int64_t n,
                                   std::mt19937& rng) {
  const int64_t block = QuantRowBytes(type, QuantBlockSize(type));
  std::vector<uint8_t> w(n * QuantRowBytes(type, k));
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t at = 0; at < static_cast<int64_t>(w.size()); at += block) {
    uint8_t* blk = &w[at];
    for (int64_t i = 0; i < block; ++i) blk[i] = rng() & 0xFF;
    switch (type) {
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:  // d, dmin (a sub-block scale is up to 63)
        PutHalf(scale(rng) / 16, blk);
        PutHalf(std::fabs(scale(rng)) / 8, blk + 2);
        break;
      case QuantType::kQ6_K:  // d at the end (a sub-block scale: int8)
        PutHalf(scale(rng) / 32, blk + 208);
        break;
      case QuantType::kQ3_K:  // d at the end (a group scale: -32 .. 31)
        PutHalf(scale(rng) / 8, blk + 108);
        break;
      case QuantType::kQ2_K:  // d, dmin at the end (4-bit scales, mins)
        PutHalf(scale(rng) / 4, blk + 80);
        PutHalf(std::fabs(scale(rng)) / 4, blk + 82);
        break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1:
        PutHalf(scale(rng), blk);
        PutHalf(scale(rng) * 8, blk + 2);
        break;
      default:
        PutHalf(scale(rng), blk);
        break;
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

std::vector<uint8_t> Quantize(Int8Activations form, const std::vector<float>& x,
                              int64_t m, int64_t k) {
  std::vector<uint8_t> xq(m * Int8RowBytes(form, k) + 4);
  QuantizeInt8Rows(Int8Isa::kScalar, form, x.data(), m, k, xq.data());
  for (Int8Isa isa : Isas()) {
    std::vector<uint8_t> again(xq.size());
    QuantizeInt8Rows(isa, form, x.data(), m, k, again.data());
    EXPECT_EQ(again, xq) << "quantized bytes differ on isa "
                         << static_cast<int>(isa);
  }
  return xq;
}

std::vector<uint8_t> Quantize(QuantType type, const std::vector<float>& x,
                              int64_t m, int64_t k) {
  return Quantize(Int8ActivationsFor(type), x, m, k);
}

float Half(const uint8_t* at) {
  uint16_t h;
  std::memcpy(&h, at, 2);
  return engine::HalfToFloat(h);
}

// Code i (< 256) of a K block, from the GGUF layout (ggml-common.h).
int32_t KCode(QuantType type, const uint8_t* blk, int i) {
  if (type == QuantType::kQ2_K || type == QuantType::kQ3_K) {
    // Q2_K {scales[16], qs[64], d, dmin}; Q3_K {hmask[32], qs[64], ...}:
    // value i = 128h + 32c + l is bits 2c, 2c + 1 of qs[32h + l] (Q3_K:
    // plus 4 times bit 4h + c of hmask[l]).
    const int h = i / 128, c = (i % 128) / 32, l = i % 32;
    const uint8_t* qs = blk + (type == QuantType::kQ2_K ? 16 : 32);
    int32_t v = (qs[32 * h + l] >> (2 * c)) & 3;
    if (type == QuantType::kQ3_K) v += 4 * ((blk[l] >> (4 * h + c)) & 1);
    return v;
  }
  if (type == QuantType::kQ6_K) {
    // ql[128], qh[64]: value i = 128h + 32c + l takes ql[64h + l + 32(c&1)]'s
    // nibble c >> 1 and qh[32h + l]'s bits 2c, 2c + 1.
    const int h = i / 128, c = (i % 128) / 32, l = i % 32;
    const int low = (blk[64 * h + l + 32 * (c & 1)] >> (4 * (c >> 1))) & 15;
    const int high = (blk[128 + 32 * h + l] >> (2 * c)) & 3;
    return low + 16 * high;
  }
  // Q4_K {d, dmin, scales[12], qs[128]}; Q5_K adds qh[32] before qs.
  const int j = i / 32, l = i % 32;
  const uint8_t* qs = blk + (type == QuantType::kQ5_K ? 48 : 16);
  int32_t v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
  if (type == QuantType::kQ5_K) v += 16 * ((blk[16 + l] >> j) & 1);
  return v;
}

// Q4_K / Q5_K: sub-block j's 6-bit scale (min: j + 8), spelled out.
int32_t KScale(const uint8_t* scales, int j) {
  const bool is_min = j >= 8;
  j %= 8;
  if (j < 4) return scales[j + (is_min ? 4 : 0)] & 63;
  const int low = is_min ? scales[j + 4] >> 4 : scales[j + 4] & 15;
  const int high = scales[is_min ? j : j - 4] >> 6;
  return low | high << 4;
}

// Q3_K's scale of group g (< 16): 6 bits from its 12 packed bytes, minus
// 32 (ggml's kmask1/kmask2 unpacking, written per group).
int32_t Q3Scale(const uint8_t* scales, int g) {
  const int low = (scales[g % 8] >> (g < 8 ? 0 : 4)) & 15;
  const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | high << 4) - 32;
}

// The header's sum for a K type, from the GGUF layout.
float ReferenceK(QuantType type, const uint8_t* xrow, int64_t k,
                 const uint8_t* wrow) {
  const int8_t* q = reinterpret_cast<const int8_t*>(xrow);
  const float* d = reinterpret_cast<const float*>(xrow + k);
  const int32_t* sum16 = reinterpret_cast<const int32_t*>(d + k / 256);
  const int64_t block = QuantRowBytes(type, 256);
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = wrow + b * block;
    int32_t s = 0, t = 0;
    for (int g = 0; g < 16; ++g) {  // groups of 16 values
      int32_t p = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        p += KCode(type, blk, i) * q[256 * b + i];
      }
      const int32_t xs = sum16[16 * b + g];
      switch (type) {
        case QuantType::kQ2_K:
          s += (blk[g] & 15) * p;
          t += (blk[g] >> 4) * xs;
          break;
        case QuantType::kQ3_K:
          s += Q3Scale(blk + 96, g) * (p - 4 * xs);
          break;
        case QuantType::kQ6_K:
          s += static_cast<int8_t>(blk[192 + g]) * (p - 32 * xs);
          break;
        default:  // Q4_K, Q5_K: the scale and min of 32 values
          s += KScale(blk + 4, g / 2) * p;
          t += KScale(blk + 4, 8 + g / 2) * xs;
          break;
      }
    }
    const float dx = d[b];
    switch (type) {
      case QuantType::kQ2_K:
        acc = std::fma(static_cast<float>(s), Half(blk + 80) * dx, acc);
        acc = std::fma(static_cast<float>(t), -(Half(blk + 82) * dx), acc);
        break;
      case QuantType::kQ3_K:
        acc = std::fma(static_cast<float>(s), Half(blk + 108) * dx, acc);
        break;
      case QuantType::kQ6_K:
        acc = std::fma(static_cast<float>(s), Half(blk + 208) * dx, acc);
        break;
      default:
        acc = std::fma(static_cast<float>(s), Half(blk) * dx, acc);
        acc = std::fma(static_cast<float>(t), -(Half(blk + 2) * dx), acc);
        break;
    }
  }
  return acc;
}

// The header's sum, from the GGUF layout: element j of a Q4 block is
// qs[j] & 15 (j < 16) or qs[j - 16] >> 4.
float Reference(QuantType type, const uint8_t* xrow, int64_t k,
                const uint8_t* wrow) {
  if (IsK(type)) return ReferenceK(type, xrow, k, wrow);
  const bool q5 = type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
  const bool has_m = type == QuantType::kQ4_1 || type == QuantType::kQ5_1;
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
        // Q5: {d, (m,) qh[4], qs[16]}, bit j of qh on top of value j.
        const uint8_t* qs = blk + (has_m ? 4 : 2) + (q5 ? 4 : 0);
        qw = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
        if (q5) qw |= ((blk[(has_m ? 4 : 2) + j / 8] >> (j % 8)) & 1) << 4;
      }
      p += qw * q[32 * b + j];
    }
    if (type == QuantType::kQ4_0) p -= 8 * sum[b];
    if (type == QuantType::kQ5_0) p -= 16 * sum[b];
    acc = std::fma(static_cast<float>(p), dw * d[b], acc);
    if (has_m) {
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
    for (Shape s : kShapes) {
      s.k = KFor(type, s.k);
      const std::vector<uint8_t> w = RandomWeights(type, s.k, s.n, rng);
      std::vector<uint8_t> packed(Int8PackedBytes(type, s.k, s.n));
      PackInt8Weights(type, w.data(), s.k, s.n, packed.data());
      const std::vector<uint8_t> xq =
          Quantize(type, RandomActivations(s.m, s.k, rng), s.m, s.k);
      const int64_t row_bytes = Int8RowBytes(Int8ActivationsFor(type), s.k);
      for (Int8Isa isa : Isas()) {
        std::vector<float> y(s.m * s.n, -1.0f);
        Int8Matmul(isa, type, xq.data(), s.m, s.k, packed.data(), 0, s.n,
                   y.data(), s.n);
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t c = 0; c < s.n; ++c) {
            const float want =
                Reference(type, xq.data() + r * row_bytes, s.k,
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
  const int64_t m = 5, n = 64;
  for (QuantType type : kTypes) {
    const int64_t k = KFor(type, 576);
    const std::vector<uint8_t> w = RandomWeights(type, k, n, rng);
    std::vector<uint8_t> packed(Int8PackedBytes(type, k, n));
    PackInt8Weights(type, w.data(), k, n, packed.data());
    const std::vector<float> x = RandomActivations(m, k, rng);
    const std::vector<uint8_t> xq = Quantize(type, x, m, k);
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
    // coarsens its block's other values 40-fold (255 of them for the K
    // types' 256-value blocks). Measured: a relative RMS error of
    // 1.2-1.8e-2 for the 32-value types, 2.0-5.4e-2 for the K types (Q2_K
    // the most) (a
    // dropped min term or a wrong scale gives > 0.5).
    EXPECT_LT(std::sqrt(err2 / ref2), IsK(type) ? 8e-2 : 3e-2) << Name(type);
    EXPECT_GT(ref2, 0.0) << Name(type);
  }
}

TEST(Int8Matmul, RowInvariantAndSplitInvariant) {
  std::mt19937 rng(13);
  const int64_t m = 11, n = 80;
  for (QuantType type : kTypes) {
    const int64_t k = KFor(type, 576);
    const std::vector<uint8_t> w = RandomWeights(type, k, n, rng);
    std::vector<uint8_t> packed(Int8PackedBytes(type, k, n));
    PackInt8Weights(type, w.data(), k, n, packed.data());
    const std::vector<float> x = RandomActivations(m, k, rng);
    const std::vector<uint8_t> xq = Quantize(type, x, m, k);
    for (Int8Isa isa : Isas()) {
      std::vector<float> all(m * n);
      Int8Matmul(isa, type, xq.data(), m, k, packed.data(), 0, n, all.data(),
                 n);
      for (int64_t r = 0; r < m; ++r) {
        // Row r alone, quantized alone, in column pieces of 7 (splits that
        // cut tiles).
        const std::vector<float> one(x.begin() + r * k,
                                     x.begin() + (r + 1) * k);
        const std::vector<uint8_t> oq = Quantize(type, one, 1, k);
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
  const std::vector<uint8_t> xq =
      Quantize(QuantType::kQ4_1, RandomActivations(2, k, rng), 2, k);
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

// Batches from 1 to 300 rows (every row-count remainder of the kernels'
// row groups, and prefill-sized batches): each row is the row alone.
TEST(Int8Matmul, RowInvariantInBatchesUpTo300) {
  std::mt19937 rng(19);
  const int64_t k = 512, n = 32;
  for (QuantType type : {QuantType::kQ4_0, QuantType::kQ5_1, QuantType::kQ3_K,
                         QuantType::kQ4_K, QuantType::kQ6_K}) {
    const std::vector<uint8_t> w = RandomWeights(type, k, n, rng);
    std::vector<uint8_t> packed(Int8PackedBytes(type, k, n));
    PackInt8Weights(type, w.data(), k, n, packed.data());
    const std::vector<float> x = RandomActivations(300, k, rng);
    const Int8Activations form = Int8ActivationsFor(type);
    std::vector<uint8_t> xq(300 * Int8RowBytes(form, k));
    QuantizeInt8Rows(BestInt8Isa(), form, x.data(), 300, k, xq.data());
    std::vector<float> alone(300 * n);
    for (int64_t r = 0; r < 300; ++r) {
      Int8Matmul(BestInt8Isa(), type, xq.data() + r * Int8RowBytes(form, k), 1,
                 k, packed.data(), 0, n, &alone[r * n], n);
    }
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 13, 64, 299, 300}) {
      std::vector<float> y(m * n);
      Int8Matmul(BestInt8Isa(), type, xq.data(), m, k, packed.data(), 0, n,
                 y.data(), n);
      ASSERT_EQ(std::memcmp(y.data(), alone.data(), 4 * m * n), 0)
          << Name(type) << " batch of " << m;
    }
  }
}

TEST(QuantizeInt8Rows, Block256HasOneScaleAndSumsPer16) {
  const int64_t k = 512;
  std::mt19937 rng(23);
  std::vector<float> x = RandomActivations(1, k, rng);
  x[300] = std::nanf("");
  const std::vector<uint8_t> xq = Quantize(Int8Activations::kBlock256, x, 1, k);
  ASSERT_EQ(Int8RowBytes(Int8Activations::kBlock256, k), k + 8 + 4 * 32);
  const int8_t* q = reinterpret_cast<const int8_t*>(xq.data());
  const float* d = reinterpret_cast<const float*>(xq.data() + k);
  const int32_t* sum16 = reinterpret_cast<const int32_t*>(d + 2);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int i = 0; i < 256; ++i) {
      if (!std::isnan(x[256 * b + i])) {
        amax = std::max(amax, std::fabs(x[256 * b + i]));
      }
    }
    EXPECT_EQ(d[b], amax / 127.0f);
  }
  EXPECT_EQ(std::abs(q[5]), 127);  // the outlier channel
  EXPECT_EQ(q[300], 0);            // NaN
  for (int g = 0; g < 32; ++g) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += q[16 * g + i];
    EXPECT_EQ(sum16[g], s) << g;
  }
}

TEST(QuantizeInt8Rows, ZeroNanAndInfBlocksQuantizeToZero) {
  const int64_t k = 128;
  std::vector<float> x(k, 0.0f);
  for (int j = 32; j < 64; ++j) x[j] = j - 48.0f;  // block 1: -16 .. 15
  x[64] = std::nanf("");
  x[65] = 3.0f;      // block 2: NaN + 3
  x[96] = INFINITY;  // block 3: Inf
  x[97] = 1.0f;
  const std::vector<uint8_t> xq = Quantize(Int8Activations::kBlock32, x, 1, k);
  const int8_t* q = reinterpret_cast<const int8_t*>(xq.data());
  const uint8_t* u = xq.data() + k;
  const float* d = reinterpret_cast<const float*>(xq.data() + 2 * k);
  const int32_t* sum = reinterpret_cast<const int32_t*>(d + 2 * (k / 32));
  EXPECT_EQ(d[0], 0.0f);
  EXPECT_EQ(sum[0], 0);
  EXPECT_EQ(d[1], 16.0f / 127.0f);
  EXPECT_EQ(q[32], -127);  // the largest |x| maps to 127
  EXPECT_EQ(q[32 + 24], std::nearbyint(8.0f * (127.0f / 16.0f)));
  EXPECT_EQ(q[64], 0);    // NaN
  EXPECT_EQ(q[65], 127);  // the block's largest finite value
  EXPECT_EQ(d[3], 0.0f);  // an Inf block is dropped whole
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

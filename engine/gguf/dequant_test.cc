// Tests for engine/gguf/dequant: every decoder against an independent
// per-element reference written here from the block layouts in the GGUF /
// ggml spec (element-indexed bit extraction instead of the production
// loops), the half/bf16 conversions exhaustively, and quantize->dequantize
// error bounds for the types the writer can quantize.
#include "engine/gguf/dequant.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/testing/gguf_writer.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

// ---------------------------------------------------------------- reference

// Half -> float straight from the IEEE 754 definition.
double RefHalf(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

uint32_t U16(const uint8_t* b, int i) { return b[i] | (b[i + 1] << 8); }
int Bit(const uint8_t* b, int bit) { return (b[bit / 8] >> (bit % 8)) & 1; }
// Bits [lo, lo + n) of the little-endian byte string starting at b.
uint32_t Bits(const uint8_t* b, int lo, int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) v |= static_cast<uint32_t>(Bit(b, lo + k)) << k;
  return v;
}
float H(const uint8_t* b, int i) {
  return static_cast<float>(RefHalf(U16(b, i)));
}

// Element e (0..31) of a 32-element nibble block: byte e % 16, low nibble
// for e < 16, high nibble otherwise.
uint32_t Nibble32(const uint8_t* qs, int e) {
  return Bits(qs, 8 * (e % 16) + 4 * (e / 16), 4);
}

// 6-bit scale/min j (0..7) from the 12-byte K-quant packing.
void RefScaleMin(const uint8_t* s, int j, float* sc, float* mn) {
  if (j < 4) {
    *sc = static_cast<float>(s[j] & 63);
    *mn = static_cast<float>(s[j + 4] & 63);
  } else {
    *sc = static_cast<float>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<float>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Reference decode of element e of one block `b` of `type`.
float RefElement(GgmlType type, const uint8_t* b, int e) {
  switch (type) {
    case GgmlType::kQ4_0:
      return H(b, 0) * (static_cast<float>(Nibble32(b + 2, e)) - 8.0f);
    case GgmlType::kQ4_1:
      return H(b, 0) * static_cast<float>(Nibble32(b + 4, e)) + H(b, 2);
    case GgmlType::kQ5_0: {
      const uint32_t q = Nibble32(b + 6, e) | (Bit(b + 2, e) << 4);
      return H(b, 0) * (static_cast<float>(q) - 16.0f);
    }
    case GgmlType::kQ5_1: {
      const uint32_t q = Nibble32(b + 8, e) | (Bit(b + 4, e) << 4);
      return H(b, 0) * static_cast<float>(q) + H(b, 2);
    }
    case GgmlType::kQ8_0:
      return H(b, 0) * static_cast<float>(static_cast<int8_t>(b[2 + e]));
    case GgmlType::kQ8_1:
      return H(b, 0) * static_cast<float>(static_cast<int8_t>(b[4 + e]));
    case GgmlType::kQ2_K: {
      // 16 sub-blocks of 16; element e: 128-half h, within it 32-column
      // l = e % 32 ... 2-bit field (e % 128) / 32 of byte 32h + e % 32.
      const int h = e / 128, r = e % 128;
      const int sub = e / 16;
      const uint32_t q = Bits(b + 16 + 32 * h, 8 * (r % 32) + 2 * (r / 32), 2);
      const float d = H(b, 80), dmin = H(b, 82);
      return d * static_cast<float>(b[sub] & 15) * static_cast<float>(q) -
             dmin * static_cast<float>(b[sub] >> 4);
    }
    case GgmlType::kQ3_K: {
      const int h = e / 128, r = e % 128, sub = e / 16;
      const uint32_t lo = Bits(b + 32 + 32 * h, 8 * (r % 32) + 2 * (r / 32), 2);
      const int hbit = Bit(b, 8 * (e % 32) + e / 32);
      const int q = static_cast<int>(lo) - (hbit ? 0 : 4);
      const uint8_t* s = b + 96;
      const int sc_lo = sub < 8 ? (s[sub] & 15) : (s[sub - 8] >> 4);
      const int sc_hi = (s[8 + sub % 4] >> (2 * (sub / 4))) & 3;
      const float d = H(b, 108);
      return d * static_cast<float>((sc_lo | (sc_hi << 4)) - 32) *
             static_cast<float>(q);
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const int sub = e / 32;  // 8 sub-blocks of 32
      const int chunk = e / 64, r = e % 32;
      const uint8_t* qs = b + 16 + (five ? 32 : 0);
      uint32_t q = Bits(qs + 32 * chunk, 8 * r + 4 * (sub % 2), 4);
      if (five) q |= Bit(b + 16, 8 * r + sub) << 4;
      float sc, mn;
      RefScaleMin(b + 4, sub, &sc, &mn);
      return H(b, 0) * sc * static_cast<float>(q) - H(b, 2) * mn;
    }
    case GgmlType::kQ6_K: {
      // Per 128-half: ql 64 bytes, qh 32 bytes; quarter k = r / 32 takes
      // ql nibble (k / 2) of byte 64h + (k % 2) * 32 + l and qh bits 2k..2k+1.
      const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
      const uint32_t lo =
          Bits(b + 64 * h + 32 * (k % 2), 8 * l + 4 * (k / 2), 4);
      const uint32_t hi = Bits(b + 128 + 32 * h, 8 * l + 2 * k, 2);
      const int q = static_cast<int>(lo | (hi << 4)) - 32;
      const int8_t sc = static_cast<int8_t>(b[192 + e / 16]);
      return H(b, 208) * static_cast<float>(sc) * static_cast<float>(q);
    }
    case GgmlType::kQ8_K: {
      float d;
      std::memcpy(&d, b, 4);
      return d * static_cast<float>(static_cast<int8_t>(b[4 + e]));
    }
    default:
      ADD_FAILURE() << "no reference for " << TypeName(type);
      return 0.0f;
  }
}

// Random block bytes with every half-precision scale field set to a finite
// value of moderate size (so the comparison is not dominated by inf/NaN).
std::string RandomBlocks(GgmlType type, int nb, std::mt19937& rng) {
  std::string bytes(static_cast<size_t>(TypeSize(type) * nb), '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  std::vector<int> half_fields;  // byte offsets of f16 fields
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
      half_fields = {0};
      break;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      half_fields = {0, 2};
      break;
    case GgmlType::kQ2_K:
      half_fields = {80, 82};
      break;
    case GgmlType::kQ3_K:
      half_fields = {108};
      break;
    case GgmlType::kQ6_K:
      half_fields = {208};
      break;
    default:
      break;
  }
  std::uniform_real_distribution<float> scale(-0.1f, 0.1f);
  for (int blk = 0; blk < nb; ++blk) {
    uint8_t* b = reinterpret_cast<uint8_t*>(&bytes[blk * TypeSize(type)]);
    for (int off : half_fields) {
      const uint16_t h = FloatToHalf(scale(rng));
      std::memcpy(b + off, &h, 2);
    }
    if (type == GgmlType::kQ8_K) {
      const float d = scale(rng);
      std::memcpy(b, &d, 4);
    }
  }
  return bytes;
}

class QuantDecodeTest : public testing::TestWithParam<GgmlType> {};

TEST_P(QuantDecodeTest, MatchesPerElementReference) {
  const GgmlType type = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(type) * 7919 + 1);
  const int nb = 37;
  const std::string bytes = RandomBlocks(type, nb, rng);
  const int64_t n = BlockSize(type) * nb;
  std::vector<float> out(n, -12345.0f);
  ASSERT_TRUE(Dequantize(type, reinterpret_cast<const uint8_t*>(bytes.data()),
                         n, out.data())
                  .ok());
  int mismatches = 0;
  for (int blk = 0; blk < nb; ++blk) {
    const uint8_t* b =
        reinterpret_cast<const uint8_t*>(bytes.data()) + blk * TypeSize(type);
    for (int e = 0; e < BlockSize(type); ++e) {
      const float want = RefElement(type, b, e);
      const float got = out[blk * BlockSize(type) + e];
      // Same formula up to float association: allow 1e-6 relative.
      if (std::fabs(got - want) > 1e-6f * std::max(1.0f, std::fabs(want))) {
        if (++mismatches <= 5) {
          ADD_FAILURE() << TypeName(type) << " block " << blk << " element "
                        << e << ": got " << got << " want " << want;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(AllQuantTypes, QuantDecodeTest,
                         testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1,
                                         GgmlType::kQ5_0, GgmlType::kQ5_1,
                                         GgmlType::kQ8_0, GgmlType::kQ8_1,
                                         GgmlType::kQ2_K, GgmlType::kQ3_K,
                                         GgmlType::kQ4_K, GgmlType::kQ5_K,
                                         GgmlType::kQ6_K, GgmlType::kQ8_K),
                         [](const testing::TestParamInfo<GgmlType>& info) {
                           return std::string(TypeName(info.param));
                         });

// Golden decodes from an implementation we did not write: the `gguf`
// Python package (gguf.quants.dequantize, numpy) on 1024 elements of the
// deterministic bytes below (byte i = (37 i + 11 + 5 (i >> 8)) & 0xFF, then
// per block b the f16 scale fields set to +-0.01 (b + 1) and the f16 min
// fields to +-0.005 (b + 1), negative for odd b). Values at kGoldenIndex.
TEST(DequantTest, MatchesGgufPythonPackage) {
  const int kGoldenIndex[9] = {0, 1, 17, 100, 255, 300, 511, 777, 1023};
  const struct {
    GgmlType type;
    double sum;
    float values[9];
  } kGolden[] = {
      {GgmlType::kQ4_0,
       0.8325119018554688,
       {-0x1.eba0000000000p-6f, 0x1.47c0000000000p-6f, -0x1.47c0000000000p-7f,
        0x1.47c0000000000p-5f, -0x1.eba0000000000p-3f, -0x1.3320000000000p-2f,
        -0x0.0p+0f, -0x1.0000000000000p-2f, 0x1.99b0000000000p+0f}},
      {GgmlType::kQ4_1,
       -34.471885681152344,
       {0x1.3d82000000000p-3f, 0x1.70b8000000000p-5f, 0x1.000e000000000p-3f,
        -0x1.3d82000000000p-1f, -0x1.47c0000000000p-5f, -0x1.8cb4000000000p+0f,
        -0x1.99b0000000000p-2f, 0x1.8000000000000p-2f, -0x1.3344000000000p+1f}},
      {GgmlType::kQ5_0,
       8.619712829589844,
       {0x1.70b8000000000p-4f, -0x1.47c0000000000p-6f, 0x0.0p+0f,
        -0x1.1ec8000000000p-2f, 0x1.c2a8000000000p-1f, -0x1.3320000000000p-2f,
        0x1.47c0000000000p-1f, -0x1.0000000000000p+2f, 0x1.99b0000000000p+0f}},
      {GgmlType::kQ5_1,
       -80.63768768310547,
       {0x1.8f72000000000p-3f, 0x1.f5de000000000p-3f, 0x1.c2a8000000000p-5f,
        -0x1.3d82000000000p-1f, -0x1.ae2c000000000p-1f, -0x1.2cba000000000p+1f,
        -0x1.0a4c000000000p+0f, 0x1.a800000000000p+2f, -0x1.42a1000000000p+3f}},
      {GgmlType::kQ8_0,
       250.8433837890625,
       {0x1.b34b000000000p-1f, 0x1.3863000000000p+0f, -0x1.148a000000000p-1f,
        0x1.c7c7000000000p+1f, -0x1.2e25000000000p+2f, -0x1.ffe0000000000p+2f,
        0x1.1ec8000000000p+4f, -0x1.7c00000000000p+4f, -0x1.2906000000000p+4f}},
      {GgmlType::kQ2_K,
       -33.68238067626953,
       {0x1.51fe000000000p-2f, 0x0.0p+0f, -0x1.eba0000000000p-7f,
        0x1.99b0000000000p-3f, 0x1.70b8000000000p-5f, -0x1.2906000000000p-2f,
        -0x1.667a000000000p-2f, -0x1.1ec8000000000p-3f,
        -0x1.47c0000000000p-1f}},
      {GgmlType::kQ3_K,
       16.2391357421875,
       {0x1.9ecf000000000p-1f, -0x1.148a000000000p+0f, 0x1.47c0000000000p+0f,
        0x0.0p+0f, 0x1.ae2c000000000p-2f, 0x1.148a000000000p-1f,
        -0x1.eba0000000000p-4f, -0x1.eba0000000000p-3f,
        -0x1.51fe000000000p+1f}},
      {GgmlType::kQ4_K,
       -996.439453125,
       {0x1.93ed200000000p+1f, -0x1.052d000000000p-2f, -0x1.052d000000000p-2f,
        0x1.e681000000000p-1f, 0x1.f0bf000000000p-2f, -0x1.4cdf000000000p+2f,
        -0x1.0f6b000000000p+3f, -0x1.3344000000000p+3f,
        -0x1.3d82000000000p+2f}},
      {GgmlType::kQ5_K,
       -761.6355285644531,
       {0x1.03bc480000000p+3f, -0x1.052d000000000p-2f, -0x1.052d000000000p-2f,
        0x1.2cdd400000000p+1f, 0x1.15d1c00000000p+0f, -0x1.2a4dc00000000p+4f,
        -0x1.4b97400000000p+2f, -0x1.1342400000000p+2f,
        -0x1.79ae400000000p+2f}},
      {GgmlType::kQ6_K,
       301.79991149902344,
       {-0x1.ca04900000000p+3f, 0x1.0f6b000000000p+4f, 0x1.47c0000000000p+2f,
        0x1.93c4280000000p+4f, -0x1.3344000000000p-1f, 0x1.1675a00000000p+5f,
        0x1.100ee00000000p+5f, -0x1.eba0000000000p+4f, -0x1.17bd600000000p+4f}},
  };
  for (const auto& g : kGolden) {
    const int64_t nb = 1024 / BlockSize(g.type);
    const int64_t ts = TypeSize(g.type);
    std::vector<uint8_t> buf(static_cast<size_t>(nb * ts));
    for (size_t i = 0; i < buf.size(); ++i) {
      buf[i] = static_cast<uint8_t>((i * 37 + 11 + (i >> 8) * 5) & 0xFF);
    }
    std::vector<int> fields;  // f16 scale field, then f16 min field
    switch (g.type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0:
        fields = {0};
        break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        fields = {0, 2};
        break;
      case GgmlType::kQ2_K:
        fields = {80, 82};
        break;
      case GgmlType::kQ3_K:
        fields = {108};
        break;
      case GgmlType::kQ6_K:
        fields = {208};
        break;
      default:
        break;
    }
    for (int64_t b = 0; b < nb; ++b) {
      for (size_t k = 0; k < fields.size(); ++k) {
        const double v =
            (k == 0 ? 0.01 : 0.005) * (b + 1) * (b % 2 == 0 ? 1 : -1);
        const uint16_t h = FloatToHalf(static_cast<float>(v));
        std::memcpy(&buf[b * ts + fields[k]], &h, 2);
      }
    }
    std::vector<float> out(1024);
    ASSERT_TRUE(Dequantize(g.type, buf.data(), 1024, out.data()).ok());
    double sum = 0;
    for (float v : out) sum += v;
    EXPECT_NEAR(sum, g.sum, 1e-9 * std::max(1.0, std::fabs(g.sum)))
        << TypeName(g.type);
    for (int k = 0; k < 9; ++k) {
      EXPECT_EQ(out[kGoldenIndex[k]], g.values[k])
          << TypeName(g.type) << "[" << kGoldenIndex[k] << "]";
    }
  }
}

// A hand-built Q4_K block: d = 1, dmin = 0.5, scale j = j + 1, min j =
// 2j + 1 (j >= 4 exercise the split 6-bit packing), nibbles = e % 16.
TEST(DequantTest, Q4KHandBuiltBlock) {
  uint8_t b[144] = {};
  const uint16_t one = FloatToHalf(1.0f), half = FloatToHalf(0.5f);
  std::memcpy(b, &one, 2);
  std::memcpy(b + 2, &half, 2);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = j + 1 + (j >= 4 ? 40 : 0);  // > 15 needs the high bits
    mn[j] = 2 * j + 1 + (j >= 4 ? 30 : 0);
  }
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, r = e % 32, high = (e / 32) % 2;
    b[16 + 32 * chunk + r] |= static_cast<uint8_t>((e % 16) << (4 * high));
  }
  std::vector<float> out(256);
  ASSERT_TRUE(Dequantize(GgmlType::kQ4_K, b, 256, out.data()).ok());
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(out[e], 1.0f * sc[j] * (e % 16) - 0.5f * mn[j]) << "e=" << e;
  }
}

// ------------------------------------------------------ plain conversions

TEST(DequantTest, HalfToFloatExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefHalf(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(got, want) << "half 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
    // Round trip is exact for every non-NaN half.
    ASSERT_EQ(FloatToHalf(got), h) << "half 0x" << std::hex << h;
  }
}

TEST(DequantTest, FloatToHalfRoundsToNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> log_mag(-27.0f, 16.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(log_mag(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
    const uint16_t h = FloatToHalf(x);
    const double got = RefHalf(h);
    if (std::fabs(x) >= 65520.0f) {
      EXPECT_TRUE(std::isinf(got)) << x;
      continue;
    }
    // No other half is strictly closer.
    for (int delta : {-1, 1}) {
      const uint16_t nb = static_cast<uint16_t>(h + delta);
      if (((nb ^ h) & 0x8000) != 0 || (nb & 0x7C00) == 0x7C00) continue;
      ASSERT_LE(std::fabs(got - x), std::fabs(RefHalf(nb) - x))
          << "x=" << x << " h=0x" << std::hex << h;
    }
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DequantTest, Bf16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    ASSERT_EQ(bits, h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), h);
    }
  }
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3F82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(DequantTest, PlainTypes) {
  const float f32[3] = {1.5f, -2.0f, 1e30f};
  std::vector<float> out(3);
  ASSERT_TRUE(Dequantize(GgmlType::kF32, reinterpret_cast<const uint8_t*>(f32),
                         3, out.data())
                  .ok());
  EXPECT_EQ(out, std::vector<float>(f32, f32 + 3));
  const double f64[2] = {0.25, -3.0};
  ASSERT_TRUE(Dequantize(GgmlType::kF64, reinterpret_cast<const uint8_t*>(f64),
                         2, out.data())
                  .ok());
  EXPECT_EQ(out[0], 0.25f);
  EXPECT_EQ(out[1], -3.0f);
  const int8_t i8[3] = {-128, 0, 127};
  ASSERT_TRUE(Dequantize(GgmlType::kI8, reinterpret_cast<const uint8_t*>(i8), 3,
                         out.data())
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{-128.0f, 0.0f, 127.0f}));
  const int32_t i32[2] = {-70000, 123456};
  ASSERT_TRUE(Dequantize(GgmlType::kI32, reinterpret_cast<const uint8_t*>(i32),
                         2, out.data())
                  .ok());
  EXPECT_EQ(out[0], -70000.0f);
  EXPECT_EQ(out[1], 123456.0f);
  const uint16_t f16[2] = {0x3C00, 0xC000};
  ASSERT_TRUE(Dequantize(GgmlType::kF16, reinterpret_cast<const uint8_t*>(f16),
                         2, out.data())
                  .ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
}

// --------------------------------------------------------- type metadata

TEST(DequantTest, SizesMatchGgml) {
  // (type, block size, bytes per block) from ggml-common.h's static_asserts.
  const struct {
    GgmlType t;
    int64_t bs, ts;
  } kCases[] = {
      {GgmlType::kF32, 1, 4},      {GgmlType::kF16, 1, 2},
      {GgmlType::kBF16, 1, 2},     {GgmlType::kQ4_0, 32, 18},
      {GgmlType::kQ4_1, 32, 20},   {GgmlType::kQ5_0, 32, 22},
      {GgmlType::kQ5_1, 32, 24},   {GgmlType::kQ8_0, 32, 34},
      {GgmlType::kQ8_1, 32, 36},   {GgmlType::kQ2_K, 256, 84},
      {GgmlType::kQ3_K, 256, 110}, {GgmlType::kQ4_K, 256, 144},
      {GgmlType::kQ5_K, 256, 176}, {GgmlType::kQ6_K, 256, 210},
      {GgmlType::kQ8_K, 256, 292}, {GgmlType::kIQ2_XXS, 256, 66},
      {GgmlType::kIQ4_NL, 32, 18}, {GgmlType::kIQ4_XS, 256, 136},
      {GgmlType::kI64, 1, 8},      {GgmlType::kTQ1_0, 256, 54},
      {GgmlType::kMXFP4, 32, 17},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(BlockSize(c.t), c.bs) << TypeName(c.t);
    EXPECT_EQ(TypeSize(c.t), c.ts) << TypeName(c.t);
  }
  EXPECT_EQ(TypeName(GgmlType::kQ6_K), "Q6_K");
  EXPECT_FALSE(IsKnownGgmlType(4));
  EXPECT_FALSE(IsKnownGgmlType(31));
  EXPECT_FALSE(IsKnownGgmlType(1000));
  EXPECT_TRUE(IsKnownGgmlType(30));
  EXPECT_EQ(TypeName(static_cast<GgmlType>(4)), "unknown");
}

TEST(DequantTest, RowBytesAndErrors) {
  EXPECT_EQ(*RowBytes(GgmlType::kQ4_K, 512), 288);
  EXPECT_EQ(*RowBytes(GgmlType::kF16, 3), 6);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 33).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowBytes(GgmlType::kF32, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowBytes(static_cast<GgmlType>(4), 32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowBytes(GgmlType::kF64, int64_t{1} << 62).status().code(),
            absl::StatusCode::kInvalidArgument);  // overflows int64

  uint8_t block[66] = {};
  float out[256];
  absl::Status s = Dequantize(GgmlType::kIQ2_XXS, block, 256, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("IQ2_XXS"), absl::string_view::npos) << s;
  s = Dequantize(GgmlType::kQ8_0, block, 31, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q8_0"), absl::string_view::npos) << s;
  EXPECT_TRUE(Dequantize(GgmlType::kQ8_0, block, 0, out).ok());
}

// ------------------------------------------- quantize -> dequantize bounds

TEST(DequantTest, QuantizeDequantizeErrorBounds) {
  std::mt19937 rng(99);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                        GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1}) {
    for (float spread : {1e-3f, 1.0f, 300.0f}) {
      std::normal_distribution<float> dist(0.0f, spread);
      std::vector<float> x(32 * 64);
      for (float& v : x) v = dist(rng);
      x[5] = 0.0f;
      std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block
      absl::StatusOr<std::string> q = QuantizeRow(type, x);
      ASSERT_TRUE(q.ok()) << q.status();
      ASSERT_EQ(static_cast<int64_t>(q->size()),
                *RowBytes(type, static_cast<int64_t>(x.size())));
      std::vector<float> y(x.size());
      ASSERT_TRUE(Dequantize(type, reinterpret_cast<const uint8_t*>(q->data()),
                             static_cast<int64_t>(x.size()), y.data())
                      .ok());
      for (size_t b = 0; b < x.size(); b += 32) {
        float amax = 0, lo = x[b], hi = x[b];
        for (int j = 0; j < 32; ++j) {
          amax = std::max(amax, std::fabs(x[b + j]));
          lo = std::min(lo, x[b + j]);
          hi = std::max(hi, x[b + j]);
        }
        for (int j = 0; j < 32; ++j) {
          const float xv = x[b + j];
          float bound = 0;
          switch (type) {
            case GgmlType::kF32:
              bound = 0;
              break;
            case GgmlType::kF16:
              bound = std::fabs(xv) * 0x1p-11f + 0x1p-25f;
              break;
            case GgmlType::kBF16:
              bound = std::fabs(xv) * 0x1p-8f;
              break;
            // Half a step of d = amax / 127, plus d's own f16 rounding.
            case GgmlType::kQ8_0:
              bound = amax / 127 * 0.5f + amax * 0x1p-10f;
              break;
            // One step of d = amax / 8 (the clamped extreme).
            case GgmlType::kQ4_0:
              bound = amax / 8 * 1.0f + amax * 0x1p-9f;
              break;
            // Half a step of d = (hi - lo) / 15 plus f16 rounding of d, min.
            case GgmlType::kQ4_1:
              bound =
                  (hi - lo) / 15 * 0.5f + (std::fabs(lo) + (hi - lo)) * 0x1p-9f;
              break;
            default:
              break;
          }
          // d (and m) are f16: below 2^-14 they are subnormal with an
          // absolute spacing of 2^-24, times at most 128 quant steps.
          if (BlockSize(type) == 32) bound += 128 * 0x1p-25f;
          ASSERT_LE(std::fabs(y[b + j] - xv), bound)
              << TypeName(type) << " spread " << spread << " index " << b + j;
        }
      }
      // The all-zero block decodes to exact zeros.
      for (int j = 64; j < 96; ++j) ASSERT_EQ(y[j], 0.0f) << TypeName(type);
    }
  }
  EXPECT_EQ(
      QuantizeRow(GgmlType::kQ4_K, std::vector<float>(256)).status().code(),
      absl::StatusCode::kUnimplemented);
  EXPECT_EQ(
      QuantizeRow(GgmlType::kQ8_0, std::vector<float>(33)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lookahead::engine

// Block decoders for ggml types. Layouts (ggml-common.h), per block:
//   Q4_0  {f16 d; u8 qs[16]}                x = d * (nibble - 8)
//   Q4_1  {f16 d, m; u8 qs[16]}             x = d * nibble + m
//   Q5_0  {f16 d; u8 qh[4]; u8 qs[16]}      x = d * ((nibble | hbit<<4) - 16)
//   Q5_1  {f16 d, m; u8 qh[4]; u8 qs[16]}   x = d * (nibble | hbit<<4) + m
//   Q8_0  {f16 d; i8 qs[32]}                x = d * q
//   Q8_1  {f16 d, s; i8 qs[32]}             x = d * q   (s is a cached sum)
//   In the 32-element blocks, byte j holds element j (low nibble) and
//   element j + 16 (high nibble); qh bit j is element j's fifth bit.
// K-quants use 256-element super-blocks:
//   Q2_K  {u8 scales[16]; u8 qs[64]; f16 d, dmin}
//   Q3_K  {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
//   Q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}
//   Q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
//   Q8_K  {f32 d; i8 qs[256]; i16 bsums[16]}
#include "engine/gguf/dequant.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace lookahead::engine {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "GGUF decoding assumes a little-endian host");

constexpr int kQK = 32;    // elements per block of the *_0 / *_1 types
constexpr int kQKK = 256;  // elements per K-quant super-block

struct TypeTraits {
  const char* name;
  int64_t block_size;  // 0: not a known type
  int64_t type_size;
};

TypeTraits Traits(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return {"F32", 1, 4};
    case GgmlType::kF16:
      return {"F16", 1, 2};
    case GgmlType::kQ4_0:
      return {"Q4_0", kQK, 2 + 16};
    case GgmlType::kQ4_1:
      return {"Q4_1", kQK, 4 + 16};
    case GgmlType::kQ5_0:
      return {"Q5_0", kQK, 2 + 4 + 16};
    case GgmlType::kQ5_1:
      return {"Q5_1", kQK, 4 + 4 + 16};
    case GgmlType::kQ8_0:
      return {"Q8_0", kQK, 2 + 32};
    case GgmlType::kQ8_1:
      return {"Q8_1", kQK, 4 + 32};
    case GgmlType::kQ2_K:
      return {"Q2_K", kQKK, 16 + 64 + 4};
    case GgmlType::kQ3_K:
      return {"Q3_K", kQKK, 32 + 64 + 12 + 2};
    case GgmlType::kQ4_K:
      return {"Q4_K", kQKK, 4 + 12 + 128};
    case GgmlType::kQ5_K:
      return {"Q5_K", kQKK, 4 + 12 + 32 + 128};
    case GgmlType::kQ6_K:
      return {"Q6_K", kQKK, 128 + 64 + 16 + 2};
    case GgmlType::kQ8_K:
      return {"Q8_K", kQKK, 4 + 256 + 32};
    case GgmlType::kIQ2_XXS:
      return {"IQ2_XXS", kQKK, 2 + 64};
    case GgmlType::kIQ2_XS:
      return {"IQ2_XS", kQKK, 2 + 64 + 8};
    case GgmlType::kIQ3_XXS:
      return {"IQ3_XXS", kQKK, 2 + 96};
    case GgmlType::kIQ1_S:
      return {"IQ1_S", kQKK, 2 + 32 + 16};
    case GgmlType::kIQ4_NL:
      return {"IQ4_NL", kQK, 2 + 16};
    case GgmlType::kIQ3_S:
      return {"IQ3_S", kQKK, 2 + 64 + 8 + 32 + 4};
    case GgmlType::kIQ2_S:
      return {"IQ2_S", kQKK, 2 + 64 + 16};
    case GgmlType::kIQ4_XS:
      return {"IQ4_XS", kQKK, 2 + 2 + 4 + 128};
    case GgmlType::kI8:
      return {"I8", 1, 1};
    case GgmlType::kI16:
      return {"I16", 1, 2};
    case GgmlType::kI32:
      return {"I32", 1, 4};
    case GgmlType::kI64:
      return {"I64", 1, 8};
    case GgmlType::kF64:
      return {"F64", 1, 8};
    case GgmlType::kIQ1_M:
      return {"IQ1_M", kQKK, 32 + 16 + 8};
    case GgmlType::kBF16:
      return {"BF16", 1, 2};
    case GgmlType::kTQ1_0:
      return {"TQ1_0", kQKK, 2 + 48 + 4};
    case GgmlType::kTQ2_0:
      return {"TQ2_0", kQKK, 2 + 64};
    case GgmlType::kMXFP4:
      return {"MXFP4", kQK, 1 + 16};
  }
  return {"unknown", 0, 0};
}

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

void DecodeF16(const uint8_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(LoadU16(x + 2 * i));
}
void DecodeBf16(const uint8_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToFloat(LoadU16(x + 2 * i));
}
template <typename T>
void DecodePlain(const uint8_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, x + sizeof(T) * i, sizeof(T));
    y[i] = static_cast<float>(v);
  }
}

// Q4_0 / Q4_1: 16 bytes of nibble pairs after the header.
template <bool kHasMin>
void DecodeQ4(const uint8_t* x, int64_t nb, float* y) {
  constexpr int kHeader = kHasMin ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b, x += kHeader + 16, y += kQK) {
    const float d = LoadHalf(x);
    const float m = kHasMin ? LoadHalf(x + 2) : -8.0f * d;
    const uint8_t* qs = x + kHeader;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// Q5_0 / Q5_1: like Q4 plus a 32-bit mask of fifth bits.
template <bool kHasMin>
void DecodeQ5(const uint8_t* x, int64_t nb, float* y) {
  constexpr int kHeader = kHasMin ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b, x += kHeader + 4 + 16, y += kQK) {
    const float d = LoadHalf(x);
    const float m = kHasMin ? LoadHalf(x + 2) : -16.0f * d;
    const uint32_t qh = LoadU32(x + kHeader);
    const uint8_t* qs = x + kHeader + 4;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = d * static_cast<float>(lo) + m;
      y[j + 16] = d * static_cast<float>(hi) + m;
    }
  }
}

// Q8_0 (header 2) / Q8_1 (header 4: d then an unused sum).
template <int kHeader>
void DecodeQ8(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += kHeader + kQK, y += kQK) {
    const float d = LoadHalf(x);
    const int8_t* qs = reinterpret_cast<const int8_t*>(x + kHeader);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

void DecodeQ2K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 84) {
    const uint8_t* scales = x;
    const float d = LoadHalf(x + 80);
    const float dmin = LoadHalf(x + 82);
    // Two halves of 128 elements; each reads 32 quant bytes four times
    // (2 bits per pass), each pass covering 2 sub-blocks of 16.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x + 16 + 32 * half;
      for (int pass = 0; pass < 4; ++pass) {
        const int shift = 2 * pass;
        for (int sub = 0; sub < 2; ++sub) {
          const uint8_t sc = *scales++;
          const float dl = d * static_cast<float>(sc & 0x0F);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[16 * sub + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void DecodeQ3K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 110) {
    const uint8_t* hmask = x;
    const uint8_t* packed = x + 32 + 64;
    const float d = LoadHalf(x + 32 + 64 + 12);
    // 16 signed 6-bit scales: low 4 bits from bytes 0..7 (low nibble for
    // scales 0..7, high nibble for 8..15), top 2 bits from bytes 8..11.
    float dl[16];
    for (int i = 0; i < 16; ++i) {
      const int lo = (packed[i % 8] >> (4 * (i / 8))) & 0x0F;
      const int hi = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
      dl[i] = d * static_cast<float>((lo | (hi << 4)) - 32);
    }
    int is = 0;
    int hbit = 0;  // hmask bit index, one per 32-element group
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x + 32 + 32 * half;
      for (int pass = 0; pass < 4; ++pass, ++hbit) {
        const int shift = 2 * pass;
        for (int sub = 0; sub < 2; ++sub) {
          const float s = dl[is++];
          for (int l = 16 * sub; l < 16 * sub + 16; ++l) {
            const int q2 = (q[l] >> shift) & 3;
            const int sub4 = ((hmask[l] >> hbit) & 1) ? 0 : 4;
            *y++ = s * static_cast<float>(q2 - sub4);
          }
        }
      }
    }
  }
}

// The 12-byte packing of eight 6-bit scales and eight 6-bit mins shared by
// Q4_K and Q5_K: scale j / min j for j < 4 are the low 6 bits of bytes j /
// j + 4; for j >= 4 their low 4 bits are the low / high nibble of byte
// j + 4 and their top 2 bits the top 2 bits of bytes j - 4 / j.
inline void UnpackScaleMinK4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <bool kFifthBit>
void DecodeQ45K(const uint8_t* x, int64_t nb, float* y) {
  constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  for (int64_t b = 0; b < nb; ++b, x += kBlockBytes) {
    const float d = LoadHalf(x);
    const float dmin = LoadHalf(x + 2);
    uint8_t sc[8], mn[8];
    UnpackScaleMinK4(x + 4, sc, mn);
    const uint8_t* qh = x + 16;  // Q5_K only
    const uint8_t* qs = x + 16 + (kFifthBit ? 32 : 0);
    // Four chunks of 64 elements over 32 quant bytes: low nibbles with
    // sub-block 2c, high nibbles with sub-block 2c + 1.
    for (int c = 0; c < 4; ++c, qs += 32) {
      const float d1 = d * sc[2 * c], m1 = dmin * mn[2 * c];
      const float d2 = d * sc[2 * c + 1], m2 = dmin * mn[2 * c + 1];
      for (int l = 0; l < 32; ++l) {
        int lo = qs[l] & 0x0F;
        int hi = qs[l] >> 4;
        if (kFifthBit) {
          lo |= ((qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        y[l] = d1 * static_cast<float>(lo) - m1;
        y[l + 32] = d2 * static_cast<float>(hi) - m2;
      }
      y += 64;
    }
  }
}

void DecodeQ6K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 210) {
    const float d = LoadHalf(x + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(x + 192);
    // Two halves of 128 elements: 64 ql bytes, 32 qh bytes, 8 scales each.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x + 64 * half;
      const uint8_t* qh = x + 128 + 32 * half;
      const int8_t* s = scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(s[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(s[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(s[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(s[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
    }
  }
}

void DecodeQ8K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 292, y += kQKK) {
    float d;
    std::memcpy(&d, x, sizeof(d));
    const int8_t* qs = reinterpret_cast<const int8_t*>(x + 4);
    for (int j = 0; j < kQKK; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

}  // namespace

bool IsKnownGgmlType(uint32_t id) {
  return Traits(static_cast<GgmlType>(id)).block_size != 0;
}

int64_t BlockSize(GgmlType type) { return Traits(type).block_size; }
int64_t TypeSize(GgmlType type) { return Traits(type).type_size; }
absl::string_view TypeName(GgmlType type) { return Traits(type).name; }

absl::StatusOr<int64_t> RowBytes(GgmlType type, int64_t n) {
  const TypeTraits t = Traits(type);
  if (t.block_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ggml type id ", static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % t.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " elements is not a whole number of ",
                     t.name, " blocks of ", t.block_size));
  }
  const int64_t blocks = n / t.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / t.type_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " ", t.name, " elements overflows int64"));
  }
  return blocks * t.type_size;
}

bool CanDequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kF64:
    case GgmlType::kI8:
    case GgmlType::kI16:
    case GgmlType::kI32:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_1:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
      return true;
    default:
      return false;
  }
}

absl::Status Dequantize(GgmlType type, const uint8_t* data, int64_t n,
                        float* out) {
  const TypeTraits t = Traits(type);
  if (t.block_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ggml type id ", static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % t.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize ", n, " elements: not a whole number ",
                     "of ", t.name, " blocks of ", t.block_size));
  }
  const int64_t nb = n / t.block_size;
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(out, data, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
      DecodeF16(data, n, out);
      return absl::OkStatus();
    case GgmlType::kBF16:
      DecodeBf16(data, n, out);
      return absl::OkStatus();
    case GgmlType::kF64:
      DecodePlain<double>(data, n, out);
      return absl::OkStatus();
    case GgmlType::kI8:
      DecodePlain<int8_t>(data, n, out);
      return absl::OkStatus();
    case GgmlType::kI16:
      DecodePlain<int16_t>(data, n, out);
      return absl::OkStatus();
    case GgmlType::kI32:
      DecodePlain<int32_t>(data, n, out);
      return absl::OkStatus();
    case GgmlType::kQ4_0:
      DecodeQ4<false>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ4_1:
      DecodeQ4<true>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ5_0:
      DecodeQ5<false>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ5_1:
      DecodeQ5<true>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ8_0:
      DecodeQ8<2>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ8_1:
      DecodeQ8<4>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ2_K:
      DecodeQ2K(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ3_K:
      DecodeQ3K(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ4_K:
      DecodeQ45K<false>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ5_K:
      DecodeQ45K<true>(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ6_K:
      DecodeQ6K(data, nb, out);
      return absl::OkStatus();
    case GgmlType::kQ8_K:
      DecodeQ8K(data, nb, out);
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat(
          "dequantizing ggml type ", t.name, " is not implemented"));
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = h & 0x7FFF;
  uint32_t bits;
  if (em >= 0x7C00) {  // inf / NaN: keep the payload
    bits = sign | 0x7F800000u | ((em & 0x03FF) << 13);
  } else if (em >= 0x0400) {  // normal: rebias exponent 15 -> 127
    bits = sign | ((em << 13) + ((127 - 15) << 23));
  } else {  // zero / subnormal: em * 2^-24 is exact in float
    const float f = static_cast<float>(em) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFF;
  if (ax > 0x7F800000u) return sign | 0x7E00;   // NaN (quiet)
  if (ax >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {  // below the smallest normal half (2^-14)
    // Subnormal half: value / 2^-24 rounded to nearest even (the default
    // rounding mode); 1024 correctly becomes the smallest normal.
    float a;
    std::memcpy(&a, &ax, sizeof(a));
    const float scaled = a * 16777216.0f;  // 2^24, exact
    const float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even.
  const uint32_t mant_odd = (ax >> 13) & 1;
  const uint32_t rounded = ax + 0xFFF + mant_odd;
  return sign | static_cast<uint16_t>((rounded - ((127 - 15) << 23)) >> 13);
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7FFFFFFF) > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  }
  const uint32_t rounded = x + 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace lookahead::engine

// The portable reference of quant_matmul: decodes one weight row with the
// formulas of engine/gguf/dequant.cc (copied: kernels/ does not depend on
// engine/), then sums in 16 scalar lanes. Compiled with -ffp-contract=off,
// so d * q + m stays a multiply and an add, as in dequant.cc.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant_matmul_isa.h"

namespace lookahead::kernels::internal {

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

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "GGUF decoding assumes a little-endian host");

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

// Q4_0 / Q4_1 blocks of 32: byte j holds element j (low nibble) and j + 16.
template <bool kHasMin>
void DecodeQ4(const uint8_t* x, int64_t nb, float* y) {
  constexpr int kHeader = kHasMin ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b, x += kHeader + 16, y += 32) {
    const float d = LoadHalf(x);
    const float m = kHasMin ? LoadHalf(x + 2) : -8.0f * d;
    const uint8_t* qs = x + kHeader;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// Q5_0 / Q5_1: like Q4 plus a 32-bit mask of fifth bits (bit j: element j).
template <bool kHasMin>
void DecodeQ5(const uint8_t* x, int64_t nb, float* y) {
  constexpr int kHeader = kHasMin ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b, x += kHeader + 4 + 16, y += 32) {
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

void DecodeQ8_0(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 34, y += 32) {
    const float d = LoadHalf(x);
    const int8_t* qs = reinterpret_cast<const int8_t*>(x + 2);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

// Two halves of 128; each reads its 32 quant bytes four times, two bits a
// pass, a pass covering two sub-blocks of 16 with a scale byte each (low
// nibble: scale, high: min).
void DecodeQ2K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 84) {
    const uint8_t* scales = x;
    const float d = LoadHalf(x + 80);
    const float dmin = LoadHalf(x + 82);
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

// As Q2_K, with signed 6-bit scales (no mins) and a third bit from hmask:
// bit (4 * half + pass) of hmask[l] clear subtracts 4.
void DecodeQ3K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 110) {
    const uint8_t* hmask = x;
    const uint8_t* packed = x + 32 + 64;
    const float d = LoadHalf(x + 32 + 64 + 12);
    // Scale i: low 4 bits from bytes 0..7 (low nibble for i < 8, high for
    // the rest), top 2 bits from bytes 8..11.
    float dl[16];
    for (int i = 0; i < 16; ++i) {
      const int lo = (packed[i % 8] >> (4 * (i / 8))) & 0x0F;
      const int hi = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
      dl[i] = d * static_cast<float>((lo | (hi << 4)) - 32);
    }
    int is = 0;
    int hbit = 0;
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

// Eight 6-bit scales and mins packed in 12 bytes (Q4_K, Q5_K).
void UnpackScaleMinK4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
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
    const uint8_t* qh = x + 16;
    const uint8_t* qs = x + 16 + (kFifthBit ? 32 : 0);
    for (int c = 0; c < 4; ++c, qs += 32, y += 64) {
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
    }
  }
}

void DecodeQ6K(const uint8_t* x, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, x += 210) {
    const float d = LoadHalf(x + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(x + 192);
    for (int half = 0; half < 2; ++half, y += 128) {
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
    }
  }
}

// Decodes a row of k elements of `type` into out[0, k).
void DecodeRow(QuantType type, const uint8_t* row, int64_t k, float* out) {
  switch (type) {
    case QuantType::kF32:
      std::memcpy(out, row, k * sizeof(float));
      return;
    case QuantType::kF16:
      for (int64_t j = 0; j < k; ++j) out[j] = LoadHalf(row + 2 * j);
      return;
    case QuantType::kBF16:
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t bits = static_cast<uint32_t>(LoadU16(row + 2 * j)) << 16;
        std::memcpy(&out[j], &bits, sizeof(float));
      }
      return;
    case QuantType::kQ4_0:
      DecodeQ4<false>(row, k / 32, out);
      return;
    case QuantType::kQ4_1:
      DecodeQ4<true>(row, k / 32, out);
      return;
    case QuantType::kQ5_0:
      DecodeQ5<false>(row, k / 32, out);
      return;
    case QuantType::kQ5_1:
      DecodeQ5<true>(row, k / 32, out);
      return;
    case QuantType::kQ8_0:
      DecodeQ8_0(row, k / 32, out);
      return;
    case QuantType::kQ2_K:
      DecodeQ2K(row, k / 256, out);
      return;
    case QuantType::kQ3_K:
      DecodeQ3K(row, k / 256, out);
      return;
    case QuantType::kQ4_K:
      DecodeQ45K<false>(row, k / 256, out);
      return;
    case QuantType::kQ5_K:
      DecodeQ45K<true>(row, k / 256, out);
      return;
    case QuantType::kQ6_K:
      DecodeQ6K(row, k / 256, out);
      return;
  }
}

// The canonical sum of the header: 16 fma lanes, then the fixed tree.
float Dot(const float* x, const float* w, int64_t k) {
  float lane[16] = {};
  for (int64_t j = 0; j < k; ++j) {
    lane[j % 16] = std::fma(x[j], w[j], lane[j % 16]);
  }
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

}  // namespace

void QuantMatmulScalar(QuantType type, const float* x, int64_t m, int64_t k,
                       const uint8_t* w, int64_t n_begin, int64_t n_end,
                       float* y, int64_t ldy) {
  const int64_t row_bytes = QuantRowBytes(type, k);
  std::vector<float> row(k);
  for (int64_t n = n_begin; n < n_end; ++n) {
    DecodeRow(type, w + n * row_bytes, k, row.data());
    for (int64_t r = 0; r < m; ++r) {
      y[r * ldy + n] = Dot(x + r * k, row.data(), k);
    }
  }
}

}  // namespace lookahead::kernels::internal

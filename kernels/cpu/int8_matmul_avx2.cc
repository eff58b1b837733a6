// The AVX2 int8 matmul (this file alone is compiled with -mavx2 -mfma
// -mf16c), for CPUs without AVX-512 VNNI (AMD Zen 2 and 3, Intel before Ice
// Lake). A 16-column tile is two registers of 8 columns, each column's 4
// bytes of a step in its own 32-bit lane, so a column's sum never leaves its
// lane, as in the VNNI kernel. VNNI's one instruction per step becomes
// vpmaddubsw (unsigned x signed bytes, adjacent pairs summed into int16)
// and vpmaddwd (the pairs summed into int32, times 1 or the K types'
// scale), exact because no int16 can overflow:
//   4-bit codes (0..15) are the unsigned side, x (|x| <= 127) the signed
//     one: a pair is at most 2 * 15 * 127 = 3810, so the 8 steps of a
//     sub-block are summed in int16 (<= 30480) and widened once;
//   5-bit codes: a pair <= 7874, so 4 steps a chain (<= 31496);
//   6-bit codes: a pair <= 16002, so 2 steps a chain (<= 32004); 2- and
//     3-bit codes likewise (far from overflowing);
//   Q8_0: |w| (0..128) is the unsigned side and x * sign(w) (|x| <= 127, so
//     negating it is exact) the signed one: a pair is at most 2 * 128 * 127
//     = 32512, widened every step. It sums q_w * q_x directly (no u, no
//     128 * sum(q_w) correction).
// The float part is the header's sequence per lane: bit for bit the scalar
// reference's.
#include <immintrin.h>

#include "kernels/cpu/int8_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

// No standard headers here (see quant_matmul_kernel.inc): raw copies only.
inline int32_t Load4(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

inline __m256 Halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m128i Bytes8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Int32 lanes v (|v| < 2^15) as int16 pairs (v, v): vpmaddwd by them
// multiplies both halves of a lane by v.
inline __m256i Pairs(__m256i v) {
  return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA);
}

// Bit `from` of every byte of v, moved to bit `to` (other bits clear).
template <int kFrom, int kTo, int kMask>
inline __m256i MoveBits(__m256i v) {
  // 16-bit shifts: the bits that cross a byte boundary are masked off.
  const __m256i m = _mm256_set1_epi8(static_cast<char>(kMask << kTo));
  if constexpr (kFrom <= kTo) {
    return _mm256_and_si256(_mm256_slli_epi16(v, kTo - kFrom), m);
  } else {
    return _mm256_and_si256(_mm256_srli_epi16(v, kFrom - kTo), m);
  }
}

// The 8 steps of columns 8h .. 8h + 7 of one 32-value sub-block's codes
// (int8_matmul_isa.h), one register a step.
template <int kBits>
inline void DecodeSub(const uint8_t* sub, int h, __m256i w[8]) {
  if constexpr (kBits == 8) {
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) w[s] = Load32(sub + 64 * s + 32 * h);
    return;
  }
  if constexpr (kBits < 4) {
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m256i c = Load32(sub + 64 * p + 32 * h);
      w[4 * p] = MoveBits<0, 0, 3>(c);
      w[4 * p + 1] = MoveBits<2, 0, 3>(c);
      w[4 * p + 2] = MoveBits<4, 0, 3>(c);
      w[4 * p + 3] = MoveBits<6, 0, 3>(c);
    }
    if constexpr (kBits == 3) {
      const __m256i hb = Load32(sub + 128 + 32 * h);
      w[0] = _mm256_or_si256(w[0], MoveBits<0, 2, 1>(hb));
      w[1] = _mm256_or_si256(w[1], MoveBits<1, 2, 1>(hb));
      w[2] = _mm256_or_si256(w[2], MoveBits<2, 2, 1>(hb));
      w[3] = _mm256_or_si256(w[3], MoveBits<3, 2, 1>(hb));
      w[4] = _mm256_or_si256(w[4], MoveBits<4, 2, 1>(hb));
      w[5] = _mm256_or_si256(w[5], MoveBits<5, 2, 1>(hb));
      w[6] = _mm256_or_si256(w[6], MoveBits<6, 2, 1>(hb));
      w[7] = _mm256_or_si256(w[7], MoveBits<7, 2, 1>(hb));
    }
    return;
  }
  const __m256i low = _mm256_set1_epi8(15);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m256i v = Load32(sub + 64 * g + 32 * h);
    w[g] = _mm256_and_si256(v, low);
    w[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
  if constexpr (kBits == 5) {
    const __m256i hb = Load32(sub + 256 + 32 * h);
    w[0] = _mm256_or_si256(w[0], MoveBits<0, 4, 1>(hb));
    w[1] = _mm256_or_si256(w[1], MoveBits<1, 4, 1>(hb));
    w[2] = _mm256_or_si256(w[2], MoveBits<2, 4, 1>(hb));
    w[3] = _mm256_or_si256(w[3], MoveBits<3, 4, 1>(hb));
    w[4] = _mm256_or_si256(w[4], MoveBits<4, 4, 1>(hb));
    w[5] = _mm256_or_si256(w[5], MoveBits<5, 4, 1>(hb));
    w[6] = _mm256_or_si256(w[6], MoveBits<6, 4, 1>(hb));
    w[7] = _mm256_or_si256(w[7], MoveBits<7, 4, 1>(hb));
  } else if constexpr (kBits == 6) {
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m256i hb = Load32(sub + 256 + 64 * p + 32 * h);
      w[4 * p] = _mm256_or_si256(w[4 * p], MoveBits<0, 4, 3>(hb));
      w[4 * p + 1] = _mm256_or_si256(w[4 * p + 1], MoveBits<2, 4, 3>(hb));
      w[4 * p + 2] = _mm256_or_si256(w[4 * p + 2], MoveBits<4, 4, 3>(hb));
      w[4 * p + 3] = _mm256_or_si256(w[4 * p + 3], MoveBits<6, 4, 3>(hb));
    }
  }
}

// Steps [kFirst, kFirst + kSteps) of unsigned codes w times x at a, as
// int16 pairs per lane, summed into two chains (steps s % 2) to hide
// vpmaddubsw's latency; see the top for why neither chain overflows.
template <int kFirst, int kSteps>
inline void DotPairs(const __m256i w[8], const int8_t* a, __m256i* even,
                     __m256i* odd) {
  *even =
      _mm256_maddubs_epi16(w[kFirst], _mm256_set1_epi32(Load4(a + 4 * kFirst)));
  *odd = _mm256_maddubs_epi16(w[kFirst + 1],
                              _mm256_set1_epi32(Load4(a + 4 * kFirst + 4)));
#pragma GCC unroll 6
  for (int s = kFirst + 2; s < kFirst + kSteps; ++s) {
    __m256i& chain = s % 2 == 0 ? *even : *odd;
    chain = _mm256_add_epi16(
        chain, _mm256_maddubs_epi16(w[s], _mm256_set1_epi32(Load4(a + 4 * s))));
  }
}

// Rows [r0, r0 + kRows) of columns 8h .. 8h + 7 of one tile of a 32-value
// type; lanes outside `mask` are not stored. Per block: the half's 8 steps
// of weights are decoded once into registers, then each row sums its 32
// products per column and scales the sum into its float accumulator.
template <QuantType kType, int kRows>
inline void HalfRows32(const uint8_t* xq, int64_t r0, int64_t k,
                       const uint8_t* tile, int h, float* y, int64_t ldy,
                       __m256i mask) {
  constexpr Int8Layout kL = LayoutOf(kType);
  constexpr bool kQ8 = kType == QuantType::kQ8_0;
  constexpr bool kMin = kType == QuantType::kQ4_1 || kType == QuantType::kQ5_1;
  constexpr int32_t kOffset = Int8ValueOffset(kType);
  const int64_t nb = k / 32;
  Int8Row x[kRows];
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(Int8Activations::kBlock32, xq, r0 + r, k);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kL.bytes;
    PrefetchSlice<kL.bytes, 1>(blk + Int8PrefetchBlocks(kType) * kL.bytes, 0);
    __m256i w[8];
    DecodeSub<kL.bits>(blk, h, w);
    const __m256 dw = Halves8(blk + kL.d_at + 16 * h);
    __m256 mw;
    if constexpr (kMin) mw = Halves8(blk + kL.m_at + 16 * h);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const int8_t* a = x[r].q + 32 * b;
      __m256i p;
      if constexpr (kQ8) {
        p = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) {
          const __m256i as = _mm256_set1_epi32(Load4(a + 4 * s));
          const __m256i pairs = _mm256_maddubs_epi16(
              _mm256_abs_epi8(w[s]), _mm256_sign_epi8(as, w[s]));
          p = _mm256_add_epi32(p, _mm256_madd_epi16(pairs, ones));
        }
      } else if constexpr (kL.bits == 4) {
        __m256i even, odd;
        DotPairs<0, 8>(w, a, &even, &odd);
        p = _mm256_madd_epi16(_mm256_add_epi16(even, odd), ones);
      } else {  // 5 bits: each chain widened on its own
        __m256i even, odd;
        DotPairs<0, 8>(w, a, &even, &odd);
        p = _mm256_add_epi32(_mm256_madd_epi16(even, ones),
                             _mm256_madd_epi16(odd, ones));
      }
      if constexpr (kOffset != 0) {
        p = _mm256_sub_epi32(p, _mm256_set1_epi32(kOffset * x[r].sum[b]));
      }
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x[r].d[b]));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r]);
      if constexpr (kMin) {
        acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x[r].ds[b]), acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    _mm256_maskstore_ps(y + r * ldy, mask, acc[r]);
  }
}

// As HalfRows32, for a K type (the header's per-super-block sequence).
template <QuantType kType, int kRows>
inline void HalfRowsK(const uint8_t* xq, int64_t r0, int64_t k,
                      const uint8_t* tile, int h, float* y, int64_t ldy,
                      __m256i mask) {
  constexpr Int8Layout kL = LayoutOf(kType);
  constexpr bool kQ2 = kType == QuantType::kQ2_K;
  constexpr int32_t kOffset = Int8ValueOffset(kType);
  const int64_t nb = k / 256;
  Int8Row x[kRows];
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(Int8Activations::kBlock256, xq, r0 + r, k);
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kL.bytes;
    // s: the scaled sums; t: the mins' sums (Q4_K, Q5_K, Q2_K) or the
    // offset's (Q3_K, Q6_K: taken off s at the end).
    __m256i s[kRows], t[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      s[r] = _mm256_setzero_si256();
      t[r] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 8; ++j) {
      PrefetchSlice<kL.bytes, 8>(blk + Int8PrefetchBlocks(kType) * kL.bytes, j);
      __m256i w[8];
      DecodeSub<kL.bits>(blk + j * kL.sub_bytes, h, w);
      if constexpr (kL.groups == 16) {  // two groups of 16 a sub-block
        __m256i sc[2], other[2];        // other: the mins (Q2_K) or scales
#pragma GCC unroll 2
        for (int g = 0; g < 2; ++g) {
          const __m128i bytes =
              Bytes8(blk + kL.sc_at + 16 * (2 * j + g) + 8 * h);
          if constexpr (kQ2) {
            const __m256i v = _mm256_cvtepu8_epi32(bytes);
            sc[g] = _mm256_and_si256(v, _mm256_set1_epi32(15));
            other[g] = _mm256_srli_epi32(v, 4);
          } else {
            sc[g] = _mm256_cvtepi8_epi32(bytes);
            other[g] = sc[g];
          }
        }
        const __m256i sc_pairs[2] = {Pairs(sc[0]), Pairs(sc[1])};
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          const int8_t* a = x[r].q + 256 * b + 32 * j;
          const int32_t* sum16 = x[r].sum16 + 16 * b + 2 * j;
          __m256i even, odd;
          DotPairs<0, 4>(w, a, &even, &odd);
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(even, sc_pairs[0]));
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(odd, sc_pairs[0]));
          DotPairs<4, 4>(w, a, &even, &odd);
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(even, sc_pairs[1]));
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(odd, sc_pairs[1]));
#pragma GCC unroll 2
          for (int g = 0; g < 2; ++g) {
            t[r] = _mm256_add_epi32(
                t[r], _mm256_mullo_epi32(
                          other[g],
                          _mm256_set1_epi32((kQ2 ? 1 : kOffset) * sum16[g])));
          }
        }
      } else {  // Q4_K, Q5_K: one group of 32, with a min
        const __m256i sc =
            _mm256_cvtepu8_epi32(Bytes8(blk + kL.sc_at + 16 * j + 8 * h));
        const __m256i mn =
            _mm256_cvtepu8_epi32(Bytes8(blk + kL.mn_at + 16 * j + 8 * h));
        const __m256i sc_pairs = Pairs(sc);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          const int8_t* a = x[r].q + 256 * b + 32 * j;
          const int32_t* sum16 = x[r].sum16 + 16 * b + 2 * j;
          __m256i even, odd;
          DotPairs<0, 8>(w, a, &even, &odd);
          if constexpr (kL.bits == 4) {
            s[r] = _mm256_add_epi32(
                s[r], _mm256_madd_epi16(_mm256_add_epi16(even, odd), sc_pairs));
          } else {
            s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(even, sc_pairs));
            s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(odd, sc_pairs));
          }
          t[r] = _mm256_add_epi32(
              t[r],
              _mm256_mullo_epi32(mn, _mm256_set1_epi32(sum16[0] + sum16[1])));
        }
      }
    }
    const __m256 dw = Halves8(blk + kL.d_at + 16 * h);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 dx = _mm256_set1_ps(x[r].d[b]);
      if constexpr (kL.mins) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]),
                                 _mm256_mul_ps(dw, dx), acc[r]);
        const __m256 dmin = Halves8(blk + kL.m_at + 16 * h);
        acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(t[r]),
                                  _mm256_mul_ps(dmin, dx), acc[r]);
      } else {
        const __m256i st = _mm256_sub_epi32(s[r], t[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st), _mm256_mul_ps(dw, dx),
                                 acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    _mm256_maskstore_ps(y + r * ldy, mask, acc[r]);
  }
}

template <QuantType kType, int kRows>
inline void HalfRows(const uint8_t* xq, int64_t r0, int64_t k,
                     const uint8_t* tile, int h, float* y, int64_t ldy,
                     __m256i mask) {
  if constexpr (LayoutOf(kType).block == 256) {
    HalfRowsK<kType, kRows>(xq, r0, k, tile, h, y, ldy, mask);
  } else {
    HalfRows32<kType, kRows>(xq, r0, k, tile, h, y, ldy, mask);
  }
}

template <QuantType kType>
void Run(const uint8_t* xq, int64_t m, int64_t k, const uint8_t* packed,
         int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  // Eight weight registers, the scales and kRows accumulators stay within
  // the 16 ymm registers (the K types keep two integer sums a row more).
  constexpr Int8Layout kL = LayoutOf(kType);
  constexpr int kRows = kL.block == 256 ? 2 : 4;
  const int64_t tile_bytes = (k / kL.block) * kL.bytes;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t t = n_begin / kInt8Tile; t * kInt8Tile < n_end; ++t) {
    const int64_t col0 = t * kInt8Tile;
    const int lo = static_cast<int>((n_begin > col0 ? n_begin : col0) - col0);
    const int hi = static_cast<int>(
        (n_end < col0 + kInt8Tile ? n_end : col0 + kInt8Tile) - col0);
    const uint8_t* tile = packed + t * tile_bytes;
    for (int h = 0; h < 2; ++h) {
      if (hi <= 8 * h || lo >= 8 * h + 8) continue;  // no column of this half
      // Lane j (column 8h + j) is stored iff lo <= 8h + j < hi.
      const __m256i mask = _mm256_and_si256(
          _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - 8 * h - 1)),
          _mm256_cmpgt_epi32(_mm256_set1_epi32(hi - 8 * h), lane));
      float* out = y + col0 + 8 * h;
      int64_t r = 0;
      for (; r + kRows <= m; r += kRows) {
        HalfRows<kType, kRows>(xq, r, k, tile, h, out + r * ldy, ldy, mask);
      }
      switch (m - r) {
        case 3:
          HalfRows<kType, 3>(xq, r, k, tile, h, out + r * ldy, ldy, mask);
          break;
        case 2:
          HalfRows<kType, 2>(xq, r, k, tile, h, out + r * ldy, ldy, mask);
          break;
        case 1:
          HalfRows<kType, 1>(xq, r, k, tile, h, out + r * ldy, ldy, mask);
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace

void Int8MatmulAvx2(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                    const uint8_t* packed, int64_t n_begin, int64_t n_end,
                    float* y, int64_t ldy) {
  switch (type) {
#define LOOKAHEAD_INT8_CASE(T) \
  case QuantType::T:           \
    return Run<QuantType::T>(xq, m, k, packed, n_begin, n_end, y, ldy);
    LOOKAHEAD_INT8_CASE(kQ4_0)
    LOOKAHEAD_INT8_CASE(kQ4_1)
    LOOKAHEAD_INT8_CASE(kQ5_0)
    LOOKAHEAD_INT8_CASE(kQ5_1)
    LOOKAHEAD_INT8_CASE(kQ8_0)
    LOOKAHEAD_INT8_CASE(kQ2_K)
    LOOKAHEAD_INT8_CASE(kQ3_K)
    LOOKAHEAD_INT8_CASE(kQ4_K)
    LOOKAHEAD_INT8_CASE(kQ5_K)
    LOOKAHEAD_INT8_CASE(kQ6_K)
#undef LOOKAHEAD_INT8_CASE
    default:
      return;  // not computed (REQUIRES)
  }
}

}  // namespace lookahead::kernels::internal

// The AVX-512 VNNI int8 matmul (this file alone is compiled with
// -mavx512f -mavx512bw -mavx512vnni -mf16c). A tile's 16 columns are the
// 16 lanes of one register, so a column's sum never leaves its lane: the
// header's sequence, with no horizontal reduction.
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

inline __m512 Halves16(const uint8_t* p) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m128i Bytes16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Bit `from` of every byte of v, moved to bit `to` (other bits clear).
template <int kFrom, int kTo, int kMask>
inline __m512i MoveBits(__m512i v) {
  // 16-bit shifts: the bits that cross a byte boundary are masked off.
  const __m512i m = _mm512_set1_epi8(static_cast<char>(kMask << kTo));
  if constexpr (kFrom <= kTo) {
    return _mm512_and_si512(_mm512_slli_epi16(v, kTo - kFrom), m);
  } else {
    return _mm512_and_si512(_mm512_srli_epi16(v, kFrom - kTo), m);
  }
}

// The 8 steps of one 32-value sub-block's codes (int8_matmul_isa.h), one
// register a step, unsigned (Q8_0: signed).
template <int kBits>
inline void DecodeSub(const uint8_t* sub, __m512i w[8]) {
  if constexpr (kBits == 8) {
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) w[s] = _mm512_loadu_si512(sub + 64 * s);
    return;
  }
  if constexpr (kBits < 4) {
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m512i c = _mm512_loadu_si512(sub + 64 * p);
      w[4 * p] = MoveBits<0, 0, 3>(c);
      w[4 * p + 1] = MoveBits<2, 0, 3>(c);
      w[4 * p + 2] = MoveBits<4, 0, 3>(c);
      w[4 * p + 3] = MoveBits<6, 0, 3>(c);
    }
    if constexpr (kBits == 3) {
      const __m512i h = _mm512_loadu_si512(sub + 128);
      w[0] = _mm512_or_si512(w[0], MoveBits<0, 2, 1>(h));
      w[1] = _mm512_or_si512(w[1], MoveBits<1, 2, 1>(h));
      w[2] = _mm512_or_si512(w[2], MoveBits<2, 2, 1>(h));
      w[3] = _mm512_or_si512(w[3], MoveBits<3, 2, 1>(h));
      w[4] = _mm512_or_si512(w[4], MoveBits<4, 2, 1>(h));
      w[5] = _mm512_or_si512(w[5], MoveBits<5, 2, 1>(h));
      w[6] = _mm512_or_si512(w[6], MoveBits<6, 2, 1>(h));
      w[7] = _mm512_or_si512(w[7], MoveBits<7, 2, 1>(h));
    }
    return;
  }
  const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512i v = _mm512_loadu_si512(sub + 64 * g);
    w[g] = _mm512_and_si512(v, low);
    w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
  }
  if constexpr (kBits == 5) {
    const __m512i h = _mm512_loadu_si512(sub + 256);
    w[0] = _mm512_or_si512(w[0], MoveBits<0, 4, 1>(h));
    w[1] = _mm512_or_si512(w[1], MoveBits<1, 4, 1>(h));
    w[2] = _mm512_or_si512(w[2], MoveBits<2, 4, 1>(h));
    w[3] = _mm512_or_si512(w[3], MoveBits<3, 4, 1>(h));
    w[4] = _mm512_or_si512(w[4], MoveBits<4, 4, 1>(h));
    w[5] = _mm512_or_si512(w[5], MoveBits<5, 4, 1>(h));
    w[6] = _mm512_or_si512(w[6], MoveBits<6, 4, 1>(h));
    w[7] = _mm512_or_si512(w[7], MoveBits<7, 4, 1>(h));
  } else if constexpr (kBits == 6) {
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m512i h = _mm512_loadu_si512(sub + 256 + 64 * p);
      w[4 * p] = _mm512_or_si512(w[4 * p], MoveBits<0, 4, 3>(h));
      w[4 * p + 1] = _mm512_or_si512(w[4 * p + 1], MoveBits<2, 4, 3>(h));
      w[4 * p + 2] = _mm512_or_si512(w[4 * p + 2], MoveBits<4, 4, 3>(h));
      w[4 * p + 3] = _mm512_or_si512(w[4 * p + 3], MoveBits<6, 4, 3>(h));
    }
  }
}

// sum over steps [kFirst, kFirst + kSteps) of w[s] * a[4s .. 4s + 3] per
// lane, in kChains independent chains (a row alone has no other work to
// hide the instruction's latency behind); integer, so exact in any order.
// kSigned: w is signed and a unsigned (Q8_0's u = q + 128).
template <int kFirst, int kSteps, int kChains, bool kSigned>
inline __m512i Dot(const __m512i w[8], const uint8_t* a) {
  __m512i chain[kChains];
#pragma GCC unroll 4
  for (int c = 0; c < kChains; ++c) chain[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = kFirst; s < kFirst + kSteps; ++s) {
    const __m512i as = _mm512_set1_epi32(Load4(a + 4 * s));
    __m512i& p = chain[(s - kFirst) % kChains];
    p = kSigned ? _mm512_dpbusd_epi32(p, as, w[s])
                : _mm512_dpbusd_epi32(p, w[s], as);
  }
  __m512i p = chain[0];
#pragma GCC unroll 4
  for (int c = 1; c < kChains; ++c) p = _mm512_add_epi32(p, chain[c]);
  return p;
}

// Rows [r0, r0 + kRows) of one 16-column tile of a 32-value type; lanes
// outside `mask` are not stored. Per block: the weights are decoded once
// into registers, then each row adds its 32 products per column in integer
// chains and scales the sum into its float accumulator.
template <QuantType kType, int kRows>
inline void TileRows32(const uint8_t* xq, int64_t r0, int64_t k,
                       const uint8_t* tile, float* y, int64_t ldy,
                       __mmask16 mask) {
  constexpr Int8Layout kL = LayoutOf(kType);
  constexpr bool kQ8 = kType == QuantType::kQ8_0;
  constexpr bool kMin = kType == QuantType::kQ4_1 || kType == QuantType::kQ5_1;
  constexpr int32_t kOffset = Int8ValueOffset(kType);
  const int64_t nb = k / 32;
  Int8Row x[kRows];
  __m512 acc[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(Int8Activations::kBlock32, xq, r0 + r, k);
    acc[r] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kL.bytes;
    PrefetchSlice<kL.bytes, 1>(blk + Int8PrefetchBlocks(kType) * kL.bytes, 0);
    __m512i w[8];
    DecodeSub<kL.bits>(blk, w);
    const __m512 dw = Halves16(blk + kL.d_at);
    __m512 mw;
    if constexpr (kMin) mw = Halves16(blk + kL.m_at);
    __m512i corr;
    if constexpr (kQ8) corr = _mm512_loadu_si512(blk + kL.m_at);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      // Q8_0 multiplies unsigned u = q + 128 by the signed weights and
      // takes 128 * sum(q_w) back off; the other weights are the unsigned
      // side.
      const uint8_t* a =
          (kQ8 ? x[r].u : reinterpret_cast<const uint8_t*>(x[r].q)) + 32 * b;
      __m512i p = Dot < 0, 8, kRows == 1 ? 4 : 2, kQ8 > (w, a);
      if constexpr (kOffset != 0) {
        p = _mm512_sub_epi32(p, _mm512_set1_epi32(kOffset * x[r].sum[b]));
      }
      if constexpr (kQ8) p = _mm512_sub_epi32(p, corr);
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x[r].d[b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[r]);
      if constexpr (kMin) {
        acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x[r].ds[b]), acc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, mask, acc[r]);
  }
}

// As TileRows32, for a K type: per super-block, each sub-block's weights
// are decoded once and every row adds its scaled integer sums; the float
// accumulator takes one (no mins) or two multiply-adds a super-block.
template <QuantType kType, int kRows>
inline void TileRowsK(const uint8_t* xq, int64_t r0, int64_t k,
                      const uint8_t* tile, float* y, int64_t ldy,
                      __mmask16 mask) {
  constexpr Int8Layout kL = LayoutOf(kType);
  constexpr bool kQ2 = kType == QuantType::kQ2_K;
  constexpr int32_t kOffset = Int8ValueOffset(kType);
  constexpr int kChains = kRows == 1 ? 4 : 2;
  const int64_t nb = k / 256;
  Int8Row x[kRows];
  __m512 acc[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(Int8Activations::kBlock256, xq, r0 + r, k);
    acc[r] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kL.bytes;
    // s: each row's scaled sums. The mins' sums (Q4_K, Q5_K, Q2_K) and the
    // offset's (Q3_K, Q6_K) depend on the scales and x alone, so they are
    // added after the sub-blocks, from the scale vectors in `other`: the
    // loop over sub-blocks then holds 8 weight registers and 2 per row,
    // and 8 rows fit the 32 registers.
    __m512i s[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) s[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      PrefetchSlice<kL.bytes, 8>(blk + Int8PrefetchBlocks(kType) * kL.bytes, j);
      __m512i w[8];
      DecodeSub<kL.bits>(blk + j * kL.sub_bytes, w);
      if constexpr (kL.groups == 16) {  // two groups of 16 a sub-block
        __m512i sc[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m128i bytes = Bytes16(blk + kL.sc_at + 16 * (2 * j + h));
          sc[h] = kQ2 ? _mm512_and_si512(_mm512_cvtepu8_epi32(bytes),
                                         _mm512_set1_epi32(15))
                      : _mm512_cvtepi8_epi32(bytes);
        }
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const uint8_t* a =
              reinterpret_cast<const uint8_t*>(x[r].q) + 256 * b + 32 * j;
          const __m512i p0 = Dot<0, 4, kChains / 2, false>(w, a);
          const __m512i p1 = Dot<4, 4, kChains / 2, false>(w, a);
          s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p0, sc[0]));
          s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p1, sc[1]));
        }
      } else {  // Q4_K, Q5_K: one group of 32, with a min
        const __m512i sc =
            _mm512_cvtepu8_epi32(Bytes16(blk + kL.sc_at + 16 * j));
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const uint8_t* a =
              reinterpret_cast<const uint8_t*>(x[r].q) + 256 * b + 32 * j;
          const __m512i p = Dot<0, 8, kChains, false>(w, a);
          s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p, sc));
        }
      }
    }
    // other[g]: group g's min (Q4_K, Q5_K, Q2_K) or kOffset * its scale
    // (Q3_K, Q6_K), times the sum of x over the group: t = sum_g mn_g *
    // sum_g(q_x), or kOffset * sum_g sc_g * sum_g(q_x) taken off s.
    __m512i other[kL.groups];
#pragma GCC unroll 16
    for (int g = 0; g < kL.groups; ++g) {
      const __m128i bytes =
          Bytes16(blk + (kL.groups == 8 ? kL.mn_at : kL.sc_at) + 16 * g);
      if constexpr (kL.groups == 8) {
        other[g] = _mm512_cvtepu8_epi32(bytes);
      } else if constexpr (kQ2) {
        other[g] = _mm512_srli_epi32(_mm512_cvtepu8_epi32(bytes), 4);
      } else {
        other[g] = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(bytes),
                                      _mm512_set1_epi32(kOffset));
      }
    }
    const __m512 dw = Halves16(blk + kL.d_at);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const int32_t* sum16 = x[r].sum16 + 16 * b;
      __m512i t = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int g = 0; g < kL.groups; ++g) {
        const int32_t sum =
            kL.groups == 8 ? sum16[2 * g] + sum16[2 * g + 1] : sum16[g];
        t = _mm512_add_epi32(
            t, _mm512_mullo_epi32(other[g], _mm512_set1_epi32(sum)));
      }
      const __m512 dx = _mm512_set1_ps(x[r].d[b]);
      if constexpr (kL.mins) {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r]),
                                 _mm512_mul_ps(dw, dx), acc[r]);
        const __m512 dmin = Halves16(blk + kL.m_at);
        acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(t),
                                  _mm512_mul_ps(dmin, dx), acc[r]);
      } else {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r], t)),
                                 _mm512_mul_ps(dw, dx), acc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, mask, acc[r]);
  }
}

template <QuantType kType, int kRows>
inline void TileRows(const uint8_t* xq, int64_t r0, int64_t k,
                     const uint8_t* tile, float* y, int64_t ldy,
                     __mmask16 mask) {
  if constexpr (LayoutOf(kType).block == 256) {
    TileRowsK<kType, kRows>(xq, r0, k, tile, y, ldy, mask);
  } else {
    TileRows32<kType, kRows>(xq, r0, k, tile, y, ldy, mask);
  }
}

// TileRows for the last `rows` (< kMax + 1) rows of a tile.
template <QuantType kType, int kMax>
inline void TileRowsTail(int64_t rows, const uint8_t* xq, int64_t r0, int64_t k,
                         const uint8_t* tile, float* y, int64_t ldy,
                         __mmask16 mask) {
  if constexpr (kMax > 0) {
    if (rows == kMax) {
      TileRows<kType, kMax>(xq, r0, k, tile, y, ldy, mask);
    } else {
      TileRowsTail<kType, kMax - 1>(rows, xq, r0, k, tile, y, ldy, mask);
    }
  }
}

template <QuantType kType>
void Run(const uint8_t* xq, int64_t m, int64_t k, const uint8_t* packed,
         int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  // Up to 8 rows share each decoded weight register (the verified rows of
  // a draft tree; more rows take more passes over the tile, from cache).
  constexpr int kRows = 8;
  constexpr Int8Layout kL = LayoutOf(kType);
  const int64_t tile_bytes = (k / kL.block) * kL.bytes;
  for (int64_t t = n_begin / kInt8Tile; t * kInt8Tile < n_end; ++t) {
    const int64_t col0 = t * kInt8Tile;
    const int lo = static_cast<int>((n_begin > col0 ? n_begin : col0) - col0);
    const int hi = static_cast<int>(
        (n_end < col0 + kInt8Tile ? n_end : col0 + kInt8Tile) - col0);
    const __mmask16 mask =
        static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    const uint8_t* tile = packed + t * tile_bytes;
    int64_t r = 0;
    for (; r + kRows <= m; r += kRows) {
      TileRows<kType, kRows>(xq, r, k, tile, y + r * ldy + col0, ldy, mask);
    }
    TileRowsTail<kType, kRows - 1>(m - r, xq, r, k, tile, y + r * ldy + col0,
                                   ldy, mask);
  }
}

}  // namespace

// QuantizeInt8RowsScalar's bytes: max ignores NaN (vmaxps returns its
// second operand, the running max, when the first is NaN), vcvtps2dq rounds
// to nearest even as nearbyint does, and the clamped values fit a byte.
void QuantizeInt8RowsAvx512Vnni(Int8Activations form, const float* x, int64_t m,
                                int64_t k, uint8_t* out) {
  const bool k256 = form == Int8Activations::kBlock256;
  const int64_t block = k256 ? 256 : 32, nb = k / block;
  const int64_t row_bytes = k256 ? k + 4 * nb + 4 * (k / 16) : 2 * k + 12 * nb;
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = out + r * row_bytes;
    float* d = reinterpret_cast<float*>(row + (k256 ? k : 2 * k));
    float* ds = d + nb;                                   // kBlock32
    int32_t* sum = reinterpret_cast<int32_t*>(ds + nb);   // kBlock32
    int32_t* sum16 = reinterpret_cast<int32_t*>(d + nb);  // kBlock256
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * k + block * b;
      __m512 mx = _mm512_setzero_ps();
      for (int64_t i = 0; i < block; i += 16) {
        mx = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), mx);
      }
      const float amax = _mm512_reduce_max_ps(mx);
      const bool usable = amax > 0.0f && amax <= 3.40282347e+38f;
      const __m512 id = _mm512_set1_ps(usable ? 127.0f / amax : 0.0f);
      __m512i total = _mm512_setzero_si512();
      for (int64_t i = 0; i < block; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + i), id);
        const __mmask16 ordered = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        v = _mm512_maskz_mov_ps(ordered, v);  // NaN -> 0
        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)),
                          _mm512_set1_ps(127.0f));
        const __m512i q = _mm512_cvtps_epi32(v);
        const __m128i bytes = _mm512_cvtepi32_epi8(q);
        const int64_t at = block * b + i;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + at), bytes);
        if (k256) {
          sum16[at / 16] = _mm512_reduce_add_epi32(q);
        } else {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(row + k + at),
                           _mm_xor_si128(bytes, _mm_set1_epi8(-128)));
          total = _mm512_add_epi32(total, q);
        }
      }
      d[b] = usable ? amax / 127.0f : 0.0f;
      if (!k256) {
        sum[b] = _mm512_reduce_add_epi32(total);
        ds[b] = d[b] * static_cast<float>(sum[b]);
      }
    }
  }
}

void Int8MatmulAvx512Vnni(QuantType type, const uint8_t* xq, int64_t m,
                          int64_t k, const uint8_t* packed, int64_t n_begin,
                          int64_t n_end, float* y, int64_t ldy) {
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

// The AVX2 int8 matmul (this file alone is compiled with -mavx2 -mfma
// -mf16c), for CPUs without AVX-512 VNNI (AMD Zen 2 and 3, Intel before Ice
// Lake). A 16-column tile is two registers of 8 columns, each column's 4
// bytes of a step in its own 32-bit lane, so a column's sum never leaves its
// lane, as in the VNNI kernel. VNNI's one instruction per step becomes
// vpmaddubsw (unsigned x signed bytes, adjacent pairs summed into int16)
// and vpmaddwd by ones (the pairs summed into int32), exact because no
// int16 can overflow:
//   Q4_0, Q4_1: the weights (0..15) are the unsigned side, x (|x| <= 127)
//     the signed one: a pair is at most 2 * 15 * 127 = 3810, so the 8 steps
//     of a block are summed in int16 (<= 30480) and widened once.
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

// Rows [r0, r0 + kRows) of columns 8h .. 8h + 7 of one tile; lanes outside
// `mask` are not stored. Per block: the half's 8 steps of weights are
// decoded once into registers, then each row sums its 32 products per
// column and scales the sum into its float accumulator.
template <QuantType kType, int kRows>
inline void HalfRows(const uint8_t* xq, int64_t r0, int64_t k,
                     const uint8_t* tile, int h, float* y, int64_t ldy,
                     __m256i mask) {
  constexpr int64_t kBytes = Int8PackedBlockBytes(kType);
  constexpr bool kQ8 = kType == QuantType::kQ8_0;
  constexpr int64_t kDAt = kQ8 ? 512 : 256;
  const int64_t nb = k / 32;
  Int8Row x[kRows];
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(xq, r0 + r, k);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i low = _mm256_set1_epi8(15);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kBytes;
    __m256i w[8];
    if constexpr (kQ8) {
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        w[s] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(blk + 64 * s + 32 * h));
      }
    } else {
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(blk + 64 * g + 32 * h));
        w[g] = _mm256_and_si256(v, low);
        w[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
    }
    const __m256 dw = Halves8(blk + kDAt + 16 * h);
    __m256 mw;
    if constexpr (kType == QuantType::kQ4_1) mw = Halves8(blk + 288 + 16 * h);
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
      } else {
        // Two int16 chains (steps s % 2) to hide vpmaddubsw's latency.
        __m256i even = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(Load4(a)));
        __m256i odd =
            _mm256_maddubs_epi16(w[1], _mm256_set1_epi32(Load4(a + 4)));
#pragma GCC unroll 6
        for (int s = 2; s < 8; ++s) {
          __m256i& chain = s % 2 == 0 ? even : odd;
          chain = _mm256_add_epi16(
              chain, _mm256_maddubs_epi16(
                         w[s], _mm256_set1_epi32(Load4(a + 4 * s))));
        }
        p = _mm256_madd_epi16(_mm256_add_epi16(even, odd), ones);
        if constexpr (kType == QuantType::kQ4_0) {
          p = _mm256_sub_epi32(p, _mm256_set1_epi32(8 * x[r].sum[b]));
        }
      }
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x[r].d[b]));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r]);
      if constexpr (kType == QuantType::kQ4_1) {
        acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x[r].ds[b]), acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    _mm256_maskstore_ps(y + r * ldy, mask, acc[r]);
  }
}

template <QuantType kType>
void Run(const uint8_t* xq, int64_t m, int64_t k, const uint8_t* packed,
         int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  // Eight weight registers, the scales and kRows accumulators stay within
  // the 16 ymm registers.
  constexpr int kRows = 4;
  const int64_t tile_bytes = (k / 32) * Int8PackedBlockBytes(kType);
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
    case QuantType::kQ4_0:
      return Run<QuantType::kQ4_0>(xq, m, k, packed, n_begin, n_end, y, ldy);
    case QuantType::kQ4_1:
      return Run<QuantType::kQ4_1>(xq, m, k, packed, n_begin, n_end, y, ldy);
    case QuantType::kQ8_0:
      return Run<QuantType::kQ8_0>(xq, m, k, packed, n_begin, n_end, y, ldy);
    default:
      return;  // not computed (REQUIRES)
  }
}

}  // namespace lookahead::kernels::internal

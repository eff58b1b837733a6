// The AVX-512 VNNI int8 matmul (this file alone is compiled with
// -mavx512f -mavx512bw -mavx512vnni -mf16c). A tile's 16 columns are the
// 16 lanes of one register, so a column's sum never leaves its lane: the
// header's sequence, with no horizontal reduction.
#include <immintrin.h>

#include "kernels/cpu/int8_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

// No standard headers here (see quant_matmul_kernel.inc): raw copies only.
inline int32_t Load4(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

inline __m512 Halves16(const uint8_t* p) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Rows [r0, r0 + kRows) of one 16-column tile; lanes outside `mask` are not
// stored. Per block: the 8 steps of weights are decoded once into
// registers, then each row adds its 32 products per column in integer
// chains and scales the sum into its float accumulator.
template <QuantType kType, int kRows>
inline void TileRows(const uint8_t* xq, int64_t r0, int64_t k,
                     const uint8_t* tile, float* y, int64_t ldy,
                     __mmask16 mask) {
  constexpr int64_t kBytes = Int8PackedBlockBytes(kType);
  constexpr bool kQ8 = kType == QuantType::kQ8_0;
  constexpr int64_t kDAt = kQ8 ? 512 : 256;
  const int64_t nb = k / 32;
  Int8Row x[kRows];
  __m512 acc[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    x[r] = Int8RowAt(xq, r0 + r, k);
    acc[r] = _mm512_setzero_ps();
  }
  const __m512i low = _mm512_set1_epi8(15);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kBytes;
    __m512i w[8];
    if constexpr (kQ8) {
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) w[s] = _mm512_loadu_si512(blk + 64 * s);
    } else {
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512i v = _mm512_loadu_si512(blk + 64 * g);
        w[g] = _mm512_and_si512(v, low);
        w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
    }
    const __m512 dw = Halves16(blk + kDAt);
    __m512 mw;
    if constexpr (kType == QuantType::kQ4_1) mw = Halves16(blk + 288);
    __m512i corr;
    if constexpr (kQ8) {
      corr = _mm512_loadu_si512(blk + 544);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      // Q8_0 multiplies unsigned u = q + 128 by the signed weights and
      // takes 128 * sum(q_w) back off; Q4 weights are the unsigned side.
      const uint8_t* a =
          (kQ8 ? x[r].u : reinterpret_cast<const uint8_t*>(x[r].q)) + 32 * b;
      // kChains independent integer chains (steps s % kChains): one row
      // alone has no other work to hide the instruction's latency behind.
      constexpr int kChains = kRows == 1 ? 4 : 2;
      __m512i chain[kChains];
#pragma GCC unroll 4
      for (int c = 0; c < kChains; ++c) chain[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m512i as = _mm512_set1_epi32(Load4(a + 4 * s));
        __m512i& p = chain[s % kChains];
        if constexpr (kQ8) {
          p = _mm512_dpbusd_epi32(p, as, w[s]);
        } else {
          p = _mm512_dpbusd_epi32(p, w[s], as);
        }
      }
      __m512i p = chain[0];  // integer sums: exact in any order
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) p = _mm512_add_epi32(p, chain[c]);
      if constexpr (kType == QuantType::kQ4_0) {
        p = _mm512_sub_epi32(p, _mm512_set1_epi32(8 * x[r].sum[b]));
      }
      if constexpr (kQ8) p = _mm512_sub_epi32(p, corr);
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x[r].d[b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[r]);
      if constexpr (kType == QuantType::kQ4_1) {
        acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x[r].ds[b]), acc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, mask, acc[r]);
  }
}

template <QuantType kType>
void Run(const uint8_t* xq, int64_t m, int64_t k, const uint8_t* packed,
         int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  constexpr int kRows = 4;
  const int64_t tile_bytes = (k / 32) * Int8PackedBlockBytes(kType);
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
    switch (m - r) {
      case 3:
        TileRows<kType, 3>(xq, r, k, tile, y + r * ldy + col0, ldy, mask);
        break;
      case 2:
        TileRows<kType, 2>(xq, r, k, tile, y + r * ldy + col0, ldy, mask);
        break;
      case 1:
        TileRows<kType, 1>(xq, r, k, tile, y + r * ldy + col0, ldy, mask);
        break;
      default:
        break;
    }
  }
}

}  // namespace

// QuantizeInt8RowsScalar's bytes: max ignores NaN (vmaxps returns its
// second operand, the running max, when the first is NaN), vcvtps2dq rounds
// to nearest even as nearbyint does, and the clamped values fit a byte.
void QuantizeInt8RowsAvx512Vnni(const float* x, int64_t m, int64_t k,
                                uint8_t* out) {
  const int64_t nb = k / 32, row_bytes = 2 * k + 12 * nb;
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = out + r * row_bytes;
    float* d = reinterpret_cast<float*>(row + 2 * k);
    float* ds = d + nb;
    int32_t* sum = reinterpret_cast<int32_t*>(ds + nb);
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * k + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      __m512 mx = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
      mx = _mm512_max_ps(_mm512_abs_ps(v1), mx);
      const float amax = _mm512_reduce_max_ps(mx);
      const bool usable = amax > 0.0f && amax <= 3.40282347e+38f;
      const __m512 id = _mm512_set1_ps(usable ? 127.0f / amax : 0.0f);
      __m512i q[2];
      for (int h = 0; h < 2; ++h) {
        __m512 v = _mm512_mul_ps(h == 0 ? v0 : v1, id);
        const __mmask16 ordered = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        v = _mm512_maskz_mov_ps(ordered, v);  // NaN -> 0
        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)),
                          _mm512_set1_ps(127.0f));
        q[h] = _mm512_cvtps_epi32(v);
        const __m128i bytes = _mm512_cvtepi32_epi8(q[h]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 32 * b + 16 * h),
                         bytes);
        _mm_storeu_si128(
            reinterpret_cast<__m128i*>(row + k + 32 * b + 16 * h),
            _mm_xor_si128(bytes, _mm_set1_epi8(-128)));
      }
      sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
      d[b] = usable ? amax / 127.0f : 0.0f;
      ds[b] = d[b] * static_cast<float>(sum[b]);
    }
  }
}

void Int8MatmulAvx512Vnni(QuantType type, const uint8_t* xq, int64_t m,
                          int64_t k, const uint8_t* packed, int64_t n_begin,
                          int64_t n_end, float* y, int64_t ldy) {
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

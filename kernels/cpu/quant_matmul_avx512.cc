// The AVX-512 quant matmul (this file alone is compiled with -mavx512f
// -mfma -mf16c). A vector of 16 lanes is one register.
#include <immintrin.h>

#include "kernels/cpu/quant_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

struct Isa {
  using Vec = __m512;
  using IVec = __m512i;
  // 4 rows x 4 columns = 16 accumulators of 32 registers; 8 decoded weight
  // vectors (4 from the buffer) and a row of x in flight.
  static constexpr int kDirectRows = 4;
  static constexpr int kDirectCols = 4;
  static constexpr int kSingleRowCols = kDirectCols;
  static constexpr int kRows = 4;
  static constexpr int kCols = 4;

  static __mmask16 First(int n) {
    return static_cast<__mmask16>((1u << n) - 1);
  }
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Set1(float f) { return _mm512_set1_ps(f); }
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadFirst(const float* p, int n) {
    return _mm512_maskz_loadu_ps(First(n), p);
  }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec FmaFirst(Vec a, Vec b, Vec c, int n) {
    return _mm512_mask3_fmadd_ps(a, b, c, First(n));
  }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static __m128i Bytes16(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static IVec U8(const uint8_t* p) { return _mm512_cvtepu8_epi32(Bytes16(p)); }
  static IVec I8(const uint8_t* p) { return _mm512_cvtepi8_epi32(Bytes16(p)); }
  static IVec U16(const uint8_t* p) {
    return _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static IVec And(IVec a, int32_t b) {
    return _mm512_and_si512(a, _mm512_set1_epi32(b));
  }
  static IVec Or(IVec a, IVec b) { return _mm512_or_si512(a, b); }
  static IVec OrIf(IVec a, uint32_t bits, int32_t v) {
    return _mm512_mask_or_epi32(a, static_cast<__mmask16>(bits), a,
                                _mm512_set1_epi32(v));
  }
  static IVec SubI(IVec a, int32_t b) {
    return _mm512_sub_epi32(a, _mm512_set1_epi32(b));
  }
  static IVec Srl(IVec a, int s) { return _mm512_srli_epi32(a, s); }
  static IVec Sll(IVec a, int s) { return _mm512_slli_epi32(a, s); }
  static Vec ToFloat(IVec a) { return _mm512_cvtepi32_ps(a); }
  static Vec Bits(IVec a) { return _mm512_castsi512_ps(a); }
  // vcvtph2ps is exact (a signaling NaN comes back quiet).
  static Vec Halves(const uint8_t* p) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float Half(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
  }
  // One half in every lane; two halves (p[0, 2) and p[2, 4)) in a and b.
  static Vec HalfBroadcast(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, sizeof(h));
    return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
  static void HalfPair(const uint8_t* p, Vec* a, Vec* b) {
    int32_t hh;
    __builtin_memcpy(&hh, p, sizeof(hh));
    const __m128 ab = _mm_cvtph_ps(_mm_cvtsi32_si128(hh));
    *a = _mm512_broadcastss_ps(ab);
    *b = _mm512_broadcastss_ps(_mm_movehdup_ps(ab));
  }
  static constexpr bool kLookup16 = true;
  static Vec Iota(float first) {
    return _mm512_add_ps(
        _mm512_set1_ps(first),
        _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static Vec Lookup16(Vec table, IVec i) {
    return _mm512_permutexvar_ps(i, table);
  }
  // vpermt2ps: index bits 0-3 pick the lane, bit 4 the table.
  static Vec Lookup32(Vec lo, Vec hi, IVec i) {
    return _mm512_permutex2var_ps(lo, i, hi);
  }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static constexpr int kParts = 1;
  using Part = Vec;
  static Part PartZero() { return Zero(); }
  static Part PartLoad(const float* p) { return Load(p); }
  static Part PartFma(Part a, Part b, Part c) { return Fma(a, b, c); }
  static void PartStore(float* p, Part v) { Store(p, v); }
  // y[r * ldy + c] = Reduce(acc[r][c]) for a 4 x 4 tile, the 16 trees
  // side by side: 15 adds and 30 shuffles instead of 16 x (4 + 4).
  static constexpr bool kReduce4x4 = true;
  static void Reduce4x4(const Vec (&acc)[4][4], float* y, int64_t ldy) {
    // t1[p] = [a lanes i + (i + 8) | b lanes i + (i + 8)] for the pair
    // a = acc[2 (p % 2)][p / 2], b = acc[2 (p % 2) + 1][p / 2]; the pairing
    // makes the last step's quarter r row r, lane c column c.
    Vec t1[8];
    for (int p = 0; p < 8; ++p) {
      const Vec a = acc[2 * (p % 2)][p / 2], b = acc[2 * (p % 2) + 1][p / 2];
      t1[p] =
          _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                        _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    // t2[q]: four 4-lane quarters, lanes i + (i + 4) of the s8 vectors.
    Vec t2[4];
    for (int q = 0; q < 4; ++q) {
      const Vec a = t1[2 * q], b = t1[2 * q + 1];
      t2[q] =
          _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    }
    // t3: lanes i + (i + 2) within each quarter, two trees per quarter.
    Vec t3[2];
    for (int h = 0; h < 2; ++h) {
      const Vec a = t2[2 * h], b = t2[2 * h + 1];
      t3[h] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    // Lanes 0 + 1: quarter r holds row r's four columns.
    const Vec sums =
        _mm512_add_ps(_mm512_shuffle_ps(t3[0], t3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_ps(t3[0], t3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm_storeu_ps(y, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(sums, 3));
  }
  static float Reduce(Vec v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm512_castps512_ps256(
        _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 s8 = _mm256_add_ps(lo, hi);  // i + (i + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8),
                                 _mm256_extractf128_ps(s8, 1));  // i + (i + 4)
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));     // i + (i + 2)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));   // 0 + 1
  }
};

#include "kernels/cpu/quant_matmul_kernel.inc"

}  // namespace

void QuantMatmulAvx512(QuantType type, const float* x, int64_t m, int64_t k,
                       const uint8_t* w, int64_t n_begin, int64_t n_end,
                       float* y, int64_t ldy) {
  Run(type, x, m, k, w, n_begin, n_end, y, ldy);
}

}  // namespace lookahead::kernels::internal

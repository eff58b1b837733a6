// The AVX2 quant matmul (this file alone is compiled with -mavx2 -mfma
// -mf16c). A vector of 16 lanes is two registers, lanes 0-7 and 8-15.
#include <immintrin.h>

#include "kernels/cpu/quant_matmul_isa.h"

namespace lookahead::kernels::internal {
namespace {

struct Isa {
  struct Vec {
    __m256 lo, hi;
  };
  struct IVec {
    __m256i lo, hi;
  };
  // Of 16 registers: direct, up to 4 rows x 1 column (8 accumulators, 4
  // decoded weights); buffered, 3 rows x 4 columns of one part (lanes 0-7,
  // then 8-15: 12 accumulators). Measured on Zen 4 with Q4_1 against other
  // shapes (2 x 2, 2 x 3, 3 x 3, 4 x 3, 2 x 4; direct 1 x 4, 2 x 2).
  static constexpr int kDirectRows = 4;
  static constexpr int kDirectCols = 1;
  static constexpr int kRows = 3;
  static constexpr int kCols = 4;
  // One row (plain decoding): two columns' sums in flight instead of one,
  // to hide the multiply-add latency; Q4_1 gate+up 0.142 instead of 0.161
  // ms, the output matmul 2.29 instead of 2.59 on an AVX2-only AMD EPYC
  // (quant_matmul_bench avx2), four columns no faster.
  static constexpr int kSingleRowCols = 2;

  // Lanes < n all ones, as two halves.
  static IVec First(int n) {
    const __m256i nn = _mm256_set1_epi32(n);
    return {_mm256_cmpgt_epi32(nn, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
            _mm256_cmpgt_epi32(
                nn, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15))};
  }
  static Vec Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec Set1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static Vec Load(const float* p) {
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  }
  static Vec LoadFirst(const float* p, int n) {
    const IVec mask = First(n);
    return {_mm256_maskload_ps(p, mask.lo), _mm256_maskload_ps(p + 8, mask.hi)};
  }
  static Vec Fma(Vec a, Vec b, Vec c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo),
            _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec FmaFirst(Vec a, Vec b, Vec c, int n) {
    const IVec mask = First(n);
    const Vec f = Fma(a, b, c);
    return {_mm256_blendv_ps(c.lo, f.lo, _mm256_castsi256_ps(mask.lo)),
            _mm256_blendv_ps(c.hi, f.hi, _mm256_castsi256_ps(mask.hi))};
  }
  static Vec Mul(Vec a, Vec b) {
    return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
  }
  static __m128i Bytes8(const uint8_t* p) {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  }
  static __m128i Bytes16(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static IVec U8(const uint8_t* p) {
    return {_mm256_cvtepu8_epi32(Bytes8(p)),
            _mm256_cvtepu8_epi32(Bytes8(p + 8))};
  }
  static IVec I8(const uint8_t* p) {
    return {_mm256_cvtepi8_epi32(Bytes8(p)),
            _mm256_cvtepi8_epi32(Bytes8(p + 8))};
  }
  static IVec U16(const uint8_t* p) {
    return {_mm256_cvtepu16_epi32(Bytes16(p)),
            _mm256_cvtepu16_epi32(Bytes16(p + 16))};
  }
  static IVec And(IVec a, int32_t b) {
    const __m256i bb = _mm256_set1_epi32(b);
    return {_mm256_and_si256(a.lo, bb), _mm256_and_si256(a.hi, bb)};
  }
  static IVec Or(IVec a, IVec b) {
    return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)};
  }
  // Lane j is set iff bits & 2^j == 2^j.
  static IVec OrIf(IVec a, uint32_t bits, int32_t v) {
    const __m256i bb = _mm256_set1_epi32(static_cast<int32_t>(bits));
    const __m256i lo = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i hi = _mm256_slli_epi32(lo, 8);
    const __m256i vv = _mm256_set1_epi32(v);
    const __m256i set_lo = _mm256_cmpeq_epi32(_mm256_and_si256(bb, lo), lo);
    const __m256i set_hi = _mm256_cmpeq_epi32(_mm256_and_si256(bb, hi), hi);
    return {_mm256_or_si256(a.lo, _mm256_and_si256(set_lo, vv)),
            _mm256_or_si256(a.hi, _mm256_and_si256(set_hi, vv))};
  }
  static IVec SubI(IVec a, int32_t b) {
    const __m256i bb = _mm256_set1_epi32(b);
    return {_mm256_sub_epi32(a.lo, bb), _mm256_sub_epi32(a.hi, bb)};
  }
  static IVec Srl(IVec a, int s) {
    return {_mm256_srli_epi32(a.lo, s), _mm256_srli_epi32(a.hi, s)};
  }
  static IVec Sll(IVec a, int s) {
    return {_mm256_slli_epi32(a.lo, s), _mm256_slli_epi32(a.hi, s)};
  }
  static Vec ToFloat(IVec a) {
    return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)};
  }
  static Vec Bits(IVec a) {
    return {_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)};
  }
  // vcvtph2ps is exact (a signaling NaN comes back quiet).
  static Vec Halves(const uint8_t* p) {
    return {_mm256_cvtph_ps(Bytes16(p)), _mm256_cvtph_ps(Bytes16(p + 16))};
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
    const __m256 v = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
    return {v, v};
  }
  static void HalfPair(const uint8_t* p, Vec* a, Vec* b) {
    int32_t hh;
    __builtin_memcpy(&hh, p, sizeof(hh));
    const __m128 ab = _mm_cvtph_ps(_mm_cvtsi32_si128(hh));
    const __m256 aa = _mm256_broadcastss_ps(ab);
    const __m256 bb = _mm256_broadcastss_ps(_mm_movehdup_ps(ab));
    *a = {aa, aa};
    *b = {bb, bb};
  }
  // A 16-entry lookup is two vpermps and a blend per 8 lanes (32 entries:
  // four and three): no faster than converting.
  static constexpr bool kLookup16 = false;
  static Vec Iota(float first);
  static Vec Lookup16(Vec table, IVec i);
  static Vec Lookup32(Vec lo, Vec hi, IVec i);
  static void Store(float* p, Vec v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static constexpr int kParts = 2;
  using Part = __m256;
  static Part PartZero() { return _mm256_setzero_ps(); }
  static Part PartLoad(const float* p) { return _mm256_loadu_ps(p); }
  static Part PartFma(Part a, Part b, Part c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  static void PartStore(float* p, Part v) { _mm256_storeu_ps(p, v); }
  static constexpr bool kReduce4x4 = false;  // a 2 x 2 tile
  static void Reduce4x4(const Vec (&acc)[4][4], float* y, int64_t ldy);
  static float Reduce(Vec v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);  // i + (i + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8),
                                 _mm256_extractf128_ps(s8, 1));  // i + (i + 4)
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));     // i + (i + 2)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));   // 0 + 1
  }
};

#include "kernels/cpu/quant_matmul_kernel.inc"

}  // namespace

void QuantMatmulAvx2(QuantType type, const float* x, int64_t m, int64_t k,
                     const uint8_t* w, int64_t n_begin, int64_t n_end, float* y,
                     int64_t ldy) {
  Run(type, x, m, k, w, n_begin, n_end, y, ldy);
}

}  // namespace lookahead::kernels::internal

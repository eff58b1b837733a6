// GumbelSurvivors 8 tokens at a time (this file alone is compiled with
// -mavx512f -mavx512dq -ffp-contract=off). Every lane computes the scalar
// scan's values with the same IEEE operations in the same order (64-bit
// integer products for the counter RNG, an exact int64 -> double
// conversion, one rounding per float operation), so the survivors are the
// same tokens.
#include <immintrin.h>

#include <cstdint>

namespace lookahead::kernels::internal {
namespace {

// Every lane, for the zero-masking forms of the shifts and the float ->
// double conversion. GCC 12.2's plain forms pass _mm512_undefined_*() as
// the merge source, which -Wmaybe-uninitialized reports once inlined (GCC
// bug 105593); with every lane selected the zero-masking forms compute the
// same values and compile to the same instructions.
constexpr __mmask8 kAllLanes = 0xFF;

// kernels::SplitMix64Finalize, per lane.
inline __m512i Finalize(__m512i z) {
  z = _mm512_mullo_epi64(
      _mm512_xor_si512(z, _mm512_maskz_srli_epi64(kAllLanes, z, 30)),
      _mm512_set1_epi64(0xbf58476d1ce4e5b9LL));
  z = _mm512_mullo_epi64(
      _mm512_xor_si512(z, _mm512_maskz_srli_epi64(kAllLanes, z, 27)),
      _mm512_set1_epi64(0x94d049bb133111ebLL));
  return _mm512_xor_si512(z, _mm512_maskz_srli_epi64(kAllLanes, z, 31));
}

}  // namespace

// REQUIRES: (end - begin) % 8 == 0.
int32_t GumbelSurvivorsAvx512(const float* logits, int32_t begin,
                              int32_t end, double max_logit, double inv_t,
                              double best_score, uint64_t position_key,
                              int32_t* out) {
  const __m512d max = _mm512_set1_pd(max_logit);
  const __m512d scale = _mm512_set1_pd(inv_t);
  const __m512d best = _mm512_set1_pd(best_score);
  const __m512d neg_inf = _mm512_set1_pd(-__builtin_inf());
  const __m512i key = _mm512_set1_epi64(static_cast<int64_t>(position_key));
  const __m512i step = _mm512_set1_epi64(static_cast<int64_t>(0x9e3779b97f4a7c15ULL));
  const __m512i offset = _mm512_set1_epi64(0x632be59bd9b4e019LL);
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  int32_t count = 0;
  for (int32_t i = begin; i < end; i += 8) {
    // z = (double(logit) - max) * inv_t, NaN as -inf; d = best - z.
    __m512d x =
        _mm512_maskz_cvtps_pd(kAllLanes, _mm256_loadu_ps(logits + i));
    x = _mm512_mask_mov_pd(x, _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q),
                           neg_inf);
    const __m512d z = _mm512_mul_pd(_mm512_sub_pd(x, max), scale);
    const __m512d d = _mm512_sub_pd(best, z);
    // u = KeyedUniform(position_key, token).
    const __m512i counter = _mm512_add_epi64(
        _mm512_set1_epi64(static_cast<int64_t>(i)), lanes);
    const __m512i bits = Finalize(_mm512_xor_si512(
        key, _mm512_add_epi64(_mm512_mullo_epi64(counter, step), offset)));
    const __m512d u = _mm512_mul_pd(
        _mm512_add_pd(
            _mm512_cvtepi64_pd(_mm512_maskz_srli_epi64(kAllLanes, bits, 11)),
            _mm512_set1_pd(0.5)),
        _mm512_set1_pd(0x1.0p-53));
    // ExpNegBound(d): 2^-floor(t) where t = d log2(e) - 1e-6 >= 1, else 1.
    const __m512d t = _mm512_sub_pd(
        _mm512_mul_pd(d, _mm512_set1_pd(1.4426950408889634)),
        _mm512_set1_pd(1e-6));
    const __m512i exponent = _mm512_maskz_slli_epi64(
        kAllLanes,
        _mm512_sub_epi64(_mm512_set1_epi64(1023), _mm512_cvttpd_epi64(t)), 52);
    const __m512d bound = _mm512_mask_mov_pd(
        _mm512_set1_pd(1.0), _mm512_cmp_pd_mask(t, _mm512_set1_pd(1.0), _CMP_GE_OQ),
        _mm512_castsi512_pd(exponent));
    // GumbelSkips: d > 38, or d > 0 and u < 1 - bound - 1e-9. Lanes with
    // d > 38 skip whatever their (possibly meaningless) bound.
    const __m512d r = _mm512_sub_pd(
        _mm512_sub_pd(_mm512_set1_pd(1.0), bound), _mm512_set1_pd(1e-9));
    const __mmask8 skip =
        _mm512_cmp_pd_mask(d, _mm512_set1_pd(38.0), _CMP_GT_OQ) |
        (_mm512_cmp_pd_mask(d, _mm512_setzero_pd(), _CMP_GT_OQ) &
         _mm512_cmp_pd_mask(u, r, _CMP_LT_OQ));
    for (unsigned keep = static_cast<uint8_t>(~skip); keep != 0;
         keep &= keep - 1) {
      out[count++] = i + __builtin_ctz(keep);
    }
  }
  return count;
}

}  // namespace lookahead::kernels::internal

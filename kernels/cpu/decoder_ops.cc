#include "kernels/cpu/decoder_ops.h"

#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels {

#define LOOKAHEAD_DISPATCH(isa, call)    \
  switch (isa) {                         \
    case QuantIsa::kAvx512:              \
      return internal::ops_avx512::call; \
    case QuantIsa::kAvx2:                \
      return internal::ops_avx2::call;   \
    case QuantIsa::kScalar:              \
      return internal::ops_scalar::call; \
  }

void RmsNorm(QuantIsa isa, const float* x, int64_t m, int64_t d, const float* w,
             float eps, float* y) {
  LOOKAHEAD_DISPATCH(isa, RmsNorm(x, m, d, w, eps, y));
}

void SiluMul(QuantIsa isa, const float* gate, const float* up, int64_t n,
             float* out) {
  LOOKAHEAD_DISPATCH(isa, SiluMul(gate, up, n, out));
}

void AttendBlock(QuantIsa isa, const float* q, int heads, int head_dim,
                 const AttentionKeys& keys, int32_t begin, int32_t end,
                 float scale, float* scores, const AttentionPartial* partials) {
  LOOKAHEAD_DISPATCH(isa, AttendBlock(q, heads, head_dim, keys, begin, end,
                                      scale, scores, partials));
}

void CombineBlocks(QuantIsa isa, const AttentionPartial* blocks, int n,
                   int head_dim, float* out) {
  LOOKAHEAD_DISPATCH(isa, CombineBlocks(blocks, n, head_dim, out));
}

#undef LOOKAHEAD_DISPATCH

void Rope(float* x, int heads, int head_dim, int rope_dim, bool adjacent_pairs,
          const float* cos, const float* sin) {
  const int half = rope_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      float* a = adjacent_pairs ? xh + 2 * i : xh + i;
      float* b = adjacent_pairs ? xh + 2 * i + 1 : xh + i + half;
      const float x0 = *a, x1 = *b;
      *a = x0 * cos[i] - x1 * sin[i];
      *b = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void AttendHead(QuantIsa isa, const float* q, int head_dim,
                const AttentionKeys& keys, float scale, float* scores,
                float* out) {
  float max = 0, sum = 0;
  const AttentionPartial partial{out, &max, &sum};
  AttendBlock(isa, q, 1, head_dim, keys, 0, keys.size(), scale, scores,
              &partial);
  CombineBlocks(isa, &partial, 1, head_dim, out);
}

}  // namespace lookahead::kernels

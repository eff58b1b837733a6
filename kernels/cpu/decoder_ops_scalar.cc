// decoder_ops for any x86-64 CPU (the reference).
#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels::internal::ops_scalar {
namespace {
#include "kernels/cpu/decoder_ops_kernel.inc"
}  // namespace

void RmsNorm(const float* x, int64_t m, int64_t d, const float* w, float eps,
             float* y) {
  RmsNormImpl(x, m, d, w, eps, y);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  SiluMulImpl(gate, up, n, out);
}

void AttendBlock(const float* q, int head_dim, const AttentionKeys& keys,
                 int32_t begin, int32_t end, float scale, float* scores,
                 AttentionPartial partial) {
  AttendBlockImpl(q, head_dim, keys, begin, end, scale, scores, partial);
}

void CombineBlocks(const AttentionPartial* blocks, int n, int head_dim,
                   float* out) {
  CombineBlocksImpl(blocks, n, head_dim, out);
}

}  // namespace lookahead::kernels::internal::ops_scalar

// decoder_ops for CPUs with AVX2 + FMA (this file alone is compiled for it).
#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels::internal::ops_avx2 {
#include "kernels/cpu/decoder_ops_kernel.inc"
}  // namespace lookahead::kernels::internal::ops_avx2

// decoder_ops for CPUs with AVX-512F (this file alone is compiled for it).
#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels::internal::ops_avx512 {
#include "kernels/cpu/decoder_ops_kernel.inc"
}  // namespace lookahead::kernels::internal::ops_avx512

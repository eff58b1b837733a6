// decoder_ops for CPUs with AVX2 + FMA (this file alone is compiled for it).
#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels::internal::ops_avx2 {
// 16 registers of 8 lanes: the attention kernels take their narrow path.
#define LOOKAHEAD_DECODER_OPS_NARROW 1
#include "kernels/cpu/decoder_ops_kernel.inc"
#undef LOOKAHEAD_DECODER_OPS_NARROW
}  // namespace lookahead::kernels::internal::ops_avx2

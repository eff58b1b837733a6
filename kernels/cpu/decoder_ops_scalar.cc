// decoder_ops for any x86-64 CPU (the reference).
#include "kernels/cpu/decoder_ops_isa.h"

namespace lookahead::kernels::internal::ops_scalar {
#include "kernels/cpu/decoder_ops_kernel.inc"
}  // namespace lookahead::kernels::internal::ops_scalar

// Small-batch matmul over a panel-packed weight, for CPU decoding.
//
// y = x · W for few rows of x (a decode step's tokens: 1 to a few hundred)
// and a weight W that is read once per call. OpenBLAS packs W on every small
// gemm call; this kernel reads a weight packed once at load, streaming it
// from memory once per call (measured on the 2-core AVX-512 machine, the
// 135M model's 211 matmuls: 16 rows 43-49 ms vs 85 ms with OpenBLAS; 1 row
// 22 ms, as OpenBLAS's gemv).
//
// Row invariance: every y[r, c] is the same sequence of fused multiply-adds,
// k = 0, 1, ..., K-1 from 0, whatever the other rows of x and however many
// there are. One token's logits are bit for bit the same alone and inside a
// draft tree or a batch, so verifying a draft cannot change what plain
// decoding would have produced through rounding in the linear layers.
//
// Thread-safe: pure functions of their arguments. Callers split panels
// across threads.
#ifndef LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_H_
#define LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_H_

#include <cstdint>

namespace lookahead::kernels {

enum class PackedIsa : uint8_t {
  kNone,    // No kernel for this CPU: use another matmul.
  kAvx2,    // AVX2 + FMA, 32-column panels.
  kAvx512,  // AVX-512F, 64-column panels.
};

// The best kernel this CPU runs (checked once, at the first call).
PackedIsa BestPackedIsa();

// Columns per panel of `isa`'s layout; 0 for kNone.
int64_t PanelWidth(PackedIsa isa);

// Packed layout of a (K, N) row-major weight W for panel width P:
// packed[p][k][c] = W[k][p*P + c] for p < ceil(N / P), zero where
// p*P + c >= N. So a panel is K rows of P contiguous floats.
//
// REQUIRES: packed holds ceil(N / P) * K * P floats; w holds K * N.
void PackWeight(const float* w, int64_t k, int64_t n, int64_t panel,
                float* packed);

// For rows r < m and panels p in [panel_begin, panel_end):
// y[r * ldy + p*P + c] = sum over j < k of x[r * k + j] * packed[p][j][c],
// c < P. x is (m, k) row-major; y must have room for whole panels.
// REQUIRES: isa != kNone and the CPU supports it (BestPackedIsa() >= isa).
void PackedMatmul(PackedIsa isa, const float* x, int64_t m, int64_t k,
                  const float* packed, int64_t panel_begin, int64_t panel_end,
                  float* y, int64_t ldy);

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_CPU_PACKED_MATMUL_H_

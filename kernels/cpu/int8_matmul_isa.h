// The packed layouts of int8_matmul and its per-instruction-set entry
// points (internal: each is defined in a file compiled for its set only).
//
// A quantized row of k values (Int8RowBytes(form, k) bytes):
//   kBlock32  (nb = k / 32):  int8 q[k]; uint8 u[k] (q + 128);
//             float d[nb]; float ds[nb] (d * float(sum)); int32 sum[nb].
//   kBlock256 (nb = k / 256): int8 q[k]; float d[nb];
//             int32 sum16[k / 16] (the sum of each 16 values of q).
//
// Packed weights: tiles of 16 columns, each nb tile-blocks of
// Int8Layout(type).bytes (one per weight block: 32 values, or 256 for the
// K types), tile t's block b at (t * nb + b) * bytes. A tile-block holds
// its 32-value sub-blocks' value planes first (Int8Layout::sub_bytes each,
// in order), then the scales. In a sub-block, "step s" (s < 8) is values
// 4s .. 4s + 3; a 64-byte plane row holds one step of every column, bytes
// 4c .. 4c + 3 being column c's four values. Values are the weight's
// stored codes, unsigned (0 .. 2^bits - 1; Q8_0: signed), in planes:
//   nibble plane (codes of 4 to 6 bits: their bits 0-3): 4 x 64 bytes,
//     byte j of row g holding step g in its low nibble, step g + 4 in its
//     high one;
//   crumb plane (codes of 2 or 3 bits: their bits 0-1; 6-bit codes: bits
//     4-5): 2 x 64 bytes, bits 2i, 2i + 1 of byte j of row p holding step
//     4p + i;
//   bit plane (5-bit codes: bit 4; 3-bit codes: bit 2): 64 bytes, bit s of
//     byte j holding step s;
//   Q8_0: 8 x 64 bytes of int8 values.
// A sub-block is the low plane (nibble, or crumb for 2 and 3 bits), then
// the high one if any.
// The scales, per column c of the tile (halves are IEEE half floats):
//   Q4_0, Q5_0:  half d[16]                     at scale_at
//   Q4_1, Q5_1:  half d[16], half m[16]
//   Q8_0:        half d[16], int32 corr[16] (128 * the block's value sum)
//   Q4_K, Q5_K:  uint8 sc[8][16], uint8 mn[8][16] (sub-block j's 6-bit
//                scale and min), half d[16], half dmin[16]
//   Q2_K:        uint8 sc[16][16] (group g of 16 values: scale in the low
//                nibble, min in the high one, as GGUF), half d, half dmin
//   Q3_K:        int8 sc[16][16] (group g's 6-bit scale - 32), half d[16]
//   Q6_K:        int8 sc[16][16] (scale of values 16g .. 16g + 15), half d[16]
// Zero columns past n have zero bytes (d = 0: they add +0).
#ifndef LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_
#define LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_

#include <cstdint>

#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels::internal {

constexpr int64_t kInt8Tile = 16;

struct Int8Layout {
  int bits = 0;           // bits of a stored value; 0: not computed
  int64_t block = 0;      // values per weight block (32 or 256)
  int64_t sub_bytes = 0;  // bytes of one 32-value sub-block's planes
  int64_t scale_at = 0;   // offset of the scales in a tile-block
  int64_t bytes = 0;      // bytes of a tile-block
  // K types: scale groups a block (8 of 32 values, or 16 of 16), and
  // whether each group has a min (Q4_K, Q5_K, Q2_K).
  int groups = 0;
  bool mins = false;
  // Offsets of the scale arrays named above (0 where the type has none;
  // Q2_K's mins share sc_at).
  int64_t d_at = 0, m_at = 0, sc_at = 0, mn_at = 0;
};

constexpr int64_t SubBlockBytes(int bits) {
  return bits == 8   ? 512
         : bits >= 4 ? 256 + (bits - 4) * 64   // nibble + bit or crumb plane
                     : 128 + (bits - 2) * 64;  // crumb + bit plane
}

constexpr Int8Layout MakeLayout(int bits, int64_t block, bool has_m,
                                int groups) {
  Int8Layout l;
  l.bits = bits;
  l.block = block;
  l.sub_bytes = SubBlockBytes(bits);
  l.scale_at = (block / 32) * l.sub_bytes;
  l.groups = groups;
  l.mins = has_m && block == 256;
  if (block == 32) {
    l.d_at = l.scale_at;
    l.m_at = has_m || bits == 8 ? l.d_at + 32 : 0;  // Q8_0: corr
    l.bytes = l.d_at + 32 + (has_m ? 32 : bits == 8 ? 64 : 0);
  } else if (groups == 8) {  // Q4_K, Q5_K
    l.sc_at = l.scale_at;
    l.mn_at = l.sc_at + 8 * 16;
    l.d_at = l.mn_at + 8 * 16;
    l.m_at = l.d_at + 32;  // dmin
    l.bytes = l.m_at + 32;
  } else {  // Q2_K (mins in sc's high nibbles), Q3_K, Q6_K
    l.sc_at = l.scale_at;
    l.d_at = l.sc_at + 16 * 16;
    l.m_at = has_m ? l.d_at + 32 : 0;
    l.bytes = l.d_at + 32 + (has_m ? 32 : 0);
  }
  return l;
}

constexpr Int8Layout LayoutOf(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return MakeLayout(4, 32, false, 0);
    case QuantType::kQ4_1:
      return MakeLayout(4, 32, true, 0);
    case QuantType::kQ5_0:
      return MakeLayout(5, 32, false, 0);
    case QuantType::kQ5_1:
      return MakeLayout(5, 32, true, 0);
    case QuantType::kQ8_0:
      return MakeLayout(8, 32, false, 0);
    case QuantType::kQ2_K:
      return MakeLayout(2, 256, true, 16);
    case QuantType::kQ3_K:
      return MakeLayout(3, 256, false, 16);
    case QuantType::kQ4_K:
      return MakeLayout(4, 256, true, 8);
    case QuantType::kQ5_K:
      return MakeLayout(5, 256, true, 8);
    case QuantType::kQ6_K:
      return MakeLayout(6, 256, false, 16);
    default:
      return Int8Layout{};
  }
}

// A call streams each weight byte from memory once, and the hardware
// prefetcher alone leaves the multiplies waiting for it: on the 2-core Zen 4
// machine a 4-row Q4_K call took about the 1-row call's time plus the 4
// rows' in-cache compute, not the larger of the two. So the kernels ask for
// the bytes about kInt8PrefetchAhead ahead of the block they multiply, a
// slice of a block per step (quant_matmul_bench rows: the 4-row call on
// Qwen2.5-1.5B's gate+up went from 2.1x to 1.2x the 1-row call).
constexpr int64_t kInt8PrefetchAhead = 4608;

// Tile-blocks of `type` between the one a kernel multiplies and the one it
// prefetches: at least 1, about kInt8PrefetchAhead bytes.
constexpr int64_t Int8PrefetchBlocks(QuantType type) {
  const int64_t bytes = LayoutOf(type).bytes;
  return bytes >= kInt8PrefetchAhead ? 1
                                     : (kInt8PrefetchAhead + bytes - 1) / bytes;
}

// Prefetches slice `slice` of kSlices of the kBytes at p, a cache line at a
// time (addresses past the weight are harmless: a prefetch never faults).
template <int64_t kBytes, int kSlices>
inline void PrefetchSlice(const uint8_t* p, int slice) {
  constexpr int64_t kLines = (kBytes + 63) / 64;
  constexpr int64_t kPer = (kLines + kSlices - 1) / kSlices;
#pragma GCC unroll 16
  for (int64_t l = 0; l < kPer; ++l) {
    __builtin_prefetch(p + 64 * (slice * kPer + l));
  }
}

// The offset subtracted from a stored value (Q4_0: 8, Q5_0: 16, Q3_K: 4,
// Q6_K: 32).
constexpr int32_t Int8ValueOffset(QuantType type) {
  return type == QuantType::kQ4_0   ? 8
         : type == QuantType::kQ5_0 ? 16
         : type == QuantType::kQ3_K ? 4
         : type == QuantType::kQ6_K ? 32
                                    : 0;
}

// A quantized row's parts (kBlock32: q, u, d, ds, sum; kBlock256: q, d,
// sum16).
struct Int8Row {
  const int8_t* q;
  const uint8_t* u;
  const float* d;
  const float* ds;
  const int32_t* sum;
  const int32_t* sum16;
};
inline Int8Row Int8RowAt(Int8Activations form, const uint8_t* xq, int64_t r,
                         int64_t k) {
  if (form == Int8Activations::kBlock256) {
    const uint8_t* p = xq + r * (k + 4 * (k / 256) + 4 * (k / 16));
    const float* d = reinterpret_cast<const float*>(p + k);
    return {reinterpret_cast<const int8_t*>(p),
            nullptr,
            d,
            nullptr,
            nullptr,
            reinterpret_cast<const int32_t*>(d + k / 256)};
  }
  const uint8_t* p = xq + r * (2 * k + 12 * (k / 32));
  const int64_t nb = k / 32;
  return {reinterpret_cast<const int8_t*>(p),
          p + k,
          reinterpret_cast<const float*>(p + 2 * k),
          reinterpret_cast<const float*>(p + 2 * k) + nb,
          reinterpret_cast<const int32_t*>(p + 2 * k) + 2 * nb,
          nullptr};
}

// As QuantizeInt8Rows and Int8Matmul, for one instruction set.
void QuantizeInt8RowsScalar(Int8Activations form, const float* x, int64_t m,
                            int64_t k, uint8_t* out);
void QuantizeInt8RowsAvx512Vnni(Int8Activations form, const float* x, int64_t m,
                                int64_t k, uint8_t* out);
void Int8MatmulScalar(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                      const uint8_t* packed, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy);
void Int8MatmulAvx2(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                    const uint8_t* packed, int64_t n_begin, int64_t n_end,
                    float* y, int64_t ldy);
void Int8MatmulAvx512Vnni(QuantType type, const uint8_t* xq, int64_t m,
                          int64_t k, const uint8_t* packed, int64_t n_begin,
                          int64_t n_end, float* y, int64_t ldy);

}  // namespace lookahead::kernels::internal

#endif  // LOOKAHEAD_KERNELS_CPU_INT8_MATMUL_ISA_H_

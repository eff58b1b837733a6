// int8_matmul's entry points, the quantizer and packer (portable; small
// next to the matmul), and the scalar reference over the packed layout.
// Compiled with -ffp-contract=off: every Mul and fma below is the one
// rounding the header's sum names.
#include "kernels/cpu/int8_matmul.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/int8_matmul_isa.h"
#include "kernels/cpu/quant_matmul_isa.h"

namespace lookahead::kernels {
namespace {

using internal::Int8Layout;
using internal::kInt8Tile;
using internal::LayoutOf;

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// `block` values into q (and, if u is not null, u = q + 128); returns
// their scale and sum.
void QuantizeBlock(const float* x, int block, int8_t* q, uint8_t* u, float* d,
                   int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < block; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;  // NaN compares false
  }
  const bool usable = amax > 0.0f && std::isfinite(amax);
  const float id = usable ? 127.0f / amax : 0.0f;
  int32_t s = 0;
  for (int i = 0; i < block; ++i) {
    float v = x[i] * id;  // |v| <= 127 up to rounding, or NaN
    if (std::isnan(v)) v = 0.0f;
    v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
    const int qi = static_cast<int>(std::nearbyint(v));  // to nearest even
    q[i] = static_cast<int8_t>(qi);
    if (u != nullptr) u[i] = static_cast<uint8_t>(qi + 128);
    s += qi;
  }
  *d = usable ? amax / 127.0f : 0.0f;
  *sum = s;
}

// One GGUF weight block, decoded to its stored codes and scales.
struct BlockCodes {
  uint8_t v[256];  // stored codes (Q8_0: int8 bit patterns)
  uint8_t d[2];    // half d, as stored
  uint8_t m[2];    // half m (Q4_1, Q5_1) or dmin (Q4_K, Q5_K), as stored
  uint8_t sc[16];  // K types: sub-block scales (Q6_K: int8)
  uint8_t mn[8];   // Q4_K, Q5_K: sub-block mins
};

// Q4_K and Q5_K's 6-bit scale and min of sub-block j (ggml's
// get_scale_min_k4).
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The codes of one block of `type` at src (layouts as ggml-common.h).
void DecodeBlock(QuantType type, const uint8_t* src, BlockCodes* out) {
  std::memset(out, 0, sizeof(*out));
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const bool has_m = type == QuantType::kQ4_1 || type == QuantType::kQ5_1;
      const bool q5 = type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
      std::memcpy(out->d, src, 2);
      if (has_m) std::memcpy(out->m, src + 2, 2);
      const uint8_t* p = src + (has_m ? 4 : 2);
      const uint32_t qh = q5 ? LoadU32(p) : 0;
      const uint8_t* qs = p + (q5 ? 4 : 0);
      for (int j = 0; j < 32; ++j) {
        const int nibble = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
        out->v[j] = static_cast<uint8_t>(nibble | (((qh >> j) & 1) << 4));
      }
      return;
    }
    case QuantType::kQ8_0:
      std::memcpy(out->d, src, 2);
      std::memcpy(out->v, src + 2, 32);
      return;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool q5 = type == QuantType::kQ5_K;
      std::memcpy(out->d, src, 2);
      std::memcpy(out->m, src + 2, 2);
      const uint8_t* scales = src + 4;
      const uint8_t* qh = src + 16;
      const uint8_t* qs = src + (q5 ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        ScaleMinK4(j, scales, &out->sc[j], &out->mn[j]);
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          const int nibble = j % 2 == 0 ? byte & 15 : byte >> 4;
          const int high = q5 ? (qh[l] >> j) & 1 : 0;
          out->v[32 * j + l] = static_cast<uint8_t>(nibble | high << 4);
        }
      }
      return;
    }
    case QuantType::kQ2_K: {
      // {sc[16] (scale | min << 4), qs[64], d, dmin}: value e = 128n + 32j
      // + l is bits 2j, 2j + 1 of qs[32n + l].
      std::memcpy(out->sc, src, 16);
      std::memcpy(out->d, src + 80, 2);
      std::memcpy(out->m, src + 82, 2);
      for (int e = 0; e < 256; ++e) {
        const int n = e / 128, j = (e % 128) / 32, l = e % 32;
        out->v[e] = (src[16 + 32 * n + l] >> (2 * j)) & 3;
      }
      return;
    }
    case QuantType::kQ3_K: {
      // {hmask[32], qs[64], scales[12], d}: value e = 128n + 32j + l is
      // bits 2j, 2j + 1 of qs[32n + l] and bit 4n + j of hmask[l] (a set
      // bit: + 4), minus 4; group g's scale is 6 bits (ggml's kmask
      // unpacking) minus 32.
      const uint8_t* hmask = src;
      const uint8_t* qs = src + 32;
      const uint8_t* scales = src + 96;
      std::memcpy(out->d, src + 108, 2);
      for (int g = 0; g < 16; ++g) {
        const int low = g < 8 ? scales[g] & 15 : scales[g - 8] >> 4;
        const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
        out->sc[g] =
            static_cast<uint8_t>(static_cast<int8_t>((low | high << 4) - 32));
      }
      for (int e = 0; e < 256; ++e) {
        const int n = e / 128, j = (e % 128) / 32, l = e % 32;
        const int low = (qs[32 * n + l] >> (2 * j)) & 3;
        const int high = (hmask[l] >> (4 * n + j)) & 1;
        out->v[e] = static_cast<uint8_t>(low | high << 2);
      }
      return;
    }
    case QuantType::kQ6_K: {
      const uint8_t* ql = src;
      const uint8_t* qh = src + 128;
      std::memcpy(out->sc, src + 192, 16);
      std::memcpy(out->d, src + 208, 2);
      for (int e = 0; e < 256; ++e) {
        const int n = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = ql[64 * n + l + 32 * (quarter % 2)];
        const int low = quarter < 2 ? low_byte & 15 : low_byte >> 4;
        const int high = (qh[32 * n + l] >> (2 * quarter)) & 3;
        out->v[e] = static_cast<uint8_t>(low | high << 4);
      }
      return;
    }
    default:
      return;  // not computed (REQUIRES)
  }
}

// Writes column c of a tile-block from its codes (layout in
// int8_matmul_isa.h).
void PackBlock(QuantType type, const BlockCodes& codes, int c, uint8_t* dst) {
  const Int8Layout l = LayoutOf(type);
  const int low_bits = l.bits >= 4 ? 4 : 2;
  const int64_t high_at = low_bits == 4 ? 256 : 128;
  for (int64_t j = 0; j < l.block / 32; ++j) {
    const uint8_t* v = codes.v + 32 * j;
    uint8_t* sub = dst + j * l.sub_bytes;
    for (int e = 0; e < 4; ++e) {
      if (l.bits == 8) {
        for (int s = 0; s < 8; ++s) sub[64 * s + 4 * c + e] = v[4 * s + e];
        continue;
      }
      // Bits [shift, shift + 2) of steps 4p .. 4p + 3, a crumb-plane byte.
      const auto crumbs = [&](int p, int shift) {
        uint8_t bits = 0;
        for (int i = 0; i < 4; ++i) {
          bits |= ((v[4 * (4 * p + i) + e] >> shift) & 3) << (2 * i);
        }
        return bits;
      };
      if (low_bits == 4) {
        for (int g = 0; g < 4; ++g) {
          sub[64 * g + 4 * c + e] = static_cast<uint8_t>(
              (v[4 * g + e] & 15) | (v[16 + 4 * g + e] & 15) << 4);
        }
      } else {
        for (int p = 0; p < 2; ++p) sub[64 * p + 4 * c + e] = crumbs(p, 0);
      }
      if (l.bits == 5 || l.bits == 3) {  // bit plane of bit low_bits
        uint8_t bits = 0;
        for (int s = 0; s < 8; ++s) {
          bits |= ((v[4 * s + e] >> low_bits) & 1) << s;
        }
        sub[high_at + 4 * c + e] = bits;
      } else if (l.bits == 6) {
        for (int p = 0; p < 2; ++p) {
          sub[high_at + 64 * p + 4 * c + e] = crumbs(p, 4);
        }
      }
    }
  }
  std::memcpy(dst + l.d_at + 2 * c, codes.d, 2);
  if (type == QuantType::kQ8_0) {
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) sum += static_cast<int8_t>(codes.v[i]);
    const int32_t corr = 128 * sum;
    std::memcpy(dst + l.m_at + 4 * c, &corr, 4);
  } else if (l.m_at != 0) {
    std::memcpy(dst + l.m_at + 2 * c, codes.m, 2);
  }
  for (int g = 0; g < l.groups; ++g) dst[l.sc_at + 16 * g + c] = codes.sc[g];
  if (l.mn_at != 0) {
    for (int j = 0; j < 8; ++j) dst[l.mn_at + 16 * j + c] = codes.mn[j];
  }
}

// The stored code of value i (< block) of column c in a tile-block.
int32_t PackedCode(const Int8Layout& l, const uint8_t* blk, int c, int64_t i) {
  const uint8_t* sub = blk + (i / 32) * l.sub_bytes;
  const int s = static_cast<int>(i % 32) / 4, e = static_cast<int>(i % 4);
  if (l.bits == 8) return static_cast<int8_t>(sub[64 * s + 4 * c + e]);
  const auto crumb = [&](int64_t at) {
    return (sub[at + 64 * (s / 4) + 4 * c + e] >> (2 * (s % 4))) & 3;
  };
  if (l.bits < 4) {
    int32_t v = crumb(0);
    if (l.bits == 3) v |= ((sub[128 + 4 * c + e] >> s) & 1) << 2;
    return v;
  }
  const uint8_t byte = sub[64 * (s % 4) + 4 * c + e];
  int32_t v = s < 4 ? byte & 15 : byte >> 4;
  if (l.bits == 5) v |= ((sub[256 + 4 * c + e] >> s) & 1) << 4;
  if (l.bits == 6) v |= crumb(256) << 4;
  return v;
}

}  // namespace

Int8Isa BestInt8Isa() {
  static const Int8Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni")) {
      return Int8Isa::kAvx512Vnni;
    }
    // The AVX2 kernel needs FMA and F16C too: exactly what a non-scalar
    // BestQuantIsa() checked (clang's __builtin_cpu_supports lacks "f16c").
    if (__builtin_cpu_supports("avx2") && BestQuantIsa() != QuantIsa::kScalar) {
      return Int8Isa::kAvx2;
    }
    return Int8Isa::kScalar;
  }();
  return best;
}

const char* Int8IsaName(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kScalar:
      return "scalar";
    case Int8Isa::kAvx2:
      return "AVX2";
    case Int8Isa::kAvx512Vnni:
      return "AVX-512 VNNI";
  }
  return "?";
}

bool Int8Computes(QuantType type) { return LayoutOf(type).bits != 0; }

Int8Activations Int8ActivationsFor(QuantType type) {
  return LayoutOf(type).block == 256 ? Int8Activations::kBlock256
                                     : Int8Activations::kBlock32;
}

int64_t Int8BlockSize(Int8Activations form) {
  return form == Int8Activations::kBlock256 ? 256 : 32;
}

int64_t Int8RowBytes(Int8Activations form, int64_t k) {
  return form == Int8Activations::kBlock256 ? k + 4 * (k / 256) + 4 * (k / 16)
                                            : 2 * k + 12 * (k / 32);
}

void QuantizeInt8Rows(Int8Isa isa, Int8Activations form, const float* x,
                      int64_t m, int64_t k, uint8_t* out) {
  if (isa == Int8Isa::kAvx512Vnni) {
    internal::QuantizeInt8RowsAvx512Vnni(form, x, m, k, out);
  } else {
    // AVX2 too: a pass quantizes m x k values against the matmul's m x k x
    // n multiply-adds.
    internal::QuantizeInt8RowsScalar(form, x, m, k, out);
  }
}

void internal::QuantizeInt8RowsScalar(Int8Activations form, const float* x,
                                      int64_t m, int64_t k, uint8_t* out) {
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = out + r * Int8RowBytes(form, k);
    const float* xr = x + r * k;
    int8_t* q = reinterpret_cast<int8_t*>(row);
    if (form == Int8Activations::kBlock256) {
      float* d = reinterpret_cast<float*>(row + k);
      int32_t* sum16 = reinterpret_cast<int32_t*>(d + k / 256);
      for (int64_t b = 0; b < k / 256; ++b) {
        int32_t sum;
        QuantizeBlock(xr + 256 * b, 256, q + 256 * b, nullptr, d + b, &sum);
      }
      for (int64_t g = 0; g < k / 16; ++g) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += q[16 * g + i];
        sum16[g] = s;
      }
      continue;
    }
    const int64_t nb = k / 32;
    uint8_t* u = row + k;
    float* d = reinterpret_cast<float*>(row + 2 * k);
    float* ds = d + nb;
    int32_t* sum = reinterpret_cast<int32_t*>(ds + nb);
    for (int64_t b = 0; b < nb; ++b) {
      QuantizeBlock(xr + 32 * b, 32, q + 32 * b, u + 32 * b, d + b, sum + b);
      ds[b] = d[b] * static_cast<float>(sum[b]);
    }
  }
}

int64_t Int8PackedBytes(QuantType type, int64_t k, int64_t n) {
  const Int8Layout l = LayoutOf(type);
  const int64_t tiles = (n + kInt8Tile - 1) / kInt8Tile;
  return tiles * (k / l.block) * l.bytes;
}

void PackInt8Weights(QuantType type, const uint8_t* w, int64_t k, int64_t n,
                     uint8_t* out) {
  const Int8Layout l = LayoutOf(type);
  const int64_t nb = k / l.block;
  const int64_t row_bytes = QuantRowBytes(type, k);
  const int64_t block_bytes = QuantRowBytes(type, l.block);
  std::memset(out, 0, Int8PackedBytes(type, k, n));
  BlockCodes codes;
  for (int64_t col = 0; col < n; ++col) {
    const int64_t t = col / kInt8Tile, c = col % kInt8Tile;
    for (int64_t b = 0; b < nb; ++b) {
      DecodeBlock(type, w + col * row_bytes + b * block_bytes, &codes);
      PackBlock(type, codes, static_cast<int>(c), out + (t * nb + b) * l.bytes);
    }
  }
}

namespace internal {

void Int8MatmulScalar(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                      const uint8_t* packed, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy) {
  const Int8Layout l = LayoutOf(type);
  const Int8Activations form = Int8ActivationsFor(type);
  const int64_t nb = k / l.block;
  const int32_t offset = Int8ValueOffset(type);
  for (int64_t r = 0; r < m; ++r) {
    const Int8Row x = Int8RowAt(form, xq, r, k);
    for (int64_t col = n_begin; col < n_end; ++col) {
      const int c = static_cast<int>(col % kInt8Tile);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = packed + ((col / kInt8Tile) * nb + b) * l.bytes;
        const int8_t* a = x.q + l.block * b;
        const float dw = HalfToFloat(LoadU16(blk + l.d_at + 2 * c));
        if (l.block == 32) {
          int32_t p = 0;
          for (int i = 0; i < 32; ++i) p += PackedCode(l, blk, c, i) * a[i];
          p -= offset * x.sum[b];
          acc = std::fma(static_cast<float>(p), dw * x.d[b], acc);
          if (type == QuantType::kQ4_1 || type == QuantType::kQ5_1) {
            const float mw = HalfToFloat(LoadU16(blk + l.m_at + 2 * c));
            acc = std::fma(mw, x.ds[b], acc);
          }
          continue;
        }
        const int32_t* sum16 = x.sum16 + 16 * b;
        const int per = 256 / l.groups;  // values a scale group
        int32_t s = 0, t = 0;
        for (int g = 0; g < l.groups; ++g) {
          int32_t p = 0;
          for (int i = per * g; i < per * g + per; ++i) {
            p += PackedCode(l, blk, c, i) * a[i];
          }
          const int32_t xsum =
              per == 16 ? sum16[g] : sum16[2 * g] + sum16[2 * g + 1];
          const uint8_t sc = blk[l.sc_at + 16 * g + c];
          if (type == QuantType::kQ2_K) {
            s += (sc & 15) * p;
            t += (sc >> 4) * xsum;
          } else if (l.mins) {
            s += sc * p;
            t += blk[l.mn_at + 16 * g + c] * xsum;
          } else {
            s += static_cast<int8_t>(sc) * (p - offset * xsum);
          }
        }
        acc = std::fma(static_cast<float>(s), dw * x.d[b], acc);
        if (l.mins) {
          const float dmin = HalfToFloat(LoadU16(blk + l.m_at + 2 * c));
          acc = std::fma(static_cast<float>(t), -(dmin * x.d[b]), acc);
        }
      }
      y[r * ldy + col] = acc;
    }
  }
}

}  // namespace internal

void Int8Matmul(Int8Isa isa, QuantType type, const uint8_t* xq, int64_t m,
                int64_t k, const uint8_t* packed, int64_t n_begin,
                int64_t n_end, float* y, int64_t ldy) {
  if (m <= 0 || n_begin >= n_end) return;
  switch (isa) {
    case Int8Isa::kScalar:
      internal::Int8MatmulScalar(type, xq, m, k, packed, n_begin, n_end, y,
                                 ldy);
      return;
    case Int8Isa::kAvx2:
      internal::Int8MatmulAvx2(type, xq, m, k, packed, n_begin, n_end, y, ldy);
      return;
    case Int8Isa::kAvx512Vnni:
      internal::Int8MatmulAvx512Vnni(type, xq, m, k, packed, n_begin, n_end, y,
                                     ldy);
      return;
  }
}

}  // namespace lookahead::kernels

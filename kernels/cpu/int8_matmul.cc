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

using internal::Int8PackedBlockBytes;
using internal::kInt8Tile;

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One block of 32 values into q (and u = q + 128); returns its scale, sum.
void QuantizeBlock(const float* x, int8_t* q, uint8_t* u, float* d,
                   int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;  // NaN compares false
  }
  const bool usable = amax > 0.0f && std::isfinite(amax);
  const float id = usable ? 127.0f / amax : 0.0f;
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) {
    float v = x[i] * id;  // |v| <= 127 up to rounding, or NaN
    if (std::isnan(v)) v = 0.0f;
    v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
    const int qi = static_cast<int>(std::nearbyint(v));  // to nearest even
    q[i] = static_cast<int8_t>(qi);
    u[i] = static_cast<uint8_t>(qi + 128);
    s += qi;
  }
  *d = usable ? amax / 127.0f : 0.0f;
  *sum = s;
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
    if (__builtin_cpu_supports("avx2") &&
        BestQuantIsa() != QuantIsa::kScalar) {
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

bool Int8Computes(QuantType type) { return Int8PackedBlockBytes(type) != 0; }

int64_t Int8RowBytes(int64_t k) { return 2 * k + 12 * (k / 32); }

void QuantizeInt8Rows(Int8Isa isa, const float* x, int64_t m, int64_t k,
                      uint8_t* out) {
  if (isa == Int8Isa::kAvx512Vnni) {
    internal::QuantizeInt8RowsAvx512Vnni(x, m, k, out);
  } else {
    // AVX2 too: a pass quantizes m x k values against the matmul's m x k x
    // n multiply-adds.
    internal::QuantizeInt8RowsScalar(x, m, k, out);
  }
}

void internal::QuantizeInt8RowsScalar(const float* x, int64_t m, int64_t k,
                                      uint8_t* out) {
  const int64_t nb = k / 32;
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = out + r * Int8RowBytes(k);
    int8_t* q = reinterpret_cast<int8_t*>(row);
    uint8_t* u = row + k;
    float* d = reinterpret_cast<float*>(row + 2 * k);
    float* ds = d + nb;
    int32_t* sum = reinterpret_cast<int32_t*>(ds + nb);
    for (int64_t b = 0; b < nb; ++b) {
      QuantizeBlock(x + r * k + 32 * b, q + 32 * b, u + 32 * b, d + b,
                    sum + b);
      ds[b] = d[b] * static_cast<float>(sum[b]);
    }
  }
}

int64_t Int8PackedBytes(QuantType type, int64_t k, int64_t n) {
  const int64_t tiles = (n + kInt8Tile - 1) / kInt8Tile;
  return tiles * (k / 32) * Int8PackedBlockBytes(type);
}

void PackInt8Weights(QuantType type, const uint8_t* w, int64_t k, int64_t n,
                     uint8_t* out) {
  const int64_t nb = k / 32, bytes = Int8PackedBlockBytes(type);
  const int64_t row_bytes = QuantRowBytes(type, k);
  std::memset(out, 0, Int8PackedBytes(type, k, n));
  for (int64_t col = 0; col < n; ++col) {
    const int64_t t = col / kInt8Tile, c = col % kInt8Tile;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = w + col * row_bytes + b * QuantRowBytes(type, 32);
      uint8_t* dst = out + (t * nb + b) * bytes;
      if (type == QuantType::kQ8_0) {
        int32_t sum = 0;
        for (int s = 0; s < 8; ++s) {
          for (int e = 0; e < 4; ++e) {
            dst[64 * s + 4 * c + e] = src[2 + 4 * s + e];
            sum += static_cast<int8_t>(src[2 + 4 * s + e]);
          }
        }
        std::memcpy(dst + 512 + 2 * c, src, 2);
        const int32_t corr = 128 * sum;
        std::memcpy(dst + 544 + 4 * c, &corr, 4);
      } else {
        const int header = type == QuantType::kQ4_1 ? 4 : 2;
        // Group g's bytes 4c + e are qs[4g + e]: element 4g + e in the low
        // nibble, 16 + 4g + e (step g + 4) in the high one.
        for (int g = 0; g < 4; ++g) {
          std::memcpy(dst + 64 * g + 4 * c, src + header + 4 * g, 4);
        }
        std::memcpy(dst + 256 + 2 * c, src, 2);
        if (type == QuantType::kQ4_1) std::memcpy(dst + 288 + 2 * c, src + 2, 2);
      }
    }
  }
}

namespace internal {

void Int8MatmulScalar(QuantType type, const uint8_t* xq, int64_t m, int64_t k,
                      const uint8_t* packed, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy) {
  const int64_t nb = k / 32, bytes = Int8PackedBlockBytes(type);
  for (int64_t r = 0; r < m; ++r) {
    const Int8Row x = Int8RowAt(xq, r, k);
    for (int64_t col = n_begin; col < n_end; ++col) {
      const int64_t t = col / kInt8Tile, c = col % kInt8Tile;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = packed + (t * nb + b) * bytes;
        const int8_t* a = x.q + 32 * b;
        int32_t p = 0;
        if (type == QuantType::kQ8_0) {
          for (int s = 0; s < 8; ++s) {
            for (int e = 0; e < 4; ++e) {
              p += static_cast<int8_t>(blk[64 * s + 4 * c + e]) * a[4 * s + e];
            }
          }
        } else {
          for (int g = 0; g < 4; ++g) {
            for (int e = 0; e < 4; ++e) {
              const uint8_t byte = blk[64 * g + 4 * c + e];
              p += (byte & 15) * a[4 * g + e] + (byte >> 4) * a[16 + 4 * g + e];
            }
          }
          if (type == QuantType::kQ4_0) p -= 8 * x.sum[b];
        }
        const int64_t d_at = type == QuantType::kQ8_0 ? 512 : 256;
        const float dw = HalfToFloat(LoadU16(blk + d_at + 2 * c));
        acc = std::fma(static_cast<float>(p), dw * x.d[b], acc);
        if (type == QuantType::kQ4_1) {
          const float mw = HalfToFloat(LoadU16(blk + 288 + 2 * c));
          acc = std::fma(mw, x.ds[b], acc);
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
      internal::Int8MatmulAvx512Vnni(type, xq, m, k, packed, n_begin, n_end,
                                     y, ldy);
      return;
  }
}

}  // namespace lookahead::kernels

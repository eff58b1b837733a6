// ggml tensor element types (as stored in GGUF files), their block layouts,
// and conversion of stored blocks to float. Pure functions on caller-owned
// memory: safe to call concurrently from any number of threads.
//
// Every ggml type stores a row of `n` elements as n / BlockSize(type) blocks
// of TypeSize(type) bytes each; a row never splits a block. Quantized layouts
// follow ggml's ggml-common.h (all multi-byte fields little-endian).
#ifndef LOOKAHEAD_ENGINE_GGUF_DEQUANT_H_
#define LOOKAHEAD_ENGINE_GGUF_DEQUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lookahead::engine {

// Element types of ggml tensors. Values are the on-disk ids of the GGUF spec
// (ggml.h `enum ggml_type`). Persisted: DO NOT CHANGE. Gaps (4, 5, 31-33,
// 36-38) are ids ggml removed; files using them are rejected.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Returns true iff `id` is one of the GgmlType values above.
bool IsKnownGgmlType(uint32_t id);

// Elements per block (1 for plain types, 32 for Q4_0.., 256 for K-quants).
// REQUIRES: IsKnownGgmlType(type).
int64_t BlockSize(GgmlType type);

// Bytes per block. REQUIRES: IsKnownGgmlType(type).
int64_t TypeSize(GgmlType type);

// "F32", "Q4_K", ...; "unknown" for an id that is not a GgmlType.
absl::string_view TypeName(GgmlType type);

// Returns the bytes a row of `n` elements occupies. INVALID_ARGUMENT iff
// `type` is unknown, n < 0, n is not a multiple of BlockSize(type), or the
// byte count overflows int64.
absl::StatusOr<int64_t> RowBytes(GgmlType type, int64_t n);

// Returns true iff Dequantize supports `type`: F32, F16, BF16, F64, I8, I16,
// I32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
bool CanDequantize(GgmlType type);

// Decodes `n` elements stored as `type` at `data` into out[0, n).
// REQUIRES: `data` holds RowBytes(type, n) readable bytes; `out` holds n
// floats. Returns INVALID_ARGUMENT iff n is negative or not a multiple of
// BlockSize(type), UNIMPLEMENTED iff !CanDequantize(type). Never reads or
// writes outside those ranges; does not check values (a NaN stays NaN).
absl::Status Dequantize(GgmlType type, const uint8_t* data, int64_t n,
                        float* out);

// IEEE half <-> float, exact (round-to-nearest-even for FloatToHalf).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// bfloat16 <-> float (round-to-nearest-even; NaN stays NaN).
float Bf16ToFloat(uint16_t h);
uint16_t FloatToBf16(float f);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_GGUF_DEQUANT_H_

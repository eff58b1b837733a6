// NativeLinear: a matmul weight kept in memory as the GGUF file stores it
// (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K), computed with
// kernels/cpu/quant_matmul, which dequantizes in registers: y = x Wᵀ with
// fp32 activations and sums; or, with LinearActivations::kInt8, every
// quantized type repacked for kernels/cpu/int8_matmul. Several GGUF
// tensors may be stacked along the output (q, k and v; gate and up), each
// keeping its own type, so one call covers them all. Torch-free.
//
// Immutable after Create: safe for concurrent use.
#ifndef LOOKAHEAD_ENGINE_MODEL_NATIVE_LINEAR_H_
#define LOOKAHEAD_ENGINE_MODEL_NATIVE_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/panel_pool.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::engine {

class WeightArena;

// What a NativeLinear multiplies its weights by.
enum class LinearActivations {
  // float32 activations and sums (quant_matmul): every product is the
  // dequantized weight's, so outputs match HF transformers' greedy tokens
  // (golden_test). The default, and the verifier's.
  kF32,
  // Activations quantized to int8 (per 32 values, or per 256 for the K
  // types), integer dot products with Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
  // Q2_K .. Q6_K weights (int8_matmul; llama.cpp's form for them): about
  // 2x cheaper matmuls with AVX-512 VNNI (quant_matmul_bench), but a lossy,
  // slightly different model. Still row-invariant, so drafting stays
  // lossless against plain decoding in the same form. Other weight types
  // (F32, F16, BF16), and any weight whose input size is not a multiple of
  // 32, stay kF32.
  kInt8,
};

// "f32" or "int8"; parsed back by ParseLinearActivations (INVALID_ARGUMENT
// naming the choices otherwise).
std::string LinearActivationsName(LinearActivations activations);
absl::StatusOr<LinearActivations> ParseLinearActivations(
    absl::string_view name);

class NativeLinear {
 public:
  NativeLinear() = default;  // Empty: in() == out() == 0.

  // A tensor of ggml dims [in, rows]: `rows` output rows of `in` values,
  // of which the first `keep` are used (-1: all). Keeping a prefix of an
  // LM head's rows scores only the low vocabulary ids (a draft-only form).
  struct Part {
    std::string name;
    int64_t rows;
    int64_t keep = -1;
  };
  // The tensors `parts` of `file`, stacked along the output in that order;
  // out() is the sum of their kept rows. NOT_FOUND naming a missing tensor;
  // INVALID_ARGUMENT naming a tensor of the wrong shape or a `keep` outside
  // [1, rows]; UNIMPLEMENTED
  // naming a tensor whose type quant_matmul does not compute.
  // The weights go into `arena` while it has room (null: the heap).
  static absl::StatusOr<NativeLinear> Create(
      const GgufFile& file, const std::vector<Part>& parts, int64_t in,
      LinearActivations activations = LinearActivations::kF32,
      WeightArena* arena = nullptr);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  // Bytes of weights held.
  int64_t bytes() const;
  // "Q4_1" or "Q4_1+Q8_0" (the parts' types).
  std::string TypeName() const;
  // Whether any part computes with int8 activations.
  bool int8() const;

  // y[r * ldy + n] = sum_j x[r * in + j] * W[n][j] for r < m, n < out().
  // The columns are shared out over `pool` (null: the calling thread); each
  // y element is the same however they are split and whatever the other
  // rows hold (quant_matmul's row invariance).
  // REQUIRES: ldy >= out(); the CPU runs `isa`; y does not overlap x.
  void Apply(kernels::QuantIsa isa, const float* x, int64_t m, float* y,
             int64_t ldy, kernels::PanelPool* pool) const;

  // Output row n of W (an embedding lookup when W is token_embd): `in`
  // floats into `out`, valued as engine/gguf's Dequantize. REQUIRES:
  // 0 <= n < out(); created with LinearActivations::kF32.
  void Row(int64_t n, float* out) const;

 private:
  struct Block {
    kernels::QuantType type = kernels::QuantType::kF32;
    int64_t first = 0;  // first output column
    int64_t rows = 0;
    int64_t row_bytes = 0;
    // The GGUF rows (rows * row_bytes), or if `int8` the same packed by
    // kernels::PackInt8Weights.
    bool int8 = false;
    kernels::Int8Activations form = kernels::Int8Activations::kBlock32;
    std::shared_ptr<const uint8_t> data;
    int64_t size = 0;  // bytes at data
  };
  int64_t in_ = 0, out_ = 0;
  // Bit f set iff a part computes with int8 activations in form f
  // (kernels::Int8Activations).
  unsigned int8_forms_ = 0;
  std::vector<Block> parts_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_NATIVE_LINEAR_H_

#include "engine/model/native_linear.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/gguf/dequant.h"
#include "engine/model/weight_arena.h"

namespace lookahead::engine {

std::string LinearActivationsName(LinearActivations activations) {
  return activations == LinearActivations::kInt8 ? "int8" : "f32";
}

absl::StatusOr<LinearActivations> ParseLinearActivations(
    absl::string_view name) {
  if (name == "f32") return LinearActivations::kF32;
  if (name == "int8") return LinearActivations::kInt8;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown activations \"", name, "\"; use f32 or int8"));
}

absl::StatusOr<NativeLinear> NativeLinear::Create(
    const GgufFile& file, const std::vector<Part>& parts, int64_t in,
    LinearActivations activations, WeightArena* arena) {
  NativeLinear w;
  w.in_ = in;
  for (const auto& [name, rows, keep] : parts) {
    const GgufTensorInfo* info = file.FindTensor(name);
    if (info == nullptr) {
      return absl::NotFoundError(absl::StrCat("tensor ", name, " is missing"));
    }
    if (info->dims != std::vector<int64_t>{in, rows}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, " has ggml dims [", absl::StrJoin(info->dims, ", "),
          "], expected [", in, ", ", rows, "]"));
    }
    const uint32_t id = static_cast<uint32_t>(info->type);
    if (!kernels::IsQuantType(id)) {
      return absl::UnimplementedError(absl::StrCat(
          "tensor ", name, " is ", engine::TypeName(info->type),
          ", which --weights=native does not compute (use --weights=f32)"));
    }
    if (keep != -1 && (keep < 1 || keep > rows)) {
      return absl::InvalidArgumentError(
          absl::StrCat("keeping ", keep, " rows of tensor ", name, " (", rows,
                       " rows): keep 1 to ", rows, ", or -1 for all"));
    }
    Block part;
    part.type = static_cast<kernels::QuantType>(id);
    part.first = w.out_;
    part.rows = info->dims[1];
    part.row_bytes = kernels::QuantRowBytes(part.type, in);
    absl::Span<const uint8_t> bytes = file.TensorData(*info);
    if (static_cast<int64_t>(bytes.size()) != part.rows * part.row_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " holds ", bytes.size(),
                       " bytes, expected ", part.rows * part.row_bytes));
    }
    if (keep != -1) {
      part.rows = keep;
      bytes = bytes.subspan(0, keep * part.row_bytes);
    }
    part.int8 = activations == LinearActivations::kInt8 &&
                kernels::Int8Computes(part.type) && in % 32 == 0 && in > 0;
    if (part.int8) {
      part.form = kernels::Int8ActivationsFor(part.type);
      w.int8_forms_ |= 1u << static_cast<int>(part.form);
    }
    part.size = part.int8 ? kernels::Int8PackedBytes(part.type, in, part.rows)
                          : static_cast<int64_t>(bytes.size());
    std::shared_ptr<uint8_t> data =
        arena != nullptr ? arena->Allocate(part.size) : nullptr;
    if (data == nullptr) {
      auto heap = std::make_shared<std::vector<uint8_t>>(part.size);
      data = std::shared_ptr<uint8_t>(heap, heap->data());
    }
    if (part.int8) {
      kernels::PackInt8Weights(part.type, bytes.data(), in, part.rows,
                               data.get());
    } else {
      std::memcpy(data.get(), bytes.data(), bytes.size());
    }
    part.data = std::move(data);
    w.out_ += part.rows;
    w.parts_.push_back(std::move(part));
  }
  return w;
}

int64_t NativeLinear::bytes() const {
  int64_t total = 0;
  for (const Block& p : parts_) total += p.size;
  return total;
}

bool NativeLinear::int8() const { return int8_forms_ != 0; }

std::string NativeLinear::TypeName() const {
  std::vector<std::string> types;
  for (const Block& p : parts_) {
    std::string t(engine::TypeName(static_cast<GgmlType>(p.type)));
    if (std::find(types.begin(), types.end(), t) == types.end()) {
      types.push_back(t);
    }
  }
  return absl::StrJoin(types, "+");
}

void NativeLinear::Apply(kernels::QuantIsa isa, const float* x, int64_t m,
                         float* y, int64_t ldy,
                         kernels::PanelPool* pool) const {
  // Int8 parts read x quantized once here, by the calling thread, in each
  // form a part takes (a Q4_K_M model stacks K types with Q5_0 or Q8_0).
  // The buffers are the thread's own and only grow, so a pass allocates
  // nothing once it has seen its sizes.
  // (The pool's workers read them through xq_data: a thread_local named
  // in the lambda below would be the worker's own.)
  thread_local std::vector<uint8_t> xq[2];
  const uint8_t* xq_data[2] = {nullptr, nullptr};
  const kernels::Int8Isa int8_isa = kernels::BestInt8Isa();
  for (int f = 0; f < 2; ++f) {
    if ((int8_forms_ & (1u << f)) == 0) continue;
    const auto form = static_cast<kernels::Int8Activations>(f);
    const size_t need = m * kernels::Int8RowBytes(form, in_);
    if (xq[f].size() < need) xq[f].resize(need);
    kernels::QuantizeInt8Rows(int8_isa, form, x, m, in_, xq[f].data());
    xq_data[f] = xq[f].data();
  }
  const auto run = [&](int64_t begin, int64_t end) {
    for (const Block& p : parts_) {
      const int64_t b = std::max(begin, p.first) - p.first;
      const int64_t e = std::min(end, p.first + p.rows) - p.first;
      if (b >= e) continue;
      if (p.int8) {
        kernels::Int8Matmul(int8_isa, p.type,
                            xq_data[static_cast<int>(p.form)], m, in_,
                            p.data.get(), b, e, y + p.first, ldy);
      } else {
        kernels::QuantMatmul(isa, p.type, x, m, in_, p.data.get(), b, e,
                             y + p.first, ldy);
      }
    }
  };
  if (pool == nullptr || pool->threads() == 1) {
    run(0, out_);
    return;
  }
  // Several chunks per thread, so one held up is covered; whole 16-column
  // groups, the kernels' tile width.
  const int64_t chunks = 8 * pool->threads();
  const int64_t chunk =
      std::max<int64_t>(16, (out_ + chunks - 1) / chunks + 15) / 16 * 16;
  pool->Run(out_, chunk, std::cref(run));  // no std::function allocation
}

void NativeLinear::Row(int64_t n, float* out) const {
  for (const Block& p : parts_) {
    if (n < p.first || n >= p.first + p.rows || p.int8) continue;
    const uint8_t* row = p.data.get() + (n - p.first) * p.row_bytes;
    // Cannot fail: the type and size were checked by Create.
    Dequantize(static_cast<GgmlType>(p.type), row, in_, out).IgnoreError();
    return;
  }
}

}  // namespace lookahead::engine

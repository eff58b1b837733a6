// A small GGUF (v2/v3, little-endian) writer for tests and tools: builds
// tiny random-weight models and deliberately corrupt files. Not for
// production model export. Not thread-safe (one writer per thread).
//
// Usage:
//   GgufWriter w;
//   w.AddMetadata("general.architecture", GgufValue::String("llama"));
//   RETURN_IF_ERROR(w.AddTensor("tok_embd.weight", {64, 10}, values,
//                               GgmlType::kQ8_0));
//   std::string bytes = w.WriteToString();
#ifndef LOOKAHEAD_ENGINE_TESTING_GGUF_WRITER_H_
#define LOOKAHEAD_ENGINE_TESTING_GGUF_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/gguf.h"

namespace lookahead::engine {

// Encodes `values` as `type` with ggml's reference (round-to-nearest)
// quantizers. Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1; UNIMPLEMENTED for
// others, INVALID_ARGUMENT iff values.size() is not a multiple of
// BlockSize(type).
absl::StatusOr<std::string> QuantizeRow(GgmlType type,
                                        absl::Span<const float> values);

class GgufWriter {
 public:
  // `version` is written as is (2 and 3 have the same layout; others are
  // for negative tests).
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Appends a key/value in order; duplicates are written as given. Setting
  // "general.alignment" to a non-zero integer also makes the writer pad the
  // data section and tensors to that alignment (default 32).
  void AddMetadata(std::string key, GgufValue value);

  // Adds a tensor with ggml-order `dims` (dims[0] = row length) holding
  // `values` (row-major, num_elements of them) stored as `type` (see
  // QuantizeRow). INVALID_ARGUMENT iff dims are empty/non-positive, their
  // product != values.size(), or dims[0] is not a multiple of the block size.
  absl::Status AddTensor(std::string name, std::vector<int64_t> dims,
                         absl::Span<const float> values,
                         GgmlType type = GgmlType::kF32);

  // Adds a tensor with arbitrary raw type id and bytes, unchecked (for
  // corrupt-file tests). Its data is placed at the next aligned offset
  // unless `offset` (relative to the data section) overrides the offset
  // written in the header; the bytes are still stored at the next aligned
  // position.
  void AddRawTensor(std::string name, std::vector<int64_t> dims, uint32_t type,
                    std::string bytes,
                    std::optional<uint64_t> offset = std::nullopt);

  // The complete file.
  std::string WriteToString() const;
  // Writes WriteToString() to `path`; INTERNAL with the path on I/O error.
  absl::Status WriteToFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    std::string bytes;
    std::optional<uint64_t> offset;
  };
  uint64_t Alignment() const;

  uint32_t version_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TESTING_GGUF_WRITER_H_

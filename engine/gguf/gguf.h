// Reader of GGUF model files (versions 2 and 3, little-endian): typed
// metadata, tensor infos, and tensor data (mmapped, or from an owned buffer)
// with dequantization to float. No torch dependency.
// Thread-safety: a GgufFile is immutable after Open/FromBuffer; every const
// method is safe to call concurrently. Spans/pointers it hands out live as
// long as the GgufFile.
//
// Error codes (all messages name the offending key, tensor or path):
//   NOT_FOUND         missing file, metadata key or tensor.
//   DATA_LOSS         the bytes are not a well-formed GGUF file: bad magic,
//                     truncation, a count or length larger than the bytes
//                     left, unknown value or tensor type, zero/negative/
//                     overflowing dims, bad alignment, tensor data that is
//                     misaligned, out of range or overlapping, duplicates,
//                     arrays nested > 8 deep or > 2^24 array elements in
//                     all metadata (bounds memory).
//   UNIMPLEMENTED     well-formed but unsupported: versions other than 2/3,
//                     big-endian files, dequantizing e.g. an IQ* tensor.
//   INVALID_ARGUMENT  caller misuse: wrong output size, a metadata value of a
//                     type the getter cannot convert (message has expected
//                     and actual type).
#ifndef LOOKAHEAD_ENGINE_GGUF_GGUF_H_
#define LOOKAHEAD_ENGINE_GGUF_GGUF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/dequant.h"

namespace lookahead::engine {

// Metadata value type ids of the GGUF spec. Persisted: DO NOT CHANGE.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
absl::string_view ValueTypeName(GgufValueType type);  // "uint32", "array"..

class GgufValue;
// A GGUF array: every element has type `element_type` (may be kArray).
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  std::vector<GgufValue> elements;
};

// One typed metadata value. Cheap to move; copies deep-copy arrays.
class GgufValue {
 public:
  // Alternative index == GgufValueType id.
  using Variant =
      std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                   bool, std::string, GgufArray, uint64_t, int64_t, double>;

  GgufValue() : v_(uint8_t{0}) {}
  static GgufValue Uint8(uint8_t x) { return GgufValue(Variant(x)); }
  static GgufValue Int8(int8_t x) { return GgufValue(Variant(x)); }
  static GgufValue Uint16(uint16_t x) { return GgufValue(Variant(x)); }
  static GgufValue Int16(int16_t x) { return GgufValue(Variant(x)); }
  static GgufValue Uint32(uint32_t x) { return GgufValue(Variant(x)); }
  static GgufValue Int32(int32_t x) { return GgufValue(Variant(x)); }
  static GgufValue Uint64(uint64_t x) { return GgufValue(Variant(x)); }
  static GgufValue Int64(int64_t x) { return GgufValue(Variant(x)); }
  static GgufValue Float32(float x) { return GgufValue(Variant(x)); }
  static GgufValue Float64(double x) { return GgufValue(Variant(x)); }
  static GgufValue Bool(bool x) { return GgufValue(Variant(x)); }
  static GgufValue String(std::string x) {
    return GgufValue(Variant(std::move(x)));
  }
  // REQUIRES: every element has type `element_type` (the writer checks).
  static GgufValue Array(GgufValueType element_type,
                         std::vector<GgufValue> elements);
  static GgufValue StringArray(const std::vector<std::string>& xs);
  static GgufValue Int32Array(const std::vector<int32_t>& xs);
  static GgufValue Float32Array(const std::vector<float>& xs);

  GgufValueType type() const { return static_cast<GgufValueType>(v_.index()); }
  const Variant& variant() const { return v_; }

  // Integer value of any of the 8 integer types iff it fits the result type
  // (bool and floats are not integers); else nullopt.
  std::optional<int64_t> AsInt64() const;
  std::optional<uint64_t> AsUint64() const;
  // float32/float64 value, else nullopt.
  std::optional<double> AsDouble() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;  // nullptr unless a string
  const GgufArray* AsArray() const;     // nullptr unless an array

  // Short human-readable rendering (arrays abbreviated), for messages.
  std::string DebugString() const;

  friend bool operator==(const GgufValue& a, const GgufValue& b);
  friend bool operator!=(const GgufValue& a, const GgufValue& b) {
    return !(a == b);
  }

 private:
  explicit GgufValue(Variant v) : v_(std::move(v)) {}
  Variant v_;
};
bool operator==(const GgufArray& a, const GgufArray& b);

// One tensor's header entry, validated against the file.
struct GgufTensorInfo {
  std::string name;
  // ggml order: dims[0] is the fastest-varying (row length). 1 to 4 dims,
  // each >= 1; dims[0] is a multiple of BlockSize(type).
  std::vector<int64_t> dims;
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section; multiple of alignment
  uint64_t num_elements = 0;  // product of dims
  uint64_t num_bytes = 0;     // RowBytes(type, dims[0]) * rows
};

// A parsed GGUF file. See the top of this header for errors and threading.
class GgufFile {
 public:
  // mmaps `path` read-only and parses it. NOT_FOUND iff it does not exist.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path);
  // Parses `bytes`, which the GgufFile keeps (tests, fuzzing).
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(
      std::string bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }      // general.alignment|32
  uint64_t data_offset() const { return data_offset_; }  // from file start
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return metadata_;
  }
  // nullptr iff `key` is absent.
  const GgufValue* FindValue(absl::string_view key) const;

  // Typed getters: NOT_FOUND if absent; INVALID_ARGUMENT naming the key,
  // the expected and the actual type if the value does not convert.
  // Integer getters accept any integer type whose value fits; GetFloat
  // accepts float32 and float64.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<uint32_t> GetUint32(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint64(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt64(absl::string_view key) const;
  absl::StatusOr<float> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  // Arrays: every element must convert, else INVALID_ARGUMENT naming the
  // element index.
  absl::StatusOr<std::vector<std::string>> GetStringArray(
      absl::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetInt32Array(
      absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;
  // As above but an absent key yields `default_value` (a present value of
  // the wrong type is still an error).
  absl::StatusOr<std::string> GetStringOr(absl::string_view key,
                                          std::string default_value) const;
  absl::StatusOr<uint32_t> GetUint32Or(absl::string_view key,
                                       uint32_t default_value) const;
  absl::StatusOr<int64_t> GetInt64Or(absl::string_view key,
                                     int64_t default_value) const;
  absl::StatusOr<float> GetFloatOr(absl::string_view key,
                                   float default_value) const;
  absl::StatusOr<bool> GetBoolOr(absl::string_view key,
                                 bool default_value) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr iff there is no tensor named `name`.
  const GgufTensorInfo* FindTensor(absl::string_view name) const;
  // The tensor's stored bytes (num_bytes of them).
  // REQUIRES: `info` is an element of tensors().
  absl::Span<const uint8_t> TensorData(const GgufTensorInfo& info) const;

  // Tells the OS this process no longer needs the mapped file's pages (after
  // a model copied what it keeps), so they leave its resident set; reading
  // tensor data afterwards still works (the pages fault back in). No-op for
  // FromBuffer files. Thread-compatible.
  void ReleaseMappedPages() const;

  // Decodes the tensor into `out`. INVALID_ARGUMENT iff out.size() !=
  // num_elements; UNIMPLEMENTED iff !CanDequantize(info.type).
  // REQUIRES: `info` is an element of tensors().
  absl::Status DequantizeTensor(const GgufTensorInfo& info,
                                absl::Span<float> out) const;
  // Same, into a new vector; NOT_FOUND iff no tensor is named `name`.
  absl::StatusOr<std::vector<float>> DequantizeTensor(
      absl::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  // Constant after construction.
  std::string owned_;               // FromBuffer storage
  void* map_ = nullptr;             // Open storage (munmapped in destructor)
  const uint8_t* bytes_ = nullptr;  // whole file
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_GGUF_GGUF_H_

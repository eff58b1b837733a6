// GGUF layout (all little-endian), versions 2 and 3:
//   u32 magic "GGUF"; u32 version; u64 tensor_count; u64 kv_count;
//   kv_count x { string key; u32 value_type; value }
//   tensor_count x { string name; u32 n_dims; u64 dims[n_dims]; u32 type;
//                    u64 offset }
//   padding to `alignment`; data section (tensor offsets relative to it).
// string = u64 length + bytes; array = u32 element_type + u64 count +
// elements. Every length/count is bounded by the bytes left before anything
// is allocated for it.
#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace lookahead::engine {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper are rejected
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// Array elements in all metadata together. An in-memory GgufValue is ~40
// bytes, so this bounds metadata memory (~700 MB) whatever the file holds;
// real tokenizers use well under 1M (SmolLM2: ~98k).
constexpr uint64_t kMaxMetadataArrayElements = uint64_t{1} << 24;

bool IsKnownValueType(uint32_t t) { return t <= 12; }

// Smallest encoding of one value of type `t` (bounds counts by bytes left).
uint64_t MinEncodedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kString:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kArray:
      return 4 + 8;
  }
  return 1;
}

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  absl::Status Read(T* out, absl::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(sizeof(T), what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, absl::string_view what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return absl::DataLossError(absl::StrCat(
          what, ": string length ", len, " at offset ", pos_ - 8,
          " exceeds the ", remaining(), " bytes left in the file"));
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  // Accounts for `n` more array elements; DATA_LOSS past the global cap.
  absl::Status ChargeArrayElements(uint64_t n, absl::string_view what) {
    if (n > array_elements_left_) {
      return absl::DataLossError(
          absl::StrCat(what, ": metadata arrays hold more than ",
                       kMaxMetadataArrayElements, " elements in total"));
    }
    array_elements_left_ -= n;
    return absl::OkStatus();
  }

  absl::Status Truncated(uint64_t need, absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(
        "truncated file: ", what, " needs ", need, " bytes at offset ", pos_,
        " but only ", remaining(), " remain (file size ", size_, ")"));
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t array_elements_left_ = kMaxMetadataArrayElements;
};

absl::StatusOr<GgufValue> ReadValue(Cursor& in, GgufValueType type,
                                    absl::string_view what, int depth);

template <typename T>
absl::StatusOr<GgufValue> ReadScalar(Cursor& in, absl::string_view what,
                                     GgufValue (*make)(T)) {
  T v{};
  RETURN_IF_ERROR(in.Read(&v, what));
  return make(v);
}

absl::StatusOr<GgufValue> ReadArray(Cursor& in, absl::string_view what,
                                    int depth) {
  if (depth >= kMaxArrayDepth) {
    return absl::DataLossError(
        absl::StrCat(what, ": arrays nested deeper than ", kMaxArrayDepth));
  }
  uint32_t elem_type = 0;
  uint64_t count = 0;
  RETURN_IF_ERROR(in.Read(&elem_type, what));
  if (!IsKnownValueType(elem_type)) {
    return absl::DataLossError(
        absl::StrCat(what, ": unknown array element type id ", elem_type));
  }
  RETURN_IF_ERROR(in.Read(&count, what));
  const auto type = static_cast<GgufValueType>(elem_type);
  if (count > in.remaining() / MinEncodedSize(type)) {
    return absl::DataLossError(
        absl::StrCat(what, ": array of ", count, " ", ValueTypeName(type),
                     " elements cannot fit in the ", in.remaining(),
                     " bytes left in the file"));
  }
  RETURN_IF_ERROR(in.ChargeArrayElements(count, what));
  std::vector<GgufValue> elements;
  elements.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(in, type, what, depth + 1));
    elements.push_back(std::move(v));
  }
  return GgufValue::Array(type, std::move(elements));
}

absl::StatusOr<GgufValue> ReadValue(Cursor& in, GgufValueType type,
                                    absl::string_view what, int depth) {
  switch (type) {
    case GgufValueType::kUint8:
      return ReadScalar(in, what, &GgufValue::Uint8);
    case GgufValueType::kInt8:
      return ReadScalar(in, what, &GgufValue::Int8);
    case GgufValueType::kUint16:
      return ReadScalar(in, what, &GgufValue::Uint16);
    case GgufValueType::kInt16:
      return ReadScalar(in, what, &GgufValue::Int16);
    case GgufValueType::kUint32:
      return ReadScalar(in, what, &GgufValue::Uint32);
    case GgufValueType::kInt32:
      return ReadScalar(in, what, &GgufValue::Int32);
    case GgufValueType::kUint64:
      return ReadScalar(in, what, &GgufValue::Uint64);
    case GgufValueType::kInt64:
      return ReadScalar(in, what, &GgufValue::Int64);
    case GgufValueType::kFloat32:
      return ReadScalar(in, what, &GgufValue::Float32);
    case GgufValueType::kFloat64:
      return ReadScalar(in, what, &GgufValue::Float64);
    case GgufValueType::kBool: {
      uint8_t b = 0;
      RETURN_IF_ERROR(in.Read(&b, what));
      if (b > 1) {
        return absl::DataLossError(absl::StrCat(
            what, ": bool byte is ", static_cast<int>(b), ", expected 0 or 1"));
      }
      return GgufValue::Bool(b == 1);
    }
    case GgufValueType::kString: {
      std::string s;
      RETURN_IF_ERROR(in.ReadString(&s, what));
      return GgufValue::String(std::move(s));
    }
    case GgufValueType::kArray:
      return ReadArray(in, what, depth);
  }
  return absl::DataLossError(absl::StrCat(what, ": unknown value type"));
}

std::string Quote(absl::string_view s) {
  return absl::StrCat("'", absl::CHexEscape(s.substr(0, 200)), "'");
}

absl::Status TypeError(absl::string_view key, absl::string_view expected,
                       const GgufValue& v) {
  return absl::InvalidArgumentError(
      absl::StrCat("metadata key ", Quote(key), ": expected ", expected,
                   ", got ", ValueTypeName(v.type()), " ", v.DebugString()));
}

}  // namespace

// ---------------------------------------------------------------- GgufValue

absl::string_view ValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

GgufValue GgufValue::Array(GgufValueType element_type,
                           std::vector<GgufValue> elements) {
  GgufArray a;
  a.element_type = element_type;
  a.elements = std::move(elements);
  return GgufValue(Variant(std::move(a)));
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& xs) {
  std::vector<GgufValue> v;
  v.reserve(xs.size());
  for (const std::string& x : xs) v.push_back(String(x));
  return Array(GgufValueType::kString, std::move(v));
}

GgufValue GgufValue::Int32Array(const std::vector<int32_t>& xs) {
  std::vector<GgufValue> v;
  v.reserve(xs.size());
  for (int32_t x : xs) v.push_back(Int32(x));
  return Array(GgufValueType::kInt32, std::move(v));
}

GgufValue GgufValue::Float32Array(const std::vector<float>& xs) {
  std::vector<GgufValue> v;
  v.reserve(xs.size());
  for (float x : xs) v.push_back(Float32(x));
  return Array(GgufValueType::kFloat32, std::move(v));
}

std::optional<int64_t> GgufValue::AsInt64() const {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return std::nullopt;
          }
          return static_cast<int64_t>(x);
        } else if constexpr (std::is_integral_v<T> &&
                             !std::is_same_v<T, bool>) {
          return static_cast<int64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      v_);
}

std::optional<uint64_t> GgufValue::AsUint64() const {
  return std::visit(
      [](const auto& x) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) return std::nullopt;
          }
          return static_cast<uint64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      v_);
}

std::optional<double> GgufValue::AsDouble() const {
  if (const float* f = std::get_if<float>(&v_)) return *f;
  if (const double* d = std::get_if<double>(&v_)) return *d;
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (const bool* b = std::get_if<bool>(&v_)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const {
  return std::get_if<std::string>(&v_);
}

const GgufArray* GgufValue::AsArray() const {
  return std::get_if<GgufArray>(&v_);
}

std::string GgufValue::DebugString() const {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return Quote(x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          std::string s = absl::StrCat("[", ValueTypeName(x.element_type),
                                       " x ", x.elements.size(), ": ");
          for (size_t i = 0; i < x.elements.size() && i < 3; ++i) {
            absl::StrAppend(&s, i ? ", " : "", x.elements[i].DebugString());
          }
          absl::StrAppend(&s, x.elements.size() > 3 ? ", ...]" : "]");
          return s;
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> ||
                             std::is_same_v<T, int8_t>) {
          return absl::StrCat(static_cast<int>(x));
        } else {
          return absl::StrCat(x);
        }
      },
      v_);
}

bool operator==(const GgufArray& a, const GgufArray& b) {
  return a.element_type == b.element_type && a.elements == b.elements;
}

bool operator==(const GgufValue& a, const GgufValue& b) { return a.v_ == b.v_; }

// ----------------------------------------------------------------- GgufFile

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg =
        absl::StrCat("cannot open GGUF file '", path, "': ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF path '", path, "' is not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* map = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map == MAP_FAILED) {
      return absl::UnavailableError(
          absl::StrCat("cannot mmap GGUF file '", path, "': ", strerror(err)));
    }
    file->map_ = map;
    file->bytes_ = static_cast<const uint8_t*>(map);
  } else {
    ::close(fd);
  }
  absl::Status s = file->Parse();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(
    std::string bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->owned_ = std::move(bytes);
  file->bytes_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status GgufFile::Parse() {
  Cursor in(bytes_, size_);
  uint32_t magic = 0;
  RETURN_IF_ERROR(in.Read(&magic, "magic"));
  if (magic != kMagic) {
    return absl::DataLossError(absl::StrCat(
        "not a GGUF file: bad magic ",
        Quote(absl::string_view(reinterpret_cast<const char*>(bytes_), 4)),
        " (expected 'GGUF')"));
  }
  RETURN_IF_ERROR(in.Read(&version_, "version"));
  if (version_ == 1) {
    return absl::UnimplementedError(
        "GGUF version 1 is not supported (only versions 2 and 3)");
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFF) == 0) {
      return absl::UnimplementedError(absl::StrCat(
          "big-endian GGUF files are not supported (version field 0x",
          absl::Hex(version_), ")"));
    }
    return absl::UnimplementedError(
        absl::StrCat("unsupported GGUF version ", version_, " (only 2 and 3)"));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(in.Read(&tensor_count, "tensor count"));
  RETURN_IF_ERROR(in.Read(&kv_count, "metadata count"));
  // Minimal encodings: kv = key length + type + 1 value byte; tensor info =
  // name length + n_dims + one dim + type + offset.
  if (kv_count > in.remaining() / (8 + 4 + 1)) {
    return absl::DataLossError(
        absl::StrCat("metadata count ", kv_count, " cannot fit in the ",
                     in.remaining(), " bytes left in the file"));
  }
  if (tensor_count > in.remaining() / (8 + 4 + 8 + 4 + 8)) {
    return absl::DataLossError(
        absl::StrCat("tensor count ", tensor_count, " cannot fit in the ",
                     in.remaining(), " bytes left in the file"));
  }

  metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    RETURN_IF_ERROR(
        in.ReadString(&key, absl::StrCat("key of metadata entry #", i)));
    const std::string what = absl::StrCat("metadata key ", Quote(key));
    uint32_t type = 0;
    RETURN_IF_ERROR(in.Read(&type, what));
    if (!IsKnownValueType(type)) {
      return absl::DataLossError(
          absl::StrCat(what, ": unknown value type id ", type));
    }
    ASSIGN_OR_RETURN(GgufValue value,
                     ReadValue(in, static_cast<GgufValueType>(type), what, 0));
    if (!metadata_index_.emplace(key, metadata_.size()).second) {
      return absl::DataLossError(
          absl::StrCat("duplicate metadata key ", Quote(key)));
    }
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = FindValue("general.alignment")) {
    const std::optional<uint64_t> v = a->AsUint64();
    if (!v.has_value() || *v == 0 || (*v & (*v - 1)) != 0 ||
        *v > kMaxAlignment) {
      return absl::DataLossError(absl::StrCat(
          "general.alignment must be a power of two integer <= 2^30, got ",
          ValueTypeName(a->type()), " ", a->DebugString()));
    }
    alignment_ = *v;
  }

  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    RETURN_IF_ERROR(
        in.ReadString(&t.name, absl::StrCat("name of tensor info #", i)));
    const std::string what = absl::StrCat("tensor ", Quote(t.name));
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(in.Read(&n_dims, what));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return absl::DataLossError(absl::StrCat(
          what, " has ", n_dims, " dimensions (must be 1 to ", kMaxDims, ")"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      RETURN_IF_ERROR(in.Read(&dim, what));
      if (dim == 0 ||
          dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::DataLossError(absl::StrCat(
            what, ": dimension ", d, " is ", dim, " (must be in [1, 2^63))"));
      }
      if (elements >
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        return absl::DataLossError(absl::StrCat(
            what, ": element count overflows int64 at dimension ", d));
      }
      elements *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.num_elements = elements;
    uint32_t type = 0;
    RETURN_IF_ERROR(in.Read(&type, what));
    if (!IsKnownGgmlType(type)) {
      return absl::DataLossError(
          absl::StrCat(what, " has unknown ggml type id ", type));
    }
    t.type = static_cast<GgmlType>(type);
    RETURN_IF_ERROR(in.Read(&t.offset, what));

    absl::StatusOr<int64_t> row_bytes = RowBytes(t.type, t.dims[0]);
    if (!row_bytes.ok()) {
      return absl::DataLossError(
          absl::StrCat(what, ": ", row_bytes.status().message()));
    }
    const uint64_t rows = elements / static_cast<uint64_t>(t.dims[0]);
    if (static_cast<uint64_t>(*row_bytes) >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / rows) {
      return absl::DataLossError(
          absl::StrCat(what, ": byte size overflows int64"));
    }
    t.num_bytes = static_cast<uint64_t>(*row_bytes) * rows;
    if (t.offset % alignment_ != 0) {
      return absl::DataLossError(absl::StrCat(what, ": data offset ", t.offset,
                                              " is not a multiple of the ",
                                              "alignment ", alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::DataLossError(
          absl::StrCat("duplicate tensor name ", Quote(t.name)));
    }
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = in.pos();
  data_offset_ = pos + (alignment_ - pos % alignment_) % alignment_;
  if (tensors_.empty()) return absl::OkStatus();
  if (data_offset_ > size_) {
    return absl::DataLossError(
        absl::StrCat("truncated file: data section would start at offset ",
                     data_offset_, " but the file has ", size_, " bytes"));
  }
  const uint64_t data_size = size_ - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.num_bytes > data_size - t.offset) {
      return absl::DataLossError(absl::StrCat(
          "tensor ", Quote(t.name), ": data [", t.offset, ", +", t.num_bytes,
          ") lies outside the data section of ", data_size,
          " bytes (file truncated or offset out of range)"));
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
              return a->offset < b->offset;
            });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.num_bytes > b.offset) {
      return absl::DataLossError(
          absl::StrCat("tensors ", Quote(a.name), " [", a.offset, ", +",
                       a.num_bytes, ") and ", Quote(b.name), " [", b.offset,
                       ", +", b.num_bytes, ") overlap"));
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ lookups

const GgufValue* GgufFile::FindValue(absl::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {
absl::Status MissingKey(absl::string_view key) {
  return absl::NotFoundError(
      absl::StrCat("metadata key ", Quote(key), " not found"));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  if (const std::string* s = v->AsString()) return *s;
  return TypeError(key, "string", *v);
}

absl::StatusOr<uint32_t> GgufFile::GetUint32(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  const std::optional<uint64_t> x = v->AsUint64();
  if (!x.has_value() || *x > std::numeric_limits<uint32_t>::max()) {
    return TypeError(key, "an integer that fits uint32", *v);
  }
  return static_cast<uint32_t>(*x);
}

absl::StatusOr<uint64_t> GgufFile::GetUint64(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  const std::optional<uint64_t> x = v->AsUint64();
  if (!x.has_value()) return TypeError(key, "an integer that fits uint64", *v);
  return *x;
}

absl::StatusOr<int64_t> GgufFile::GetInt64(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  const std::optional<int64_t> x = v->AsInt64();
  if (!x.has_value()) return TypeError(key, "an integer that fits int64", *v);
  return *x;
}

absl::StatusOr<float> GgufFile::GetFloat(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  const std::optional<double> x = v->AsDouble();
  if (!x.has_value()) return TypeError(key, "float32 or float64", *v);
  return static_cast<float>(*x);
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) return MissingKey(key);
  const std::optional<bool> x = v->AsBool();
  if (!x.has_value()) return TypeError(key, "bool", *v);
  return *x;
}

namespace {
// Converts every element of the array at `key` with `convert` (returns
// nullopt for an element that does not convert).
template <typename T, typename F>
absl::StatusOr<std::vector<T>> ConvertArray(const GgufValue* v,
                                            absl::string_view key,
                                            absl::string_view expected,
                                            F convert) {
  if (v == nullptr) return MissingKey(key);
  const GgufArray* a = v->AsArray();
  if (a == nullptr) {
    return TypeError(key, absl::StrCat("array of ", expected), *v);
  }
  std::vector<T> out;
  out.reserve(a->elements.size());
  for (size_t i = 0; i < a->elements.size(); ++i) {
    std::optional<T> x = convert(a->elements[i]);
    if (!x.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metadata key ", Quote(key), ": element ", i, " expected ", expected,
          ", got ", ValueTypeName(a->elements[i].type()), " ",
          a->elements[i].DebugString()));
    }
    out.push_back(std::move(*x));
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(
    absl::string_view key) const {
  return ConvertArray<std::string>(
      FindValue(key), key, "string",
      [](const GgufValue& e) -> std::optional<std::string> {
        if (const std::string* s = e.AsString()) return *s;
        return std::nullopt;
      });
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetInt32Array(
    absl::string_view key) const {
  return ConvertArray<int32_t>(
      FindValue(key), key, "an integer that fits int32",
      [](const GgufValue& e) -> std::optional<int32_t> {
        const std::optional<int64_t> x = e.AsInt64();
        if (!x.has_value() || *x < std::numeric_limits<int32_t>::min() ||
            *x > std::numeric_limits<int32_t>::max()) {
          return std::nullopt;
        }
        return static_cast<int32_t>(*x);
      });
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(
    absl::string_view key) const {
  return ConvertArray<float>(FindValue(key), key, "float32 or float64",
                             [](const GgufValue& e) -> std::optional<float> {
                               const std::optional<double> x = e.AsDouble();
                               if (!x.has_value()) return std::nullopt;
                               return static_cast<float>(*x);
                             });
}

absl::StatusOr<std::string> GgufFile::GetStringOr(
    absl::string_view key, std::string default_value) const {
  if (FindValue(key) == nullptr) return default_value;
  return GetString(key);
}
absl::StatusOr<uint32_t> GgufFile::GetUint32Or(absl::string_view key,
                                               uint32_t default_value) const {
  if (FindValue(key) == nullptr) return default_value;
  return GetUint32(key);
}
absl::StatusOr<int64_t> GgufFile::GetInt64Or(absl::string_view key,
                                             int64_t default_value) const {
  if (FindValue(key) == nullptr) return default_value;
  return GetInt64(key);
}
absl::StatusOr<float> GgufFile::GetFloatOr(absl::string_view key,
                                           float default_value) const {
  if (FindValue(key) == nullptr) return default_value;
  return GetFloat(key);
}
absl::StatusOr<bool> GgufFile::GetBoolOr(absl::string_view key,
                                         bool default_value) const {
  if (FindValue(key) == nullptr) return default_value;
  return GetBool(key);
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> GgufFile::TensorData(
    const GgufTensorInfo& info) const {
  return absl::Span<const uint8_t>(bytes_ + data_offset_ + info.offset,
                                   info.num_bytes);
}

absl::Status GgufFile::DequantizeTensor(const GgufTensorInfo& info,
                                        absl::Span<float> out) const {
  if (out.size() != info.num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", Quote(info.name), " has ", info.num_elements,
                     " elements but the output holds ", out.size()));
  }
  if (!CanDequantize(info.type)) {
    return absl::UnimplementedError(
        absl::StrCat("tensor ", Quote(info.name), ": dequantizing ",
                     TypeName(info.type), " is not implemented"));
  }
  // Rows are whole blocks, so the tensor decodes as one run.
  return Dequantize(info.type, TensorData(info).data(),
                    static_cast<int64_t>(info.num_elements), out.data());
}

absl::StatusOr<std::vector<float>> GgufFile::DequantizeTensor(
    absl::string_view name) const {
  const GgufTensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", Quote(name), " not found"));
  }
  if (!CanDequantize(info->type)) {
    return absl::UnimplementedError(
        absl::StrCat("tensor ", Quote(info->name), ": dequantizing ",
                     TypeName(info->type), " is not implemented"));
  }
  std::vector<float> out(info->num_elements);
  RETURN_IF_ERROR(DequantizeTensor(*info, absl::MakeSpan(out)));
  return out;
}

void GgufFile::ReleaseMappedPages() const {
  if (map_ != nullptr) madvise(map_, size_, MADV_DONTNEED);
}

}  // namespace lookahead::engine

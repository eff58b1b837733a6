#include "engine/testing/gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace lookahead::engine {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

void PutValue(std::string* out, const GgufValue& value) {
  std::visit(
      [out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          PutString(out, x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          Put<uint32_t>(out, static_cast<uint32_t>(x.element_type));
          Put<uint64_t>(out, x.elements.size());
          for (const GgufValue& e : x.elements) PutValue(out, e);
        } else if constexpr (std::is_same_v<T, bool>) {
          Put<uint8_t>(out, x ? 1 : 0);
        } else {
          Put<T>(out, x);
        }
      },
      value.variant());
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ggml's reference quantizers (round to nearest), one 32-element block.
void QuantizeQ8_0(const float* x, std::string* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Put<uint16_t>(out, FloatToHalf(d));
  for (int j = 0; j < 32; ++j) {
    Put<int8_t>(out, static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void QuantizeQ4_0(const float* x, std::string* out) {
  float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest |x|
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Put<uint16_t>(out, FloatToHalf(d));
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    Put<uint8_t>(out, static_cast<uint8_t>(q0 | (q1 << 4)));
  }
}

void QuantizeQ4_1(const float* x, std::string* out) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Put<uint16_t>(out, FloatToHalf(d));
  Put<uint16_t>(out, FloatToHalf(min));
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
    const int q1 =
        std::min(15, static_cast<int>((x[j + 16] - min) * id + 0.5f));
    Put<uint8_t>(out, static_cast<uint8_t>(q0 | (q1 << 4)));
  }
}

}  // namespace

absl::StatusOr<std::string> QuantizeRow(GgmlType type,
                                        absl::Span<const float> values) {
  std::string out;
  switch (type) {
    case GgmlType::kF32:
      for (float v : values) Put<float>(&out, v);
      return out;
    case GgmlType::kF16:
      for (float v : values) Put<uint16_t>(&out, FloatToHalf(v));
      return out;
    case GgmlType::kBF16:
      for (float v : values) Put<uint16_t>(&out, FloatToBf16(v));
      return out;
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("no quantizer for ggml type ", TypeName(type)));
  }
  if (values.size() % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " values are not a whole number of ",
                     TypeName(type), " blocks of 32"));
  }
  out.reserve(values.size() / 32 * static_cast<size_t>(TypeSize(type)));
  for (size_t b = 0; b < values.size(); b += 32) {
    const float* x = values.data() + b;
    if (type == GgmlType::kQ8_0) QuantizeQ8_0(x, &out);
    if (type == GgmlType::kQ4_0) QuantizeQ4_0(x, &out);
    if (type == GgmlType::kQ4_1) QuantizeQ4_1(x, &out);
  }
  return out;
}

void GgufWriter::AddMetadata(std::string key, GgufValue value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims,
                                   absl::Span<const float> values,
                                   GgmlType type) {
  if (dims.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has no dimensions"));
  }
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has a non-positive dimension ", d));
    }
    n *= static_cast<uint64_t>(d);
  }
  if (n != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", n, " elements but ",
                     values.size(), " values were given"));
  }
  if (dims[0] % BlockSize(type) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "': row length ", dims[0],
        " is not a multiple of the ", TypeName(type), " block size"));
  }
  absl::StatusOr<std::string> bytes = QuantizeRow(type, values);
  if (!bytes.ok()) return bytes.status();
  tensors_.push_back(Tensor{std::move(name), std::move(dims),
                            static_cast<uint32_t>(type), *std::move(bytes),
                            std::nullopt});
  return absl::OkStatus();
}

void GgufWriter::AddRawTensor(std::string name, std::vector<int64_t> dims,
                              uint32_t type, std::string bytes,
                              std::optional<uint64_t> offset) {
  tensors_.push_back(
      Tensor{std::move(name), std::move(dims), type, std::move(bytes), offset});
}

uint64_t GgufWriter::Alignment() const {
  for (const auto& [key, value] : metadata_) {
    if (key != "general.alignment") continue;
    const std::optional<uint64_t> a = value.AsUint64();
    if (a.has_value() && *a > 0 && *a <= (uint64_t{1} << 30)) return *a;
  }
  return 32;
}

std::string GgufWriter::WriteToString() const {
  const uint64_t alignment = Alignment();
  std::string out;
  Put<uint32_t>(&out, 0x46554747);  // "GGUF"
  Put<uint32_t>(&out, version_);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(&out, key);
    Put<uint32_t>(&out, static_cast<uint32_t>(value.type()));
    PutValue(&out, value);
  }
  // Data layout: each tensor at the next aligned position.
  std::vector<uint64_t> positions;
  uint64_t data_size = 0;
  for (const Tensor& t : tensors_) {
    data_size = AlignUp(data_size, alignment);
    positions.push_back(data_size);
    data_size += t.bytes.size();
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) Put<int64_t>(&out, d);
    Put<uint32_t>(&out, t.type);
    Put<uint64_t>(&out, t.offset.value_or(positions[i]));
  }
  if (tensors_.empty()) return out;
  out.resize(AlignUp(out.size(), alignment), '\0');
  const size_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + positions[i], '\0');
    out.append(tensors_[i].bytes);
  }
  return out;
}

absl::Status GgufWriter::WriteToFile(const std::string& path) const {
  const std::string bytes = WriteToString();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    return absl::InternalError(absl::StrCat("cannot create '", path, "'"));
  }
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace lookahead::engine

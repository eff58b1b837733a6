// libFuzzer target for the GGUF reader: parses arbitrary bytes and
// dequantizes every tensor it can. Any crash, sanitizer report, or an OK
// parse whose tensors do not lie inside the buffer is a bug. Built and run
// by tools/fuzz.sh (clang -fsanitize=fuzzer,address); not a Bazel target.
// Compiled with -DLOOKAHEAD_GGUF_FUZZ_SEEDS (and gguf_writer.cc) it is
// instead a plain program writing seed files into the directory argv[1].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/gguf/dequant.h"
#include "engine/gguf/gguf.h"

namespace lookahead::engine {
namespace {

// Caps the floats decoded per input so slow paths stay visible to the
// fuzzer instead of drowning in memset time.
constexpr uint64_t kMaxDecodedElements = uint64_t{1} << 22;

void FuzzOne(const uint8_t* data, size_t size) {
  auto file = GgufFile::FromBuffer(
      std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return;
  const GgufFile& f = **file;
  // Exercise the getters on every key (errors are fine, crashes are not).
  for (const auto& [key, value] : f.metadata()) {
    (void)f.GetString(key);
    (void)f.GetUint32(key);
    (void)f.GetInt64(key);
    (void)f.GetFloat(key);
    (void)f.GetBool(key);
    (void)f.GetStringArray(key);
    (void)f.GetInt32Array(key);
    (void)f.GetFloatArray(key);
    (void)value.DebugString();
  }
  uint64_t budget = kMaxDecodedElements;
  for (const GgufTensorInfo& t : f.tensors()) {
    // The reader promises every tensor lies inside the data section.
    if (f.data_offset() + t.offset + t.num_bytes > size) std::abort();
    if (f.FindTensor(t.name) == nullptr) std::abort();
    if (!CanDequantize(t.type) || t.num_elements > budget) continue;
    budget -= t.num_elements;
    std::vector<float> out(t.num_elements);
    if (!f.DequantizeTensor(t, absl::MakeSpan(out)).ok()) std::abort();
  }
}

}  // namespace
}  // namespace lookahead::engine

#ifdef LOOKAHEAD_GGUF_FUZZ_SEEDS
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/testing/gguf_writer.h"

namespace lookahead::engine {
namespace {

// Small files covering every value type and every tensor type id, with
// valid layouts, so mutations start from deep inside the parser.
int WriteSeeds(const std::string& dir) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  int written = 0;
  for (int variant = 0; variant < 6; ++variant) {
    GgufWriter w(variant == 1 ? 2 : 3);
    w.AddMetadata("general.architecture", GgufValue::String("llama"));
    if (variant == 2) {
      w.AddMetadata("general.alignment", GgufValue::Uint32(64));
    }
    w.AddMetadata("u8", GgufValue::Uint8(7));
    w.AddMetadata("i8", GgufValue::Int8(-7));
    w.AddMetadata("u16", GgufValue::Uint16(700));
    w.AddMetadata("i16", GgufValue::Int16(-700));
    w.AddMetadata("u32", GgufValue::Uint32(70000));
    w.AddMetadata("i32", GgufValue::Int32(-70000));
    w.AddMetadata("u64", GgufValue::Uint64(uint64_t{1} << 40));
    w.AddMetadata("i64", GgufValue::Int64(-(int64_t{1} << 40)));
    w.AddMetadata("f32", GgufValue::Float32(0.5f));
    w.AddMetadata("f64", GgufValue::Float64(0.25));
    w.AddMetadata("bool", GgufValue::Bool(true));
    w.AddMetadata("strs", GgufValue::StringArray({"a", "bc", ""}));
    w.AddMetadata("ints", GgufValue::Int32Array({1, -2, 3}));
    w.AddMetadata("floats", GgufValue::Float32Array({1.5f, -2.5f}));
    w.AddMetadata("nested", GgufValue::Array(GgufValueType::kArray,
                                             {GgufValue::Int32Array({4, 5})}));
    const GgmlType quantizable[] = {GgmlType::kF32,  GgmlType::kF16,
                                    GgmlType::kBF16, GgmlType::kQ8_0,
                                    GgmlType::kQ4_0, GgmlType::kQ4_1};
    std::vector<float> values(64);
    for (float& v : values) v = uni(rng);
    const GgmlType q = quantizable[variant];
    if (!w.AddTensor("t.quant", {32, 2}, values, q).ok()) return -1;
    // One raw tensor per type id (random bytes) in rotating subsets.
    for (uint32_t id = 0; id < 42; ++id) {
      if (!IsKnownGgmlType(id) || id % 6 != static_cast<uint32_t>(variant)) {
        continue;
      }
      const auto type = static_cast<GgmlType>(id);
      std::string bytes(static_cast<size_t>(TypeSize(type)), '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      w.AddRawTensor(absl::StrCat("raw.", TypeName(type)), {BlockSize(type)},
                     id, bytes);
    }
    if (!w.WriteToFile(absl::StrCat(dir, "/seed", variant, ".gguf")).ok()) {
      return -1;
    }
    ++written;
  }
  return written;
}

}  // namespace
}  // namespace lookahead::engine

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  return lookahead::engine::WriteSeeds(argv[1]) > 0 ? 0 : 1;
}

#else  // !LOOKAHEAD_GGUF_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lookahead::engine::FuzzOne(data, size);
  return 0;
}

#endif  // LOOKAHEAD_GGUF_FUZZ_SEEDS

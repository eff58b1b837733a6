// Tests for engine/gguf/gguf: metadata and tensor round trips through
// GgufWriter (v2 and v3), typed getters, every malformed-file error (code +
// message), randomized files against the writer's inputs as oracle, random
// corruption (never a crash), and the real shipped model against golden
// values produced by an independent implementation (the `gguf` Python
// package's numpy dequantizers).
#include "engine/gguf/gguf.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/model_files.h"
#include "engine/testing/gguf_writer.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

using absl::StatusCode;

// Asserts `s` has `code` and a message containing `substr`.
#define EXPECT_STATUS(expr, want_code, substr)                            \
  do {                                                                    \
    const absl::Status st_ = (expr);                                      \
    EXPECT_EQ(st_.code(), (want_code)) << st_;                            \
    EXPECT_NE(std::string(st_.message()).find(substr), std::string::npos) \
        << "message: " << st_.message() << "\nwanted: " << (substr);      \
  } while (0)

absl::Status ParseStatus(const std::string& bytes) {
  return GgufFile::FromBuffer(bytes).status();
}

void PatchU64(std::string* bytes, size_t at, uint64_t v) {
  std::memcpy(&(*bytes)[at], &v, 8);
}
void PatchU32(std::string* bytes, size_t at, uint32_t v) {
  std::memcpy(&(*bytes)[at], &v, 4);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

// One value of every type, nested arrays and empty ones included.
std::vector<std::pair<std::string, GgufValue>> AllValueTypes() {
  return {
      {"u8", GgufValue::Uint8(250)},
      {"i8", GgufValue::Int8(-120)},
      {"u16", GgufValue::Uint16(65000)},
      {"i16", GgufValue::Int16(-32000)},
      {"u32", GgufValue::Uint32(4000000000u)},
      {"i32", GgufValue::Int32(-2000000000)},
      {"u64", GgufValue::Uint64(18000000000000000000ull)},
      {"i64", GgufValue::Int64(-9000000000000000000ll)},
      {"f32", GgufValue::Float32(3.25f)},
      {"f64", GgufValue::Float64(-1e300)},
      {"bool.t", GgufValue::Bool(true)},
      {"bool.f", GgufValue::Bool(false)},
      {"str", GgufValue::String("héllo\n")},
      {"str.empty", GgufValue::String("")},
      {"str.nul", GgufValue::String(std::string("a\0b", 3))},
      {"arr.str", GgufValue::StringArray({"x", "", "yz"})},
      {"arr.i32", GgufValue::Int32Array({1, -2, 2147483647})},
      {"arr.f32", GgufValue::Float32Array({0.5f, -0.25f})},
      {"arr.u8", GgufValue::Array(GgufValueType::kUint8,
                                  {GgufValue::Uint8(1), GgufValue::Uint8(2)})},
      {"arr.f64", GgufValue::Array(GgufValueType::kFloat64,
                                   {GgufValue::Float64(1.0 / 3)})},
      {"arr.bool",
       GgufValue::Array(GgufValueType::kBool,
                        {GgufValue::Bool(true), GgufValue::Bool(false)})},
      {"arr.empty", GgufValue::Array(GgufValueType::kInt64, {})},
      {"arr.nested",
       GgufValue::Array(
           GgufValueType::kArray,
           {GgufValue::StringArray({"a", "b"}), GgufValue::StringArray({}),
            GgufValue::Array(GgufValueType::kArray,
                             {GgufValue::Int32Array({7})})})},
  };
}

// ---------------------------------------------------------- round trips

class VersionTest : public testing::TestWithParam<uint32_t> {};

TEST_P(VersionTest, MetadataRoundTripsEveryValueType) {
  GgufWriter w(GetParam());
  const auto kvs = AllValueTypes();
  for (const auto& [k, v] : kvs) w.AddMetadata(k, v);
  auto file = GgufFile::FromBuffer(w.WriteToString());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), GetParam());
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  ASSERT_EQ(f.metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, kvs[i].first);
    EXPECT_EQ(f.metadata()[i].second, kvs[i].second)
        << kvs[i].first << ": " << f.metadata()[i].second.DebugString();
    const GgufValue* v = f.FindValue(kvs[i].first);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->type(), kvs[i].second.type());
  }
  EXPECT_EQ(f.FindValue("absent"), nullptr);
}

TEST_P(VersionTest, TensorsRoundTripAndDequantize) {
  GgufWriter w(GetParam());
  w.AddMetadata("general.architecture", GgufValue::String("llama"));
  std::mt19937 rng(GetParam());
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                            GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1};
  std::map<std::string, std::vector<float>> expected;
  std::map<std::string, std::string> expected_bytes;
  for (GgmlType t : types) {
    const std::string name = absl::StrCat("w.", TypeName(t));
    std::vector<float> x(64 * 3);
    for (float& v : x) v = dist(rng);
    ASSERT_TRUE(w.AddTensor(name, {64, 3}, x, t).ok());
    expected_bytes[name] = *QuantizeRow(t, x);
    std::vector<float> y(x.size());
    ASSERT_TRUE(
        Dequantize(
            t, reinterpret_cast<const uint8_t*>(expected_bytes[name].data()),
            static_cast<int64_t>(x.size()), y.data())
            .ok());
    expected[name] = y;
  }
  // A 1-D and a 4-D tensor.
  ASSERT_TRUE(w.AddTensor("bias", {5}, std::vector<float>{1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(
      w.AddTensor("four_d", {2, 1, 3, 2}, std::vector<float>(12, 0.5f)).ok());

  const std::string path = TempPath(absl::StrCat("rt", GetParam(), ".gguf"));
  ASSERT_TRUE(w.WriteToFile(path).ok());
  auto file = GgufFile::Open(path);  // the mmap path
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  ASSERT_EQ(f.tensors().size(), std::size(types) + 2);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  for (const auto& [name, want] : expected) {
    const GgufTensorInfo* t = f.FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 3}));
    EXPECT_EQ(t->num_elements, 192u);
    EXPECT_EQ(t->num_bytes, expected_bytes[name].size());
    EXPECT_EQ(t->offset % f.alignment(), 0u);
    absl::Span<const uint8_t> data = f.TensorData(*t);
    EXPECT_EQ(std::string(data.begin(), data.end()), expected_bytes[name]);
    absl::StatusOr<std::vector<float>> got = f.DequantizeTensor(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << name;
  }
  EXPECT_EQ(*f.DequantizeTensor("bias"), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(f.FindTensor("four_d")->dims, (std::vector<int64_t>{2, 1, 3, 2}));
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, VersionTest, testing::Values(2u, 3u));

TEST(GgufTest, CustomAlignment) {
  GgufWriter w;
  w.AddMetadata("general.alignment", GgufValue::Uint32(256));
  ASSERT_TRUE(w.AddTensor("a", {3}, std::vector<float>{1, 2, 3}).ok());
  ASSERT_TRUE(w.AddTensor("b", {2}, std::vector<float>{4, 5}).ok());
  auto file = GgufFile::FromBuffer(w.WriteToString());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->alignment(), 256u);
  EXPECT_EQ((*file)->data_offset() % 256, 0u);
  EXPECT_EQ((*file)->FindTensor("b")->offset, 256u);
  EXPECT_EQ(*(*file)->DequantizeTensor("b"), (std::vector<float>{4, 5}));
}

// ---------------------------------------------------------------- getters

TEST(GgufTest, TypedGetters) {
  GgufWriter w;
  for (const auto& [k, v] : AllValueTypes()) w.AddMetadata(k, v);
  auto file = GgufFile::FromBuffer(w.WriteToString());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(*f.GetUint32("u8"), 250u);
  EXPECT_EQ(*f.GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt64("i8"), -120);
  EXPECT_EQ(*f.GetInt64("u32"), 4000000000);
  EXPECT_EQ(*f.GetUint64("u64"), 18000000000000000000ull);
  EXPECT_EQ(*f.GetFloat("f32"), 3.25f);
  EXPECT_TRUE(std::isinf(*f.GetFloat("f64")));  // -1e300 as float
  EXPECT_TRUE(*f.GetBool("bool.t"));
  EXPECT_FALSE(*f.GetBool("bool.f"));
  EXPECT_EQ(*f.GetString("str"), "héllo\n");
  EXPECT_EQ(*f.GetStringArray("arr.str"),
            (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*f.GetInt32Array("arr.i32"),
            (std::vector<int32_t>{1, -2, 2147483647}));
  EXPECT_EQ(*f.GetInt32Array("arr.u8"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*f.GetFloatArray("arr.f32"), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(*f.GetFloatArray("arr.f64"), (std::vector<float>{1.0f / 3}));
  EXPECT_TRUE(f.GetInt32Array("arr.empty")->empty());

  // Wrong types name the key, the expected and the actual type.
  EXPECT_STATUS(f.GetString("u32").status(), StatusCode::kInvalidArgument,
                "metadata key 'u32': expected string, got uint32");
  EXPECT_STATUS(f.GetUint32("i8").status(), StatusCode::kInvalidArgument,
                "'i8': expected an integer that fits uint32, got int8 -120");
  EXPECT_STATUS(f.GetUint32("u64").status(), StatusCode::kInvalidArgument,
                "got uint64");
  EXPECT_STATUS(f.GetInt64("u64").status(), StatusCode::kInvalidArgument,
                "fits int64");
  EXPECT_STATUS(f.GetUint32("f32").status(), StatusCode::kInvalidArgument,
                "got float32");
  EXPECT_STATUS(f.GetFloat("i32").status(), StatusCode::kInvalidArgument,
                "expected float32 or float64, got int32");
  EXPECT_STATUS(f.GetBool("u8").status(), StatusCode::kInvalidArgument,
                "expected bool, got uint8");
  EXPECT_STATUS(f.GetStringArray("str").status(), StatusCode::kInvalidArgument,
                "expected array of string, got string");
  EXPECT_STATUS(f.GetStringArray("arr.i32").status(),
                StatusCode::kInvalidArgument,
                "'arr.i32': element 0 expected string, got int32");
  EXPECT_STATUS(f.GetInt32Array("arr.f32").status(),
                StatusCode::kInvalidArgument, "element 0");
  EXPECT_STATUS(f.GetFloatArray("arr.nested").status(),
                StatusCode::kInvalidArgument, "got array");
  EXPECT_STATUS(f.GetString("missing.key").status(), StatusCode::kNotFound,
                "'missing.key' not found");

  // Or-default variants: absent -> default, present-but-wrong -> error.
  EXPECT_EQ(*f.GetUint32Or("missing", 7), 7u);
  EXPECT_EQ(*f.GetUint32Or("u16", 7), 65000u);
  EXPECT_EQ(*f.GetStringOr("missing", "d"), "d");
  EXPECT_EQ(*f.GetInt64Or("missing", -3), -3);
  EXPECT_EQ(*f.GetFloatOr("missing", 1.5f), 1.5f);
  EXPECT_EQ(*f.GetBoolOr("missing", true), true);
  EXPECT_EQ(f.GetFloatOr("str", 1.5f).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetBoolOr("u8", true).status().code(),
            StatusCode::kInvalidArgument);
}

// ------------------------------------------------------- malformed files

// A small valid file: a few keys, one array, two tensors.
std::string ValidFile(GgufWriter* w = nullptr) {
  GgufWriter local;
  if (w == nullptr) w = &local;
  w->AddMetadata("general.architecture", GgufValue::String("llama"));
  w->AddMetadata("arr", GgufValue::StringArray({"ab", "cd"}));
  std::vector<float> x(64, 0.25f);
  (void)w->AddTensor("t0", {32, 2}, x, GgmlType::kQ8_0);
  (void)w->AddTensor("t1", {4}, std::vector<float>{1, 2, 3, 4});
  return w->WriteToString();
}

TEST(GgufErrorTest, EveryTruncationIsDataLoss) {
  const std::string bytes = ValidFile();
  ASSERT_TRUE(ParseStatus(bytes).ok());
  for (size_t len = 0; len < bytes.size(); ++len) {
    const absl::Status s = ParseStatus(bytes.substr(0, len));
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << "len " << len << ": " << s;
  }
  EXPECT_STATUS(ParseStatus(bytes.substr(0, 2)), StatusCode::kDataLoss,
                "truncated file: magic");
  EXPECT_STATUS(ParseStatus(bytes.substr(0, 30)), StatusCode::kDataLoss,
                "metadata count 2 cannot fit in the 6 bytes left");
  GgufWriter meta_only;
  meta_only.AddMetadata("general.architecture", GgufValue::String("llama"));
  EXPECT_STATUS(ParseStatus(meta_only.WriteToString().substr(0, 58)),
                StatusCode::kDataLoss,
                "truncated file: metadata key 'general.architecture' needs 8 "
                "bytes at offset 56 but only 2 remain");
  EXPECT_STATUS(ParseStatus(bytes.substr(0, bytes.size() - 1)),
                StatusCode::kDataLoss, "'t1': data [");
}

TEST(GgufErrorTest, BadMagicAndVersions) {
  std::string bytes = ValidFile();
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "not a GGUF file: bad magic 'XGUF'");
  EXPECT_STATUS(ParseStatus("GGML\x01\0\0\0"), StatusCode::kDataLoss,
                "bad magic");
  bad = bytes;
  PatchU32(&bad, 4, 1);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kUnimplemented,
                "GGUF version 1 is not supported");
  PatchU32(&bad, 4, 4);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kUnimplemented,
                "unsupported GGUF version 4");
  PatchU32(&bad, 4, 0x03000000);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kUnimplemented, "big-endian");
}

TEST(GgufErrorTest, MissingFileIsNotFound) {
  const std::string path = TempPath("does/not/exist.gguf");
  auto file = GgufFile::Open(path);
  EXPECT_STATUS(file.status(), StatusCode::kNotFound, path);
  EXPECT_STATUS(GgufFile::Open(TempPath("")).status(),
                StatusCode::kInvalidArgument, "not a regular file");
  // Errors from Open name the path too.
  const std::string bad_path = TempPath("bad_magic.gguf");
  GgufWriter w(3);
  w.AddMetadata("k", GgufValue::Bool(true));
  std::string bytes = w.WriteToString();
  bytes[3] = '!';
  FILE* fp = std::fopen(bad_path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), fp);
  std::fclose(fp);
  EXPECT_STATUS(GgufFile::Open(bad_path).status(), StatusCode::kDataLoss,
                absl::StrCat(bad_path, ": not a GGUF file"));
  fp = std::fopen(bad_path.c_str(), "wb");  // empty file
  std::fclose(fp);
  EXPECT_STATUS(GgufFile::Open(bad_path).status(), StatusCode::kDataLoss,
                "truncated file: magic");
  std::remove(bad_path.c_str());
}

TEST(GgufErrorTest, LyingCounts) {
  const std::string bytes = ValidFile();
  std::string bad = bytes;
  PatchU64(&bad, 8, uint64_t{1} << 60);  // tensor count
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "tensor count 1152921504606846976 cannot fit");
  bad = bytes;
  PatchU64(&bad, 16, ~uint64_t{0});  // kv count
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "metadata count 18446744073709551615 cannot fit");
  bad = bytes;
  PatchU64(&bad, 8, 3);  // one tensor more than described
  EXPECT_EQ(ParseStatus(bad).code(), StatusCode::kDataLoss);

  // First key's string length (offset 24).
  bad = bytes;
  PatchU64(&bad, 24, uint64_t{1} << 40);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "key of metadata entry #0: string length 1099511627776");
  // The array "arr": key at 24 + 8 + 20 + 4 + 8 + 5 = 69 -> len 3 + "arr" +
  // type(4) + elem type(4) -> count at 69 + 8 + 3 + 4 + 4 = 88.
  const size_t arr_count = 88;
  uint64_t count;
  std::memcpy(&count, &bytes[arr_count], 8);
  ASSERT_EQ(count, 2u);
  bad = bytes;
  PatchU64(&bad, arr_count, uint64_t{1} << 50);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "metadata key 'arr': array of 1125899906842624 string "
                "elements cannot fit");
  // An element string length.
  bad = bytes;
  PatchU64(&bad, arr_count + 8, ~uint64_t{0} - 3);
  EXPECT_STATUS(ParseStatus(bad), StatusCode::kDataLoss,
                "metadata key 'arr': string length 18446744073709551612");
}

TEST(GgufErrorTest, BadValueTypes) {
  GgufWriter w;
  w.AddMetadata("k", GgufValue::Uint32(1));
  std::string bytes = w.WriteToString();
  PatchU32(&bytes, 24 + 8 + 1, 13);  // value type after key "k"
  EXPECT_STATUS(ParseStatus(bytes), StatusCode::kDataLoss,
                "metadata key 'k': unknown value type id 13");
  GgufWriter w2;
  w2.AddMetadata("a", GgufValue::Int32Array({1}));
  bytes = w2.WriteToString();
  PatchU32(&bytes, 24 + 8 + 1 + 4, 99);  // array element type
  EXPECT_STATUS(ParseStatus(bytes), StatusCode::kDataLoss,
                "unknown array element type id 99");
  GgufWriter w3;
  w3.AddMetadata("b", GgufValue::Bool(true));
  bytes = w3.WriteToString();
  bytes[24 + 8 + 1 + 4] = 2;
  EXPECT_STATUS(ParseStatus(bytes), StatusCode::kDataLoss, "bool byte is 2");
  // Arrays nested 9 deep.
  GgufValue v = GgufValue::Int32Array({1});
  for (int i = 0; i < 8; ++i) v = GgufValue::Array(GgufValueType::kArray, {v});
  GgufWriter w4;
  w4.AddMetadata("deep", v);
  EXPECT_STATUS(ParseStatus(w4.WriteToString()), StatusCode::kDataLoss,
                "nested deeper than 8");
}

TEST(GgufErrorTest, MetadataElementCap) {
  // A real (not lying) uint8 array just over the 2^24-element cap.
  GgufWriter w;
  w.AddMetadata("big", GgufValue::Array(GgufValueType::kUint8, {}));
  std::string bytes = w.WriteToString();
  ASSERT_EQ(bytes.size(), 24u + 8 + 3 + 4 + 4 + 8);
  const uint64_t n = (uint64_t{1} << 24) + 1;
  PatchU64(&bytes, bytes.size() - 8, n);
  bytes.append(n, '\x07');
  EXPECT_STATUS(ParseStatus(bytes), StatusCode::kDataLoss,
                "metadata key 'big': metadata arrays hold more than 16777216 "
                "elements in total");
}

TEST(GgufErrorTest, Duplicates) {
  GgufWriter w;
  w.AddMetadata("k", GgufValue::Uint32(1));
  w.AddMetadata("k", GgufValue::Uint32(2));
  EXPECT_STATUS(ParseStatus(w.WriteToString()), StatusCode::kDataLoss,
                "duplicate metadata key 'k'");
  GgufWriter w2;
  ASSERT_TRUE(w2.AddTensor("t", {1}, std::vector<float>{1}).ok());
  ASSERT_TRUE(w2.AddTensor("t", {1}, std::vector<float>{2}).ok());
  EXPECT_STATUS(ParseStatus(w2.WriteToString()), StatusCode::kDataLoss,
                "duplicate tensor name 't'");
}

TEST(GgufErrorTest, Alignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.AddMetadata("general.alignment", GgufValue::Uint32(a));
    EXPECT_STATUS(ParseStatus(w.WriteToString()), StatusCode::kDataLoss,
                  absl::StrCat("general.alignment must be a power of two ",
                               "integer <= 2^30, got uint32 ", a));
  }
  GgufWriter w;
  w.AddMetadata("general.alignment", GgufValue::String("32"));
  EXPECT_STATUS(ParseStatus(w.WriteToString()), StatusCode::kDataLoss,
                "got string");
}

std::string RawTensorFile(std::vector<int64_t> dims, uint32_t type,
                          std::string bytes,
                          std::optional<uint64_t> offset = std::nullopt) {
  GgufWriter w;
  w.AddRawTensor("bad.weight", std::move(dims), type, std::move(bytes), offset);
  return w.WriteToString();
}

TEST(GgufErrorTest, BadTensorInfos) {
  EXPECT_STATUS(ParseStatus(RawTensorFile({4}, 99, std::string(16, '\0'))),
                StatusCode::kDataLoss,
                "tensor 'bad.weight' has unknown ggml type id 99");
  EXPECT_STATUS(ParseStatus(RawTensorFile({32}, 4, std::string(20, '\0'))),
                StatusCode::kDataLoss, "unknown ggml type id 4");
  EXPECT_STATUS(ParseStatus(RawTensorFile({4, 0}, 0, "")),
                StatusCode::kDataLoss, "tensor 'bad.weight': dimension 1 is 0");
  EXPECT_STATUS(ParseStatus(RawTensorFile({-1}, 0, "")), StatusCode::kDataLoss,
                "dimension 0 is 18446744073709551615");
  EXPECT_STATUS(
      ParseStatus(RawTensorFile({int64_t{1} << 32, int64_t{1} << 32}, 0, "")),
      StatusCode::kDataLoss,
      "'bad.weight': element count overflows int64 at dimension 1");
  EXPECT_STATUS(ParseStatus(RawTensorFile({int64_t{1} << 62}, 0, "")),
                StatusCode::kDataLoss, "overflows int64");
  EXPECT_STATUS(ParseStatus(RawTensorFile({}, 0, "")), StatusCode::kDataLoss,
                "'bad.weight' has 0 dimensions");
  EXPECT_STATUS(ParseStatus(RawTensorFile({1, 1, 1, 1, 1}, 0, "xxxx")),
                StatusCode::kDataLoss, "has 5 dimensions");
  EXPECT_STATUS(ParseStatus(RawTensorFile({16}, 2, std::string(18, '\0'))),
                StatusCode::kDataLoss,
                "row of 16 elements is not a whole number of Q4_0 blocks");
  // Wrong size: the header claims more data than the file holds.
  EXPECT_STATUS(ParseStatus(RawTensorFile({64}, 0, std::string(255, '\0'))),
                StatusCode::kDataLoss,
                "tensor 'bad.weight': data [0, +256) lies outside the data "
                "section of 255 bytes");
  // Out-of-range and misaligned offsets.
  EXPECT_STATUS(ParseStatus(RawTensorFile({4}, 0, std::string(16, '\0'), 64)),
                StatusCode::kDataLoss, "data [64, +16) lies outside");
  EXPECT_STATUS(ParseStatus(RawTensorFile({4}, 0, std::string(16, '\0'),
                                          ~uint64_t{0} - 31)),
                StatusCode::kDataLoss, "lies outside the data section");
  EXPECT_STATUS(ParseStatus(RawTensorFile({4}, 0, std::string(16, '\0'), 8)),
                StatusCode::kDataLoss,
                "'bad.weight': data offset 8 is not a multiple of the "
                "alignment 32");
}

TEST(GgufErrorTest, OverlappingTensors) {
  GgufWriter w;
  w.AddRawTensor("a", {16}, 0, std::string(64, '\1'));
  w.AddRawTensor("b", {8}, 0, std::string(32, '\2'), 32);  // inside "a"
  EXPECT_STATUS(ParseStatus(w.WriteToString()), StatusCode::kDataLoss,
                "tensors 'a' [0, +64) and 'b' [32, +32) overlap");
  GgufWriter ok;  // adjacent is fine
  ok.AddRawTensor("a", {8}, 0, std::string(32, '\1'));
  ok.AddRawTensor("b", {8}, 0, std::string(32, '\2'), 32);
  EXPECT_TRUE(ParseStatus(ok.WriteToString()).ok());
}

TEST(GgufErrorTest, DequantizeMisuse) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("t", {4}, std::vector<float>{1, 2, 3, 4}).ok());
  w.AddRawTensor("iq", {256}, static_cast<uint32_t>(GgmlType::kIQ2_XXS),
                 std::string(66, '\0'));
  auto file = GgufFile::FromBuffer(w.WriteToString());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  std::vector<float> out(3);
  EXPECT_STATUS(f.DequantizeTensor(*f.FindTensor("t"), absl::MakeSpan(out)),
                StatusCode::kInvalidArgument,
                "tensor 't' has 4 elements but the output holds 3");
  EXPECT_STATUS(f.DequantizeTensor("iq").status(), StatusCode::kUnimplemented,
                "tensor 'iq': dequantizing IQ2_XXS is not implemented");
  EXPECT_STATUS(f.DequantizeTensor("zz").status(), StatusCode::kNotFound,
                "tensor 'zz' not found");
  EXPECT_EQ(f.FindTensor("iq")->num_bytes, 66u);
}

// ------------------------------------------------------------ randomized

// Random files: random metadata of random types and random tensors; the
// parse must reproduce exactly what was given to the writer. Then random
// byte corruptions of each must parse or fail cleanly (ASan/fuzz catch the
// rest), and whatever parses must dequantize.
TEST(GgufRandomizedTest, RandomFilesMatchWriterInputs) {
  std::mt19937 rng(2024);
  auto rand_int = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::function<GgufValue(int)> random_value = [&](int depth) -> GgufValue {
    switch (rand_int(0, depth < 2 ? 9 : 8)) {
      case 0:
        return GgufValue::Uint8(static_cast<uint8_t>(rng()));
      case 1:
        return GgufValue::Int16(static_cast<int16_t>(rng()));
      case 2:
        return GgufValue::Uint32(static_cast<uint32_t>(rng()));
      case 3:
        return GgufValue::Int64(static_cast<int64_t>(rng()) << 20);
      case 4:
        return GgufValue::Float32(static_cast<float>(rng()) / 7.0f);
      case 5:
        return GgufValue::Float64(static_cast<double>(rng()) / 3.0);
      case 6:
        return GgufValue::Bool(rng() & 1);
      case 7:
        return GgufValue::String(
            std::string(rand_int(0, 12), 'a' + rand_int(0, 25)));
      case 8:
        return GgufValue::Int8(static_cast<int8_t>(rng()));
      default: {
        // Homogeneous array: one prototype type.
        GgufValue proto = random_value(depth + 1);
        std::vector<GgufValue> elems;
        const int n = rand_int(0, 5);
        for (int i = 0; i < n; ++i) {
          GgufValue e = random_value(depth + 1);
          while (e.type() != proto.type()) e = random_value(depth + 1);
          elems.push_back(e);
        }
        return GgufValue::Array(proto.type(), std::move(elems));
      }
    }
  };
  const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                             GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1};
  int parsed_corruptions = 0;
  for (int iter = 0; iter < 60; ++iter) {
    GgufWriter w(rand_int(2, 3));
    std::vector<std::pair<std::string, GgufValue>> kvs;
    const uint32_t alignment = 1u << rand_int(0, 7);
    if (rng() & 1)
      kvs.emplace_back("general.alignment", GgufValue::Uint32(alignment));
    const int nkv = rand_int(0, 12);
    for (int i = 0; i < nkv; ++i) {
      kvs.emplace_back(absl::StrCat("key.", i), random_value(0));
    }
    for (const auto& [k, v] : kvs) w.AddMetadata(k, v);
    struct Expected {
      std::string name;
      std::vector<int64_t> dims;
      GgmlType type;
      std::string bytes;
    };
    std::vector<Expected> tensors;
    const int nt = rand_int(0, 6);
    for (int i = 0; i < nt; ++i) {
      const GgmlType type = kTypes[rand_int(0, 5)];
      std::vector<int64_t> dims = {BlockSize(type) * rand_int(1, 3)};
      for (int d = rand_int(0, 3); d > 0; --d) dims.push_back(rand_int(1, 3));
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> x(n);
      for (float& v : x) v = std::normal_distribution<float>(0, 1)(rng);
      const std::string name = absl::StrCat("blk.", i, ".w");
      ASSERT_TRUE(w.AddTensor(name, dims, x, type).ok());
      tensors.push_back({name, dims, type, *QuantizeRow(type, x)});
    }
    const std::string bytes = w.WriteToString();
    auto file = GgufFile::FromBuffer(bytes);
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    ASSERT_EQ(f.metadata().size(), kvs.size());
    for (size_t i = 0; i < kvs.size(); ++i) {
      ASSERT_EQ(f.metadata()[i].first, kvs[i].first);
      ASSERT_EQ(f.metadata()[i].second, kvs[i].second)
          << kvs[i].second.DebugString();
    }
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GgufTensorInfo& t = f.tensors()[i];
      ASSERT_EQ(t.name, tensors[i].name);
      ASSERT_EQ(t.dims, tensors[i].dims);
      ASSERT_EQ(t.type, tensors[i].type);
      absl::Span<const uint8_t> data = f.TensorData(t);
      ASSERT_EQ(std::string(data.begin(), data.end()), tensors[i].bytes);
      ASSERT_EQ(t.offset % f.alignment(), 0u);
    }

    // Corruptions: flip 1-4 random bytes.
    for (int c = 0; c < 50; ++c) {
      std::string bad = bytes;
      for (int k = rand_int(1, 4); k > 0; --k) {
        bad[rand_int(0, static_cast<int>(bad.size()) - 1)] ^=
            static_cast<char>(1 << rand_int(0, 7));
      }
      auto g = GgufFile::FromBuffer(bad);
      if (!g.ok()) {
        ASSERT_NE(g.status().code(), StatusCode::kOk);
        ASSERT_FALSE(g.status().message().empty());
        continue;
      }
      ++parsed_corruptions;
      for (const GgufTensorInfo& t : (*g)->tensors()) {
        ASSERT_LE((*g)->data_offset() + t.offset + t.num_bytes, bad.size());
        if (!CanDequantize(t.type)) continue;
        std::vector<float> out(t.num_elements);
        ASSERT_TRUE((*g)->DequantizeTensor(t, absl::MakeSpan(out)).ok());
      }
    }
  }
  EXPECT_GT(parsed_corruptions, 0);  // flips inside data/values still parse
}

// ------------------------------------------------------------- real model

std::string ModelPath() { return DefaultModelPath(); }

struct Golden {
  const char* name;
  GgmlType type;
  uint64_t num_elements;
  double sum;
  std::vector<std::pair<uint64_t, float>> values;
};

TEST(RealModelTest, OpensAndDequantizesEverything) {
  const std::string path = ModelPath();
  const auto open_start = std::chrono::steady_clock::now();
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status()
                         << "\nthe model is missing: run tools/setup.sh";
  std::printf("opened and parsed %s in %.3f s\n", path.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            open_start)
                  .count());
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint32("llama.block_count"), 30u);
  EXPECT_EQ(*f.GetUint32("llama.embedding_length"), 576u);
  EXPECT_EQ(*f.GetUint32("llama.attention.head_count"), 9u);
  EXPECT_EQ(*f.GetUint32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(f.GetInt32Array("tokenizer.ggml.token_type")->size(), 49152u);
  EXPECT_GT(f.GetStringArray("tokenizer.ggml.merges")->size(), 40000u);
  EXPECT_EQ(f.tensors().size(), 272u);

  std::map<std::string, int> type_counts;
  for (const GgufTensorInfo& t : f.tensors()) {
    ++type_counts[std::string(TypeName(t.type))];
  }
  std::string types;
  for (const auto& [name, count] : type_counts) {
    absl::StrAppend(&types, name, " x", count, " ");
  }
  std::printf("real model tensor types: %s\n", types.c_str());
  EXPECT_EQ(type_counts, (std::map<std::string, int>{
                             {"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));

  // Dequantize everything; all finite; time it.
  std::chrono::steady_clock::duration elapsed{};
  uint64_t total = 0;
  std::map<std::string, std::vector<float>> kept;
  std::vector<float> buf;
  for (const GgufTensorInfo& t : f.tensors()) {
    buf.resize(t.num_elements);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status s = f.DequantizeTensor(t, absl::MakeSpan(buf));
    elapsed += std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(s.ok()) << t.name << ": " << s;
    total += t.num_elements;
    for (float v : buf) ASSERT_TRUE(std::isfinite(v)) << t.name;
    if (t.name == "token_embd.weight" || t.name == "blk.0.attn_q.weight" ||
        t.name == "blk.29.ffn_down.weight" || t.name == "output_norm.weight" ||
        t.name == "blk.3.ffn_norm.weight") {
      kept[t.name] = buf;
    }
  }
  const double secs = std::chrono::duration<double>(elapsed).count();
  std::printf("dequantized %llu elements of %zu tensors in %.3f s\n",
              static_cast<unsigned long long>(total), f.tensors().size(), secs);
  EXPECT_EQ(total, 134515008u);

  // Golden values from the `gguf` Python package (gguf.quants.dequantize),
  // an implementation we did not write, on the same file.
  const Golden kGolden[] = {
      {"token_embd.weight",
       GgmlType::kQ8_0,
       28311552,
       -15353.04449415207,
       {{0, -0x1.b468p-4f},
        {1, 0x1.0e28p-5f},
        {31, -0x1.9a6ep-3f},
        {32, -0x1.7eecp-4f},
        {9437184, 0x1.2318p-4f},
        {14155783, 0x1.fa16p-4f},
        {28311551, -0x1.55ap-5f}}},
      {"blk.0.attn_q.weight",
       GgmlType::kQ4_1,
       331776,
       59.22322082519531,
       {{0, -0x1.8a8p-4f},
        {1, 0x1.424p-3f},
        {31, -0x1.8a8p-4f},
        {32, -0x1.628p-2f},
        {110592, -0x1.e15p-2f},
        {165895, 0x1.6p-3f},
        {331775, -0x1.06p-2f}}},
      {"blk.29.ffn_down.weight",
       GgmlType::kQ4_1,
       884736,
       49.83570861816406,
       {{0, -0x1.17ep-2f},
        {1, 0x1.7d8p-3f},
        {31, -0x1.17ep-2f},
        {32, 0x1.b4p-6f},
        {294912, 0x1.d88p-3f},
        {442375, -0x1.fcp-7f},
        {884735, 0x1.dp-5f}}},
      {"blk.3.ffn_norm.weight",
       GgmlType::kF32,
       576,
       109.79030799865723,
       {{0, 0x1.4ep-4f},
        {1, 0x1.c4p-3f},
        {31, 0x1.76p-3f},
        {32, 0x1.bcp-3f},
        {192, 0x1.fep-3f},
        {295, 0x1.bcp-3f},
        {575, 0x1.fcp-3f}}},
      {"output_norm.weight",
       GgmlType::kF32,
       576,
       1038.33203125,
       {{0, 0x1.c2p+0f},
        {1, 0x1.d2p+0f},
        {31, 0x1.d4p+0f},
        {32, 0x1.ep+0f},
        {192, 0x1.b8p+0f},
        {295, 0x1.c8p+0f},
        {575, 0x1.fcp+0f}}},
  };
  for (const Golden& g : kGolden) {
    const GgufTensorInfo* t = f.FindTensor(g.name);
    ASSERT_NE(t, nullptr) << g.name;
    EXPECT_EQ(t->type, g.type) << g.name;
    ASSERT_EQ(t->num_elements, g.num_elements) << g.name;
    const std::vector<float>& v = kept[g.name];
    double sum = 0;
    for (float x : v) sum += x;
    EXPECT_NEAR(sum, g.sum, 1e-6 * std::max(1.0, std::fabs(g.sum))) << g.name;
    for (const auto& [i, want] : g.values) {
      EXPECT_EQ(v[i], want) << g.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(f.FindTensor("token_embd.weight")->dims,
            (std::vector<int64_t>{576, 49152}));
}

}  // namespace
}  // namespace lookahead::engine

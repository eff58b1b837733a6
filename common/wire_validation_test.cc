#include "common/wire_validation.h"

#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"

namespace lookahead {
namespace {

using google::protobuf::FileDescriptorProto;
using google::protobuf::Struct;
using ::testing::HasSubstr;

constexpr char kBad[] = "\xC3(\xFF";  // 3 bytes: a lead without continuation
constexpr char kMark[] = "@@@";       // as long as kBad

// `message` serialized with its one "@@@" replaced by invalid UTF-8.
std::string Poisoned(const google::protobuf::Message& message) {
  std::string wire = message.SerializeAsString();
  const size_t at = wire.find(kMark);
  EXPECT_NE(at, std::string::npos);
  wire.replace(at, 3, kBad);
  return wire;
}

void ExpectNamed(const absl::Status& status, const std::string& path) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(path, " is not valid UTF-8")));
  EXPECT_EQ(status.message().find(kBad), std::string::npos) << "echoed bytes";
}

FileDescriptorProto File() {
  FileDescriptorProto file;
  file.set_name("a.proto");
  file.add_message_type()->set_name("First");
  auto* second = file.add_message_type();
  second->set_name("Second");
  for (const char* name : {"x", "y", "z"}) second->add_field()->set_name(name);
  file.add_dependency("b.proto");
  return file;
}

TEST(WireValidationTest, ValidMessagesPass) {
  const FileDescriptorProto file = File();
  EXPECT_TRUE(
      CheckWireUtf8(file.SerializeAsString(), *file.GetDescriptor()).ok());
  Struct s;
  (*s.mutable_fields())["k\xC3\xA9"].set_string_value("v\xE2\x82\xAC");
  (*s.mutable_fields())["n"].set_number_value(1.5);
  (*(*s.mutable_fields())["list"].mutable_list_value()->add_values())
      .set_string_value("");
  EXPECT_TRUE(CheckWireUtf8(s.SerializeAsString(), *s.GetDescriptor()).ok());
  EXPECT_TRUE(CheckWireUtf8("", *s.GetDescriptor()).ok());
}

TEST(WireValidationTest, NamesTheFieldPathOfRepeatedAndNestedStrings) {
  FileDescriptorProto file = File();
  file.mutable_message_type(1)->mutable_field(2)->set_name(kMark);
  ExpectNamed(CheckWireUtf8(Poisoned(file), *file.GetDescriptor()),
              "message_type[1].field[2].name");
  file = File();
  file.set_dependency(0, kMark);
  ExpectNamed(CheckWireUtf8(Poisoned(file), *file.GetDescriptor()),
              "dependency[0]");
  file = File();
  file.set_name(kMark);
  ExpectNamed(CheckWireUtf8(Poisoned(file), *file.GetDescriptor()), "name");
}

TEST(WireValidationTest, MapKeysValuesAndOneofs) {
  Struct s;
  (*s.mutable_fields())[kMark].set_number_value(1);
  ExpectNamed(CheckWireUtf8(Poisoned(s), *s.GetDescriptor()), "fields[0].key");
  s.Clear();
  (*s.mutable_fields())["k"].set_string_value(kMark);
  ExpectNamed(CheckWireUtf8(Poisoned(s), *s.GetDescriptor()),
              "fields[0].value.string_value");
  s.Clear();
  (*(*s.mutable_fields())["k"].mutable_list_value()->add_values())
      .set_string_value("fine");
  (*(*s.mutable_fields())["k"].mutable_list_value()->add_values())
      .set_string_value(kMark);
  ExpectNamed(CheckWireUtf8(Poisoned(s), *s.GetDescriptor()),
              "fields[0].value.list_value.values[1].string_value");
}

TEST(WireValidationTest, UnknownAndMismatchedFieldsAreSkippedAsTheParserDoes) {
  // Field 99 (unknown) holding bad bytes, then field 1 ("name") sent as a
  // varint: the parser keeps both as unknown fields, so do we.
  const std::string wire = std::string("\x9A\x06\x03", 3) + kBad + "\x08\x05";
  FileDescriptorProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(CheckWireUtf8(wire, *parsed.GetDescriptor()).ok());
}

TEST(WireValidationTest, MalformedFramingIsInvalidArgument) {
  const FileDescriptorProto file = File();
  const std::string wire = file.SerializeAsString();
  for (const std::string& bad :
       {wire.substr(0, wire.size() - 1),
        std::string("\x0A\x7F"
                    "ab",
                    4),
        std::string("\x00", 1), std::string("\x0F", 1)}) {
    const absl::Status status = CheckWireUtf8(bad, *file.GetDescriptor());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

// protobuf's parser is the oracle on randomly damaged messages: whatever it
// parses, we pass (no false rejection), and whatever we call invalid UTF-8,
// it refuses to parse.
TEST(WireValidationTest, AgreesWithTheParserOnDamagedMessages) {
  google::protobuf::LogSilencer quiet;  // the parser logs each bad string
  Struct s;
  (*s.mutable_fields())["alpha"].set_string_value("h\xC3\xA9llo");
  (*s.mutable_fields())["beta"]
      .mutable_struct_value()
      ->mutable_fields()
      ->insert({"gamma", google::protobuf::Value()});
  (*(*s.mutable_fields())["list"].mutable_list_value()->add_values())
      .set_string_value("\xE2\x82\xAC\xF0\x9F\x98\x80");
  const std::string wire = s.SerializeAsString();
  std::mt19937 rng(7);
  int parsed = 0, rejected_utf8 = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = wire;
    for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
      damaged[rng() % damaged.size()] = static_cast<char>(rng() & 0xFF);
    }
    Struct out;
    const bool ok = out.ParseFromString(damaged);
    const absl::Status ours = CheckWireUtf8(damaged, *s.GetDescriptor());
    if (ok) {
      ++parsed;
      ASSERT_TRUE(ours.ok()) << ours;
    }
    if (absl::StrContains(ours.message(), "UTF-8")) {
      ++rejected_utf8;
      ASSERT_FALSE(ok);
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected_utf8, 100);
}

}  // namespace
}  // namespace lookahead

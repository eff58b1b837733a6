#include "common/wire_validation.h"

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace lookahead {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// protobuf's default recursion limit: deeper messages do not parse anyway.
constexpr int kMaxDepth = 100;

absl::Status Malformed(const Descriptor& top, absl::string_view where) {
  return absl::InvalidArgumentError(absl::StrCat(
      "request is not a valid ", top.full_name(),
      where.empty() ? "" : " (malformed at ", where, where.empty() ? "" : ")"));
}

// The path of the next occurrence of `field` under `prefix`: "name" or, for
// a repeated field, "name[i]" with i counted by `seen`.
std::string FieldPath(const std::string& prefix, const FieldDescriptor& field,
                      absl::flat_hash_map<int, int>* seen) {
  std::string path = absl::StrCat(prefix, field.name());
  if (field.is_repeated()) {
    absl::StrAppend(&path, "[", (*seen)[field.number()]++, "]");
  }
  return path;
}

absl::Status CheckString(CodedInputStream* in, const std::string& path,
                         uint32_t length) {
  if (length == 0) return absl::OkStatus();  // may end the buffer
  const void* data = nullptr;
  int available = 0;
  // Our input is one flat array, so the rest of it is directly readable.
  if (!in->GetDirectBufferPointer(&data, &available) ||
      static_cast<uint32_t>(available) < length) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is cut short: ", length, " bytes declared"));
  }
  const absl::string_view text(static_cast<const char*>(data), length);
  const size_t valid = ValidUtf8Prefix(text);
  if (valid != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not valid UTF-8 (byte ", valid, " of ",
                     text.size(), " starts no character)"));
  }
  in->Skip(static_cast<int>(length));
  return absl::OkStatus();
}

absl::Status Walk(CodedInputStream* in, const Descriptor& top,
                  const Descriptor& descriptor, const std::string& prefix,
                  int depth) {
  absl::flat_hash_map<int, int> seen;
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      return in->ConsumedEntireMessage() ? absl::OkStatus()
                                         : Malformed(top, prefix);
    }
    const FieldDescriptor* field =
        descriptor.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool delimited = WireFormatLite::GetTagWireType(tag) ==
                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    const bool is_string =
        field != nullptr && field->type() == FieldDescriptor::TYPE_STRING;
    const bool is_message =
        field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE;
    if (!delimited || !(is_string || is_message)) {
      if (!WireFormatLite::SkipField(in, tag)) return Malformed(top, prefix);
      continue;
    }
    const std::string path = FieldPath(prefix, *field, &seen);
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return Malformed(top, path);
    if (is_string) {
      absl::Status checked = CheckString(in, path, length);
      if (!checked.ok()) return checked;
      continue;
    }
    if (depth >= kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " nests messages deeper than ", kMaxDepth, " levels"));
    }
    if (in->BytesUntilLimit() >= 0 &&
        static_cast<uint32_t>(in->BytesUntilLimit()) < length) {
      return Malformed(top, path);
    }
    const CodedInputStream::Limit limit =
        in->PushLimit(static_cast<int>(length));
    absl::Status nested = Walk(in, top, *field->message_type(),
                               absl::StrCat(path, "."), depth + 1);
    if (!nested.ok()) return nested;
    in->PopLimit(limit);
  }
}

}  // namespace

absl::Status CheckWireUtf8(absl::string_view wire,
                           const Descriptor& descriptor) {
  if (wire.size() > static_cast<size_t>(INT32_MAX)) {
    return Malformed(descriptor, "");
  }
  CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                      static_cast<int>(wire.size()));
  return Walk(&in, descriptor, descriptor, "", 0);
}

}  // namespace lookahead

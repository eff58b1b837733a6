#include "engine/text/text_stream.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lookahead::engine {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// For a lead byte: the sequence length and the allowed range of the second
// byte (Unicode Table 3-7); length 0 for bytes that cannot start one.
struct Lead {
  int len;
  unsigned char lo;
  unsigned char hi;
};

Lead ClassifyLead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    return {3, 0x80, 0xBF};
  }
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

std::string Utf8Assembler::Push(absl::string_view bytes) {
  std::string buffer = pending_;
  buffer.append(bytes.data(), bytes.size());
  pending_.clear();
  std::string out;
  out.reserve(buffer.size());
  size_t i = 0;
  while (i < buffer.size()) {
    const auto b = static_cast<unsigned char>(buffer[i]);
    const Lead lead = ClassifyLead(b);
    if (lead.len == 1) {
      out.push_back(buffer[i++]);
      continue;
    }
    if (lead.len == 0) {  // stray continuation or impossible byte
      out.append(kReplacement.data(), kReplacement.size());
      ++i;
      continue;
    }
    // Length of the valid prefix of the sequence starting at i.
    int valid = 1;
    bool truncated = false;
    while (valid < lead.len) {
      if (i + valid >= buffer.size()) {
        truncated = true;
        break;
      }
      const auto c = static_cast<unsigned char>(buffer[i + valid]);
      const unsigned char lo = valid == 1 ? lead.lo : 0x80;
      const unsigned char hi = valid == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) break;
      ++valid;
    }
    if (truncated) {  // may still complete: hold it back
      pending_ = buffer.substr(i);
      break;
    }
    if (valid == lead.len) {
      out.append(buffer, i, valid);
    } else {  // maximal subpart of an ill-formed sequence
      out.append(kReplacement.data(), kReplacement.size());
    }
    i += valid;
  }
  return out;
}

std::string Utf8Assembler::Finish() {
  if (pending_.empty()) return "";
  pending_.clear();
  return std::string(kReplacement);
}

std::string SanitizeUtf8(absl::string_view bytes) {
  Utf8Assembler assembler;
  std::string out = assembler.Push(bytes);
  out += assembler.Finish();
  return out;
}

namespace {

absl::Status CheckId(int32_t id, int32_t vocab_size) {
  if (id >= 0 && id < vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("token id ", id, " is out of range [0, ", vocab_size,
                   ") of the vocabulary (size ", vocab_size, ")"));
}

}  // namespace

absl::StatusOr<std::string> TextStream::Feed(absl::Span<const int32_t> ids) {
  for (int32_t id : ids) {
    absl::Status status = CheckId(id, tokenizer_->vocab_size());
    if (!status.ok()) return status;
  }
  std::string out;
  for (int32_t id : ids) out += *Feed(id);
  return out;
}

absl::StatusOr<std::string> TextStream::Feed(int32_t id) {
  absl::Status status = CheckId(id, tokenizer_->vocab_size());
  if (!status.ok()) return status;
  absl::string_view bytes = tokenizer_->TokenBytes(id, options_.render_special);
  if (!seen_bytes_ && !bytes.empty()) {
    seen_bytes_ = true;
    if (options_.strip_space_prefix && tokenizer_->adds_space_prefix() &&
        bytes[0] == ' ') {
      bytes.remove_prefix(1);
    }
  }
  return utf8_.Push(bytes);
}

std::string TextStream::Finish() {
  seen_bytes_ = false;
  return utf8_.Finish();
}

}  // namespace lookahead::engine

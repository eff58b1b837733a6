#include "draftsvc/storage/trie_format.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proto/namespace_name.h"

namespace lookahead::draftsvc::trie_format {
namespace {

void AppendBigEndian32(uint32_t v, std::string* out) {
  char buf[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                 static_cast<char>(v >> 8), static_cast<char>(v)};
  out->append(buf, 4);
}

uint32_t ReadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace

absl::Status ValidateNamespace(absl::string_view name) {
  return v1::ValidateNamespaceName(name);
}

std::string FormatKey() { return std::string(1, kFormatTag); }

std::string NamespaceKey(absl::string_view name) {
  return absl::StrCat(absl::string_view(&kNamespaceTag, 1), name);
}

std::string NodePrefix(absl::string_view name) {
  std::string key;
  key.reserve(name.size() + 2);
  key.push_back(kNodeTag);
  key.append(name.data(), name.size());
  key.push_back(kNamespaceEnd);
  return key;
}

std::string NodeKey(absl::string_view name, absl::Span<const int32_t> path) {
  std::string key = NodePrefix(name);
  key.reserve(key.size() + 4 * path.size());
  for (int32_t token : path) {
    AppendBigEndian32(static_cast<uint32_t>(token), &key);
  }
  return key;
}

std::string PrefixSuccessor(absl::string_view prefix) {
  std::string out(prefix);
  while (!out.empty()) {
    auto last = static_cast<unsigned char>(out.back());
    if (last != 0xff) {
      out.back() = static_cast<char>(last + 1);
      return out;
    }
    out.pop_back();
  }
  return out;
}

absl::Status ParseNodeKey(absl::string_view key, ParsedNodeKey* out) {
  if (key.empty() || key[0] != kNodeTag) {
    return absl::DataLossError("node key does not start with the node tag");
  }
  size_t end = key.find(kNamespaceEnd, 1);
  if (end == absl::string_view::npos) {
    return absl::DataLossError("node key has no namespace terminator");
  }
  out->name_space = key.substr(1, end - 1);
  absl::string_view tokens = key.substr(end + 1);
  if (tokens.empty() || tokens.size() % 4 != 0) {
    return absl::DataLossError(absl::StrCat(
        "node key of namespace \"", absl::CHexEscape(out->name_space),
        "\" has ", tokens.size(),
        " token bytes (want a positive multiple of 4)"));
  }
  out->path.clear();
  out->path.reserve(tokens.size() / 4);
  for (size_t i = 0; i < tokens.size(); i += 4) {
    uint32_t v = ReadBigEndian32(tokens.data() + i);
    if (v > 0x7fffffffu) {
      return absl::DataLossError("node key holds a negative token id");
    }
    out->path.push_back(static_cast<int32_t>(v));
  }
  return absl::OkStatus();
}

std::string NgramPrefix(absl::string_view name) {
  std::string key;
  key.reserve(name.size() + 2);
  key.push_back(kNgramTag);
  key.append(name.data(), name.size());
  key.push_back(kNamespaceEnd);
  return key;
}

std::string NgramKey(absl::string_view name, absl::Span<const int32_t> key,
                     absl::Span<const int32_t> continuation) {
  std::string out = NgramPrefix(name);
  out.reserve(out.size() + 1 + 4 * (key.size() + continuation.size()));
  out.push_back(static_cast<char>(static_cast<uint8_t>(key.size())));
  for (int32_t token : key) {
    AppendBigEndian32(static_cast<uint32_t>(token), &out);
  }
  for (int32_t token : continuation) {
    AppendBigEndian32(static_cast<uint32_t>(token), &out);
  }
  return out;
}

absl::Status ParseNgramKey(absl::string_view key, ParsedNgramKey* out) {
  if (key.empty() || key[0] != kNgramTag) {
    return absl::DataLossError(
        "n-gram pool key does not start with the pool tag");
  }
  size_t end = key.find(kNamespaceEnd, 1);
  if (end == absl::string_view::npos) {
    return absl::DataLossError("n-gram pool key has no namespace terminator");
  }
  out->name_space = key.substr(1, end - 1);
  absl::string_view rest = key.substr(end + 1);
  const std::string where =
      absl::StrCat("n-gram pool key of namespace \"",
                   absl::CHexEscape(out->name_space), "\"");
  if (rest.empty()) {
    return absl::DataLossError(absl::StrCat(where, " has no key length"));
  }
  const size_t key_tokens = static_cast<unsigned char>(rest[0]);
  absl::string_view tokens = rest.substr(1);
  if (key_tokens == 0 || tokens.size() % 4 != 0 ||
      tokens.size() / 4 <= key_tokens) {
    return absl::DataLossError(absl::StrCat(
        where, " has key length ", key_tokens, " and ", tokens.size(),
        " token bytes (want a multiple of 4 holding the key and at least "
        "one continuation token)"));
  }
  out->key.clear();
  out->continuation.clear();
  out->key.reserve(key_tokens);
  out->continuation.reserve(tokens.size() / 4 - key_tokens);
  for (size_t i = 0; i < tokens.size(); i += 4) {
    uint32_t v = ReadBigEndian32(tokens.data() + i);
    if (v > 0x7fffffffu) {
      return absl::DataLossError(
          absl::StrCat(where, " holds a negative token id"));
    }
    (i / 4 < key_tokens ? out->key : out->continuation)
        .push_back(static_cast<int32_t>(v));
  }
  return absl::OkStatus();
}

std::string EncodeFixed32(uint32_t value) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

std::string EncodeFixed64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

bool DecodeFixed32(absl::string_view bytes, uint32_t* value) {
  if (bytes.size() != 4) return false;
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  }
  *value = v;
  return true;
}

bool DecodeFixed64(absl::string_view bytes, uint64_t* value) {
  if (bytes.size() != 8) return false;
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  }
  *value = v;
  return true;
}

}  // namespace lookahead::draftsvc::trie_format

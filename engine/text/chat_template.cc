#include "engine/text/chat_template.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace lookahead::engine {
namespace {

// Code points Python's str.isspace() accepts (what Jinja's `trim` and
// `.strip()` remove).
bool IsPythonSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Decodes the well-formed UTF-8 character of `len` bytes at `p`, or returns
// 0xFFFFFFFF. Only used on the few code points IsPythonSpace cares about, so
// over-long or surrogate forms simply fail to be spaces.
uint32_t DecodeAt(const unsigned char* p, size_t len) {
  if (len == 1) return p[0] < 0x80 ? p[0] : 0xFFFFFFFF;
  for (size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0xFFFFFFFF;
  }
  if (len == 2 && (p[0] & 0xE0) == 0xC0) {
    return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  }
  if (len == 3 && (p[0] & 0xF0) == 0xE0) {
    return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  }
  return 0xFFFFFFFF;
}

// Python's str.strip() on UTF-8 text (only 1-3 byte spaces exist).
absl::string_view StripPython(absl::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  size_t begin = 0, end = s.size();
  while (begin < end) {
    size_t len = b[begin] < 0x80 ? 1 : (b[begin] >= 0xE0 ? 3 : 2);
    if (begin + len > end || !IsPythonSpace(DecodeAt(b + begin, len))) break;
    begin += len;
  }
  while (end > begin) {
    bool stripped = false;
    for (size_t len = 1; len <= 3 && len <= end - begin; ++len) {
      if (IsPythonSpace(DecodeAt(b + end - len, len))) {
        end -= len;
        stripped = true;
        break;
      }
    }
    if (!stripped) break;
  }
  return s.substr(begin, end - begin);
}

absl::Status CheckRole(const ChatMessage& m, size_t index) {
  if (m.role == "system" || m.role == "user" || m.role == "assistant") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("message ", index, " has role '", m.role,
                   "'; expected system, user or assistant"));
}

// For ChatML templates that insert a system message when the conversation
// lacks one (SmolLM2, Qwen2.5): the literal text of that message, else "".
// Accepts the first "<|im_start|>system" + newline (raw or the escape "\n")
// literal whose text up to "<|im_end|>" holds no Jinja syntax.
std::string ExtractDefaultSystem(absl::string_view jinja) {
  if (!absl::StrContains(jinja, "messages[0]['role']") &&
      !absl::StrContains(jinja, "messages[0][\"role\"]")) {
    return "";
  }
  constexpr absl::string_view kOpen = "<|im_start|>system";
  size_t pos = 0;
  while ((pos = jinja.find(kOpen, pos)) != absl::string_view::npos) {
    pos += kOpen.size();
    absl::string_view rest = jinja.substr(pos);
    if (absl::ConsumePrefix(&rest, "\n") || absl::ConsumePrefix(&rest, "\\n")) {
      size_t close = rest.find("<|im_end|>");
      if (close == absl::string_view::npos) continue;
      absl::string_view text = rest.substr(0, close);
      if (text.empty() || absl::StrContains(text, "{") ||
          absl::StrContains(text, "'") || absl::StrContains(text, "\"")) {
        continue;
      }
      return absl::StrReplaceAll(text, {{"\\n", "\n"}});
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(absl::string_view jinja,
                                                     std::string bos_text,
                                                     std::string eos_text) {
  if (jinja.empty()) return ChatMl();
  if (absl::StrContains(jinja, "<|im_start|>")) {
    return ChatTemplate(ChatFormat::kChatMl, ExtractDefaultSystem(jinja),
                        std::move(bos_text), std::move(eos_text));
  }
  if (absl::StrContains(jinja, "<|start_header_id|>")) {
    return ChatTemplate(ChatFormat::kLlama3, "", std::move(bos_text),
                        std::move(eos_text));
  }
  if (absl::StrContains(jinja, "[INST]")) {
    return ChatTemplate(ChatFormat::kLlama2, "", std::move(bos_text),
                        std::move(eos_text));
  }
  if (absl::StrContains(jinja, "<|user|>") &&
      absl::StrContains(jinja, "<|assistant|>")) {
    return ChatTemplate(ChatFormat::kZephyr, "", std::move(bos_text),
                        std::move(eos_text));
  }
  return absl::UnimplementedError(absl::StrCat(
      "unrecognized chat template (known: ChatML, Llama 2, Llama 3, Zephyr): "
      "'",
      jinja.substr(0, 80), jinja.size() > 80 ? "...'" : "'"));
}

ChatTemplate ChatTemplate::ChatMl(std::string default_system) {
  return ChatTemplate(ChatFormat::kChatMl, std::move(default_system), "", "");
}

absl::StatusOr<std::string> ChatTemplate::Render(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::Status status = CheckRole(messages[i], i);
    if (!status.ok()) return status;
  }
  std::string out;
  switch (format_) {
    case ChatFormat::kChatMl:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && messages[0].role != "system" &&
            !default_system_.empty()) {
          absl::StrAppend(&out, "<|im_start|>system\n", default_system_,
                          "<|im_end|>\n");
        }
        absl::StrAppend(&out, "<|im_start|>", messages[i].role, "\n",
                        messages[i].content, "<|im_end|>\n");
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kLlama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos_text_;
        absl::StrAppend(&out, "<|start_header_id|>", messages[i].role,
                        "<|end_header_id|>\n\n",
                        StripPython(messages[i].content), "<|eot_id|>");
      }
      if (add_generation_prompt) {
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      }
      return out;
    case ChatFormat::kLlama2: {
      // Meta's template: an optional leading system message is folded into
      // the first user turn; then user/assistant must alternate.
      size_t first = 0;
      const ChatMessage* system = nullptr;
      if (!messages.empty() && messages[0].role == "system") {
        system = &messages[0];
        first = 1;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const bool expect_user = (i - first) % 2 == 0;
        if ((messages[i].role == "user") != expect_user ||
            (!expect_user && messages[i].role != "assistant")) {
          return absl::InvalidArgumentError(absl::StrCat(
              "message ", i, " has role '", messages[i].role,
              "'; Llama 2 chat roles must alternate user/assistant/user/... "
              "after an optional first system message"));
        }
        std::string content = messages[i].content;
        if (i == first && system != nullptr) {
          content = absl::StrCat("<<SYS>>\n", system->content, "\n<</SYS>>\n\n",
                                 content);
        }
        if (expect_user) {
          absl::StrAppend(&out, bos_text_, "[INST] ", StripPython(content),
                          " [/INST]");
        } else {
          absl::StrAppend(&out, " ", StripPython(content), " ", eos_text_);
        }
      }
      return out;
    }
    case ChatFormat::kZephyr:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, eos_text_, "\n");
      }
      if (add_generation_prompt && !messages.empty()) {
        out += "<|assistant|>\n";
      }
      return out;
  }
  return absl::InternalError("unknown chat format");
}

}  // namespace lookahead::engine

#include "engine/text/chat_template.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

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

// Length of the Python space that starts `s` (0 if none); only 1-3 byte
// spaces exist.
size_t LeadingSpace(absl::string_view s) {
  if (s.empty()) return 0;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  size_t len = b[0] < 0x80 ? 1 : (b[0] >= 0xE0 ? 3 : 2);
  return len <= s.size() && IsPythonSpace(DecodeAt(b, len)) ? len : 0;
}
// Length of the Python space that ends `s` (0 if none).
size_t TrailingSpace(absl::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t len = 1; len <= 3 && len <= s.size(); ++len) {
    if (IsPythonSpace(DecodeAt(b + s.size() - len, len))) return len;
  }
  return 0;
}

// Python's str.strip() on UTF-8 text.
absl::string_view StripPython(absl::string_view s) {
  while (size_t len = LeadingSpace(s)) s.remove_prefix(len);
  while (size_t len = TrailingSpace(s)) s.remove_suffix(len);
  return s;
}

// Builds RenderSegments' result: drops empty runs, merges adjacent runs of
// one kind.
class SegmentWriter {
 public:
  void Markup(absl::string_view text) {
    Append(ChatSegment::Kind::kMarkup, text);
  }
  void Content(absl::string_view text) {
    Append(ChatSegment::Kind::kContent, text);
  }
  void Append(ChatSegment::Kind kind, absl::string_view text) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().kind == kind) {
      segments_.back().text.append(text.data(), text.size());
    } else {
      segments_.push_back(ChatSegment{kind, std::string(text)});
    }
  }
  // Appends `unit` with Python's str.strip() applied to its concatenated
  // text (Jinja's `.strip()`/`trim` of a string built from markup and
  // content). Stripping run by run is the same: a unit's content runs are
  // kept apart by ASCII markup, so no space character straddles two runs.
  void AppendStripped(std::vector<ChatSegment> unit) {
    for (size_t i = 0; i < unit.size(); ++i) {
      std::string& t = unit[i].text;
      size_t n = 0;
      while (size_t len = LeadingSpace(absl::string_view(t).substr(n))) {
        n += len;
      }
      t.erase(0, n);
      if (!t.empty()) break;
    }
    for (size_t i = unit.size(); i-- > 0;) {
      std::string& t = unit[i].text;
      while (size_t len = TrailingSpace(t)) t.resize(t.size() - len);
      if (!t.empty()) break;
    }
    for (const ChatSegment& s : unit) Append(s.kind, s.text);
  }
  std::vector<ChatSegment> Take() { return std::move(segments_); }

 private:
  std::vector<ChatSegment> segments_;
};

// The template's spelling of `m`'s role iff it is system, user or
// assistant; else INVALID_ARGUMENT naming the message.
absl::StatusOr<absl::string_view> CheckRole(const ChatMessage& m,
                                            size_t index) {
  for (absl::string_view role : {"system", "user", "assistant"}) {
    if (m.role == role) return role;
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
  ASSIGN_OR_RETURN(std::vector<ChatSegment> segments,
                   RenderSegments(messages, add_generation_prompt));
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

absl::StatusOr<std::vector<ChatSegment>> ChatTemplate::RenderSegments(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt) const {
  // The template's own spelling of each (checked) role: request bytes never
  // reach the markup.
  std::vector<absl::string_view> roles;
  roles.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSIGN_OR_RETURN(absl::string_view role, CheckRole(messages[i], i));
    roles.push_back(role);
  }
  SegmentWriter out;
  switch (format_) {
    case ChatFormat::kChatMl:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && roles[0] != "system" && !default_system_.empty()) {
          out.Markup(absl::StrCat("<|im_start|>system\n", default_system_,
                                  "<|im_end|>\n"));
        }
        out.Markup(absl::StrCat("<|im_start|>", roles[i], "\n"));
        out.Content(messages[i].content);
        out.Markup("<|im_end|>\n");
      }
      if (add_generation_prompt) out.Markup("<|im_start|>assistant\n");
      return out.Take();
    case ChatFormat::kLlama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out.Markup(bos_text_);
        out.Markup(absl::StrCat("<|start_header_id|>", roles[i],
                                "<|end_header_id|>\n\n"));
        out.Content(StripPython(messages[i].content));
        out.Markup("<|eot_id|>");
      }
      if (add_generation_prompt) {
        out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      }
      return out.Take();
    case ChatFormat::kLlama2: {
      // Meta's template: an optional leading system message is folded into
      // the first user turn; then user/assistant must alternate.
      size_t first = 0;
      const ChatMessage* system = nullptr;
      if (!messages.empty() && roles[0] == "system") {
        system = &messages[0];
        first = 1;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const bool expect_user = (i - first) % 2 == 0;
        if ((roles[i] == "user") != expect_user ||
            (!expect_user && roles[i] != "assistant")) {
          return absl::InvalidArgumentError(absl::StrCat(
              "message ", i, " has role '", messages[i].role,
              "'; Llama 2 chat roles must alternate user/assistant/user/... "
              "after an optional first system message"));
        }
        // content = ("<<SYS>>\n" + system + "\n<</SYS>>\n\n")? + message,
        // stripped as one string.
        std::vector<ChatSegment> content;
        if (i == first && system != nullptr) {
          content.push_back({ChatSegment::Kind::kMarkup, "<<SYS>>\n"});
          content.push_back({ChatSegment::Kind::kContent, system->content});
          content.push_back({ChatSegment::Kind::kMarkup, "\n<</SYS>>\n\n"});
        }
        content.push_back({ChatSegment::Kind::kContent, messages[i].content});
        if (expect_user) {
          out.Markup(absl::StrCat(bos_text_, "[INST] "));
          out.AppendStripped(std::move(content));
          out.Markup(" [/INST]");
        } else {
          out.Markup(" ");
          out.AppendStripped(std::move(content));
          out.Markup(absl::StrCat(" ", eos_text_));
        }
      }
      return out.Take();
    }
    case ChatFormat::kZephyr:
      for (size_t i = 0; i < messages.size(); ++i) {
        out.Markup(absl::StrCat("<|", roles[i], "|>\n"));
        out.Content(messages[i].content);
        out.Markup(absl::StrCat(eos_text_, "\n"));
      }
      if (add_generation_prompt && !messages.empty()) {
        out.Markup("<|assistant|>\n");
      }
      return out.Take();
  }
  return absl::InternalError("unknown chat format");
}

}  // namespace lookahead::engine

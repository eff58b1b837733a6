// ChatTemplate: renders chat messages into prompt text exactly as the
// model's Jinja `tokenizer.chat_template` would, for the formats we
// recognize by their markers (we do not run Jinja):
//   ChatML   "<|im_start|>"            SmolLM2, Qwen (incl. a default system
//                                      message the template inserts)
//   Llama 3  "<|start_header_id|>"     Llama 3 / 3.x base chat format
//   Llama 2  "[INST]"                  Llama 2 chat ("<<SYS>>" system)
//   Zephyr   "<|user|>"                TinyLlama chat, Zephyr
// An absent (empty) template falls back to plain ChatML, as llama.cpp does;
// a non-empty template we do not recognize is an error (UNIMPLEMENTED), not
// a guess. RenderSegments keeps the template's own text (markup) apart from
// the messages' content, so a tokenizer can give control tokens to the
// markup alone (Tokenizer::EncodeChat). Thread-safety: immutable; Render and
// RenderSegments are safe to call concurrently.
#ifndef LOOKAHEAD_ENGINE_TEXT_CHAT_TEMPLATE_H_
#define LOOKAHEAD_ENGINE_TEXT_CHAT_TEMPLATE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lookahead::engine {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama3, kLlama2, kZephyr };

// One run of a rendered chat. Markup is the template's own text: its markers
// ("<|im_start|>", "[INST]", ...), the role names (written by the template
// from its own spelling of system/user/assistant, never copied from the
// request), separators, BOS/EOS text and a default system message from the
// model file. Content is a message's text as the client sent it (after the
// template's strip, where it has one), however it is spelled.
struct ChatSegment {
  enum class Kind { kMarkup, kContent };
  Kind kind;
  std::string text;  // never empty

  bool operator==(const ChatSegment& o) const {
    return kind == o.kind && text == o.text;
  }
};

class ChatTemplate {
 public:
  // Recognizes `jinja` (see above). `bos_text`/`eos_text` are the model's
  // BOS/EOS token texts, which Llama 2/3 and Zephyr templates print.
  // UNIMPLEMENTED (quoting the template's start) iff not recognized.
  static absl::StatusOr<ChatTemplate> FromJinja(absl::string_view jinja,
                                                std::string bos_text,
                                                std::string eos_text);
  // Plain ChatML; `default_system` (if non-empty) is inserted as the first
  // message when the conversation does not start with a system message.
  static ChatTemplate ChatMl(std::string default_system = "");

  // The prompt text. `add_generation_prompt` appends the opening of an
  // assistant turn (Llama 2 has none). INVALID_ARGUMENT if a role is not
  // system/user/assistant, or (Llama 2) roles do not alternate
  // user/assistant after an optional leading system message.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt) const;
  // The same rendering as runs of markup and content, in order: their texts
  // concatenated are Render's result. Adjacent runs differ in kind. Errors
  // as Render.
  absl::StatusOr<std::vector<ChatSegment>> RenderSegments(
      absl::Span<const ChatMessage> messages, bool add_generation_prompt) const;

  ChatFormat format() const { return format_; }
  // ChatML only: the system message inserted when none is given ("" none).
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate(ChatFormat format, std::string default_system,
               std::string bos_text, std::string eos_text)
      : format_(format),
        default_system_(std::move(default_system)),
        bos_text_(std::move(bos_text)),
        eos_text_(std::move(eos_text)) {}

  ChatFormat format_;
  std::string default_system_;
  std::string bos_text_;
  std::string eos_text_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TEXT_CHAT_TEMPLATE_H_

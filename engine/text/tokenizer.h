// Tokenizer: text <-> token ids for a GGUF model, built from its
// `tokenizer.ggml.*` metadata. Models: "gpt2" (byte-level BPE with merge
// ranks and a named pre-tokenizer, e.g. SmolLM2, Llama 3) and "llama"
// (SentencePiece BPE by token scores with byte fallback, e.g. Llama 2,
// TinyLlama). Matches HF tokenizers / llama.cpp on the same vocabulary.
// Chat content is text: EncodeChat gives control tokens only to the chat
// template's markers unless TokenizerOptions says otherwise.
// Thread-safety: immutable after Create; every const method is safe to call
// concurrently.
#ifndef LOOKAHEAD_ENGINE_TEXT_TOKENIZER_H_
#define LOOKAHEAD_ENGINE_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/text/chat_template.h"
#include "engine/text/pre_tokenizer.h"

namespace lookahead::engine {

class GgufFile;

// `tokenizer.ggml.token_type` values. Persisted in GGUF: DO NOT CHANGE.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: <|im_start|>, <s>; parsed only on request
  kUserDefined = 4,  // added text tokens: always matched as a whole
  kUnused = 5,
  kByte = 6,  // SentencePiece byte fallback "<0xAB>"
};

// Everything a Tokenizer is built from (the GGUF keys in brackets).
struct TokenizerSpec {
  std::string model;  // "gpt2" or "llama" [tokenizer.ggml.model]
  // Pre-tokenizer name for "gpt2" (see PreTokenizer::Create); ignored for
  // "llama". [tokenizer.ggml.pre; absent means "default"]
  std::string pre = "default";
  std::vector<std::string> tokens;  // id -> text [tokenizer.ggml.tokens]
  // Same length as tokens, or empty for all kNormal. [token_type]
  std::vector<int32_t> token_types;
  // Same length as tokens; needed by "llama" (merge priority), unused by
  // "gpt2". [tokenizer.ggml.scores]
  std::vector<float> scores;
  // "left right" pairs, best first; needed by "gpt2". [tokenizer.ggml.merges]
  std::vector<std::string> merges;
  // -1 = none. [tokenizer.ggml.{bos,eos,unknown,padding}_token_id]
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  // Whether Encode(.., {.add_special = true}) adds BOS / EOS.
  // [tokenizer.ggml.add_bos_token; default: true for "llama", else false]
  bool add_bos = false;
  bool add_eos = false;  // [tokenizer.ggml.add_eos_token; default false]
  // "llama" only: prefix raw text with a space. [add_space_prefix; true]
  bool add_space_prefix = true;
  // Jinja chat template; empty means none. [tokenizer.chat_template]
  std::string chat_template;
};

// How a server uses the tokenizer; not read from the model file.
struct TokenizerOptions {
  // EncodeChat: control-token strings inside message content ("<|im_start|>"
  // in a user's text) become control tokens iff true. True is HF
  // transformers' apply_chat_template(tokenize=True): a user can then open a
  // new turn with any role, e.g. a system turn. False (the default, and
  // OpenAI's API) encodes content as plain text, so only the template places
  // control tokens. Chats without such strings encode to the same ids
  // either way. [verifysvc --parse_special_in_content]
  bool parse_special_in_content = false;
};

struct EncodeOptions {
  // Text equal to a control token (<|im_start|>, <s>, ...) becomes that id
  // (leftmost-longest match, never split) iff true; else it is plain text.
  // User-defined tokens are always matched. Use true for chat-templated
  // text, false for untrusted user text.
  bool parse_special = false;
  // Prepend BOS iff add_bos(), append EOS iff add_eos().
  bool add_special = false;
};

struct DecodeOptions {
  // Control tokens render as their text iff true; else they are skipped.
  bool render_special = true;
  // "llama" with add_space_prefix only: drop the one space Encode adds in
  // front of the text, so Decode(Encode(t)) == t.
  bool strip_space_prefix = false;
};

class Tokenizer {
 public:
  // INVALID_ARGUMENT naming the field for inconsistent specs (lengths,
  // out-of-range special ids, empty vocab, a "llama" vocab missing byte
  // tokens without an unk id, malformed merges); UNIMPLEMENTED for other
  // models or pre-tokenizers.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(
      TokenizerSpec spec, const TokenizerOptions& options = {});
  // Reads the spec from GGUF metadata; errors as GgufFile's getters (with
  // the key) or Create.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(
      const GgufFile& file, const TokenizerOptions& options = {});
  static absl::StatusOr<TokenizerSpec> SpecFromGguf(const GgufFile& file);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Any byte string encodes, invalid UTF-8 included: byte by byte ("gpt2")
  // or via byte-fallback tokens ("llama"), so Decode(Encode(t)) == t, with
  // one exception matching HF tokenizers and llama.cpp: "gpt2" drops bytes
  // whose stand-in is not in the vocabulary (SmolLM2 lacks 21 bytes that
  // never occur in its training text: 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D,
  // 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF).
  std::vector<int32_t> Encode(absl::string_view text,
                              const EncodeOptions& options = {}) const;

  // Concatenated bytes of `ids`; may be invalid UTF-8 where `ids` cut a
  // character (see TextStream for display). INVALID_ARGUMENT naming the id
  // and the vocab size iff an id is out of [0, vocab_size()).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     const DecodeOptions& options = {}) const;
  // The bytes `id` decodes to (empty for a skipped control token).
  // REQUIRES: 0 <= id < vocab_size().
  absl::string_view TokenBytes(int32_t id, bool render_special = true) const;

  // The chat template from the spec, rendered (see ChatTemplate::Render;
  // FAILED_PRECONDITION if the spec's template was not recognized).
  absl::StatusOr<std::string> RenderChat(absl::Span<const ChatMessage> messages,
                                         bool add_generation_prompt) const;
  // The ids of RenderChat's text, without add_special (the template places
  // any BOS it wants). The template's markup is encoded with parse_special;
  // message content as plain text unless options().parse_special_in_content
  // (then the whole text is Encode'd with parse_special, as HF does). Plain
  // text between two control tokens is pre-tokenized as one string whether
  // it came from markup or content ("user\n" + content), exactly as Encode
  // would, so a chat whose content spells no control token encodes to the
  // same ids in both modes. Errors as RenderChat.
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      absl::Span<const ChatMessage> messages, bool add_generation_prompt) const;
  const absl::StatusOr<ChatTemplate>& chat_template() const {
    return chat_template_;
  }

  const TokenizerOptions& options() const { return options_; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  int32_t unk_id() const { return unk_id_; }  // -1 if none
  int32_t pad_id() const { return pad_id_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // True iff Encode prefixes raw text with a space ("llama" models with
  // add_space_prefix); DecodeOptions::strip_space_prefix undoes it.
  bool adds_space_prefix() const { return add_space_prefix_; }
  // True iff `id` ends a generation: EOS, or a control token spelled like
  // an end of turn/text (<|im_end|>, <|endoftext|>, <|eot_id|>, </s>, ...).
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_; }
  // REQUIRES: 0 <= id < vocab_size().
  absl::string_view TokenText(int32_t id) const { return tokens_[id]; }
  TokenType token_type(int32_t id) const { return types_[id]; }
  // The id whose vocabulary text is exactly `text`, if any.
  std::optional<int32_t> FindToken(absl::string_view text) const;

 private:
  Tokenizer() = default;
  absl::Status Init(TokenizerSpec spec);
  // A piece of text to encode and whether control tokens in it are parsed.
  struct TextSpan {
    absl::string_view text;
    bool parse_special;
  };
  // Encode over the concatenation of `spans`, matching control tokens only
  // inside spans that parse them (user-defined tokens everywhere). Plain
  // text runs on across span boundaries until the next special token.
  std::vector<int32_t> EncodeSpans(absl::Span<const TextSpan> spans,
                                   bool add_special) const;
  // Encodes text without special tokens into `out`.
  void EncodeBpePiece(absl::string_view piece, std::vector<int32_t>* out) const;
  void EncodeRawGpt2(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodeRawSpm(absl::string_view text, std::vector<int32_t>* out) const;

  // All constant after Init.
  TokenizerOptions options_;
  bool is_spm_ = false;  // "llama" model; else "gpt2"
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::vector<std::string> token_bytes_;  // decoded bytes per id
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  // gpt2: (left id << 32 | right id) -> (rank << 32 | merged id).
  absl::flat_hash_map<uint64_t, uint64_t> merges_;
  // gpt2: id of the token for each byte's GPT-2 unicode stand-in, or -1.
  // llama: id of "<0xAB>" for each byte, or -1.
  int32_t byte_tokens_[256];
  std::unique_ptr<PreTokenizer> pre_;  // gpt2 only
  // Tokens matched as whole words in text: (text, id), longest first.
  std::vector<std::pair<std::string, int32_t>> special_;
  bool special_first_byte_[256];  // some special_ text starts with the byte
  int32_t bos_id_ = -1, eos_id_ = -1, unk_id_ = -1, pad_id_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  std::vector<int32_t> eog_;
  absl::StatusOr<ChatTemplate> chat_template_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TEXT_TOKENIZER_H_

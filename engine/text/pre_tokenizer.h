// PreTokenizer: splits text into the pieces that byte-level BPE merges
// within, as named by GGUF's `tokenizer.ggml.pre` (llama.cpp's names).
// Each pre-tokenizer is a sequence of regex split stages (RE2); a stage
// splits every piece from the previous stage into its matches and the text
// between them, so the pieces always concatenate back to the input, even for
// invalid UTF-8 (bytes no class matches become pieces of their own).
// Thread-safety: immutable after Create; Split is safe to call concurrently.
#ifndef LOOKAHEAD_ENGINE_TEXT_PRE_TOKENIZER_H_
#define LOOKAHEAD_ENGINE_TEXT_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace lookahead::engine {

class PreTokenizer {
 public:
  // Supported names (aliases as in llama.cpp):
  //   "gpt2"                        GPT-2's pattern
  //       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
  //       \s+(?!\S)|\s+
  //   "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
  //   "minerva"                     every \p{N} on its own, then GPT-2's
  //                                 (HF: Sequence[Digits(individual),
  //                                 ByteLevel])
  //   "llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"
  //                                 Llama 3's (tiktoken cl100k) pattern
  //   "qwen2", "stablelm2"          Llama 3's with single digits
  //   "default" or ""               llama.cpp's default stages
  // UNIMPLEMENTED naming `name` for anything else.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      absl::string_view name);
  ~PreTokenizer();

  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (views into it, non-empty, in order, and
  // concatenating to `text`) to `pieces`.
  void Split(absl::string_view text,
             std::vector<absl::string_view>* pieces) const;

  // Whether the BPE model should take a piece that is itself a vocabulary
  // token as is, without merging (HF `ignore_merges`; true for Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Stage {
    std::unique_ptr<re2::RE2> re;
    // The pattern ends in a capture group `([ws]+)` standing for
    // `\s+(?!\S)|\s+`, which RE2 cannot express; Split emulates it.
    bool whitespace_lookahead = false;
  };
  PreTokenizer() = default;
  absl::Status AddStage(absl::string_view pattern, bool whitespace_lookahead);
  void SplitStage(const Stage& stage, absl::string_view piece,
                  std::vector<absl::string_view>* out) const;

  std::vector<Stage> stages_;
  bool ignore_merges_ = false;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TEXT_PRE_TOKENIZER_H_

// Streaming detokenization: token ids in, text out, never broken UTF-8.
//   Utf8Assembler  bytes in, well-formed UTF-8 out: holds back an
//                  incomplete character until it completes; replaces each
//                  ill-formed sequence with U+FFFD once no further byte can
//                  make it valid ("maximal subpart" substitution, Unicode
//                  ch. 3 / WHATWG), so chunked output equals one-shot output.
//   TextStream     a Utf8Assembler fed with a Tokenizer's token bytes.
// Thread-safety: neither is thread-safe (one stream per generation).
#ifndef LOOKAHEAD_ENGINE_TEXT_TEXT_STREAM_H_
#define LOOKAHEAD_ENGINE_TEXT_TEXT_STREAM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/text/tokenizer.h"

namespace lookahead::engine {

class Utf8Assembler {
 public:
  // Returns the well-formed text that `bytes` completes (possibly empty).
  std::string Push(absl::string_view bytes);
  // Flushes: a held-back incomplete character becomes one U+FFFD.
  std::string Finish();
  // Bytes held back (0 to 3).
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

// `bytes` with every ill-formed sequence replaced by U+FFFD, as a
// Utf8Assembler would emit it in total.
std::string SanitizeUtf8(absl::string_view bytes);

class TextStream {
 public:
  // REQUIRES: `tokenizer` outlives the stream. `options` as for Decode;
  // strip_space_prefix applies to the first non-empty token only.
  explicit TextStream(const Tokenizer* tokenizer,
                      const DecodeOptions& options = {})
      : tokenizer_(tokenizer), options_(options) {}

  // The newly completed text after appending token `id`. INVALID_ARGUMENT
  // (naming the id and vocab size) iff `id` is out of range; the stream is
  // then unchanged.
  absl::StatusOr<std::string> Feed(int32_t id);
  // Feed for each of `ids` (e.g. the tokens one verify step accepted),
  // concatenated. All ids are checked first: on error nothing is fed.
  absl::StatusOr<std::string> Feed(absl::Span<const int32_t> ids);
  // Flushes held-back bytes (as U+FFFD). The stream may be reused after.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  bool seen_bytes_ = false;
  Utf8Assembler utf8_;
};

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TEXT_TEXT_STREAM_H_

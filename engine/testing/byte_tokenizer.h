// Byte-level tokenizers for tests, built in memory (no model file): ids
// 0..255 are the bytes (as GPT-2's printable stand-ins), no merges, then
// the given control tokens. Thread-compatible values.
#ifndef LOOKAHEAD_ENGINE_TESTING_BYTE_TOKENIZER_H_
#define LOOKAHEAD_ENGINE_TESTING_BYTE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/text/tokenizer.h"

namespace lookahead::engine {

// GPT-2's printable stand-in for byte `b` (its vocabulary text).
std::string ByteChar(unsigned char b);

// A "gpt2" spec of the 256 bytes (kNormal) followed by `control_tokens`
// (kControl, ids 256, 257, ... in order). The caller sets eos/bos and flags.
TokenizerSpec ByteLevelSpec(const std::vector<std::string>& control_tokens);

// Tokenizer::Create(spec); null (and a test failure) if the spec is bad.
std::unique_ptr<Tokenizer> MustCreateTokenizer(TokenizerSpec spec);

// The ids of `text`'s bytes in a byte-level vocabulary.
std::vector<int32_t> ByteIds(absl::string_view text);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_TESTING_BYTE_TOKENIZER_H_

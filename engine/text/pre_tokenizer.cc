#include "engine/text/pre_tokenizer.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "re2/re2.h"

namespace lookahead::engine {
namespace {

// `\s` as HF tokenizers (Oniguruma) and llama.cpp read it: Unicode
// White_Space. RE2's own `\s` is ASCII only, so patterns spell it out; the
// `{WS}` placeholder expands to this list inside a character class.
constexpr absl::string_view kWhitespaceClassBody =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// The tail `([{WS}]+)` replaces `\s+(?!\S)|\s+`; see SplitStage.
constexpr absl::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^{WS}\\p{L}\\p{N}]+|"
    "([{WS}]+)";
constexpr absl::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|"
    "([{WS}]+)";
constexpr absl::string_view kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|([{WS}]+)";

bool IsOneOf(absl::string_view name,
             std::initializer_list<absl::string_view> names) {
  for (absl::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

// Start of the last UTF-8 character of non-empty `s` (which is valid UTF-8).
size_t LastCharStart(absl::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    absl::string_view name) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  absl::Status status;
  if (name == "gpt2") {
    status = pre->AddStage(kGpt2Pattern, true);
  } else if (IsOneOf(name, {"smollm", "starcoder", "refact", "command-r",
                            "codeshell", "exaone", "minerva"})) {
    status = pre->AddStage("\\p{N}", false);
    if (status.ok()) status = pre->AddStage(kGpt2Pattern, true);
  } else if (IsOneOf(name, {"llama-bpe", "llama3", "llama-v3", "dbrx",
                            "smaug-bpe"})) {
    status = pre->AddStage(kLlama3Pattern, true);
    pre->ignore_merges_ = true;
  } else if (IsOneOf(name, {"qwen2", "stablelm2"})) {
    status = pre->AddStage(kQwen2Pattern, true);
  } else if (name == "default" || name.empty()) {
    status = pre->AddStage("[\\p{P}\\$\\+<=>\\^~\\|]+", false);
    if (status.ok()) status = pre->AddStage(kGpt2Pattern, true);
    if (status.ok()) status = pre->AddStage("\\p{N}+", false);
    if (status.ok()) status = pre->AddStage("[0-9][0-9][0-9]", false);
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported pre-tokenizer (tokenizer.ggml.pre) '", name,
        "'; supported: gpt2, smollm (and starcoder-like), llama-bpe/llama3, "
        "qwen2, default"));
  }
  if (!status.ok()) return status;
  return pre;
}

absl::Status PreTokenizer::AddStage(absl::string_view pattern,
                                    bool whitespace_lookahead) {
  std::string expanded =
      absl::StrReplaceAll(pattern, {{"{WS}", kWhitespaceClassBody}});
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingUTF8);
  options.set_log_errors(false);
  auto re = std::make_unique<RE2>(expanded, options);
  if (!re->ok()) {
    return absl::InternalError(
        absl::StrCat("pre-tokenizer pattern does not compile: ", re->error()));
  }
  if (whitespace_lookahead && re->NumberOfCapturingGroups() != 1) {
    return absl::InternalError("whitespace stage needs exactly one group");
  }
  stages_.push_back(Stage{std::move(re), whitespace_lookahead});
  return absl::OkStatus();
}

void PreTokenizer::Split(absl::string_view text,
                         std::vector<absl::string_view>* pieces) const {
  if (text.empty()) return;
  std::vector<absl::string_view> current = {text};
  std::vector<absl::string_view> next;
  for (const Stage& stage : stages_) {
    next.clear();
    for (absl::string_view piece : current) SplitStage(stage, piece, &next);
    current.swap(next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
}

// Matches and the gaps between them become pieces. For a whitespace stage,
// `\s+(?!\S)|\s+` is emulated: a whitespace run (the group) that is followed
// by a non-space character inside this piece gives its last character back
// when it has more than one, so that character starts the next match (e.g.
// "  x" -> " ", " x"); a run ending the piece is taken whole.
void PreTokenizer::SplitStage(const Stage& stage, absl::string_view piece,
                              std::vector<absl::string_view>* out) const {
  const re2::StringPiece input(piece.data(), piece.size());
  re2::StringPiece groups[2];
  const int num_groups = stage.whitespace_lookahead ? 2 : 1;
  size_t pos = 0;
  while (pos < piece.size()) {
    if (!stage.re->Match(input, pos, piece.size(), RE2::UNANCHORED, groups,
                         num_groups) ||
        groups[0].empty()) {
      // No (non-empty) match in the rest: the rest is one gap piece.
      out->push_back(piece.substr(pos));
      return;
    }
    size_t start = groups[0].data() - piece.data();
    size_t end = start + groups[0].size();
    if (start > pos) out->push_back(piece.substr(pos, start - pos));
    if (stage.whitespace_lookahead && groups[1].data() != nullptr &&
        end < piece.size()) {
      absl::string_view run = piece.substr(start, end - start);
      size_t last = LastCharStart(run);
      if (last > 0) end = start + last;
    }
    out->push_back(piece.substr(start, end - start));
    pos = end;
  }
}

}  // namespace lookahead::engine

#include "engine/text/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "engine/gguf/gguf.h"

namespace lookahead::engine {
namespace {

constexpr absl::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's byte -> code point stand-ins: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order.
std::vector<uint32_t> Gpt2ByteToCodePoint() {
  std::vector<uint32_t> table(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    table[b] = printable ? b : next++;
  }
  return table;
}

// Length of the UTF-8 character starting at `s[i]`: its lead byte's length
// if that many continuation bytes follow, else 1 (a stray byte).
size_t CharLen(absl::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t len = c < 0x80         ? 1
                     : (c >> 5) == 6  ? 2
                     : (c >> 4) == 14 ? 3
                     : (c >> 3) == 30 ? 4
                                      : 1;
  if (i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

// Decodes a token's GPT-2 byte-level text back into bytes. Characters
// without a stand-in (none in real vocabularies) are kept as UTF-8.
std::string Gpt2TokenBytes(absl::string_view text,
                           const absl::flat_hash_map<uint32_t, uint8_t>& inv) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = CharLen(text, i);
    uint32_t cp = static_cast<unsigned char>(text[i]);
    if (len == 2) {
      cp =
          ((cp & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
    }
    auto it = len <= 2 ? inv.find(cp) : inv.end();
    if (it != inv.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      absl::string_view ch = text.substr(i, len);
      out.append(ch.data(), ch.size());
    }
    i += len;
  }
  return out;
}

// "<0xAB>" -> 0xAB, else -1.
int ParseByteToken(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') {
    return -1;
  }
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

absl::Status CheckSpecialId(const char* name, int32_t id, size_t vocab) {
  if (id < -1 || id >= static_cast<int64_t>(vocab)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", id, " is out of range for vocab size ", vocab));
  }
  return absl::OkStatus();
}

absl::Status OutOfRange(int32_t id, int32_t vocab_size) {
  return absl::InvalidArgumentError(
      absl::StrCat("token id ", id, " is out of range [0, ", vocab_size,
                   ") of the vocabulary (size ", vocab_size, ")"));
}

// Texts of control tokens that end a turn or a document.
constexpr absl::string_view kEndOfGenerationTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>",      "<|end_of_text|>",
    "<|eom_id|>", "</s>",          "<end_of_turn>",   "<|end|>",
    "<EOT>",      "<|return|>",    "<|end_of_turn|>",
};

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(
    TokenizerSpec spec, const TokenizerOptions& options) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->options_ = options;
  RETURN_IF_ERROR(tokenizer->Init(std::move(spec)));
  return tokenizer;
}

absl::Status Tokenizer::Init(TokenizerSpec spec) {
  if (spec.model == "llama") {
    is_spm_ = true;
  } else if (spec.model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported tokenizer model (tokenizer.ggml.model) '", spec.model,
        "'; supported: gpt2 (byte-level BPE), llama (SentencePiece BPE)"));
  }
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer has too many tokens");
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_type has ", spec.token_types.size(),
                     " entries but there are ", n, " tokens"));
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores has ", spec.scores.size(),
                     " entries but there are ", n, " tokens"));
  }
  RETURN_IF_ERROR(CheckSpecialId("bos_token_id", spec.bos_id, n));
  RETURN_IF_ERROR(CheckSpecialId("eos_token_id", spec.eos_id, n));
  RETURN_IF_ERROR(CheckSpecialId("unknown_token_id", spec.unk_id, n));
  RETURN_IF_ERROR(CheckSpecialId("padding_token_id", spec.pad_id, n));
  if (spec.add_bos && spec.bos_id < 0) {
    return absl::InvalidArgumentError("add_bos_token is set but no BOS id");
  }
  if (spec.add_eos && spec.eos_id < 0) {
    return absl::InvalidArgumentError("add_eos_token is set but no EOS id");
  }
  bos_id_ = spec.bos_id;
  eos_id_ = spec.eos_id;
  unk_id_ = spec.unk_id;
  pad_id_ = spec.pad_id;
  add_bos_ = spec.add_bos;
  add_eos_ = spec.add_eos;
  add_space_prefix_ = is_spm_ && spec.add_space_prefix;

  types_.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    int32_t t = spec.token_types[i];
    if (t < 0 || t > 6) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " has unknown token_type ", t));
    }
    types_[i] = static_cast<TokenType>(t);
  }
  tokens_ = std::move(spec.tokens);
  scores_ = std::move(spec.scores);
  if (scores_.empty()) scores_.assign(n, 0.0f);
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    token_ids_.emplace(tokens_[i], static_cast<int32_t>(i));  // first wins
  }

  // Per-token bytes and byte tokens.
  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
  token_bytes_.resize(n);
  std::vector<uint32_t> byte_cp;
  absl::flat_hash_map<uint32_t, uint8_t> cp_byte;
  if (!is_spm_) {
    byte_cp = Gpt2ByteToCodePoint();
    for (int b = 0; b < 256; ++b) cp_byte[byte_cp[b]] = static_cast<uint8_t>(b);
    for (int b = 0; b < 256; ++b) {
      std::string text;
      AppendUtf8(byte_cp[b], &text);
      auto it = token_ids_.find(text);
      if (it != token_ids_.end()) byte_tokens_[b] = it->second;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = tokens_[i];
    switch (types_[i]) {
      case TokenType::kControl:
      case TokenType::kUserDefined:
      case TokenType::kUnknown:
        token_bytes_[i] = text;
        break;
      case TokenType::kByte:
        if (is_spm_) {
          int b = ParseByteToken(text);
          if (b < 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "token ", i, " has type BYTE but text '", text, "'"));
          }
          token_bytes_[i] = std::string(1, static_cast<char>(b));
          if (byte_tokens_[b] < 0) byte_tokens_[b] = static_cast<int32_t>(i);
          break;
        }
        ABSL_FALLTHROUGH_INTENDED;
      default:
        token_bytes_[i] = is_spm_
                              ? absl::StrReplaceAll(text, {{kSpmSpace, " "}})
                              : Gpt2TokenBytes(text, cp_byte);
    }
  }
  for (int b = 0; b < 256 && is_spm_; ++b) {
    if (byte_tokens_[b] < 0 && unk_id_ < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "vocabulary has no token for byte 0x%02X and no unknown token", b));
    }
  }

  if (!is_spm_) {
    ASSIGN_OR_RETURN(pre_, PreTokenizer::Create(spec.pre));
    merges_.reserve(spec.merges.size());
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
      absl::string_view merge = spec.merges[rank];
      size_t space = merge.find(' ');
      if (space == absl::string_view::npos || space == 0 ||
          space + 1 == merge.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge ", rank, " '", merge, "' is not 'left right'"));
      }
      auto left = token_ids_.find(merge.substr(0, space));
      auto right = token_ids_.find(merge.substr(space + 1));
      auto merged = token_ids_.find(
          absl::StrCat(merge.substr(0, space), merge.substr(space + 1)));
      // Merges whose parts or result are not tokens can never apply.
      if (left == token_ids_.end() || right == token_ids_.end() ||
          merged == token_ids_.end()) {
        continue;
      }
      uint64_t key = (static_cast<uint64_t>(left->second) << 32) |
                     static_cast<uint32_t>(right->second);
      merges_.emplace(key, (static_cast<uint64_t>(rank) << 32) |
                               static_cast<uint32_t>(merged->second));
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const bool special = types_[i] == TokenType::kControl ||
                         types_[i] == TokenType::kUserDefined ||
                         types_[i] == TokenType::kUnknown;
    if (special && !tokens_[i].empty()) {
      special_.emplace_back(tokens_[i], static_cast<int32_t>(i));
    }
  }
  std::fill(std::begin(special_first_byte_), std::end(special_first_byte_),
            false);
  for (const auto& special : special_) {
    special_first_byte_[static_cast<unsigned char>(special.first[0])] = true;
  }
  std::stable_sort(special_.begin(), special_.end(),
                   [](const auto& a, const auto& b) {
                     return a.first.size() > b.first.size();
                   });

  if (eos_id_ >= 0) eog_.push_back(eos_id_);
  for (absl::string_view text : kEndOfGenerationTexts) {
    auto it = token_ids_.find(text);
    if (it != token_ids_.end() && types_[it->second] == TokenType::kControl &&
        it->second != eos_id_) {
      eog_.push_back(it->second);
    }
  }
  std::sort(eog_.begin(), eog_.end());

  chat_template_ = ChatTemplate::FromJinja(
      spec.chat_template, bos_id_ >= 0 ? tokens_[bos_id_] : "",
      eos_id_ >= 0 ? tokens_[eos_id_] : "");
  return absl::OkStatus();
}

absl::StatusOr<TokenizerSpec> Tokenizer::SpecFromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  ASSIGN_OR_RETURN(spec.model, file.GetString("tokenizer.ggml.model"));
  const bool spm = spec.model == "llama";
  ASSIGN_OR_RETURN(spec.pre, file.GetStringOr("tokenizer.ggml.pre", "default"));
  ASSIGN_OR_RETURN(spec.tokens, file.GetStringArray("tokenizer.ggml.tokens"));
  if (file.FindValue("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(spec.token_types,
                     file.GetInt32Array("tokenizer.ggml.token_type"));
  }
  if (file.FindValue("tokenizer.ggml.scores") != nullptr) {
    ASSIGN_OR_RETURN(spec.scores, file.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (file.FindValue("tokenizer.ggml.merges") != nullptr) {
    ASSIGN_OR_RETURN(spec.merges, file.GetStringArray("tokenizer.ggml.merges"));
  }
  // llama.cpp's defaults for SentencePiece vocabularies when ids are absent.
  struct IdKey {
    const char* key;
    int64_t spm_default;
    int32_t* out;
  };
  for (const IdKey& k :
       {IdKey{"tokenizer.ggml.bos_token_id", 1, &spec.bos_id},
        IdKey{"tokenizer.ggml.eos_token_id", 2, &spec.eos_id},
        IdKey{"tokenizer.ggml.unknown_token_id", 0, &spec.unk_id},
        IdKey{"tokenizer.ggml.padding_token_id", -1, &spec.pad_id}}) {
    ASSIGN_OR_RETURN(int64_t id,
                     file.GetInt64Or(k.key, spm ? k.spm_default : -1));
    if (id < -1 || id >= static_cast<int64_t>(spec.tokens.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(k.key, " = ", id, " is out of range for vocab size ",
                       spec.tokens.size()));
    }
    *k.out = static_cast<int32_t>(id);
  }
  ASSIGN_OR_RETURN(spec.add_bos,
                   file.GetBoolOr("tokenizer.ggml.add_bos_token", spm));
  ASSIGN_OR_RETURN(spec.add_eos,
                   file.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  ASSIGN_OR_RETURN(spec.add_space_prefix,
                   file.GetBoolOr("tokenizer.ggml.add_space_prefix", true));
  ASSIGN_OR_RETURN(spec.chat_template,
                   file.GetStringOr("tokenizer.chat_template", ""));
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(
    const GgufFile& file, const TokenizerOptions& options) {
  ASSIGN_OR_RETURN(TokenizerSpec spec, SpecFromGguf(file));
  return Create(std::move(spec), options);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text,
                                       const EncodeOptions& options) const {
  const TextSpan span{text, options.parse_special};
  return EncodeSpans(absl::MakeConstSpan(&span, 1), options.add_special);
}

std::vector<int32_t> Tokenizer::EncodeSpans(absl::Span<const TextSpan> spans,
                                            bool add_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_id_);
  // Split off special-token matches (leftmost-longest), encode the rest.
  // `raw`: the plain text since the last special token, one piece per span.
  bool prev_special = true;  // SentencePiece: space prefix after specials
  absl::InlinedVector<absl::string_view, 4> raw;
  std::string joined;
  auto flush_raw = [&] {
    if (raw.empty()) return;
    absl::string_view text = raw[0];
    if (raw.size() > 1) {
      joined = absl::StrJoin(raw, "");
      text = joined;
    }
    raw.clear();
    if (is_spm_) {
      std::string prefixed = add_space_prefix_ && prev_special
                                 ? absl::StrCat(" ", text)
                                 : std::string(text);
      EncodeRawSpm(prefixed, &out);
    } else {
      EncodeRawGpt2(text, &out);
    }
    prev_special = false;
  };
  for (const TextSpan& span : spans) {
    const absl::string_view text = span.text;
    size_t raw_begin = 0;
    size_t i = 0;
    while (i < text.size()) {
      if (!special_first_byte_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      int32_t match = -1;
      size_t match_len = 0;
      for (const auto& [special_text, id] : special_) {
        if (!span.parse_special && types_[id] != TokenType::kUserDefined) {
          continue;
        }
        if (text.compare(i, special_text.size(), special_text) == 0) {
          match = id;
          match_len = special_text.size();
          break;  // longest first
        }
      }
      if (match < 0) {
        ++i;
        continue;
      }
      if (i > raw_begin) raw.push_back(text.substr(raw_begin, i - raw_begin));
      flush_raw();
      out.push_back(match);
      prev_special = true;
      i += match_len;
      raw_begin = i;
    }
    if (text.size() > raw_begin) raw.push_back(text.substr(raw_begin));
  }
  flush_raw();
  if (add_special && add_eos_) out.push_back(eos_id_);
  return out;
}

void Tokenizer::EncodeRawGpt2(absl::string_view text,
                              std::vector<int32_t>* out) const {
  std::vector<absl::string_view> pieces;
  pre_->Split(text, &pieces);
  for (absl::string_view piece : pieces) EncodeBpePiece(piece, out);
}

// Byte-level BPE on one pre-token: start from one symbol per byte, then
// repeatedly merge the adjacent pair with the lowest merge rank, leftmost
// first among equal ranks (HF tokenizers' order), via a heap with lazy
// invalidation over a linked list of symbols.
void Tokenizer::EncodeBpePiece(absl::string_view piece,
                               std::vector<int32_t>* out) const {
  if (pre_->ignore_merges()) {
    std::string mapped;
    bool complete = true;
    for (char c : piece) {
      int32_t id = byte_tokens_[static_cast<unsigned char>(c)];
      if (id < 0) {
        complete = false;
        break;
      }
      mapped += tokens_[id];
    }
    auto it = complete ? token_ids_.find(mapped) : token_ids_.end();
    if (it != token_ids_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator<(const Candidate& o) const {  // max-heap: invert
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  // Bytes without a token are dropped (HF tokenizers and llama.cpp do the
  // same), so their neighbours become adjacent.
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_tokens_[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, -1, true});
    if (index > 0) symbols[index - 1].next = index;
  }
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n <= 1) {
    if (n == 1) out->push_back(symbols[0].id);
    return;
  }
  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint64_t key = (static_cast<uint64_t>(symbols[left].id) << 32) |
                         static_cast<uint32_t>(symbols[right].id);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    heap.push(Candidate{static_cast<uint32_t>(it->second >> 32), left, right,
                        symbols[left].id, symbols[right].id,
                        static_cast<int32_t>(it->second & 0xFFFFFFFFu)});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (!left.alive || !right.alive || left.next != c.right ||
        left.id != c.left_id || right.id != c.right_id) {
      continue;  // stale: a neighbour merged since this was pushed
    }
    left.id = c.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    out->push_back(symbols[i].id);
  }
}

// SentencePiece BPE (llama.cpp's llm_tokenizer_spm): spaces become U+2581,
// start from UTF-8 characters, repeatedly merge the adjacent pair whose
// concatenation is the vocabulary token with the highest score (leftmost on
// ties); characters left that are not tokens fall back to byte tokens.
void Tokenizer::EncodeRawSpm(absl::string_view text,
                             std::vector<int32_t>* out) const {
  const std::string escaped = absl::StrReplaceAll(text, {{" ", kSpmSpace}});
  struct Symbol {
    size_t begin;
    size_t len;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    size_t len;
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < escaped.size();) {
    size_t len = CharLen(escaped, i);
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{i, len, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    i += len;
  }
  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[left].len + symbols[right].len;
    auto it = token_ids_.find(
        absl::string_view(escaped).substr(symbols[left].begin, len));
    if (it == token_ids_.end()) return;
    heap.push(Candidate{scores_[it->second], left, right, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    consider(i, i + 1);
  }
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.len == 0 || right.len == 0 || left.next != c.right ||
        left.len + right.len != c.len) {
      continue;  // stale
    }
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    absl::string_view piece =
        absl::string_view(escaped).substr(symbols[i].begin, symbols[i].len);
    auto it = token_ids_.find(piece);
    if (it != token_ids_.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : piece) {
      int32_t id = byte_tokens_[static_cast<unsigned char>(c)];
      out->push_back(id >= 0 ? id : unk_id_);
    }
  }
}

absl::StatusOr<std::string> Tokenizer::Decode(
    absl::Span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  bool strip = options.strip_space_prefix && add_space_prefix_;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) return OutOfRange(id, vocab_size());
    absl::string_view bytes = TokenBytes(id, options.render_special);
    if (strip && !bytes.empty()) {
      if (bytes[0] == ' ') bytes.remove_prefix(1);
      strip = false;
    }
    out.append(bytes.data(), bytes.size());
  }
  return out;
}

absl::string_view Tokenizer::TokenBytes(int32_t id, bool render_special) const {
  if (!render_special && types_[id] == TokenType::kControl) return "";
  return token_bytes_[id];
}

absl::StatusOr<std::string> Tokenizer::RenderChat(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt) const {
  if (!chat_template_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model has no usable chat template: ",
                     chat_template_.status().message()));
  }
  return chat_template_->Render(messages, add_generation_prompt);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeChat(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt) const {
  if (options_.parse_special_in_content) {  // HF's behaviour
    ASSIGN_OR_RETURN(std::string text,
                     RenderChat(messages, add_generation_prompt));
    EncodeOptions options;
    options.parse_special = true;
    return Encode(text, options);
  }
  if (!chat_template_.ok()) {
    return RenderChat(messages, add_generation_prompt).status();
  }
  ASSIGN_OR_RETURN(
      std::vector<ChatSegment> segments,
      chat_template_->RenderSegments(messages, add_generation_prompt));
  // Control tokens from the template's markup only.
  std::vector<TextSpan> spans;
  spans.reserve(segments.size());
  for (const ChatSegment& segment : segments) {
    spans.push_back(
        TextSpan{segment.text, segment.kind == ChatSegment::Kind::kMarkup});
  }
  return EncodeSpans(spans, /*add_special=*/false);
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

std::optional<int32_t> Tokenizer::FindToken(absl::string_view text) const {
  auto it = token_ids_.find(text);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace lookahead::engine

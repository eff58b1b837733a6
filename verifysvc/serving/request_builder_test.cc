#include "verifysvc/serving/request_builder.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/testing/byte_tokenizer.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifysvc/serving/field_error.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Ids of the tiny vocabulary's special tokens; ids 0..255 are the bytes.
constexpr int32_t kImStart = 256;
constexpr int32_t kImEnd = 257;  // EOS
constexpr int32_t kBos = 258;
constexpr int32_t kVocab = 259;

// A byte-level tokenizer with no merges (so "hi" is {'h', 'i'}), ChatML
// control tokens and an empty chat template (plain ChatML). Built in
// memory: no model file.
std::unique_ptr<engine::Tokenizer> TinyTokenizer(bool add_bos) {
  engine::TokenizerSpec spec =
      engine::ByteLevelSpec({"<|im_start|>", "<|im_end|>", "<|bos|>"});
  spec.eos_id = kImEnd;
  spec.bos_id = kBos;
  spec.add_bos = add_bos;
  return engine::MustCreateTokenizer(std::move(spec));
}

// Small limits, so every bound is easy to reach.
RequestLimits SmallLimits() {
  RequestLimits limits;
  limits.max_context_tokens = 32;
  limits.max_prompt_tokens = 20;
  limits.default_max_new_tokens = 16;
  limits.default_decoding_length = 8;
  limits.max_decoding_length = 12;
  limits.default_branch_length = 4;
  limits.max_branch_length = 6;
  limits.max_stop_strings = 2;
  limits.vocab_size = kVocab;
  return limits;
}

// A request with a prompt of `n` token ids (1, 2, ..., n).
RawRequest TokensRequest(int n) {
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kTokens;
  for (int i = 1; i <= n; ++i) raw.prompt.token_ids.push_back(i);
  return raw;
}

class RequestBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = TinyTokenizer(/*add_bos=*/false);
    ASSERT_NE(tokenizer_, nullptr);
    limits_ = FitLimitsToTokenizer(SmallLimits(), *tokenizer_);
  }

  absl::StatusOr<GenerationRequest> Build(const RawRequest& raw) {
    return BuildRequest(raw, *tokenizer_, limits_);
  }

  // Asserts that `raw` is rejected with INVALID_ARGUMENT and a message
  // holding every one of `parts`.
  void ExpectInvalid(const RawRequest& raw,
                     const std::vector<std::string>& parts) {
    absl::StatusOr<GenerationRequest> built = Build(raw);
    ASSERT_FALSE(built.ok()) << "accepted; wanted an error with " << parts[0];
    EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument)
        << built.status();
    for (const std::string& part : parts) {
      EXPECT_THAT(built.status().message(), HasSubstr(part));
    }
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  RequestLimits limits_ = SmallLimits();
};

// ---------------------------------------------------------------------------
// Defaults.

TEST_F(RequestBuilderTest, TokenPromptWithDefaults) {
  absl::StatusOr<GenerationRequest> built = Build(TokensRequest(3));
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_THAT(built->prompt, ElementsAre(1, 2, 3));
  EXPECT_EQ(built->max_new_tokens, 16);  // min(16, 32 - 3)
  EXPECT_TRUE(built->sampling.greedy());
  EXPECT_FLOAT_EQ(built->sampling.top_p, 1.0f);  // 0 = off = 1
  EXPECT_EQ(built->sampling.top_k, 0);
  EXPECT_THAT(built->stop, IsEmpty());
  EXPECT_EQ(built->draft.mode, DraftMode::kTrieHierarchical);
  EXPECT_EQ(built->draft.decoding_length, 8);
  EXPECT_EQ(built->draft.branch_length, 4);
  EXPECT_EQ(built->draft.name_space, "default");
  EXPECT_TRUE(built->draft.enabled());
}

TEST_F(RequestBuilderTest, DefaultMaxNewTokensIsCutToTheContextLeft) {
  for (int prompt : {1, 16, 17, 20}) {
    SCOPED_TRACE(prompt);
    absl::StatusOr<GenerationRequest> built = Build(TokensRequest(prompt));
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ(built->max_new_tokens, std::min(16, 32 - prompt));
  }
}

TEST_F(RequestBuilderTest, ExplicitValuesAreKept) {
  RawRequest raw = TokensRequest(3);
  raw.max_new_tokens = 29;  // Exactly fills the context.
  raw.temperature = 0.7f;
  raw.top_p = 0.9f;
  raw.top_k = 40;
  raw.seed = 1234;
  raw.stop = {"\n\n", "END"};
  raw.draft.mode = RawDraftParams::Mode::kTrieParallel;
  raw.draft.decoding_length = 12;
  raw.draft.branch_length = 6;
  raw.draft.name_space = "docs.v2_x-1";
  absl::StatusOr<GenerationRequest> built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->max_new_tokens, 29);
  EXPECT_FLOAT_EQ(built->sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(built->sampling.top_p, 0.9f);
  EXPECT_EQ(built->sampling.top_k, 40);
  EXPECT_EQ(built->sampling.seed, 1234u);
  EXPECT_THAT(built->stop, ElementsAre("\n\n", "END"));
  EXPECT_EQ(built->draft.mode, DraftMode::kTrieParallel);
  EXPECT_EQ(built->draft.decoding_length, 12);
  EXPECT_EQ(built->draft.branch_length, 6);
  EXPECT_EQ(built->draft.name_space, "docs.v2_x-1");
}

TEST_F(RequestBuilderTest, DraftModeOffMeansNoDraftTokens) {
  RawRequest raw = TokensRequest(3);
  raw.draft.mode = RawDraftParams::Mode::kOff;
  for (int decoding_length : {0, 5}) {
    raw.draft.decoding_length = decoding_length;
    absl::StatusOr<GenerationRequest> built = Build(raw);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ(built->draft.mode, DraftMode::kOff);
    EXPECT_EQ(built->draft.decoding_length, 0);
    EXPECT_FALSE(built->draft.enabled());
  }
}

TEST_F(RequestBuilderTest, ExplicitHierarchicalModeIsTheDefaultMode) {
  RawRequest raw = TokensRequest(3);
  raw.draft.mode = RawDraftParams::Mode::kTrieHierarchical;
  raw.draft.decoding_length = 3;
  absl::StatusOr<GenerationRequest> built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.mode, DraftMode::kTrieHierarchical);
  EXPECT_EQ(built->draft.decoding_length, 3);
}

// ---------------------------------------------------------------------------
// Prompt errors.

TEST_F(RequestBuilderTest, NoPromptIsRejected) {
  RawRequest raw;
  ExpectInvalid(raw, {"no prompt: set one of text, chat or tokens"});
}

TEST_F(RequestBuilderTest, EmptyPromptIsRejected) {
  ExpectInvalid(
      TokensRequest(0),
      {"tokens.ids is empty (0 tokens): a prompt needs at least one token"});
  RawRequest text;
  text.prompt.kind = RawPrompt::Kind::kText;
  text.prompt.text = "";  // No BOS from this tokenizer: 0 tokens.
  ExpectInvalid(
      text, {"text is empty (0 tokens): a prompt needs at least one token"});
}

TEST_F(RequestBuilderTest, PromptOverTheLimitIsRejected) {
  ASSERT_TRUE(Build(TokensRequest(20)).ok());
  ExpectInvalid(TokensRequest(21), {"tokens.ids has 21 tokens; use at most 20 "
                                    "(--max_prompt_tokens)"});
}

TEST_F(RequestBuilderTest, TokenIdsOutsideTheVocabularyAreRejected) {
  for (int64_t bad : {int64_t{kVocab}, int64_t{kVocab} + 1000, int64_t{-1},
                      int64_t{std::numeric_limits<int32_t>::min()},
                      std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.prompt.token_ids[1] = bad;
    ExpectInvalid(raw, {absl::StrCat("tokens.ids[1] must be in [0, 259) (a "
                                     "token id of the model's vocabulary); "
                                     "got ",
                                     bad)});
  }
  RawRequest last = TokensRequest(1);
  last.prompt.token_ids[0] = kVocab - 1;
  EXPECT_TRUE(Build(last).ok());
}

// ---------------------------------------------------------------------------
// max_new_tokens.

// The one wording of max_new_tokens' range, [1, the context left]; unset
// (gRPC's 0) is the server's default.
constexpr char kMaxNewTokensRange[] =
    "max_new_tokens must be in [1, 29] (leave it unset for the server's "
    "default; --max_context_tokens=32 less the prompt's 3 tokens); got ";

TEST_F(RequestBuilderTest, NegativeOrZeroMaxNewTokensIsRejected) {
  RawRequest raw = TokensRequest(3);
  raw.max_new_tokens = -1;
  ExpectInvalid(raw, {absl::StrCat(kMaxNewTokensRange, "-1")});
  raw.max_new_tokens = 0;  // set to 0: only HTTP can say so; an error there
  ExpectInvalid(raw, {absl::StrCat(kMaxNewTokensRange, "0")});
  raw.max_new_tokens = 1;
  EXPECT_TRUE(Build(raw).ok());
}

TEST_F(RequestBuilderTest, MaxNewTokensOverTheContextIsRejected) {
  RawRequest raw = TokensRequest(3);
  raw.max_new_tokens = 30;
  ExpectInvalid(raw, {absl::StrCat(kMaxNewTokensRange, "30")});
}

TEST_F(RequestBuilderTest, HugeMaxNewTokensDoesNotWrap) {
  RawRequest raw = TokensRequest(3);
  raw.max_new_tokens = 2147483647;  // 3 + this wraps in 32 bits.
  ExpectInvalid(raw, {absl::StrCat(kMaxNewTokensRange, "2147483647")});
  // RawRequest::max_new_tokens is 64-bit: a front end may pass any value.
  for (int64_t huge : {std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::max() - 2,
                       std::numeric_limits<int64_t>::min()}) {
    raw.max_new_tokens = huge;
    ExpectInvalid(raw, {absl::StrCat(kMaxNewTokensRange, huge)});
  }
}

// ---------------------------------------------------------------------------
// Sampling.

TEST_F(RequestBuilderTest, BadTemperatureIsRejected) {
  for (float bad : {-0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.temperature = bad;
    ExpectInvalid(raw, {absl::StrCat("sampling.temperature must be in [0, "
                                     "inf) (0 = greedy); got ",
                                     bad)});
  }
}

TEST_F(RequestBuilderTest, BadTopPIsRejected) {
  for (float bad : {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.temperature = 1;
    raw.top_p = bad;
    ExpectInvalid(raw, {absl::StrCat("sampling.top_p must be in [0, 1] (0 = "
                                     "off, as is 1); got ",
                                     bad)});
  }
  RawRequest edge = TokensRequest(3);
  edge.top_p = 1;
  EXPECT_TRUE(Build(edge).ok());
}

TEST_F(RequestBuilderTest, TopKOutsideInt32IsRejected) {
  for (int64_t bad : {int64_t{-1}, int64_t{1} << 31}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.top_k = bad;
    ExpectInvalid(raw, {absl::StrCat("sampling.top_k must be in [0, "
                                     "2147483647] (0 = off, as is any value "
                                     ">= the vocabulary size); got ",
                                     bad)});
  }
}

// ---------------------------------------------------------------------------
// Stop strings.

TEST_F(RequestBuilderTest, BadStopStringsAreRejected) {
  RawRequest raw = TokensRequest(3);
  raw.stop = {"a", "b", "c"};
  ExpectInvalid(raw,
                {"stop has 3 strings; use at most 2 (--max_stop_strings)"});
  raw.stop = {"ok", ""};
  ExpectInvalid(raw, {"stop[1] is empty; remove it"});
  raw.stop = {"\xff"};
  ExpectInvalid(raw, {"stop[0] \"\\xff\" is not valid UTF-8"});
  raw.stop = {std::string(limits_.max_stop_bytes + 1, 's')};
  ExpectInvalid(raw, {"stop[0] is 1025 bytes; use at most 1024 "
                      "(--max_stop_bytes)"});
  raw.stop = {std::string(limits_.max_stop_bytes, 's')};
  EXPECT_TRUE(Build(raw).ok());
}

// ---------------------------------------------------------------------------
// Draft parameters.

TEST_F(RequestBuilderTest, UnsupportedDraftModeIsRejected) {
  RawRequest raw = TokensRequest(3);
  raw.draft.mode = RawDraftParams::Mode::kUnsupported;
  raw.draft.wire_mode = 7;
  ExpectInvalid(raw, {"draft.mode 7 is not supported",
                      "use OFF, TRIE_HIERARCHICAL or TRIE_PARALLEL"});
}

TEST_F(RequestBuilderTest, DecodingLengthOutOfRangeIsRejected) {
  for (int bad : {-1, 13}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.draft.decoding_length = bad;
    ExpectInvalid(raw, {absl::StrCat("draft.decoding_length must be in [0, "
                                     "12] (0 = server default; "
                                     "--max_decoding_length); got ",
                                     bad)});
  }
}

TEST_F(RequestBuilderTest, BranchLengthOutOfRangeIsRejected) {
  for (int bad : {-2, 7}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.draft.branch_length = bad;
    ExpectInvalid(raw, {absl::StrCat("draft.branch_length must be in [0, 6] "
                                     "(0 = server default); got ",
                                     bad)});
  }
}

// Sources and the Jacobi window (W, N, G).

RawDraftParams::Source SourceOf(RawDraftParams::Source::Kind kind,
                                int wire = 0) {
  RawDraftParams::Source source;
  source.kind = kind;
  source.wire = wire;
  return source;
}

TEST_F(RequestBuilderTest, SourcesDefaultToTheServersAndAreCarried) {
  using Kind = RawDraftParams::Source::Kind;
  RawRequest raw = TokensRequest(3);
  auto built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.sources, 0u);  // draftsvc's defaults
  EXPECT_TRUE(built->draft.MayUse(engine::DraftSourceTag::kNgram));

  limits_.default_draft_sources =
      engine::SourceBit(engine::DraftSourceTag::kTrie);
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.sources, limits_.default_draft_sources);
  EXPECT_FALSE(built->draft.MayUse(engine::DraftSourceTag::kNgram));

  // The request's own choice wins; duplicates are harmless.
  raw.draft.sources = {SourceOf(Kind::kNgram), SourceOf(Kind::kAssistant),
                       SourceOf(Kind::kNgram)};
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.sources,
            engine::SourceBit(engine::DraftSourceTag::kNgram) |
                engine::SourceBit(engine::DraftSourceTag::kAssistant));
  EXPECT_FALSE(built->draft.MayUse(engine::DraftSourceTag::kTrie));
}

TEST_F(RequestBuilderTest, UnknownSourceIsRejected) {
  using Kind = RawDraftParams::Source::Kind;
  for (int wire : {0, 5, -3}) {
    SCOPED_TRACE(wire);
    RawRequest raw = TokensRequest(3);
    raw.draft.sources = {SourceOf(Kind::kTrie, 1),
                         SourceOf(Kind::kUnsupported, wire)};
    ExpectInvalid(raw, {absl::StrCat("draft.sources[1] = ", wire,
                                     " is not a draft source"),
                        "PROMPT or OUTPUT", "NGRAM or ASSISTANT"});
  }
}

TEST_F(RequestBuilderTest, LookaheadWindowDefaultsAndCarries) {
  RawRequest raw = TokensRequest(3);
  auto built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, limits_.default_lookahead_window);
  EXPECT_EQ(built->draft.lookahead_ngram, limits_.default_lookahead_ngram);
  EXPECT_EQ(built->draft.lookahead_guess, limits_.default_lookahead_guess);
  raw.draft.lookahead_window = 16;
  raw.draft.lookahead_ngram = 2;
  raw.draft.lookahead_guess = 1;
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, 16);
  EXPECT_EQ(built->draft.lookahead_ngram, 2);
  EXPECT_EQ(built->draft.lookahead_guess, 1);
}

TEST_F(RequestBuilderTest, ExplicitZeroWindowIsOffUnderADefaultWindow) {
  limits_.default_lookahead_window = 5;  // --lookahead_window=5
  RawRequest raw = TokensRequest(3);
  auto built = Build(raw);  // unset: the server's window
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, 5);
  raw.draft.lookahead_window = 0;  // set to 0: no window, whatever the default
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, 0);
  // N and G keep their defaults: only W says off.
  EXPECT_EQ(built->draft.lookahead_ngram, limits_.default_lookahead_ngram);
  EXPECT_EQ(built->draft.lookahead_guess, limits_.default_lookahead_guess);
  raw.draft.lookahead_window = 3;
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, 3);
  // A server whose default is no window gives no window to unset requests.
  limits_.default_lookahead_window = 0;
  raw.draft.lookahead_window.reset();
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->draft.lookahead_window, 0);
  // Nor may a request exceed a max of 0, but it may ask for 0.
  limits_.max_lookahead_window = 0;
  raw.draft.lookahead_window = 0;
  EXPECT_TRUE(Build(raw).ok());
  raw.draft.lookahead_window = 1;
  ExpectInvalid(raw, {"draft.lookahead_window must be in [0, 0] "});
}

TEST_F(RequestBuilderTest, LookaheadWindowOutOfRangeIsRejected) {
  for (int bad : {-1, 17}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.draft.lookahead_window = bad;
    ExpectInvalid(raw, {absl::StrCat("draft.lookahead_window must be in [0, "
                                     "16] (0 = no window; unset = server "
                                     "default; --max_lookahead_window); got ",
                                     bad)});
    raw = TokensRequest(3);
    raw.draft.lookahead_guess = bad;
    ExpectInvalid(raw, {absl::StrCat("draft.lookahead_guess must be in [0, "
                                     "16] (0 = server default; "
                                     "--max_lookahead_guess); got ",
                                     bad)});
  }
  for (int bad : {-1, 1, 9}) {
    SCOPED_TRACE(bad);
    RawRequest raw = TokensRequest(3);
    raw.draft.lookahead_ngram = bad;
    ExpectInvalid(raw, {absl::StrCat("draft.lookahead_ngram must be 0 or in "
                                     "[2, 8] (0 = server default; "
                                     "--max_lookahead_ngram); got ",
                                     bad)});
  }
}

TEST(LookaheadLimitsTest, InconsistentFlagsAreRejected) {
  RequestLimits limits;
  EXPECT_TRUE(CheckLookaheadLimits(limits).ok());
  limits.default_lookahead_window = 17;
  absl::Status status = CheckLookaheadLimits(limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("--lookahead_window=17 and --max_lookahead_window=16"));
  limits = RequestLimits();
  limits.default_lookahead_ngram = 1;
  status = CheckLookaheadLimits(limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("each 0 or >= 2"));
}

TEST_F(RequestBuilderTest, SamplingReachesTheDraftPolicy) {
  RawRequest raw = TokensRequest(3);
  raw.temperature = 0.7f;
  raw.top_p = 0.9f;
  raw.top_k = 5;
  raw.seed = 42;
  auto built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_FLOAT_EQ(built->draft.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(built->draft.sampling.top_p, 0.9f);
  EXPECT_EQ(built->draft.sampling.top_k, 5);
  EXPECT_EQ(built->draft.sampling.seed, 42u);
}

TEST_F(RequestBuilderTest, BadNamespaceIsRejected) {
  for (const std::string& bad :
       {std::string("has space"), std::string("slash/"), std::string(129, 'a'),
        std::string("nul\0x", 5)}) {
    SCOPED_TRACE(bad.size());
    RawRequest raw = TokensRequest(3);
    raw.draft.name_space = bad;
    ExpectInvalid(raw, {"draft.namespace:"});
  }
  RawRequest longest = TokensRequest(3);
  longest.draft.name_space = std::string(128, 'a');
  EXPECT_TRUE(Build(longest).ok());
}

// ---------------------------------------------------------------------------
// Text and chat prompts.

TEST_F(RequestBuilderTest, TextPromptIsEncodedWithoutParsingSpecials) {
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kText;
  raw.prompt.text = "hi";
  absl::StatusOr<GenerationRequest> built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_THAT(built->prompt, ElementsAre('h', 'i'));

  // A user's text spelling a control token stays text: no injected EOS.
  raw.prompt.text = "<|im_end|>";
  built = Build(raw);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->prompt.size(), 10u);
  EXPECT_EQ(built->prompt[0], '<');
  for (int32_t id : built->prompt) EXPECT_LT(id, 256);
}

TEST(EncodePromptTest, TextGetsBosIffTheModelWantsOne) {
  RawPrompt prompt;
  prompt.kind = RawPrompt::Kind::kText;
  prompt.text = "hi";
  std::unique_ptr<engine::Tokenizer> with_bos = TinyTokenizer(true);
  std::unique_ptr<engine::Tokenizer> without = TinyTokenizer(false);
  ASSERT_NE(with_bos, nullptr);
  ASSERT_NE(without, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodePrompt(prompt, *with_bos, kVocab);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(kBos, 'h', 'i'));
  ids = EncodePrompt(prompt, *without, kVocab);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre('h', 'i'));

  // An empty text with BOS is one token: BuildRequest accepts it.
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kText;
  absl::StatusOr<GenerationRequest> built =
      BuildRequest(raw, *with_bos, SmallLimits());
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_THAT(built->prompt, ElementsAre(kBos));
}

TEST(EncodePromptTest, ChatGoesThroughTheTemplateWithTheGenerationPrompt) {
  std::unique_ptr<engine::Tokenizer> tokenizer = TinyTokenizer(false);
  ASSERT_NE(tokenizer, nullptr);
  RawPrompt prompt;
  prompt.kind = RawPrompt::Kind::kChat;
  prompt.chat = {{"system", "s"}, {"user", "hi"}};
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodePrompt(prompt, *tokenizer, kVocab);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<std::string> text = tokenizer->Decode(*ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  // The template's markers are the control tokens, not their spelling.
  EXPECT_EQ(ids->front(), kImStart);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kImStart), 3);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kImEnd), 2);
}

TEST(EncodePromptTest, BadChatIsRejectedNamingTheMessage) {
  std::unique_ptr<engine::Tokenizer> tokenizer = TinyTokenizer(false);
  ASSERT_NE(tokenizer, nullptr);
  RawPrompt prompt;
  prompt.kind = RawPrompt::Kind::kChat;
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodePrompt(prompt, *tokenizer, kVocab);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(),
              HasSubstr("chat.messages is empty: give at least one message"));

  prompt.chat = {{"user", "hi"}, {"tool", "x"}};
  ids = EncodePrompt(prompt, *tokenizer, kVocab);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(),
              HasSubstr("chat.messages[1].role is \"tool\"; use system, "
                        "user or assistant"));
}

TEST(EncodePromptTest, TokenIdsAreCheckedAgainstTheGivenVocabulary) {
  std::unique_ptr<engine::Tokenizer> tokenizer = TinyTokenizer(false);
  ASSERT_NE(tokenizer, nullptr);
  RawPrompt prompt;
  prompt.kind = RawPrompt::Kind::kTokens;
  prompt.token_ids = {0, 9, 99};
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodePrompt(prompt, *tokenizer, /*vocab_size=*/100);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(0, 9, 99));
  ids = EncodePrompt(prompt, *tokenizer, /*vocab_size=*/99);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(),
              HasSubstr("tokens.ids[2] must be in [0, 99) (a token id of the "
                        "model's vocabulary); got 99"));
}

TEST(ValidateChatTest, AcceptsTheThreeRoles) {
  const std::vector<engine::ChatMessage> ok = {
      {"system", "a"}, {"user", "b"}, {"assistant", "c"}, {"user", ""}};
  EXPECT_TRUE(ValidateChat(ok).ok());
  for (const char* role : {"", "User", "tool", "function"}) {
    SCOPED_TRACE(role);
    const std::vector<engine::ChatMessage> bad = {{"user", "a"}, {role, "b"}};
    absl::Status status = ValidateChat(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        status.message(),
        HasSubstr(absl::StrCat("chat.messages[1].role is \"", role, "\"")));
  }
  absl::Status empty = ValidateChat({});
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("chat.messages is empty"));
}

TEST(CheckTokenIdsTest, NamesTheFieldAndTheFirstBadIndex) {
  const std::vector<int32_t> ids = {0, 4, 5};
  EXPECT_TRUE(CheckTokenIds(ids, 6, "x").ok());
  EXPECT_TRUE(CheckTokenIds(std::vector<int32_t>{}, 0, "x").ok());
  absl::Status status = CheckTokenIds(ids, 5, "draft.ids");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "draft.ids[2] must be in [0, 5) (a token id of the model's "
            "vocabulary); got 5");
  // The first bad index is named, whichever way it is out of range.
  const std::vector<int32_t> negative = {1, -3, 99};
  status = CheckTokenIds(negative, 6, "draft.ids");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "draft.ids[1] must be in [0, 6) (a token id of the model's "
            "vocabulary); got -3");
}

// ---------------------------------------------------------------------------
// Byte limits, checked before tokenizing, and client input in messages.

TEST_F(RequestBuilderTest, ByteLimitsComeFromTheLongestToken) {
  EXPECT_EQ(limits_.max_token_bytes, 12);  // "<|im_start|>"
  EXPECT_EQ(MaxPromptBytes(limits_), 20 * 12);
  EXPECT_EQ(MaxTokenizeBytes(limits_), 32 * 12);
}

TEST_F(RequestBuilderTest, TextOverTheByteLimitIsRejectedUnread) {
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kText;
  raw.prompt.text = std::string(241, 'a');
  ExpectInvalid(raw, {"text is 241 bytes; use at most 240 "
                      "(--max_prompt_tokens=20 tokens of at most 12 bytes)"});
  // At the limit the tokenizer decides: 240 byte tokens are too many.
  raw.prompt.text.pop_back();
  ExpectInvalid(raw, {"text has 240 tokens; use at most 20 "
                      "(--max_prompt_tokens)"});
}

TEST_F(RequestBuilderTest, ChatBytesCountRolesAndContentsTogether) {
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kChat;
  raw.prompt.chat = {{"system", std::string(100, 's')},
                     {"user", std::string(130, 'u')}};
  // 6 + 100 + 4 + 130 = 240: within the limit (then too many tokens).
  ExpectInvalid(raw, {"chat.messages has 259 tokens; use at most 20 "
                      "(--max_prompt_tokens)"});
  raw.prompt.chat[1].content.push_back('u');
  ExpectInvalid(raw, {"chat.messages[1].content is 131 bytes, making the chat "
                      "241 bytes; use at most 240 in all"});
  raw.prompt.chat.assign(21, {"user", ""});
  ExpectInvalid(raw, {"chat.messages has 21 messages; use at most 20"});
}

TEST_F(RequestBuilderTest, TokenizeInputHasItsOwnByteLimit) {
  RawPrompt input;
  input.kind = RawPrompt::Kind::kText;
  input.text = std::string(384, 'a');
  EXPECT_TRUE(CheckTokenizeBytes(input, limits_).ok());
  input.text.push_back('a');
  const absl::Status status = CheckTokenizeBytes(input, limits_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("text is 385 bytes; use at most 384 "
                                          "(--max_context_tokens=32"));
}

TEST_F(RequestBuilderTest, CheapChecksComeBeforeTokenizing) {
  // Bad stop strings and draft parameters are reported even when the
  // prompt is too long to tokenize: nothing was tokenized.
  RawRequest raw;
  raw.prompt.kind = RawPrompt::Kind::kText;
  raw.prompt.text = std::string(1 << 20, 'a');
  raw.stop = std::vector<std::string>(10000, "x");
  ExpectInvalid(raw, {"stop has 10000 strings"});
  raw.stop.clear();
  raw.draft.decoding_length = -1;
  ExpectInvalid(raw, {"draft.decoding_length must be in [0, 12] "});
}

TEST_F(RequestBuilderTest, ClientStringsAreQuotedShort) {
  RawRequest raw = TokensRequest(3);
  raw.draft.name_space = std::string(100000, '/');
  absl::StatusOr<GenerationRequest> built = Build(raw);
  ASSERT_FALSE(built.ok());
  EXPECT_LT(built.status().message().size(), 300u) << built.status();
  EXPECT_THAT(built.status().message(), HasSubstr("(100000 bytes)"));
  EXPECT_THAT(built.status().message(), HasSubstr("draft.namespace"));

  const std::vector<engine::ChatMessage> chat = {
      {std::string(100000, 'r') + "\n\xff", "x"}};
  const absl::Status role = ValidateChat(chat);
  EXPECT_LT(role.message().size(), 300u) << role;
  EXPECT_THAT(role.message(), HasSubstr("chat.messages[0].role is \"rrrr"));
  EXPECT_THAT(role.message(), HasSubstr("(100002 bytes)"));
}

// ---------------------------------------------------------------------------
// Every limit and field check, worded once: the exact message (gRPC names)
// and the field attached for a front end that renames it. openai_api_test
// holds the HTTP side, where only the field's name differs.

struct FieldCase {
  std::string what;
  std::function<void(RawRequest*)> set;  // applied to TokensRequest(3)
  std::string field;                     // "" = the request as a whole
  std::string message;
};

TEST_F(RequestBuilderTest, EveryLimitIsWordedOnceAndNamesItsField) {
  auto text = [](std::string t) {
    return [t](RawRequest* r) {
      r->prompt = {};
      r->prompt.kind = RawPrompt::Kind::kText;
      r->prompt.text = t;
    };
  };
  auto chat = [](std::vector<engine::ChatMessage> messages) {
    return [messages](RawRequest* r) {
      r->prompt = {};
      r->prompt.kind = RawPrompt::Kind::kChat;
      r->prompt.chat = messages;
    };
  };
  const std::vector<FieldCase> cases = {
      {"max_new_tokens 0", [](RawRequest* r) { r->max_new_tokens = 0; },
       "max_new_tokens",
       "max_new_tokens must be in [1, 29] (leave it unset for the server's "
       "default; --max_context_tokens=32 less the prompt's 3 tokens); got 0"},
      {"max_new_tokens 2^31 - 1",
       [](RawRequest* r) { r->max_new_tokens = 2147483647; }, "max_new_tokens",
       "max_new_tokens must be in [1, 29] (leave it unset for the server's "
       "default; --max_context_tokens=32 less the prompt's 3 tokens); got "
       "2147483647"},
      {"temperature", [](RawRequest* r) { r->temperature = -1; },
       "sampling.temperature",
       "sampling.temperature must be in [0, inf) (0 = greedy); got -1"},
      {"top_p", [](RawRequest* r) { r->top_p = 2; }, "sampling.top_p",
       "sampling.top_p must be in [0, 1] (0 = off, as is 1); got 2"},
      {"top_k", [](RawRequest* r) { r->top_k = -1; }, "sampling.top_k",
       "sampling.top_k must be in [0, 2147483647] (0 = off, as is any value "
       ">= the vocabulary size); got -1"},
      {"decoding_length", [](RawRequest* r) { r->draft.decoding_length = 13; },
       "draft.decoding_length",
       "draft.decoding_length must be in [0, 12] (0 = server default; "
       "--max_decoding_length); got 13"},
      {"branch_length", [](RawRequest* r) { r->draft.branch_length = 7; },
       "draft.branch_length",
       "draft.branch_length must be in [0, 6] (0 = server default); got 7"},
      {"lookahead_window",
       [](RawRequest* r) { r->draft.lookahead_window = 17; },
       "draft.lookahead_window",
       "draft.lookahead_window must be in [0, 16] (0 = no window; unset = "
       "server default; --max_lookahead_window); got 17"},
      {"lookahead_ngram", [](RawRequest* r) { r->draft.lookahead_ngram = 1; },
       "draft.lookahead_ngram",
       "draft.lookahead_ngram must be 0 or in [2, 8] (0 = server default; "
       "--max_lookahead_ngram); got 1"},
      {"lookahead_guess", [](RawRequest* r) { r->draft.lookahead_guess = 17; },
       "draft.lookahead_guess",
       "draft.lookahead_guess must be in [0, 16] (0 = server default; "
       "--max_lookahead_guess); got 17"},
      {"namespace", [](RawRequest* r) { r->draft.name_space = "a b"; },
       "draft.namespace",
       "draft.namespace: \"a b\" is not a namespace name; use 1..128 bytes "
       "of [A-Za-z0-9_.-] (empty = \"default\")"},
      {"mode",
       [](RawRequest* r) {
         r->draft.mode = RawDraftParams::Mode::kUnsupported;
         r->draft.wire_mode = 9;
       },
       "draft.mode",
       "draft.mode 9 is not supported; use OFF, TRIE_HIERARCHICAL or "
       "TRIE_PARALLEL"},
      {"source",
       [](RawRequest* r) {
         r->draft.sources = {
             SourceOf(RawDraftParams::Source::Kind::kUnsupported, 9)};
       },
       "draft.sources[0]",
       "draft.sources[0] = 9 is not a draft source; use PROMPT or OUTPUT (the "
       "token tries), NGRAM or ASSISTANT (none = server default)"},
      {"token id", [](RawRequest* r) { r->prompt.token_ids[2] = kVocab; },
       "tokens.ids[2]",
       "tokens.ids[2] must be in [0, 259) (a token id of the model's "
       "vocabulary); got 259"},
      {"stop count",
       [](RawRequest* r) {
         r->stop = {"a", "b", "c"};
       },
       "stop", "stop has 3 strings; use at most 2 (--max_stop_strings)"},
      {"stop bytes",
       [](RawRequest* r) {
         r->stop = {"a", std::string(1025, 's')};
       },
       "stop[1]", "stop[1] is 1025 bytes; use at most 1024 (--max_stop_bytes)"},
      {"empty stop", [](RawRequest* r) { r->stop = {""}; }, "stop[0]",
       "stop[0] is empty; remove it"},
      {"stop UTF-8", [](RawRequest* r) { r->stop = {"\xff"}; }, "stop[0]",
       "stop[0] \"\\xff\" is not valid UTF-8"},
      {"prompt tokens", [](RawRequest* r) { *r = TokensRequest(21); },
       "tokens.ids",
       "tokens.ids has 21 tokens; use at most 20 (--max_prompt_tokens)"},
      {"empty prompt", [](RawRequest* r) { *r = TokensRequest(0); },
       "tokens.ids",
       "tokens.ids is empty (0 tokens): a prompt needs at least one token"},
      {"text tokens", text(std::string(21, 'a')), "text",
       "text has 21 tokens; use at most 20 (--max_prompt_tokens)"},
      {"text bytes", text(std::string(241, 'a')), "text",
       "text is 241 bytes; use at most 240 (--max_prompt_tokens=20 tokens of "
       "at most 12 bytes)"},
      {"chat tokens", chat({{"user", std::string(10, 'u')}}), "chat.messages",
       "chat.messages has 29 tokens; use at most 20 (--max_prompt_tokens)"},
      {"chat messages",
       chat(std::vector<engine::ChatMessage>(21, {"user", ""})),
       "chat.messages",
       "chat.messages has 21 messages; use at most 20 (each message takes at "
       "least one token)"},
      {"chat bytes", chat({{"user", "x"}, {"user", std::string(240, 'u')}}),
       "chat.messages[1].content",
       "chat.messages[1].content is 240 bytes, making the chat 249 bytes; use "
       "at most 240 in all (--max_prompt_tokens=20 tokens of at most 12 "
       "bytes)"},
      {"no messages", chat({}), "chat.messages",
       "chat.messages is empty: give at least one message"},
      {"role", chat({{"user", "x"}, {"tool", "y"}}), "chat.messages[1].role",
       "chat.messages[1].role is \"tool\"; use system, user or assistant"},
      {"no prompt", [](RawRequest* r) { r->prompt = {}; }, "",
       "no prompt: set one of text, chat or tokens"},
  };
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(c.what);
    RawRequest raw = TokensRequest(3);
    c.set(&raw);
    const absl::StatusOr<GenerationRequest> built = Build(raw);
    EXPECT_FALSE(built.ok());
    if (built.ok()) continue;
    EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(built.status().message()), c.message);
    EXPECT_EQ(ErrorField(built.status()), c.field);
  }
}

}  // namespace
}  // namespace lookahead::verifysvc

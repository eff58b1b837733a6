#include "verifysvc/serving/output_processor.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/testing/byte_tokenizer.h"
#include "engine/testing/utf8_test_util.h"
#include "engine/text/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifysvc/serving/output.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// Ids of the tiny vocabulary's special tokens; ids 0..255 are the bytes.
constexpr int32_t kImEnd = 256;      // EOS
constexpr int32_t kEndOfText = 257;  // ends a generation by its spelling
constexpr int32_t kImStart = 258;    // control, not an end

// A byte-level tokenizer with no merges, so token id b is byte b. Built in
// memory: no model file.
std::unique_ptr<engine::Tokenizer> TinyTokenizer() {
  engine::TokenizerSpec spec =
      engine::ByteLevelSpec({"<|im_end|>", "<|endoftext|>", "<|im_start|>"});
  spec.eos_id = kImEnd;
  return engine::MustCreateTokenizer(std::move(spec));
}

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = TinyTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    ASSERT_TRUE(tokenizer_->IsEndOfGeneration(kImEnd));
    ASSERT_TRUE(tokenizer_->IsEndOfGeneration(kEndOfText));
    ASSERT_FALSE(tokenizer_->IsEndOfGeneration(kImStart));
  }

  OutputProcessor Make(std::vector<std::string> stop, int max_new_tokens) {
    return OutputProcessor(tokenizer_.get(), stop, max_new_tokens);
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_;
};

TEST_F(OutputProcessorTest, StreamsTextUntilTheLengthLimit) {
  OutputProcessor out = Make({}, /*max_new_tokens=*/3);
  GenerationOutput first = out.Append(engine::ByteIds("ab"));
  EXPECT_THAT(first.token_ids, ElementsAreArray(engine::ByteIds("ab")));
  EXPECT_EQ(first.text, "ab");
  EXPECT_EQ(first.finish_reason, FinishReason::kNone);
  EXPECT_FALSE(first.usage.has_value());
  EXPECT_FALSE(out.finished());

  // The limit falls inside the step: the tokens past it are dropped.
  GenerationOutput last = out.Append(engine::ByteIds("cde"));
  EXPECT_THAT(last.token_ids, ElementsAreArray(engine::ByteIds("c")));
  EXPECT_EQ(last.text, "c");
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_FALSE(last.usage.has_value());
  EXPECT_TRUE(out.finished());
  EXPECT_THAT(out.tokens(), ElementsAreArray(engine::ByteIds("abc")));
}

TEST_F(OutputProcessorTest, LengthLimitAtTheEndOfAStep) {
  OutputProcessor out = Make({}, /*max_new_tokens=*/2);
  GenerationOutput last = out.Append(engine::ByteIds("xy"));
  EXPECT_EQ(last.text, "xy");
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(out.finished());
}

TEST_F(OutputProcessorTest, EosEndsTheSequenceAndIsKeptButNotShown) {
  OutputProcessor out = Make({}, /*max_new_tokens=*/100);
  GenerationOutput last = out.Append({'h', 'i', kImEnd, 'x', kImStart, 'y'});
  EXPECT_THAT(last.token_ids, ElementsAre('h', 'i', kImEnd));
  EXPECT_EQ(last.text, "hi");  // No "<|im_end|>" in the answer.
  EXPECT_EQ(last.finish_reason, FinishReason::kEos);
  EXPECT_TRUE(out.finished());
  EXPECT_THAT(out.tokens(), ElementsAre('h', 'i', kImEnd));
}

TEST_F(OutputProcessorTest, AnyEndOfGenerationTokenEnds) {
  OutputProcessor out = Make({}, /*max_new_tokens=*/100);
  GenerationOutput first = out.Append({'a', kImStart});  // Not an end.
  EXPECT_EQ(first.finish_reason, FinishReason::kNone);
  EXPECT_EQ(first.text, "a");  // Control text is not shown.
  GenerationOutput last = out.Append({kEndOfText, 'b'});
  EXPECT_THAT(last.token_ids, ElementsAre(kEndOfText));
  EXPECT_EQ(last.text, "");
  EXPECT_EQ(last.finish_reason, FinishReason::kEos);
}

TEST_F(OutputProcessorTest, EosAtTheLengthLimitIsAnEosFinish) {
  OutputProcessor out = Make({}, /*max_new_tokens=*/3);
  GenerationOutput last = out.Append({'a', 'b', kImEnd});
  EXPECT_EQ(last.finish_reason, FinishReason::kEos);
  EXPECT_EQ(last.text, "ab");
}

TEST_F(OutputProcessorTest, StopStringCutsTheTextAndKeepsItsTokens) {
  OutputProcessor out = Make({"END"}, /*max_new_tokens=*/100);
  GenerationOutput last = out.Append(engine::ByteIds("abENDxy"));
  // Tokens up to the one completing the stop string; text before it.
  EXPECT_THAT(last.token_ids, ElementsAreArray(engine::ByteIds("abEND")));
  EXPECT_EQ(last.text, "ab");
  EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
  EXPECT_TRUE(out.finished());
  EXPECT_THAT(out.tokens(), ElementsAreArray(engine::ByteIds("abEND")));
}

// Logprobs stay one per kept token: those of tokens cut by a stop string,
// an EOS or the length limit go with them.
TEST_F(OutputProcessorTest, LogprobsFollowTheKeptTokens) {
  auto logprobs_of = [](absl::Span<const int32_t> tokens) {
    std::vector<engine::ChoiceLogprobs> logprobs;
    for (int32_t t : tokens) {
      logprobs.push_back({{t, -0.5f * t}, {{t, -0.5f * t}}});
    }
    return logprobs;
  };
  auto chosen = [](const GenerationOutput& out) {
    std::vector<int32_t> ids;
    for (const engine::ChoiceLogprobs& l : out.logprobs) {
      ids.push_back(l.chosen.token);
    }
    return ids;
  };
  OutputProcessor stop = Make({"END"}, /*max_new_tokens=*/100);
  const std::vector<int32_t> first = engine::ByteIds("xyE");
  GenerationOutput held = stop.Append(first, logprobs_of(first));
  EXPECT_EQ(held.text, "xy");  // "E" is held back, its token and logprob not
  EXPECT_EQ(chosen(held), first);
  const std::vector<int32_t> rest = engine::ByteIds("NDab");
  GenerationOutput cut = stop.Append(rest, logprobs_of(rest));
  EXPECT_THAT(cut.token_ids, ElementsAreArray(engine::ByteIds("ND")));
  EXPECT_EQ(chosen(cut), cut.token_ids);
  EXPECT_EQ(cut.logprobs[1].chosen.logprob, -0.5f * 'D');

  OutputProcessor length = Make({}, /*max_new_tokens=*/2);
  const std::vector<int32_t> three = engine::ByteIds("abc");
  EXPECT_EQ(chosen(length.Append(three, logprobs_of(three))),
            engine::ByteIds("ab"));
  OutputProcessor eos = Make({}, /*max_new_tokens=*/100);
  const std::vector<int32_t> ended = {'o', kImEnd, 'k'};
  GenerationOutput last = eos.Append(ended, logprobs_of(ended));
  EXPECT_THAT(chosen(last), ElementsAre('o', kImEnd));
  // Without logprobs asked, none come out.
  OutputProcessor plain = Make({}, /*max_new_tokens=*/100);
  EXPECT_TRUE(plain.Append(engine::ByteIds("ab")).logprobs.empty());
}

TEST_F(OutputProcessorTest, StopStringWinsOverEosAndLengthInTheSameStep) {
  {
    OutputProcessor out = Make({"!"}, /*max_new_tokens=*/100);
    GenerationOutput last = out.Append({'o', 'k', '!', kImEnd});
    EXPECT_THAT(last.token_ids, ElementsAre('o', 'k', '!'));
    EXPECT_EQ(last.text, "ok");
    EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
  }
  {
    OutputProcessor out = Make({"!"}, /*max_new_tokens=*/3);
    GenerationOutput last = out.Append(engine::ByteIds("ok!"));
    EXPECT_EQ(last.text, "ok");
    EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
  }
}

TEST_F(OutputProcessorTest, StopStringSplitAcrossStepsIsHeldBack) {
  OutputProcessor out = Make({"END"}, /*max_new_tokens=*/100);
  GenerationOutput a = out.Append(engine::ByteIds("ab E"));
  EXPECT_EQ(a.text, "ab ");  // "E" may start "END": held back.
  EXPECT_THAT(a.token_ids, ElementsAreArray(engine::ByteIds("ab E")));
  EXPECT_EQ(a.finish_reason, FinishReason::kNone);
  GenerationOutput b = out.Append(engine::ByteIds("N"));
  EXPECT_EQ(b.text, "");
  EXPECT_THAT(b.token_ids, ElementsAreArray(engine::ByteIds("N")));
  EXPECT_EQ(b.finish_reason, FinishReason::kNone);
  GenerationOutput c = out.Append(engine::ByteIds("D!"));
  EXPECT_EQ(c.text, "");  // The held "EN" was the stop string's start.
  EXPECT_THAT(c.token_ids, ElementsAreArray(engine::ByteIds("D")));
  EXPECT_EQ(c.finish_reason, FinishReason::kStopString);
  EXPECT_THAT(out.tokens(), ElementsAreArray(engine::ByteIds("ab END")));
}

TEST_F(OutputProcessorTest, HeldBackTextIsReleasedWhenItDoesNotMatch) {
  OutputProcessor out = Make({"END"}, /*max_new_tokens=*/100);
  EXPECT_EQ(out.Append(engine::ByteIds("xE")).text, "x");
  EXPECT_EQ(out.Append(engine::ByteIds("N")).text, "");
  GenerationOutput c = out.Append(engine::ByteIds("d"));
  EXPECT_EQ(c.text, "ENd");
  EXPECT_EQ(c.finish_reason, FinishReason::kNone);
  // A partial match that restarts inside itself: "EEND" stops after "E".
  GenerationOutput d = out.Append(engine::ByteIds("EEND"));
  EXPECT_EQ(d.text, "E");
  EXPECT_EQ(d.finish_reason, FinishReason::kStopString);
}

TEST_F(OutputProcessorTest, HeldBackTextIsFlushedWhenTheSequenceEnds) {
  {
    OutputProcessor out = Make({"END"}, /*max_new_tokens=*/2);
    GenerationOutput last = out.Append(engine::ByteIds("xE"));
    EXPECT_EQ(last.text, "xE");
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  }
  {
    OutputProcessor out = Make({"END"}, /*max_new_tokens=*/100);
    EXPECT_EQ(out.Append(engine::ByteIds("EN")).text, "");
    GenerationOutput last = out.Append({kImEnd});
    EXPECT_EQ(last.text, "EN");
    EXPECT_EQ(last.finish_reason, FinishReason::kEos);
  }
}

TEST_F(OutputProcessorTest, MultiByteCharactersAreNeverSplit) {
  // "é" is C3 A9: two byte tokens.
  OutputProcessor out = Make({}, /*max_new_tokens=*/100);
  GenerationOutput a = out.Append({'a', 0xC3});
  EXPECT_EQ(a.text, "a");
  GenerationOutput b = out.Append({0xA9, 'b'});
  EXPECT_EQ(b.text, engine::Utf8(0xE9) + "b");
  // A character cut by the end is flushed as U+FFFD.
  OutputProcessor cut = Make({}, /*max_new_tokens=*/2);
  GenerationOutput last = cut.Append({'a', 0xC3});
  EXPECT_EQ(last.text, "a\xEF\xBF\xBD");
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
}

TEST_F(OutputProcessorTest, MultiByteStopString) {
  OutputProcessor out = Make({"\xC3\xA9!"}, /*max_new_tokens=*/100);
  EXPECT_EQ(out.Append({'a', 0xC3}).text, "a");
  EXPECT_EQ(out.Append({0xA9}).text, "");  // "é" may start "é!".
  GenerationOutput last = out.Append({'!', 'z'});
  EXPECT_EQ(last.text, "");
  EXPECT_THAT(last.token_ids, ElementsAre('!'));
  EXPECT_EQ(last.finish_reason, FinishReason::kStopString);
}

// Against a one-shot oracle: random ASCII streams with EOS, cut into random
// steps, must give the same tokens, text and finish as deciding over the
// whole stream, and the text streamed so far is always a prefix of it.
TEST_F(OutputProcessorTest, RandomizedAgainstWholeStreamOracle) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"END", "NEN", "b"};
  const std::vector<int32_t> alphabet = {'E', 'N', 'D', 'a', 'b', kImEnd};
  for (int iter = 0; iter < 3000; ++iter) {
    SCOPED_TRACE(iter);
    const int max_new = std::uniform_int_distribution<int>(1, 12)(rng);
    const int n = std::uniform_int_distribution<int>(1, 16)(rng);
    std::vector<int32_t> stream;
    for (int i = 0; i < n; ++i) {
      // EOS rarely, so most streams run into a limit or a stop string.
      const int k = std::uniform_int_distribution<int>(0, 30)(rng);
      stream.push_back(k == 0 ? kImEnd : alphabet[k % 5]);
    }
    std::vector<std::string> use_stops;
    for (const std::string& s : stops) {
      if (std::bernoulli_distribution(0.5)(rng)) use_stops.push_back(s);
    }

    // Oracle: walk the whole stream once.
    std::vector<int32_t> want_tokens;
    std::string want_text;
    FinishReason want_finish = FinishReason::kNone;
    std::string text;
    for (int32_t token : stream) {
      want_tokens.push_back(token);
      if (token != kImEnd) text.push_back(static_cast<char>(token));
      size_t cut = std::string::npos;
      for (const std::string& s : use_stops) cut = std::min(cut, text.find(s));
      if (cut != std::string::npos) {
        want_finish = FinishReason::kStopString;
        text.resize(cut);
      } else if (token == kImEnd) {
        want_finish = FinishReason::kEos;
      } else if (static_cast<int>(want_tokens.size()) >= max_new) {
        want_finish = FinishReason::kLength;
      }
      if (want_finish != FinishReason::kNone) break;
    }
    want_text = text;

    OutputProcessor out = Make(use_stops, max_new);
    std::vector<int32_t> got_tokens;
    std::string got_text;
    FinishReason got_finish = FinishReason::kNone;
    size_t pos = 0;
    while (pos < stream.size() && !out.finished()) {
      const size_t len = std::uniform_int_distribution<size_t>(
          1, std::min<size_t>(4, stream.size() - pos))(rng);
      GenerationOutput step =
          out.Append(absl::Span<const int32_t>(stream.data() + pos, len));
      pos += len;
      ASSERT_EQ(got_finish, FinishReason::kNone) << "output after the end";
      got_tokens.insert(got_tokens.end(), step.token_ids.begin(),
                        step.token_ids.end());
      got_text += step.text;
      got_finish = step.finish_reason;
      ASSERT_EQ(want_text.compare(0, got_text.size(), got_text), 0)
          << "streamed \"" << got_text << "\", final \"" << want_text << "\"";
    }
    EXPECT_EQ(got_tokens, want_tokens);
    EXPECT_EQ(out.tokens(), want_tokens);
    EXPECT_EQ(got_finish, want_finish);
    EXPECT_EQ(out.finished(), want_finish != FinishReason::kNone);
    if (want_finish != FinishReason::kNone) {
      EXPECT_EQ(got_text, want_text);
    }
  }
}

}  // namespace
}  // namespace lookahead::verifysvc

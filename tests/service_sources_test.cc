// Draft sources chosen per request, end to end: real draftsvc and verifysvc
// binaries over loopback gRPC, the real model, a draftsvc that runs no
// assistant model.
//
//   * A request for a source draftsvc does not run fails with
//     FAILED_PRECONDITION carrying draftsvc's message (naming the source),
//     never silently without drafts, and before its stream carried any
//     token (draftsvc refuses the session's open); the service goes on
//     serving.
//   * Every source choice (the tries, the n-gram pool fed by the verifier's
//     recycled predictions, both, the pool fed by a Jacobi window too) gives
//     exactly plain decoding's tokens, greedy and with seeded sampling, and
//     Usage.sources accounts for the draft tokens per source (only sources that
//     were asked for).
//   * Bad sources and Jacobi windows are INVALID_ARGUMENT naming the field.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kNewTokens = 48;

// A prompt whose answer repeats its text: drafts from the prompt trie (and
// the recycled predictions at its nodes) are accepted.
const char kPassage[] =
    "Read the passage and answer with its exact words.\n\nPassage:\nThe "
    "licenses for most software and other practical works are designed to "
    "take away your freedom to share and change the works. By contrast, the "
    "GNU General Public License is intended to guarantee your freedom to "
    "share and change all versions of a program.\n\nQuestion: What is the "
    "GNU General Public License intended to guarantee?";

class ServiceSourcesTest : public SharedPairTest<ServiceSourcesTest> {
 public:  // Read by SharedPairTest.
  static PairOptions Options() {
    PairOptions options;
    options.name = "sources";
    // The Jacobi window runs on every step it is asked for, so its path is
    // checked whatever its cost gate would decide on this machine.
    options.verifysvc_flags = {"--cost_gates=false"};
    return options;
  }

 protected:
  static v1::GenerateRequest Request(std::vector<v1::DraftSource> sources,
                                     const std::string& name_space) {
    v1::GenerateRequest request = ChatRequest(kPassage, kNewTokens);
    SetDraftMode(&request, v1::DRAFT_MODE_TRIE_HIERARCHICAL);
    for (v1::DraftSource source : sources) {
      request.mutable_draft()->add_sources(source);
    }
    request.mutable_draft()->set_namespace_(name_space);
    return request;
  }
};

TEST_F(ServiceSourcesTest, UnservedSourceIsFailedPreconditionFromDraftsvc) {
  const Generation failed =
      pair_->Generate(Request({v1::DRAFT_SOURCE_ASSISTANT}, "unserved"));
  ASSERT_EQ(failed.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << failed.status.error_message() << "\n"
      << pair_->Logs();
  ExpectMentions(failed.status.error_message(),
                 {"draftsvc", "DRAFT_SOURCE_ASSISTANT|assistant"});
  // Nothing reached the client before the error: not even the prefill's
  // token.
  EXPECT_EQ(failed.messages, 0) << TokensToString(failed.tokens);
  EXPECT_TRUE(failed.tokens.empty()) << TokensToString(failed.tokens);
  EXPECT_FALSE(failed.has_usage);
  // Only the request failed: the same request on the tries is served.
  const Generation served =
      pair_->Generate(Request({v1::DRAFT_SOURCE_PROMPT}, "unserved"));
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
}

TEST_F(ServiceSourcesTest, EverySourceChoiceIsLosslessAndAccountedFor) {
  struct Choice {
    const char* name;
    std::vector<v1::DraftSource> sources;
    std::vector<v1::DraftSource> may_report;  // Usage.sources allowed
    int window = 0;  // Jacobi lookahead window W (N = 3, G = W); 0: none
  };
  const std::vector<Choice> choices = {
      {"trie",
       {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_OUTPUT},
       {v1::DRAFT_SOURCE_PROMPT}},
      {"ngram", {v1::DRAFT_SOURCE_NGRAM}, {v1::DRAFT_SOURCE_NGRAM}},
      {"trie-ngram",
       {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_NGRAM},
       {v1::DRAFT_SOURCE_PROMPT, v1::DRAFT_SOURCE_NGRAM}},
      // The Jacobi window's rows ride in the verify pass; its n-grams join
      // the pool.
      {"jacobi", {v1::DRAFT_SOURCE_NGRAM}, {v1::DRAFT_SOURCE_NGRAM}, 4},
  };
  int64_t trie_accepted = 0;
  for (const Choice& choice : choices) {
    for (bool sampled : {false, true}) {
      SCOPED_TRACE(absl::StrCat(choice.name, sampled ? " sampled" : " greedy"));
      // Twice in one namespace: the second request finds the first one's
      // output and recycled predictions in draftsvc.
      for (int round = 0; round < 2; ++round) {
        v1::GenerateRequest request =
            Request(choice.sources, absl::StrCat("src-", choice.name));
        if (sampled) SetSeededSampling(&request, 4242);
        if (choice.window > 0) {
          request.mutable_draft()->set_lookahead_window(choice.window);
          request.mutable_draft()->set_lookahead_ngram(3);
          request.mutable_draft()->set_lookahead_guess(choice.window);
        }
        const Generation plain = pair_->Reference(request);
        const Generation fast = pair_->Generate(request);
        ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
        ASSERT_TRUE(fast.status.ok()) << fast.status.error_message();
        ExpectSameTokens(fast, plain);
        const v1::Usage& usage = fast.usage;
        int64_t drafted = 0, accepted = 0;
        std::string line;
        for (const v1::SourceUsage& s : usage.sources()) {
          bool allowed = false;
          for (v1::DraftSource ok : choice.may_report) {
            allowed = allowed || s.source() == ok;
          }
          EXPECT_TRUE(allowed) << v1::DraftSource_Name(s.source());
          EXPECT_GT(s.draft_tokens(), 0);
          EXPECT_LE(s.accepted_draft_tokens(), s.draft_tokens());
          EXPECT_LE(s.draft_tokens(), usage.draft_tokens());
          EXPECT_LE(s.accepted_draft_tokens(), usage.accepted_draft_tokens());
          drafted += s.draft_tokens();
          accepted += s.accepted_draft_tokens();
          if (s.source() == v1::DRAFT_SOURCE_PROMPT) {
            trie_accepted += s.accepted_draft_tokens();
          }
          absl::StrAppend(&line, " ", v1::DraftSource_Name(s.source()), " ",
                          s.accepted_draft_tokens(), "/", s.draft_tokens());
        }
        // Each node counts for at least one source.
        EXPECT_GE(drafted, usage.draft_tokens());
        EXPECT_GE(accepted, usage.accepted_draft_tokens());
        std::printf("%-10s %s round %d: edl %.2f,%s\n", choice.name,
                    sampled ? "sampled" : "greedy ", round, usage.edl(),
                    line.c_str());
      }
    }
  }
  // The tries draft this prompt's answer, or the comparisons prove little.
  EXPECT_GT(trie_accepted, 0);
}

TEST_F(ServiceSourcesTest, BadSourcesAndWindowsAreInvalidArgument) {
  v1::GenerateRequest unknown = Request({}, "");
  unknown.mutable_draft()->add_sources(static_cast<v1::DraftSource>(9));
  const Generation bad_source = pair_->Generate(unknown);
  EXPECT_EQ(bad_source.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectMentions(bad_source.status.error_message(),
                 {"draft.sources[0] = 9", "NGRAM"});

  v1::GenerateRequest window = Request({v1::DRAFT_SOURCE_NGRAM}, "");
  window.mutable_draft()->set_lookahead_ngram(1);
  const Generation bad_window = pair_->Generate(window);
  EXPECT_EQ(bad_window.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectMentions(bad_window.status.error_message(),
                 {"draft.lookahead_ngram must be 0 or in [2, ",
                  "--max_lookahead_ngram", "got 1"});

  window.mutable_draft()->set_lookahead_ngram(0);
  window.mutable_draft()->set_lookahead_window(17);
  const Generation wide = pair_->Generate(window);
  EXPECT_EQ(wide.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectMentions(wide.status.error_message(),
                 {"draft.lookahead_window must be in [0, 16]", "got 17"});
}

}  // namespace
}  // namespace lookahead::testing

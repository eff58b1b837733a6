// Lossless end to end: the real draftsvc binary over loopback gRPC feeds draft
// trees to the real model, and every output must be token for token the
// output of plain decoding, greedy and seeded sampling. Also checks that the
// drafts are really exercised (some get accepted), so the comparison is not
// vacuous.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/llama_model.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "engine/text/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"
#include "tests/session_draft_provider.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"

namespace lookahead::verifysvc {
namespace {

constexpr int kNewTokens = 48;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

class LookaheadLosslessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<engine::RealModel> real = engine::LoadRealModel();
    ASSERT_TRUE(real.ok()) << real.status();
    real_ = new engine::RealModel(*std::move(real));
    model_ = real_->model.get();
    tokenizer_ = real_->tokenizer.get();
  }
  static void TearDownTestSuite() { delete real_; }

  void SetUp() override {
    const std::string dir = Env("TEST_TMPDIR");
    server_ = std::make_unique<testing::ServerProcess>(
        std::vector<std::string>{Env("DRAFTSVC_BINARY"), "--host=127.0.0.1",
                                 "--port=0", "--metrics_port=-1",
                                 "--db_path=" + dir + "/db"},
        dir + "/port", dir + "/draftsvc.log");
    const int port = server_->WaitForPort();
    ASSERT_GT(port, 0) << server_->Log();
    client_ = DraftClient::Create(absl::StrCat("127.0.0.1:", port), {});
  }

  std::vector<int32_t> Chat(const std::string& user) {
    auto ids = tokenizer_->EncodeChat({{"user", user}}, true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{1};
  }

  engine::GenerationResult Run(const std::vector<int32_t>& prompt,
                               const engine::SamplingParams& sampling,
                               bool drafts, DraftRequest step = {}) {
    engine::GenerationOptions options;
    options.max_new_tokens = kNewTokens;
    options.sampling = sampling;
    std::unique_ptr<SessionDraftProvider> provider;
    if (drafts) {
      auto opened = SessionDraftProvider::Open(
          client_.get(), absl::StrCat("s", ++sessions_), "lossless",
          model_->config().vocab_size, prompt, step);
      EXPECT_TRUE(opened.ok()) << opened.status();
      if (opened.ok()) provider = *std::move(opened);
    }
    auto result = engine::Generate(*model_, prompt, options, provider.get());
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : engine::GenerationResult();
  }

  static inline engine::RealModel* real_ = nullptr;
  static inline const engine::LlamaModel* model_ = nullptr;
  static inline const engine::Tokenizer* tokenizer_ = nullptr;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<DraftClient> client_;
  int sessions_ = 0;
};

const char* const kPrompts[] = {
    "Answer using the passage.\n\nPassage: The Grant of Patent License "
    "terminates as of the date such litigation is filed, if You institute "
    "patent litigation against any entity alleging that the Work constitutes "
    "patent infringement.\n\nQuestion: When does the patent license end?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the days of the week, one per line.",
    "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick "
    "brown fox jumps over the lazy dog.",
    "Explique en une phrase ce qu'est la photosynthèse.",
    "What is 12 + 30? Show your steps.",
};

TEST_F(LookaheadLosslessTest, GreedyAndSeededSamplingMatchPlainDecoding) {
  int64_t accepted = 0, proposed = 0;
  int index = 0;
  for (const char* text : kPrompts) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> prompt = Chat(text);
    engine::SamplingParams greedy;
    engine::SamplingParams sampled;
    sampled.temperature = 0.8f;
    sampled.top_p = 0.95f;
    sampled.top_k = 50;
    sampled.seed = 1000 + index;
    DraftRequest hierarchical;
    hierarchical.decoding_length = 16;
    DraftRequest parallel = hierarchical;
    parallel.mode = lookahead::v1::DRAFT_MODE_TRIE_PARALLEL;

    const engine::GenerationResult plain = Run(prompt, greedy, false);
    ASSERT_EQ(plain.tokens.size(), kNewTokens);
    EXPECT_EQ(plain.steps, kNewTokens);
    // Twice: the second run also draws on the first's outputs, now in the
    // namespace's global trie.
    for (int pass = 0; pass < 2; ++pass) {
      const engine::GenerationResult fast =
          Run(prompt, greedy, true, hierarchical);
      EXPECT_EQ(fast.tokens, plain.tokens) << "greedy pass " << pass;
      accepted += fast.accepted_draft_tokens;
      proposed += fast.draft_tokens;
    }
    EXPECT_EQ(Run(prompt, greedy, true, parallel).tokens, plain.tokens)
        << "greedy, parallel drafts";

    const engine::GenerationResult plain_sampled = Run(prompt, sampled, false);
    EXPECT_EQ(Run(prompt, sampled, true, hierarchical).tokens,
              plain_sampled.tokens)
        << "seeded sampling";
    ++index;
  }
  // Drafts must really be verified and partly accepted, or the comparisons
  // above prove nothing.
  EXPECT_GT(proposed, 0);
  EXPECT_GT(accepted, 0);
  std::printf("draft tokens accepted: %lld of %lld\n",
              static_cast<long long>(accepted),
              static_cast<long long>(proposed));
}

TEST_F(LookaheadLosslessTest, DeadDraftServiceCostsOnlyDrafts) {
  const std::vector<int32_t> prompt = Chat(kPrompts[2]);
  engine::SamplingParams greedy;
  const engine::GenerationResult plain = Run(prompt, greedy, false);
  DraftRequest step;
  step.decoding_length = 16;
  auto provider =
      SessionDraftProvider::Open(client_.get(), "dies", "lossless",
                                 model_->config().vocab_size, prompt, step);
  ASSERT_TRUE(provider.ok()) << provider.status();
  server_->Kill(SIGKILL);  // Every Step now fails: no drafts, same output.
  engine::GenerationOptions options;
  options.max_new_tokens = kNewTokens;
  auto result = engine::Generate(*model_, prompt, options, provider->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, plain.tokens);
  EXPECT_EQ(result->draft_tokens, 0);
}

}  // namespace
}  // namespace lookahead::verifysvc

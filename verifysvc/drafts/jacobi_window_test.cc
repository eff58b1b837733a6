// JacobiWindow against a straightforward reference written here: every
// window row's context is built explicitly and run through an independent
// causal forward (ReferenceCausalLogits: full-sequence attention, no cache,
// no masks), the Jacobi update and harvest redone with plain loops; then
// losslessness (the verify tree's logits and committed K/V do not move, and
// decoding with the window and its n-grams gives plain decoding's tokens) and
// bad parameters.
#include "verifysvc/drafts/jacobi_window.h"

#include <torch/types.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/model/acceptance.h"
#include "engine/model/batch.h"
#include "engine/model/llama_model.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/jacobi_decode.h"

namespace lookahead::verifysvc {
namespace {

using ::testing::HasSubstr;

// Max |logit difference| between our float32 pass and the float64
// reference on the tiny model (as llama_model_test's kTol).
constexpr double kRefTol = 1e-4;

class JacobiWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = engine::LoadTinyModel(engine::TinyModelSpec());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    engine::ModelOptions f32;
    f32.weights = engine::WeightFormat::kF32;
    auto reference = engine::LoadTinyModel(engine::TinyModelSpec(), f32);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = reference->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    delete reference_;
    reference_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }

  static int32_t vocab() { return model_->config().vocab_size; }
  static JacobiOptions Options(int w, int n, int g) {
    JacobiOptions o;
    o.window = w;
    o.ngram = n;
    o.max_ngrams = g;
    o.vocab_size = vocab();
    o.seed = 42;
    return o;
  }

  static engine::LlamaModel* model_;      // owned; native pass
  static engine::LlamaModel* reference_;  // owned; f32, for the reference
};
engine::LlamaModel* JacobiWindowTest::model_ = nullptr;
engine::LlamaModel* JacobiWindowTest::reference_ = nullptr;

const std::vector<int32_t> kPrompt = {3, 17, 29, 5, 88, 17, 42, 9, 60, 71};

// The reference window, column-major (grid[column][level]) and updated by
// explicit loops, following the contract in jacobi_window.h.
struct ReferenceWindow {
  int w, n, g;
  uint64_t seed;
  bool shift;
  std::vector<int32_t> history;
  uint64_t draws = 0;
  int64_t updates = 0;
  std::vector<std::vector<int32_t>> grid;  // (W, N - 1)

  int32_t Draw() {
    return history[engine::CounterRandom(seed, draws++) % history.size()];
  }
  void Init() {
    grid.assign(w, std::vector<int32_t>(n - 1));
    for (int l = 0; l < n - 1; ++l) {
      for (int i = 0; i < w; ++i) grid[i][l] = Draw();
    }
  }
  // The causal sequence window row (l, i) stands for, after `sequence`
  // (everything up to and including the root).
  std::vector<int32_t> RowContext(const std::vector<int32_t>& sequence, int l,
                                  int i) const {
    std::vector<int32_t> context = sequence;
    for (int j = 0; j < i; ++j) context.push_back(grid[j][0]);
    for (int m = 0; m <= l; ++m) context.push_back(grid[i][m]);
    return context;
  }
  // predictions[i]: the token after column i's last level.
  std::vector<JacobiNgram> Step(const std::vector<int32_t>& predictions,
                                const std::vector<int32_t>& emitted) {
    std::vector<JacobiNgram> harvested;
    if (updates >= n - 2) {
      for (int i = 0; i < w; ++i) {
        if (static_cast<int>(harvested.size()) >= std::min(w, g)) break;
        JacobiNgram gram = grid[i];
        gram.push_back(predictions[i]);
        bool seen = false;
        for (const JacobiNgram& h : harvested) seen = seen || h == gram;
        if (!seen) harvested.push_back(gram);
      }
    }
    for (int i = 0; i < w; ++i) {
      grid[i].erase(grid[i].begin());
      grid[i].push_back(predictions[i]);
    }
    history.insert(history.end(), emitted.begin(), emitted.end());
    const int k = std::min<int>(w, emitted.size() - 1);
    if (shift && k > 0) {
      grid.erase(grid.begin(), grid.begin() + k);
      std::vector<std::vector<int32_t>> fresh(k, std::vector<int32_t>(n - 1));
      for (int l = 0; l < n - 1; ++l) {
        for (int c = 0; c < k; ++c) fresh[c][l] = Draw();
      }
      grid.insert(grid.end(), fresh.begin(), fresh.end());
    }
    ++updates;
    return harvested;
  }
};

struct ReferenceCase {
  int w, n, g;
  bool shift;
  float temperature;  // 0 = greedy
};

// Each step verifies a tree holding the next k plain-decoding tokens (so
// some steps accept several and the window shifts) plus random nodes (which
// the window rows must not see), with the window appended; the window's
// rows, its update and its harvest must match the reference's.
TEST_F(JacobiWindowTest, MatchesStraightforwardReference) {
  const std::vector<ReferenceCase> cases = {{3, 3, 8, true, 0},
                                            {4, 4, 2, false, 0},
                                            {2, 2, 5, true, 0},
                                            {5, 3, 5, true, 0},
                                            {3, 4, 3, true, 0.9f}};
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "W=" << c.w << " N=" << c.n << " G=" << c.g
                 << " shift=" << c.shift << " T=" << c.temperature);
    engine::SamplingParams sampling;
    sampling.temperature = c.temperature;
    sampling.seed = 11;
    engine::GenerationOptions plain_options;
    plain_options.max_new_tokens = 40;
    plain_options.sampling = sampling;
    auto plain = engine::Generate(*model_, kPrompt, plain_options, nullptr);
    ASSERT_TRUE(plain.ok()) << plain.status();

    auto cache = *model_->NewCache(256);
    ASSERT_TRUE(model_->Prefill(cache.get(), kPrompt).ok());
    std::vector<int32_t> sequence = kPrompt;  // up to and including the root
    sequence.push_back(plain->tokens[0]);
    JacobiOptions options = Options(c.w, c.n, c.g);
    options.shift_by_accepted = c.shift;
    auto window = JacobiWindow::Create(options, sequence);
    ASSERT_TRUE(window.ok()) << window.status();
    ReferenceWindow ref{c.w, c.n, c.g, options.seed, c.shift, sequence};
    ref.Init();
    std::mt19937 rng(c.w * 100 + c.n);
    int shifted_steps = 0;
    for (int step = 0; step < 7; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      for (int l = 0; l < c.n - 1; ++l) {
        for (int i = 0; i < c.w; ++i) {
          ASSERT_EQ((*window)->token(l, i), ref.grid[i][l]) << l << "," << i;
        }
      }
      // The tree: a chain of the next (step % 4) plain tokens, a random
      // sibling under the root and a random child of the chain's head.
      const size_t generated = sequence.size() - kPrompt.size();
      engine::DraftTree draft;
      const int chain =
          std::min<int>(step % 4, plain->tokens.size() - generated - 1);
      for (int k = 0; k < chain; ++k) {
        draft.tokens.push_back(plain->tokens[generated + k]);
        draft.parents.push_back(k - 1);
      }
      draft.tokens.push_back(static_cast<int32_t>(rng() % vocab()));
      draft.parents.push_back(-1);
      if (chain > 0) {
        draft.tokens.push_back(static_cast<int32_t>(rng() % vocab()));
        draft.parents.push_back(0);
      }
      engine::TreeInput input =
          engine::MakeVerifyInput(cache.get(), sequence.back(), draft);
      engine::SequenceRows rows = *engine::RowsFromTree(input);
      const int kept = rows.size();
      ASSERT_TRUE((*window)->AppendRows(&rows).ok());
      ASSERT_EQ(rows.size(), kept + c.w * (c.n - 1));
      auto logits = model_->ForwardRows(absl::MakeConstSpan(&rows, 1));
      ASSERT_TRUE(logits.ok()) << logits.status();

      // Every window row against its explicit causal context.
      std::vector<int32_t> predictions(c.w);
      for (int l = 0; l < c.n - 1; ++l) {
        for (int i = 0; i < c.w; ++i) {
          const std::vector<int32_t> context = ref.RowContext(sequence, l, i);
          torch::Tensor want =
              engine::ReferenceCausalLogits(*reference_, context)
                  .select(0, context.size() - 1)
                  .to(torch::kFloat32);
          torch::Tensor got = (*logits)[0][kept + l * c.w + i];
          ASSERT_LT(engine::MaxAbsDiff(got, want), kRefTol)
              << "row " << l << "," << i;
          if (l == c.n - 2) {
            absl::Span<const float> row(want.contiguous().data_ptr<float>(),
                                        vocab());
            predictions[i] =
                sampling.greedy()
                    ? engine::ArgMax(row)
                    : engine::SampleToken(row, sampling, context.size());
          }
        }
      }
      auto accepted = engine::AcceptLongestPath(input.tokens, input.parents,
                                                (*logits)[0].narrow(0, 0, kept),
                                                sampling, cache->Length());
      ASSERT_TRUE(accepted.ok()) << accepted.status();
      ASSERT_TRUE(cache->CommitPath(accepted->path).ok());
      const std::vector<int32_t>& emitted = accepted->tokens;
      ASSERT_EQ(emitted.size(), static_cast<size_t>(chain) + 1);
      shifted_steps += emitted.size() > 1;

      auto harvested = (*window)->Update((*logits)[0], sampling, emitted);
      ASSERT_TRUE(harvested.ok()) << harvested.status();
      const std::vector<JacobiNgram> want = ref.Step(predictions, emitted);
      EXPECT_EQ(*harvested, want);
      if (step >= c.n - 2 && c.g > 0) {
        EXPECT_FALSE(harvested->empty());
      }
      sequence.insert(sequence.end(), emitted.begin(), emitted.end());
    }
    EXPECT_GT(shifted_steps, 0);
  }
}

TEST_F(JacobiWindowTest, RowsFollowTheDocumentedMask) {
  auto cache = *model_->NewCache(64);
  ASSERT_TRUE(model_->Prefill(cache.get(), kPrompt).ok());
  engine::DraftTree draft{{5, 6}, {-1, 0}, {}};
  engine::SequenceRows rows =
      *engine::RowsFromTree(engine::MakeVerifyInput(cache.get(), 7, draft));
  const engine::SequenceRows before = rows;
  auto window = *JacobiWindow::Create(Options(3, 4, 3), kPrompt);
  ASSERT_TRUE(window->AppendRows(&rows).ok());
  ASSERT_EQ(rows.size(), 3 + 9);
  EXPECT_TRUE(engine::ValidateRows(rows, cache->Length()).ok());
  const int p = cache->Length();
  // Row (level 2, column 1) = row 3 + 2 * 3 + 1 = 10 at position p + 4.
  EXPECT_EQ(rows.positions[10], p + 1 + 1 + 2);
  EXPECT_EQ(rows.tokens[10], window->token(2, 1));
  std::vector<int> sees;
  for (int c = 0; c < rows.size(); ++c) {
    if (rows.mask.Get(10, c)) sees.push_back(c);
  }
  // Root, level 0 of columns 0 and 1, column 1's levels 1 and 2.
  EXPECT_EQ(sees, (std::vector<int>{0, 3, 4, 7, 10}));
  // The kept rows' bits are as before.
  for (int r = 0; r < before.size(); ++r) {
    for (int c = 0; c < rows.size(); ++c) {
      EXPECT_EQ(rows.mask.Get(r, c), c < before.size() && before.mask.Get(r, c))
          << r << "," << c;
    }
  }
}

// The verify tree's logits with the window appended equal those without
// it, and so does the committed K/V. On the native pass bit for bit: each
// row's attention runs over the keys its mask allows and the matmuls do not
// depend on the other rows. On the LibTorch pass allclose with the same
// argmax: its softmax runs over the wider masked span and BLAS blocks a
// matmul by its row count (how, depends on the CPU's OpenBLAS kernel), so
// the summation order may differ: float32 rounding, ~1e-5 on logits of
// magnitude ~20 on an AMD EPYC, where a window leaking into the kept rows
// would move them by tenths. Either way acceptance sees the same choices.
TEST_F(JacobiWindowTest, KeptRowsUnchangedByWindow) {
  for (engine::LlamaModel* model : {model_, reference_}) {
    SCOPED_TRACE(model->native() ? "native" : "libtorch");
    auto alone = *model->NewCache(128);
    auto with = *model->NewCache(128);
    ASSERT_TRUE(model->Prefill(alone.get(), kPrompt).ok());
    ASSERT_TRUE(model->Prefill(with.get(), kPrompt).ok());
    // Nodes: root 0; 1 (5) and 5 (9) under it; 2, 3 under 1; 4 under 3.
    engine::DraftTree draft{{5, 6, 7, 8, 9}, {-1, 0, 0, 2, -1}, {}};
    auto want = model->VerifyTree(alone.get(), 7, draft);
    ASSERT_TRUE(want.ok()) << want.status();
    auto window = *JacobiWindow::Create(Options(8, 4, 8), kPrompt);
    engine::SequenceRows rows =
        *engine::RowsFromTree(engine::MakeVerifyInput(with.get(), 7, draft));
    ASSERT_TRUE(window->AppendRows(&rows).ok());
    auto got = model->ForwardRows(absl::MakeConstSpan(&rows, 1));
    ASSERT_TRUE(got.ok()) << got.status();
    torch::Tensor kept = (*got)[0].narrow(0, 0, 6);
    const double diff = engine::MaxAbsDiff(kept, *want);
    if (model->native()) {
      EXPECT_TRUE(torch::equal(kept, *want)) << "max |diff| " << diff;
    }
    EXPECT_LT(diff, 1e-4);
    EXPECT_TRUE(torch::equal(kept.argmax(1), want->argmax(1)));
    std::cout << (model->native() ? "native" : "libtorch")
              << ": kept rows max |diff| with the window " << diff << "\n";
    ASSERT_TRUE(alone->CommitPath({0, 1, 3, 4}).ok());
    ASSERT_TRUE(with->CommitPath({0, 1, 3, 4}).ok());
    const double cache_diff = engine::MaxCommittedCacheDiff(*alone, *with);
    if (model->native()) {
      EXPECT_EQ(cache_diff, 0);
    }
    EXPECT_LT(cache_diff, 1e-5);
  }
}

// Decoding with the window in every pass and drafts from its n-grams gives
// plain decoding's tokens, greedy and seeded.
TEST_F(JacobiWindowTest, DecodingWithWindowIsLossless) {
  for (float temperature : {0.0f, 0.8f}) {
    for (auto [w, n] : {std::pair{4, 3}, std::pair{6, 4}, std::pair{3, 2}}) {
      SCOPED_TRACE(testing::Message()
                   << "T=" << temperature << " W=" << w << " N=" << n);
      JacobiDecodeOptions options;
      options.window = Options(w, n, w);
      options.sampling.temperature = temperature;
      options.sampling.seed = 5;
      options.max_new_tokens = 48;
      auto jacobi = JacobiDecode(*model_, kPrompt, options);
      ASSERT_TRUE(jacobi.ok()) << jacobi.status();
      engine::GenerationOptions plain_options;
      plain_options.max_new_tokens = 48;
      plain_options.sampling = options.sampling;
      auto plain = engine::Generate(*model_, kPrompt, plain_options, nullptr);
      ASSERT_TRUE(plain.ok()) << plain.status();
      EXPECT_EQ(jacobi->tokens, plain->tokens);
      EXPECT_GT(jacobi->harvested, 0);
      std::cout << "T=" << temperature << " W=" << w << " N=" << n << ": steps "
                << jacobi->steps << " for " << jacobi->tokens.size()
                << " tokens, accepted " << jacobi->accepted_draft_tokens << "/"
                << jacobi->draft_tokens << " draft tokens\n";
    }
  }
}

TEST_F(JacobiWindowTest, BadParametersAreInvalidArgument) {
  struct Bad {
    int w, n, g;
    int32_t vocab;
    const char* says;
  };
  for (const Bad& b : std::vector<Bad>{
           {0, 3, 1, 101, "lookahead window (W) is 0; want it in [1, 256]"},
           {257, 3, 1, 101, "lookahead window (W) is 257"},
           {2, 1, 1, 101, "lookahead ngram (N) is 1; want it in [2, 16]"},
           {2, 17, 1, 101, "lookahead ngram (N) is 17"},
           {2, 3, -1, 101, "lookahead guess (G) is -1; want it in [0, 4096]"},
           {2, 3, 4097, 101, "lookahead guess (G) is 4097"},
           {2, 3, 1, 0, "vocab_size is 0"}}) {
    JacobiOptions o = Options(b.w, b.n, b.g);
    o.vocab_size = b.vocab;
    absl::Status status = JacobiWindow::Create(o, kPrompt).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b.says;
    EXPECT_THAT(status.message(), HasSubstr(b.says));
  }
  absl::Status empty = JacobiWindow::Create(Options(2, 3, 1), {}).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("context is empty"));
  absl::Status bad_token =
      JacobiWindow::Create(Options(2, 3, 1), {1, 101}).status();
  EXPECT_EQ(bad_token.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_token.message(), HasSubstr("context[1] = 101 is outside"));
  // The limits themselves are fine.
  EXPECT_TRUE(JacobiWindow::Create(Options(1, 2, 0), kPrompt).ok());
  EXPECT_TRUE(JacobiWindow::Create(Options(256, 16, 4096), kPrompt).ok());
}

TEST_F(JacobiWindowTest, BadCallsAreRejectedAndChangeNothing) {
  auto window = *JacobiWindow::Create(Options(2, 3, 2), kPrompt);
  const torch::Tensor logits = torch::zeros({5, vocab()});
  engine::SamplingParams greedy;
  EXPECT_EQ(window->Update(logits, greedy, {1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(window->AppendRows(nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  auto cache = *model_->NewCache(64);
  ASSERT_TRUE(model_->Prefill(cache.get(), kPrompt).ok());
  engine::SequenceRows chain = *engine::RowsFromTree(
      engine::ChainInput(cache.get(), std::vector<int32_t>{1, 2}));
  absl::Status last_only = window->AppendRows(&chain);
  EXPECT_EQ(last_only.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(last_only.message(), HasSubstr("last_logits_only"));
  EXPECT_EQ(chain.size(), 2);
  engine::SequenceRows scratch_only;
  scratch_only.cache = cache.get();
  scratch_only.tokens = {1};
  scratch_only.positions = {cache->Length()};
  scratch_only.mask = engine::PackedTreeMask::Zeros(1, 1);
  scratch_only.mask.Set(0, 0);
  EXPECT_THAT(window->AppendRows(&scratch_only).message(),
              HasSubstr("kept root row"));

  engine::SequenceRows rows = *engine::RowsFromTree(
      engine::MakeVerifyInput(cache.get(), 7, engine::DraftTree()));
  ASSERT_TRUE(window->AppendRows(&rows).ok());  // 1 + 4 rows
  const int32_t before = window->token(1, 1);
  absl::Status short_logits =
      window->Update(torch::zeros({4, vocab()}), greedy, {1}).status();
  EXPECT_EQ(short_logits.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_logits.message(), HasSubstr("want float (>= 5, 101)"));
  EXPECT_THAT(
      window->Update(torch::zeros({5, 7}), greedy, {1}).status().message(),
      HasSubstr("want float (>= 5, 101)"));
  EXPECT_THAT(window->Update(logits, greedy, {}).status().message(),
              HasSubstr("emitted is empty"));
  EXPECT_THAT(window->Update(logits, greedy, {3, -1}).status().message(),
              HasSubstr("emitted[1] = -1 is outside [0, 101)"));
  engine::SamplingParams bad_sampling;
  bad_sampling.top_p = 2;
  EXPECT_EQ(window->Update(logits, bad_sampling, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window->token(1, 1), before);
  EXPECT_EQ(window->updates(), 0);
  // Still pending: a good Update goes through (all-zero logits: argmax 0).
  auto ok = window->Update(logits, greedy, {1});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(window->token(1, 0), 0);
  EXPECT_EQ(window->updates(), 1);
  EXPECT_THAT(window->Skip({}).message(), HasSubstr("emitted is empty"));
  EXPECT_THAT(window->Skip({101}).message(), HasSubstr("emitted[0] = 101"));
}

// Skip keeps the columns on their positions: after a plain step that
// emitted 2 tokens, the columns moved 2 left.
TEST_F(JacobiWindowTest, SkipShiftsByEmittedTokens) {
  auto window = *JacobiWindow::Create(Options(4, 3, 4), kPrompt);
  const int32_t col2 = window->token(0, 2), col3 = window->token(1, 3);
  ASSERT_TRUE(window->Skip({1, 2}).ok());
  EXPECT_EQ(window->token(0, 0), col2);
  EXPECT_EQ(window->token(1, 1), col3);
  JacobiOptions fixed = Options(4, 3, 4);
  fixed.shift_by_accepted = false;
  auto still = *JacobiWindow::Create(fixed, kPrompt);
  const int32_t t = still->token(1, 3);
  ASSERT_TRUE(still->Skip({1, 2}).ok());
  EXPECT_EQ(still->token(1, 3), t);
}

TEST(NgramCreditTest, LongestPrefixOfTheAcceptedTokensAnNgramForesaw) {
  const std::vector<JacobiNgram> ngrams = {{7, 1, 2}, {7, 1, 3, 4}, {9, 5}};
  EXPECT_EQ(NgramCredit(ngrams, 7, {1, 3, 4, 8}), 3);
  EXPECT_EQ(NgramCredit(ngrams, 7, {1, 2}), 2);
  EXPECT_EQ(NgramCredit(ngrams, 7, {1, 5}), 1);
  EXPECT_EQ(NgramCredit(ngrams, 7, {}), 0);
  EXPECT_EQ(NgramCredit(ngrams, 9, {6}), 0);     // key matches, token does not
  EXPECT_EQ(NgramCredit(ngrams, 5, {1, 2}), 0);  // no n-gram keyed on 5
  EXPECT_EQ(NgramCredit({}, 7, {1}), 0);
}

}  // namespace
}  // namespace lookahead::verifysvc

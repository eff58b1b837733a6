// AssistantDrafter on tiny random GGUF models (engine/testing): the cached,
// incremental drafts are exactly the tokens of a from-scratch greedy
// continuation (AssistantModel::Continue) through rollbacks, evictions and
// pre-draft hits; a deadline in the past does no model work; seeded drafts
// of an assistant equal to the target are the verifier's own draws; every
// bad input is a clear error. No timing assertions.
#include "draftsvc/sources/assistant/assistant_drafter.h"

#include <atomic>
#include <cctype>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "draftsvc/sources/assistant/assistant_model.h"
#include "engine/gguf/gguf.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/reference_decode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lookahead::draftsvc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kVocab = 101;

engine::TinyModelSpec Spec() {
  engine::TinyModelSpec spec;
  spec.vocab = kVocab;
  spec.layers = 4;
  spec.weight_type = engine::GgmlType::kQ4_1;
  spec.weight_scale = 0.5f;
  return spec;
}

// A tiny GGUF written once per test binary; its path.
const std::string& TinyPath() {
  static const std::string* path = [] {
    auto bytes = engine::TinyModelGguf(Spec());
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto* p = new std::string(::testing::TempDir() + "/assistant_tiny.gguf");
    FILE* f = fopen(p->c_str(), "wb");
    fwrite(bytes->data(), 1, bytes->size(), f);
    fclose(f);
    return p;
  }();
  return *path;
}

std::unique_ptr<AssistantModel> LoadAssistant(const std::string& layers) {
  AssistantOptions options;
  options.layers = layers;
  auto model = AssistantModel::Load(TinyPath(), kVocab, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<AssistantDrafter> MakeDrafter(
    const AssistantModel* model, const AssistantDrafterOptions& options) {
  auto drafter = AssistantDrafter::Create(model, options);
  EXPECT_TRUE(drafter.ok()) << drafter.status();
  return drafter.ok() ? *std::move(drafter) : nullptr;
}

std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(rng() % kVocab);
  return out;
}

std::vector<int32_t> Chain(const AssistantDraft& draft, int n) {
  return std::vector<int32_t>(draft.tree.tokens.begin(),
                              draft.tree.tokens.begin() + n);
}

struct Param {
  std::string layers;
  int predraft_threads;
};

class DrafterTest : public ::testing::TestWithParam<Param> {};

// Steps as a verifier would: draft, accept a prefix of the draft (0 to all
// of it), then a bonus token that is sometimes the assistant's own next
// token (full acceptance: a pre-draft hit) and sometimes another (the cache
// rolls back). Every draft must equal the from-scratch continuation.
TEST_P(DrafterTest, IncrementalDraftsEqualFromScratchContinuation) {
  auto model = LoadAssistant(GetParam().layers);
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = GetParam().predraft_threads;
  options.max_chain_tokens = 4;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  std::vector<int32_t> context = Prompt(9, 3);
  ASSERT_TRUE(drafter->Open("s", context, {}).ok());
  std::mt19937 rng(11);
  for (int step = 0; step < 24; ++step) {
    SCOPED_TRACE(step);
    if (step % 2 == 0) drafter->WaitForPredraftIdle();
    const int budget = 1 + step % 4;  // chains of 1..4, no siblings below 4
    const int chain = budget == 4 ? 3 : budget;
    auto draft = drafter->Draft("s", budget, absl::InfiniteFuture());
    ASSERT_TRUE(draft.ok()) << draft.status();
    auto want = model->Continue(context, chain + 1);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_GE(draft->tree.size(), chain);
    EXPECT_EQ(Chain(*draft, chain),
              std::vector<int32_t>(want->begin(), want->begin() + chain));
    for (float p : draft->probabilities) {
      EXPECT_GT(p, 0.0f);
      EXPECT_LE(p, 1.0f);
    }
    // Accept j draft tokens, then a bonus.
    const int j = rng() % (chain + 1);
    std::vector<int32_t> accepted(want->begin(), want->begin() + j);
    const bool agree = rng() % 2 == 0;
    int32_t bonus = (*want)[j];
    if (!agree) bonus = ((*want)[j] + 1 + rng() % (kVocab - 1)) % kVocab;
    accepted.push_back(bonus);
    ASSERT_TRUE(drafter->Advance("s", accepted).ok());
    context.insert(context.end(), accepted.begin(), accepted.end());
  }
  const AssistantDrafterStats stats = drafter->stats();
  EXPECT_EQ(stats.predraft_hits + stats.predraft_misses, 24);
  if (GetParam().predraft_threads > 0) {
    EXPECT_GT(stats.predraft_hits, 0);
  }
  EXPECT_EQ(stats.sessions, 1);
  EXPECT_GT(stats.cached_tokens, 0);
  ASSERT_TRUE(drafter->Close("s").ok());
  EXPECT_EQ(drafter->stats().cached_tokens, 0);
  EXPECT_EQ(drafter->stats().sessions, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, DrafterTest,
    ::testing::Values(Param{"all", 0}, Param{"all", 1}, Param{"first:2", 0},
                      Param{"every:2", 2}, Param{"skip:1-2", 1}),
    [](const ::testing::TestParamInfo<Param>& info) {
      std::string name = absl::StrCat(info.param.layers, "_workers",
                                      info.param.predraft_threads);
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(AssistantDrafterTest, RollbackRunsOnlyTheNewTokens) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  std::vector<int32_t> context = Prompt(12, 5);
  ASSERT_TRUE(drafter->Open("s", context, {}).ok());
  auto first = drafter->Draft("s", 3, absl::InfiniteFuture());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->tree.size(), 3);
  // The prompt once, then one pass per further draft token.
  EXPECT_EQ(drafter->stats().tokens_run, 12 + 2);
  // One draft token accepted, then a token the assistant did not draft: the
  // cache keeps the prompt and the accepted token, and runs only the bonus.
  const int32_t other = (first->tree.tokens[1] + 1) % kVocab;
  ASSERT_TRUE(drafter->Advance("s", {first->tree.tokens[0], other}).ok());
  context.push_back(first->tree.tokens[0]);
  context.push_back(other);
  const int64_t before = drafter->stats().tokens_run;
  auto second = drafter->Draft("s", 3, absl::InfiniteFuture());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(drafter->stats().tokens_run - before, 1 + 2);
  auto want = model->Continue(context, 3);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(second->tree.tokens, *want);
  // Same context again: nothing runs.
  const int64_t passes = drafter->stats().forward_passes;
  auto again = drafter->Draft("s", 3, absl::InfiniteFuture());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tree.tokens, *want);
  EXPECT_TRUE(again->predrafted);
  EXPECT_EQ(drafter->stats().forward_passes, passes);
}

TEST(AssistantDrafterTest, EvictionAndRecomputeGiveTheSameDrafts) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  options.max_chain_tokens = 3;
  // One session's cache (prompt 10 + 2 * 3 + 2 slack = 18, grown by half)
  // fits, two do not.
  options.max_cached_tokens = 40;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  std::vector<std::vector<int32_t>> contexts = {Prompt(10, 1), Prompt(10, 2)};
  ASSERT_TRUE(drafter->Open("a", contexts[0], {}).ok());
  ASSERT_TRUE(drafter->Open("b", contexts[1], {}).ok());
  for (int step = 0; step < 6; ++step) {
    for (int i = 0; i < 2; ++i) {
      const std::string id = i == 0 ? "a" : "b";
      auto draft = drafter->Draft(id, 3, absl::InfiniteFuture());
      ASSERT_TRUE(draft.ok()) << draft.status();
      auto want = model->Continue(contexts[i], 3);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(draft->tree.tokens, *want) << id << " step " << step;
      EXPECT_LE(drafter->stats().cached_tokens, 40);
      ASSERT_TRUE(drafter->Advance(id, {(*want)[0]}).ok());
      contexts[i].push_back((*want)[0]);
    }
  }
  EXPECT_GE(drafter->stats().evictions, 10);
  // A session that alone needs more than the cap drafts nothing, no error.
  ASSERT_TRUE(drafter->Open("big", Prompt(50, 3), {}).ok());
  auto big = drafter->Draft("big", 3, absl::InfiniteFuture());
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_TRUE(big->tree.empty());
  EXPECT_LE(drafter->stats().cached_tokens, 40);
}

TEST(AssistantDrafterTest, PredraftHitEqualsAFreshDraft) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions ahead;
  ahead.predraft_threads = 1;
  ahead.max_chain_tokens = 4;
  AssistantDrafterOptions fresh_options = ahead;
  fresh_options.predraft_threads = 0;
  auto drafter = MakeDrafter(model.get(), ahead);
  ASSERT_NE(drafter, nullptr);
  std::vector<int32_t> context = Prompt(8, 9);
  ASSERT_TRUE(drafter->Open("s", context, {}).ok());
  for (int step = 0; step < 4; ++step) {
    drafter->WaitForPredraftIdle();
    // A deadline in the past: a hit needs no model work.
    auto draft = drafter->Draft("s", 5, absl::InfinitePast());
    ASSERT_TRUE(draft.ok()) << draft.status();
    EXPECT_TRUE(draft->predrafted) << step;
    auto fresh_drafter = MakeDrafter(model.get(), fresh_options);
    ASSERT_NE(fresh_drafter, nullptr);
    ASSERT_TRUE(fresh_drafter->Open("s", context, {}).ok());
    auto fresh = fresh_drafter->Draft("s", 5, absl::InfiniteFuture());
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    EXPECT_FALSE(fresh->predrafted);
    EXPECT_EQ(draft->tree.tokens, fresh->tree.tokens);
    EXPECT_EQ(draft->tree.parents, fresh->tree.parents);
    EXPECT_EQ(draft->probabilities, fresh->probabilities);
    // The whole chain and the assistant's next token are accepted.
    auto next = model->Continue(context, 5);
    ASSERT_TRUE(next.ok());
    ASSERT_TRUE(drafter->Advance("s", *next).ok());
    context.insert(context.end(), next->begin(), next->end());
  }
  EXPECT_EQ(drafter->stats().predraft_hits, 4);
  EXPECT_EQ(drafter->stats().predraft_misses, 0);
}

// Create times a one-token pass before any session runs one (what draftsvc
// tells verifiers at OpenSession, so they know the assistant's cost before
// asking it); a measurement older than asked for is timed again. Neither
// counts as a session's pass.
TEST(AssistantDrafterTest, APassIsTimedBeforeAnySessionRunsOne) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  const double timed = drafter->seconds_per_pass();
  EXPECT_GT(timed, 0);
  EXPECT_LT(timed, 10);
  EXPECT_EQ(drafter->RecentSecondsPerPass(absl::Hours(1)), timed);
  EXPECT_GT(drafter->RecentSecondsPerPass(absl::ZeroDuration()), 0);
  EXPECT_EQ(drafter->stats().forward_passes, 0);
}

TEST(AssistantDrafterTest, PastDeadlineDoesNoModelWork) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  ASSERT_TRUE(drafter->Open("s", Prompt(6, 4), {}).ok());
  auto late = drafter->Draft("s", 4, absl::InfinitePast());
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->tree.empty());
  EXPECT_EQ(drafter->stats().forward_passes, 0);
  EXPECT_EQ(drafter->stats().deadline_cuts, 1);
  auto draft = drafter->Draft("s", 3, absl::InfiniteFuture());
  ASSERT_TRUE(draft.ok());
  ASSERT_EQ(draft->tree.size(), 3);
  // One drafted token accepted: two drafted nodes remain, and a late
  // Draft returns them (what it has) without a pass.
  const int64_t passes = drafter->stats().forward_passes;
  std::vector<int32_t> context = Prompt(6, 4);
  context.push_back(draft->tree.tokens[0]);
  ASSERT_TRUE(drafter->Advance("s", {draft->tree.tokens[0]}).ok());
  late = drafter->Draft("s", 3, absl::InfinitePast());
  ASSERT_TRUE(late.ok());
  auto want = model->Continue(context, 2);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(late->tree.tokens, *want);
  EXPECT_EQ(drafter->stats().forward_passes, passes);
  // The other two accepted too: the logits after the last drafted token
  // were never computed, so nothing can be drafted without a pass.
  ASSERT_TRUE(
      drafter->Advance("s", {draft->tree.tokens[1], draft->tree.tokens[2]})
          .ok());
  late = drafter->Draft("s", 3, absl::InfinitePast());
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->tree.empty());
  EXPECT_EQ(drafter->stats().forward_passes, passes);
  EXPECT_EQ(drafter->stats().deadline_cuts, 3);
}

// Sessions on several threads at once, with pre-draft workers and a cap
// that keeps evicting: every draft still equals the from-scratch one.
TEST(AssistantDrafterTest, ConcurrentSessionsStayExact) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 2;
  options.max_chain_tokens = 3;
  options.max_cached_tokens = 70;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  std::atomic<int> empty{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string id = absl::StrCat("s", t);
      std::vector<int32_t> context = Prompt(8 + t, 40 + t);
      if (!drafter->Open(id, context, {}).ok()) ++mismatches[t];
      std::mt19937 rng(t);
      for (int step = 0; step < 10; ++step) {
        auto draft = drafter->Draft(id, 3, absl::InfiniteFuture());
        auto want = model->Continue(context, 4);
        if (!draft.ok() || !want.ok()) {
          ++mismatches[t];
          continue;
        }
        // Empty when the cap could not be met (every other session busy).
        if (draft->tree.empty()) {
          ++empty;
        } else if (draft->tree.tokens !=
                   std::vector<int32_t>(want->begin(), want->begin() + 3)) {
          ++mismatches[t];
        }
        const int j = rng() % 4;
        std::vector<int32_t> accepted(want->begin(), want->begin() + j);
        accepted.push_back(rng() % 2 ? (*want)[j] : rng() % kVocab);
        if (!drafter->Advance(id, accepted).ok()) ++mismatches[t];
        context.insert(context.end(), accepted.begin(), accepted.end());
      }
      if (!drafter->Close(id).ok()) ++mismatches[t];
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
  EXPECT_LT(empty.load(), 40);
  drafter->WaitForPredraftIdle();
  EXPECT_EQ(drafter->stats().cached_tokens, 0);
}

TEST(AssistantDrafterTest, StairsShapeAddsRunnerUpSiblings) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  options.max_chain_tokens = 8;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  const std::vector<int32_t> prompt = Prompt(7, 6);
  ASSERT_TRUE(drafter->Open("s", prompt, {}).ok());
  auto draft = drafter->Draft("s", 8, absl::InfiniteFuture());
  ASSERT_TRUE(draft.ok()) << draft.status();
  // Budget 8: a chain of 6 and the runner-ups at levels 1 and 2.
  EXPECT_THAT(draft->tree.parents, ElementsAre(-1, 0, 1, 2, 3, 4, -1, 0));
  auto want = model->Continue(prompt, 6);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(Chain(*draft, 6), *want);
  EXPECT_NE(draft->tree.tokens[6], draft->tree.tokens[0]);
  EXPECT_NE(draft->tree.tokens[7], draft->tree.tokens[1]);
  EXPECT_LE(draft->probabilities[6], draft->probabilities[0]);
  EXPECT_LE(draft->probabilities[7], draft->probabilities[1]);
  EXPECT_LE(draft->probabilities[0] + draft->probabilities[6], 1.0f + 1e-6f);
  ASSERT_EQ(draft->tree.sources.size(), 8u);
  for (auto tag : draft->tree.sources) {
    EXPECT_EQ(tag, engine::DraftSourceTag::kAssistant);
  }
  // Budget 5: chain of 4 and the level-1 runner-up; 0: nothing.
  auto five = drafter->Draft("s", 5, absl::InfiniteFuture());
  ASSERT_TRUE(five.ok());
  EXPECT_THAT(five->tree.parents, ElementsAre(-1, 0, 1, 2, -1));
  auto none = drafter->Draft("s", 0, absl::InfiniteFuture());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tree.empty());
}

// With the assistant equal to the target, a seeded draft is exactly what
// the verifier's sampler draws at those positions: plain seeded decoding.
TEST(AssistantDrafterTest, SeededDraftsAreTheVerifiersDraws) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions options;
  options.predraft_threads = 0;
  options.max_chain_tokens = 8;
  options.top2_levels = 0;
  auto drafter = MakeDrafter(model.get(), options);
  ASSERT_NE(drafter, nullptr);
  for (uint64_t seed : {1u, 2u, 3u}) {
    engine::SamplingParams sampling;
    sampling.temperature = 0.9f;
    sampling.top_k = 40;
    sampling.top_p = 0.95f;
    sampling.seed = seed;
    const std::vector<int32_t> prompt = Prompt(6, 20 + seed);
    engine::GenerationOptions generation;
    generation.max_new_tokens = 12;
    generation.sampling = sampling;
    auto plain = engine::Generate(model->model(), prompt, generation, nullptr);
    ASSERT_TRUE(plain.ok()) << plain.status();
    const std::string id = absl::StrCat("s", seed);
    ASSERT_TRUE(drafter->Open(id, prompt, sampling).ok());
    auto draft = drafter->Draft(id, 8, absl::InfiniteFuture());
    ASSERT_TRUE(draft.ok()) << draft.status();
    EXPECT_EQ(
        draft->tree.tokens,
        std::vector<int32_t>(plain->tokens.begin(), plain->tokens.begin() + 8));
    // Then from the middle of the sequence (absolute positions matter).
    ASSERT_TRUE(
        drafter->Advance(id, absl::MakeConstSpan(plain->tokens.data(), 4))
            .ok());
    draft = drafter->Draft(id, 8, absl::InfiniteFuture());
    ASSERT_TRUE(draft.ok()) << draft.status();
    EXPECT_EQ(draft->tree.tokens,
              std::vector<int32_t>(plain->tokens.begin() + 4,
                                   plain->tokens.begin() + 12));
  }
}

TEST(AssistantDrafterTest, BadInputIsNamed) {
  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  AssistantDrafterOptions bad;
  bad.max_cached_tokens = 0;
  auto created = AssistantDrafter::Create(model.get(), bad);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("max_cached_tokens"));
  bad = {};
  bad.max_chain_tokens = 0;
  EXPECT_THAT(AssistantDrafter::Create(model.get(), bad).status().message(),
              HasSubstr("max_chain_tokens"));
  auto drafter = MakeDrafter(model.get(), {});
  ASSERT_NE(drafter, nullptr);
  EXPECT_EQ(drafter->Open("s", {}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status status = drafter->Open("s", {1, kVocab}, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("prompt_tokens[1]"));
  engine::SamplingParams sampling;
  sampling.top_p = 0;
  EXPECT_EQ(drafter->Open("s", {1}, sampling).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(drafter->Open("s", {1, 2}, {}).ok());
  EXPECT_EQ(drafter->Open("s", {1}, {}).code(),
            absl::StatusCode::kAlreadyExists);
  status = drafter->Advance("s", {-1});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("accepted_tokens[0]"));
  status = drafter->Advance("nope\n", {1});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("\"nope\\n\""));
  EXPECT_EQ(drafter->Draft("nope", 1, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(drafter->Draft("s", -1, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(drafter->Close("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(drafter->Close("s").ok());
  EXPECT_EQ(drafter->Close("s").code(), absl::StatusCode::kNotFound);
}

TEST(AssistantModelLoadTest, FileErrorsNameThePathAndReason) {
  auto mismatch = AssistantModel::Load(TinyPath(), 32000);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("32000"));
  EXPECT_THAT(mismatch.status().message(), HasSubstr("101"));
  EXPECT_THAT(mismatch.status().message(), HasSubstr(TinyPath()));

  auto model = LoadAssistant("all");
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->CheckVocabulary(kVocab).ok());
  absl::Status other = model->CheckVocabulary(49152);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("49152"));
  EXPECT_THAT(other.message(), HasSubstr("101"));
  EXPECT_THAT(other.message(), HasSubstr(TinyPath()));

  const std::string missing = ::testing::TempDir() + "/no_such_model.gguf";
  auto absent = AssistantModel::Load(missing, kVocab);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(absent.status().message(), HasSubstr(missing));

  // A file cut in the middle of its tensor data.
  auto bytes = engine::TinyModelGguf(Spec());
  ASSERT_TRUE(bytes.ok());
  const std::string corrupt = ::testing::TempDir() + "/corrupt.gguf";
  FILE* f = fopen(corrupt.c_str(), "wb");
  fwrite(bytes->data(), 1, bytes->size() / 2, f);
  fclose(f);
  auto cut = AssistantModel::Load(corrupt, kVocab);
  ASSERT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().message(), HasSubstr(corrupt));
  // Not a GGUF at all.
  f = fopen(corrupt.c_str(), "wb");
  fputs("this is not a model", f);
  fclose(f);
  auto junk = AssistantModel::Load(corrupt, kVocab);
  ASSERT_FALSE(junk.ok());
  EXPECT_THAT(junk.status().message(), HasSubstr(corrupt));

  AssistantOptions layers;
  layers.layers = "first:9";
  auto too_many = AssistantModel::Load(TinyPath(), kVocab, layers);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(), HasSubstr("first:9"));
}

TEST(ParseAssistantLayersTest, Forms) {
  EXPECT_THAT(*ParseAssistantLayers("all", 4), ElementsAre());
  EXPECT_THAT(*ParseAssistantLayers("first:2", 4), ElementsAre(0, 1));
  EXPECT_THAT(*ParseAssistantLayers("every:2", 5), ElementsAre(0, 2, 4));
  EXPECT_THAT(*ParseAssistantLayers("skip:1-2", 5), ElementsAre(0, 3, 4));
  for (const char* bad : {"", "first", "first:0", "first:5", "every:x",
                          "skip:2-1", "skip:0-4", "half:2", "first:1:2"}) {
    auto layers = ParseAssistantLayers(bad, 4);
    EXPECT_EQ(layers.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_THAT(ParseAssistantLayers("skip:0-3", 4).status().message(),
              HasSubstr("keeps no layer"));
}

}  // namespace
}  // namespace lookahead::draftsvc

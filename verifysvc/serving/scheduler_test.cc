// The scheduler in process on the real model, without draftsvc (drafts are
// covered end to end by tests/service_*): stop strings cut exactly where
// plain decoding reaches them, a queued request can be cancelled, a full
// server names its limits, and shutdown ends every stream; with a prefix
// cache the outputs are token for token those without it (greedy and
// seeded, prefixes ending mid-block, a cache evicting under load).

#include "verifysvc/serving/scheduler.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/prefix_cache.h"
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"
#include "verifysvc/serving/recording_sink.h"

namespace lookahead::verifysvc {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<engine::RealModel> real = engine::LoadRealModel();
    ASSERT_TRUE(real.ok()) << real.status();
    real_ = new engine::RealModel(*std::move(real));
    model_ = real_->model.get();
    tokenizer_ = real_->tokenizer.get();
  }
  static void TearDownTestSuite() { delete real_; }

  static std::unique_ptr<Scheduler> NewScheduler(SchedulerOptions options) {
    auto cost = StepCostModel::Create({{1, 0.02}, {64, 0.1}});
    auto scheduler = Scheduler::Create(model_, tokenizer_, /*drafts=*/nullptr,
                                       *cost, options);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? *std::move(scheduler) : nullptr;
  }

  // A prefix cache for the model's K/V.
  static std::unique_ptr<engine::PrefixCache> NewPrefixCache(
      int block_tokens, int64_t capacity_bytes) {
    auto probe = model_->NewCache(1);
    EXPECT_TRUE(probe.ok()) << probe.status();
    engine::PrefixCacheOptions options;
    options.block_tokens = block_tokens;
    options.capacity_bytes = capacity_bytes;
    auto cache = engine::PrefixCache::Create(options, (*probe)->shape(),
                                             model_->options().dtype,
                                             model_->options().device);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  static GenerationRequest Spec(const std::string& text, int max_new_tokens) {
    GenerationRequest spec;
    spec.prompt = tokenizer_->Encode(text);
    spec.max_new_tokens = max_new_tokens;
    return spec;
  }

  static inline engine::RealModel* real_ = nullptr;
  static inline const engine::LlamaModel* model_ = nullptr;
  static inline const engine::Tokenizer* tokenizer_ = nullptr;
};

constexpr char kPrompt[] =
    "The GNU General Public License is a free, copyleft license for";

TEST_F(SchedulerTest, StopStringCutsWherePlainDecodingReachesIt) {
  auto scheduler = NewScheduler({});
  ASSERT_NE(scheduler, nullptr);
  RecordingSink full;
  ASSERT_TRUE(scheduler->Submit(Spec(kPrompt, 48), &full).ok());
  ASSERT_TRUE(full.Wait());
  ASSERT_TRUE(full.status().ok()) << full.status();
  const std::string text = full.text();
  ASSERT_GT(text.size(), 40u) << text;

  // A stop string from the middle of the answer: a word of it.
  const size_t space = text.find(' ', text.size() / 2);
  ASSERT_NE(space, std::string::npos) << text;
  const size_t end = text.find(' ', space + 1);
  const std::string stop = text.substr(space, end - space);
  const size_t first = text.find(stop);

  RecordingSink cut;
  GenerationRequest spec = Spec(kPrompt, 48);
  spec.stop = {"never appears \x01", stop};
  ASSERT_TRUE(scheduler->Submit(spec, &cut).ok());
  ASSERT_TRUE(cut.Wait());
  ASSERT_TRUE(cut.status().ok()) << cut.status();
  EXPECT_EQ(cut.text(), text.substr(0, first)) << "stop \"" << stop << "\"";
  EXPECT_EQ(cut.usage().finish_reason, FinishReason::kStopString);
  // The tokens are plain decoding's, up to the one completing the stop.
  const std::vector<int32_t> all = full.tokens();
  const std::vector<int32_t> some = cut.tokens();
  ASSERT_LT(some.size(), all.size());
  EXPECT_EQ(some, std::vector<int32_t>(all.begin(), all.begin() + some.size()));
  auto text_of = [](absl::Span<const int32_t> ids) {
    return tokenizer_->Decode(ids).value_or("");
  };
  EXPECT_NE(text_of(some).find(stop), std::string::npos);
  EXPECT_EQ(
      text_of(absl::MakeConstSpan(some).first(some.size() - 1)).find(stop),
      std::string::npos);
}

TEST_F(SchedulerTest, QueuedRequestCanBeCancelledAndFullServerNamesLimits) {
  SchedulerOptions options;
  options.max_running = 1;
  options.max_queued = 1;
  auto scheduler = NewScheduler(options);
  ASSERT_NE(scheduler, nullptr);
  RecordingSink running, queued, rejected;
  ASSERT_TRUE(scheduler->Submit(Spec(kPrompt, 64), &running).ok());
  ASSERT_TRUE(scheduler->Submit(Spec(kPrompt, 8), &queued).ok());
  absl::Status full = scheduler->Submit(Spec(kPrompt, 8), &rejected);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max_running=1"), std::string::npos)
      << full.message();
  EXPECT_NE(full.message().find("--max_queued=1"), std::string::npos);

  queued.Cancel();
  ASSERT_TRUE(queued.Wait());
  EXPECT_EQ(queued.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(queued.tokens().empty());  // It never ran.
  EXPECT_EQ(scheduler->Stats().requests_cancelled, 1);
  // The running one is unaffected.
  ASSERT_TRUE(running.Wait());
  EXPECT_TRUE(running.status().ok()) << running.status();
  EXPECT_EQ(running.tokens().size(), 64u);
}

TEST_F(SchedulerTest, ShutdownEndsEveryStream) {
  SchedulerOptions options;
  options.max_running = 1;
  auto scheduler = NewScheduler(options);
  ASSERT_NE(scheduler, nullptr);
  std::vector<RecordingSink> sinks(3);
  for (RecordingSink& sink : sinks) {
    ASSERT_TRUE(scheduler->Submit(Spec(kPrompt, 200), &sink).ok());
  }
  scheduler->Shutdown(absl::ZeroDuration());
  for (RecordingSink& sink : sinks) {
    ASSERT_TRUE(sink.Wait(absl::Seconds(5)));
    EXPECT_EQ(sink.status().code(), absl::StatusCode::kUnavailable);
  }
  RecordingSink late;
  EXPECT_EQ(scheduler->Submit(Spec(kPrompt, 8), &late).code(),
            absl::StatusCode::kUnavailable);
}

// A retrieved document, as a RAG pipeline would send it again and again.
constexpr char kDocument[] =
    "Context: The GNU General Public License is a free, copyleft license for "
    "software and other kinds of works. The licenses for most software and "
    "other practical works are designed to take away your freedom to share "
    "and change the works. By contrast, the GNU General Public License is "
    "intended to guarantee your freedom to share and change all versions of "
    "a program, to make sure it remains free software for all its users. "
    "When we speak of free software, we are referring to freedom, not price. "
    "Our General Public Licenses are designed to make sure that you have the "
    "freedom to distribute copies of free software (and charge for them if "
    "you wish), that you receive source code or can get it if you want it, "
    "that you can change the software or use pieces of it in new free "
    "programs, and that you know you can do these things.\n";

// Runs `specs` one after another (or all at once) and returns each
// request's tokens and usage.
struct RequestRun {
  std::vector<int32_t> tokens;
  Usage usage;
};
std::vector<RequestRun> RunAll(Scheduler* scheduler,
                               const std::vector<GenerationRequest>& specs,
                               bool together) {
  std::vector<RecordingSink> sinks(specs.size());
  std::vector<RequestRun> runs(specs.size());
  auto finish = [&](size_t i) {
    EXPECT_TRUE(sinks[i].Wait(absl::Seconds(300)));
    EXPECT_TRUE(sinks[i].status().ok()) << sinks[i].status();
    runs[i] = {sinks[i].tokens(), sinks[i].usage()};
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(scheduler->Submit(specs[i], &sinks[i]).ok());
    if (!together) finish(i);
  }
  if (together) {
    for (size_t i = 0; i < specs.size(); ++i) finish(i);
  }
  return runs;
}

// Whole blocks of the longest common prefix of a and b, leaving one token
// of b: what a cache holding a's blocks gives b.
int ExpectedHit(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                int block_tokens) {
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) {
    ++common;
  }
  common = std::min(common, b.size() - 1);
  return static_cast<int>(common / block_tokens) * block_tokens;
}

TEST_F(SchedulerTest, PrefixCacheOutputsAreTokenIdentical) {
  constexpr int kBlock = 32;
  const std::string doc = kDocument;
  std::vector<GenerationRequest> specs = {
      Spec(doc + "Question: What does the license guarantee?\nAnswer:", 24),
      Spec(doc + "Question: Is free software about price?\nAnswer:", 24),
      // The same document again, whole: every block but the last hits.
      Spec(doc + "Question: What does the license guarantee?\nAnswer:", 24),
      // A prefix of the document that ends mid-block, then something else.
      Spec(doc.substr(0, doc.size() / 2) + " In short:", 24),
  };
  const int doc_tokens = static_cast<int>(tokenizer_->Encode(doc).size());
  ASSERT_GT(doc_tokens, 4 * kBlock);
  ASSERT_NE(ExpectedHit(specs[0].prompt, specs[3].prompt, 1) % kBlock, 0)
      << "the shared prefix should end mid-block";
  for (const bool greedy : {true, false}) {
    SCOPED_TRACE(greedy ? "greedy" : "seeded sampling");
    for (GenerationRequest& spec : specs) {
      spec.sampling = {};
      if (!greedy) spec.sampling = {/*temperature=*/0.9f, 40, 0.95f, 1234};
    }
    auto plain = NewScheduler({});
    ASSERT_NE(plain, nullptr);
    const std::vector<RequestRun> want = RunAll(plain.get(), specs, false);
    auto prefix = NewPrefixCache(kBlock, int64_t{64} << 20);
    SchedulerOptions options;
    options.prefix_cache = prefix.get();
    auto cached = NewScheduler(options);
    ASSERT_NE(cached, nullptr);
    const std::vector<RequestRun> got = RunAll(cached.get(), specs, false);
    for (size_t i = 0; i < specs.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("request ", i));
      EXPECT_EQ(got[i].tokens, want[i].tokens);
      EXPECT_EQ(want[i].usage.cached_prompt_tokens, 0);
    }
    EXPECT_EQ(got[0].usage.cached_prompt_tokens, 0);  // cold
    EXPECT_EQ(got[1].usage.cached_prompt_tokens,
              ExpectedHit(specs[0].prompt, specs[1].prompt, kBlock));
    EXPECT_GE(got[1].usage.cached_prompt_tokens, doc_tokens - kBlock);
    EXPECT_EQ(got[2].usage.cached_prompt_tokens,
              ExpectedHit(specs[0].prompt, specs[2].prompt, kBlock));
    EXPECT_EQ(got[3].usage.cached_prompt_tokens,
              ExpectedHit(specs[0].prompt, specs[3].prompt, kBlock));
    EXPECT_GT(got[3].usage.cached_prompt_tokens, 0);
    const engine::PrefixCacheStats stats = prefix->Stats();
    EXPECT_EQ(stats.lookups, 4);
    int hits = 0;
    for (const RequestRun& run : got) hits += run.usage.cached_prompt_tokens;
    EXPECT_EQ(stats.hit_tokens, hits);
  }
}

// Many distinct documents at once behind one system prompt, through a cache
// of a few blocks: blocks are evicted while others are restored, the bytes
// held never pass the cap, and every output is the one without the cache.
TEST_F(SchedulerTest, PrefixCacheEvictedUnderLoadStaysLossless) {
  constexpr int kBlock = 16;
  const std::string system =
      "System: You answer questions about software licenses from the "
      "context, briefly and exactly.\n";
  std::vector<GenerationRequest> specs;
  const std::string doc = kDocument;
  for (int i = 0; i < 12; ++i) {
    // Distinct documents: a different slice of the text, numbered; every
    // third repeats an earlier one.
    const int which = i % 3 == 2 ? i - 2 : i;
    specs.push_back(Spec(absl::StrCat(system, "Document ", which, ": ",
                                      doc.substr(which * 40, 300),
                                      "\nQuestion: what is this about?"),
                         8));
  }
  SchedulerOptions options;
  options.max_running = 4;
  auto plain = NewScheduler(options);
  ASSERT_NE(plain, nullptr);
  const std::vector<RequestRun> want = RunAll(plain.get(), specs, true);

  auto probe = NewPrefixCache(kBlock, 0);
  const int64_t cap = 6 * probe->block_bytes();
  auto prefix = NewPrefixCache(kBlock, cap);
  options.prefix_cache = prefix.get();
  auto cached = NewScheduler(options);
  ASSERT_NE(cached, nullptr);
  // Twice: the second round finds what the first left (or evicts it).
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::vector<RequestRun> got = RunAll(cached.get(), specs, true);
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    }
  }
  const engine::PrefixCacheStats stats = prefix->Stats();
  EXPECT_LE(stats.peak_bytes, cap);
  EXPECT_LE(stats.bytes, cap);
  EXPECT_GT(stats.evicted_blocks, 0);
  EXPECT_GT(stats.hit_tokens, 0);
  EXPECT_EQ(stats.lookups, 24);
}

}  // namespace
}  // namespace lookahead::verifysvc

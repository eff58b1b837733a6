// The scheduler in process on the real model, without draftsvc (drafts are
// covered end to end by tests/service_*): stop strings cut exactly where
// plain decoding reaches them, a queued request can be cancelled, a full
// server names its limits, and shutdown ends every stream; with a prefix
// cache the outputs are token for token those without it (greedy and
// seeded, prefixes ending mid-block, a cache evicting under load); and
// logprobs with drafts on (an oracle source whose trees hold plain
// decoding's tokens and wrong branches) are bit for bit those of plain
// decoding, greedy and seeded.

#include "verifysvc/serving/scheduler.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/model/prefix_cache.h"
#include "engine/model/token_logprobs.h"
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"
#include "verifysvc/drafts/draft_fanout.h"
#include "verifysvc/drafts/draft_source.h"
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

  static std::unique_ptr<Scheduler> NewScheduler(
      SchedulerOptions options, DraftFanout* drafts = nullptr) {
    auto cost = StepCostModel::Create({{1, 0.02}, {64, 0.1}});
    auto scheduler =
        Scheduler::Create(model_, tokenizer_, drafts, *cost, options);
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

// Drafts that know the answer: for each prompt, plain decoding's tokens.
// Each step's tree holds the next of them as a chain, a wrong sibling at the
// first level and, every other step, a wrong token after two right ones, so
// that bonus tokens come from the root, from inner nodes and from leaves.
class OracleDraftSource : public DraftSource {
 public:
  OracleDraftSource(
      std::map<std::vector<int32_t>, std::vector<int32_t>> answers,
      int32_t vocab_size)
      : answers_(std::move(answers)), vocab_size_(vocab_size) {}

  std::string name() const override { return "oracle"; }
  int64_t Open(const DraftPolicy&, absl::Span<const int32_t> prompt) override {
    absl::MutexLock lock(&mu_);
    auto it = answers_.find(std::vector<int32_t>(prompt.begin(), prompt.end()));
    if (it == answers_.end()) return 0;
    sessions_[next_handle_] = {&it->second, 0, 0};
    return next_handle_++;
  }
  void Observe(int64_t handle, absl::Span<const int32_t> tokens) override {
    absl::MutexLock lock(&mu_);
    sessions_.at(handle).emitted += static_cast<int>(tokens.size());
  }
  std::vector<engine::DraftTree> Propose(absl::Span<const DraftAsk> asks,
                                         bool* called) override {
    absl::MutexLock lock(&mu_);
    *called = false;
    std::vector<engine::DraftTree> trees(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) {
      Session& s = sessions_.at(asks[i].handle);
      const std::vector<int32_t>& answer = *s.answer;
      const int next = s.emitted;
      if (asks[i].budget < 2 || next >= static_cast<int>(answer.size())) {
        continue;
      }
      *called = true;
      const bool cut = s.steps++ % 2 == 1;
      engine::DraftTree& tree = trees[i];
      auto add = [&](int32_t token, int32_t parent) {
        tree.tokens.push_back(token);
        tree.parents.push_back(parent);
        return tree.size() - 1;
      };
      int parent = add(answer[next], -1);
      add((answer[next] + 1) % vocab_size_, -1);
      for (int k = next + 1;
           k < static_cast<int>(answer.size()) && tree.size() < asks[i].budget;
           ++k) {
        if (cut && k == next + 2) {
          add((answer[k] + 7) % vocab_size_, parent);
          break;
        }
        parent = add(answer[k], parent);
      }
    }
    return trees;
  }
  void Close(int64_t handle) override {
    absl::MutexLock lock(&mu_);
    sessions_.erase(handle);
  }
  DraftCost cost() const override { return {}; }
  DraftSourceStats Stats() const override { return {}; }

 private:
  struct Session {
    const std::vector<int32_t>* answer;
    int emitted;  // tokens the sequence emitted so far
    int steps;    // trees proposed
  };
  const std::map<std::vector<int32_t>, std::vector<int32_t>> answers_;
  const int32_t vocab_size_;
  absl::Mutex mu_;
  std::map<int64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
};

// What one request streamed, logprobs included.
struct LogprobsRun {
  std::vector<int32_t> tokens;
  std::vector<engine::ChoiceLogprobs> logprobs;
  Usage usage;
};

LogprobsRun RunOne(Scheduler* scheduler, const GenerationRequest& spec) {
  RecordingSink sink;
  EXPECT_TRUE(scheduler->Submit(spec, &sink).ok());
  EXPECT_TRUE(sink.Wait(absl::Seconds(300)));
  EXPECT_TRUE(sink.status().ok()) << sink.status();
  return {sink.tokens(), sink.logprobs(), sink.usage()};
}

// Bit for bit: a float's bits, not its value within a tolerance.
uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

TEST_F(SchedulerTest, LogprobsAreBitIdenticalWithDraftsOnAndOff) {
  constexpr int kTop = 5;
  const std::vector<GenerationRequest> base = {
      Spec(kPrompt, 40),
      // A long prompt, prefilled in chunks.
      Spec(std::string(kDocument) + "Question: Is free software about "
                                    "price?\nAnswer:",
           40),
  };
  engine::SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.top_k = 40;
  seeded.top_p = 0.95f;
  seeded.seed = 1234;
  for (const bool greedy : {true, false}) {
    SCOPED_TRACE(greedy ? "greedy" : "seeded sampling");
    std::vector<GenerationRequest> specs = base;
    for (GenerationRequest& spec : specs) {
      spec.sampling = greedy ? engine::SamplingParams{} : seeded;
      spec.logprobs = kTop;
    }
    // Drafts off: plain decoding, one verified row per token.
    auto plain = NewScheduler({});
    ASSERT_NE(plain, nullptr);
    std::vector<LogprobsRun> want;
    std::map<std::vector<int32_t>, std::vector<int32_t>> answers;
    for (const GenerationRequest& spec : specs) {
      want.push_back(RunOne(plain.get(), spec));
      const LogprobsRun& run = want.back();
      answers[spec.prompt] = run.tokens;
      // One entry per token, each the token's own, top by value.
      ASSERT_EQ(run.logprobs.size(), run.tokens.size());
      for (size_t j = 0; j < run.tokens.size(); ++j) {
        const engine::ChoiceLogprobs& l = run.logprobs[j];
        EXPECT_EQ(l.chosen.token, run.tokens[j]);
        EXPECT_LE(l.chosen.logprob, 0.0f);
        EXPECT_GT(l.chosen.logprob, -1e30f);
        // Sampling lists only the top-k/top-p set, which may be smaller.
        if (greedy) {
          ASSERT_EQ(l.top.size(), static_cast<size_t>(kTop));
        } else {
          ASSERT_GE(l.top.size(), 1u);
          ASSERT_LE(l.top.size(), static_cast<size_t>(kTop));
        }
        for (size_t k = 1; k < l.top.size(); ++k) {
          EXPECT_GE(l.top[k - 1].logprob, l.top[k].logprob);
        }
        if (greedy) {
          EXPECT_EQ(l.top[0].token, l.chosen.token);
          EXPECT_EQ(Bits(l.top[0].logprob), Bits(l.chosen.logprob));
        }
      }
    }
    // Drafts on: the same tokens, chosen from tree rows, same bits.
    OracleDraftSource oracle(answers, tokenizer_->vocab_size());
    DraftFanout fanout({&oracle}, tokenizer_->vocab_size());
    auto drafted = NewScheduler({}, &fanout);
    ASSERT_NE(drafted, nullptr);
    int64_t accepted = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("request ", i));
      GenerationRequest spec = specs[i];
      spec.draft.mode = DraftMode::kTrieHierarchical;
      spec.draft.decoding_length = 8;
      spec.draft.branch_length = 8;
      const LogprobsRun got = RunOne(drafted.get(), spec);
      accepted += got.usage.accepted_draft_tokens;
      ASSERT_EQ(got.tokens, want[i].tokens);
      ASSERT_EQ(got.logprobs.size(), want[i].logprobs.size());
      for (size_t j = 0; j < got.logprobs.size(); ++j) {
        SCOPED_TRACE(absl::StrCat("token ", j));
        const engine::ChoiceLogprobs& a = got.logprobs[j];
        const engine::ChoiceLogprobs& b = want[i].logprobs[j];
        EXPECT_EQ(a.chosen.token, b.chosen.token);
        EXPECT_EQ(Bits(a.chosen.logprob), Bits(b.chosen.logprob))
            << a.chosen.logprob << " vs " << b.chosen.logprob;
        ASSERT_EQ(a.top.size(), b.top.size());
        for (size_t k = 0; k < a.top.size(); ++k) {
          EXPECT_EQ(a.top[k].token, b.top[k].token);
          EXPECT_EQ(Bits(a.top[k].logprob), Bits(b.top[k].logprob));
        }
      }
    }
    // The drafts really were accepted, or the comparison proves little.
    EXPECT_GT(accepted, 20);
  }
}

// Without logprobs asked, outputs carry none.
TEST_F(SchedulerTest, NoLogprobsUnlessAsked) {
  auto scheduler = NewScheduler({});
  ASSERT_NE(scheduler, nullptr);
  const LogprobsRun run = RunOne(scheduler.get(), Spec(kPrompt, 4));
  EXPECT_EQ(run.tokens.size(), 4u);
  EXPECT_TRUE(run.logprobs.empty());
}

}  // namespace
}  // namespace lookahead::verifysvc

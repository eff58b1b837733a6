// The scheduler in process on the real model, without draftsvc (drafts are
// covered end to end by tests/service_*): stop strings cut exactly where
// plain decoding reaches them, a queued request can be cancelled, a full
// server names its limits, and shutdown ends every stream.

#include "verifysvc/serving/scheduler.h"

#include <memory>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace lookahead::verifysvc

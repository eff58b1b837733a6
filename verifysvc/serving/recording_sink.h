// RecordingSink: a GenerationSink for tests that collects a stream (text,
// tokens, usage, final status) and can be cancelled. The gRPC sink itself is
// covered by the cross-service tests. Thread-safe.
#ifndef LOOKAHEAD_VERIFYSVC_SERVING_RECORDING_SINK_H_
#define LOOKAHEAD_VERIFYSVC_SERVING_RECORDING_SINK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "verifysvc/serving/output.h"

namespace lookahead::verifysvc {

class RecordingSink : public GenerationSink {
 public:
  void Send(GenerationOutput output) override {
    absl::MutexLock lock(&mu_);
    text_ += output.text;
    tokens_.insert(tokens_.end(), output.token_ids.begin(),
                   output.token_ids.end());
    steps_.push_back(output.token_ids);
    logprobs_.insert(logprobs_.end(), output.logprobs.begin(),
                     output.logprobs.end());
    if (!output.logprobs.empty()) {
      EXPECT_EQ(output.logprobs.size(), output.token_ids.size())
          << "logprobs must be one per token";
    }
    if (output.usage.has_value()) usage_ = *output.usage;
  }
  void Finish(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      status_ = std::move(status);
    }
    done_.Notify();
  }
  bool Cancelled() const override {
    // After Finish a real (gRPC) sink may be deleted: touching it is a bug.
    EXPECT_FALSE(done_.HasBeenNotified()) << "Cancelled() after Finish()";
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  void Cancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  // Waits for Finish; false after `timeout`.
  bool Wait(absl::Duration timeout = absl::Seconds(60)) {
    return done_.WaitForNotificationWithTimeout(timeout);
  }
  bool finished() const { return done_.HasBeenNotified(); }
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  std::string text() const {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  std::vector<int32_t> tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  // Each Send's token ids.
  std::vector<std::vector<int32_t>> steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  Usage usage() const {
    absl::MutexLock lock(&mu_);
    return usage_;
  }
  // Every Send's logprobs, in order.
  std::vector<engine::ChoiceLogprobs> logprobs() const {
    absl::MutexLock lock(&mu_);
    return logprobs_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int32_t>> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::ChoiceLogprobs> logprobs_ ABSL_GUARDED_BY(mu_);
  Usage usage_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification done_;
};

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_SERVING_RECORDING_SINK_H_

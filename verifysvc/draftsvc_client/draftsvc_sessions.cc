#include "verifysvc/draftsvc_client/draftsvc_sessions.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lookahead::verifysvc {
namespace {

void Append(std::vector<int32_t>* to, absl::Span<const int32_t> tokens) {
  to->insert(to->end(), tokens.begin(), tokens.end());
}

}  // namespace

DraftSessions::DraftSessions(DraftClient* client, int32_t vocab_size,
                             DraftSessionsOptions options)
    : client_(client),
      vocab_size_(vocab_size),
      options_(std::move(options)),
      worker_([this] { WorkerLoop(); }),
      stepper_([this] { StepLoop(); }) {}

DraftSessions::~DraftSessions() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stepper_.join();
  worker_.join();
}

int64_t DraftSessions::Open(std::string name_space, std::vector<int32_t> prompt,
                            int32_t branch_length,
                            std::vector<lookahead::v1::DraftSource> sources,
                            lookahead::v1::DraftSampling sampling) {
  absl::MutexLock lock(&mu_);
  const int64_t handle = next_handle_++;
  Session& session = sessions_[handle];
  session.id = absl::StrCat(options_.replica_id, "/", handle);
  session.name_space = std::move(name_space);
  session.branch_length = branch_length;
  session.sources = std::move(sources);
  session.sampling = std::move(sampling);
  session.context = std::move(prompt);
  session.prompt_size = session.context.size();
  Enqueue({/*close=*/false, handle, session.context});
  ++stats_.open_sessions;
  return handle;
}

void DraftSessions::Enqueue(Task task) { tasks_.push_back(std::move(task)); }

std::vector<engine::DraftTree> DraftSessions::Step(
    absl::Span<const StepEntry> entries) {
  std::vector<engine::DraftTree> trees(entries.size());
  Batch batch;
  {
    absl::MutexLock lock(&mu_);
    // One Step at a time, so reports stay in order.
    mu_.Await(absl::Condition(
        +[](DraftSessions* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !self->step_in_flight_;
        },
        this));
    batch = Prepare(entries);
    if (batch.requests.empty()) return trees;
    step_in_flight_ = true;
  }
  std::vector<engine::DraftTree> got = Send(&batch);
  for (size_t k = 0; k < got.size(); ++k) {
    trees[batch.sent[k]] = std::move(got[k]);
  }
  return trees;
}

bool DraftSessions::StepInFlight() const {
  absl::MutexLock lock(&mu_);
  return step_in_flight_;
}

bool DraftSessions::StepAsync(absl::Span<const StepEntry> entries) {
  absl::MutexLock lock(&mu_);
  if (step_in_flight_) return false;
  Batch batch = Prepare(entries);
  if (batch.requests.empty()) return true;
  step_in_flight_ = true;
  queued_step_ = std::move(batch);
  return true;
}

std::vector<DraftSessions::Answer> DraftSessions::TakeAnswers() {
  absl::MutexLock lock(&mu_);
  std::vector<Answer> answers = std::move(answers_);
  answers_.clear();
  return answers;
}

std::vector<double> DraftSessions::TakeCallSeconds() {
  absl::MutexLock lock(&mu_);
  std::vector<double> seconds = std::move(call_seconds_);
  call_seconds_.clear();
  return seconds;
}

DraftSessions::Batch DraftSessions::Prepare(
    absl::Span<const StepEntry> entries) {
  Batch batch;
  const absl::Time now = absl::Now();
  const bool link_up = now >= next_attempt_;
  bool reopen_attempted = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    auto it = sessions_.find(entries[i].handle);
    if (it == sessions_.end()) continue;
    Session& session = it->second;
    // Tokens held back before this entry's: its predictions' roots lie
    // this much further into what is reported.
    const size_t held_back = session.unreported.size();
    Append(&session.context, entries[i].accepted);
    Append(&session.unreported, entries[i].accepted);
    if (session.state == State::kClosed && link_up) {
      // A failed open: try again now that the backoff has passed, with
      // what draftsvc was told so far as the prompt; the tokens it never
      // got are reported, as output, once it is open.
      session.state = State::kOpening;
      Enqueue({false, it->first,
               std::vector<int32_t>(
                   session.context.begin(),
                   session.context.end() - session.unreported.size())});
      reopen_attempted = true;
      continue;
    }
    if (session.state != State::kOpen || !link_up) continue;
    DraftRequest request;
    request.session_id = session.id;
    request.accepted_offset = session.applied;
    if (!session.failure.ok()) {
      // Its request is ending; keep the trie fed meanwhile.
      request.accepted_tokens = std::move(session.unreported);
      session.unreported.clear();
      batch.Add(std::move(request), i, it->first, session.context.size());
      continue;
    }
    const size_t report =
        std::min(session.unreported.size(),
                 static_cast<size_t>(options_.max_report_tokens));
    request.accepted_tokens.assign(session.unreported.begin(),
                                   session.unreported.begin() + report);
    session.unreported.erase(session.unreported.begin(),
                             session.unreported.begin() + report);
    // A draft for a context draftsvc has not caught up with would be for
    // the wrong position.
    request.decoding_length =
        session.unreported.empty() ? entries[i].decoding_length : 0;
    request.branch_length = session.branch_length;
    request.mode = entries[i].mode;
    request.sources = session.sources;
    request.withheld_sources = SourcesToProto(entries[i].withheld);
    for (const lookahead::v1::PredictionTree& p : entries[i].predictions) {
      // Only trees whose root is among the tokens reported now.
      const size_t root_after = held_back + p.root_after();
      if (root_after > report) continue;
      request.predictions.push_back(p);
      request.predictions.back().set_root_after(
          static_cast<int32_t>(root_after));
    }
    request.ngrams = entries[i].ngrams;
    const int64_t root =
        static_cast<int64_t>(session.context.size() - session.unreported.size());
    batch.Add(std::move(request), i, it->first, root);
  }
  if (reopen_attempted && batch.requests.empty()) {
    // Pace the reopen attempts like failed steps until one succeeds.
    next_attempt_ = now + std::max(backoff_, options_.min_backoff);
  }
  return batch;
}

std::vector<engine::DraftTree> DraftSessions::Send(Batch* batch) {
  absl::StatusOr<std::vector<absl::StatusOr<engine::DraftTree>>> results =
      client_->Step(batch->requests, vocab_size_);
  absl::MutexLock lock(&mu_);
  step_in_flight_ = false;
  return Finish(batch, &results);
}

void DraftSessions::StepLoop() {
  while (true) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DraftSessions* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || self->queued_step_.has_value();
          },
          this));
      if (!queued_step_.has_value()) return;  // Stopping.
      batch = *std::move(queued_step_);
      queued_step_.reset();
    }
    const absl::Time start = absl::Now();
    std::vector<engine::DraftTree> trees = Send(&batch);
    absl::MutexLock lock(&mu_);
    call_seconds_.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    for (size_t k = 0; k < trees.size(); ++k) {
      answers_.push_back(
          {batch.handles[k], batch.roots[k], std::move(trees[k])});
    }
  }
}

std::vector<engine::DraftTree> DraftSessions::Finish(
    Batch* batch,
    absl::StatusOr<std::vector<absl::StatusOr<engine::DraftTree>>>* results) {
  std::vector<DraftRequest>& requests = batch->requests;
  std::vector<engine::DraftTree> trees(requests.size());
  if (!results->ok()) {
    // No drafts this step; keep the tokens for the next successful Step,
    // which reports them at the same offset (applied once if this one
    // reached draftsvc after all).
    for (size_t k = 0; k < requests.size(); ++k) {
      auto it = sessions_.find(batch->handles[k]);
      if (it == sessions_.end()) continue;
      std::vector<int32_t>& tokens = requests[k].accepted_tokens;
      Append(&tokens, it->second.unreported);
      it->second.unreported = std::move(tokens);
    }
    ++stats_.step_failures;
    stats_.available = false;
    backoff_ =
        std::clamp(backoff_ * 2, options_.min_backoff, options_.max_backoff);
    next_attempt_ = absl::Now() + backoff_;
    return trees;
  }
  stats_.available = true;
  backoff_ = absl::ZeroDuration();
  for (size_t k = 0; k < (*results)->size() && k < requests.size(); ++k) {
    absl::StatusOr<engine::DraftTree>& result = (**results)[k];
    auto it = sessions_.find(batch->handles[k]);
    if (result.ok()) {
      trees[k] = *std::move(result);
      if (it != sessions_.end()) {
        it->second.applied +=
            static_cast<int64_t>(requests[k].accepted_tokens.size());
      }
      continue;
    }
    if (it == sessions_.end()) continue;
    Session& session = it->second;
    if (absl::IsFailedPrecondition(result.status()) &&
        !requests[k].sources.empty()) {
      // A requested source draftsvc does not run: the client's
      // configuration error, for its request to fail with. The entry
      // stored nothing: report its tokens again with the next Step.
      session.failure = absl::FailedPreconditionError(
          absl::StrCat("draftsvc: ", result.status().message()));
      std::vector<int32_t> unapplied = std::move(requests[k].accepted_tokens);
      Append(&unapplied, session.unreported);
      session.unreported = std::move(unapplied);
      continue;
    }
    // NOT_FOUND: draftsvc no longer knows the session (it restarted, or
    // expired it after its idle lease); FAILED_PRECONDITION: it lost
    // tokens this session reported (an offset past what it holds).
    if (!absl::IsNotFound(result.status()) &&
        !absl::IsFailedPrecondition(result.status())) {
      continue;
    }
    if (session.state != State::kOpen) continue;
    // Reopen it with everything its sequence has seen before this Step's
    // tokens; those were not applied (such an entry changes nothing), so
    // they are reported again, as output, once it is open. (After a
    // restart without --sync, earlier reported tokens may be gone from the
    // global trie; the new prompt trie still holds them.)
    std::vector<int32_t> unapplied = std::move(requests[k].accepted_tokens);
    Append(&unapplied, session.unreported);
    // context = prompt (>= 1 token) + every accepted token, so this keeps
    // at least the prompt.
    const size_t seen_before =
        session.context.size() > unapplied.size()
            ? session.context.size() - unapplied.size()
            : std::min<size_t>(session.context.size(), 1);
    session.state = State::kOpening;
    session.unreported = std::move(unapplied);
    Enqueue({false, it->first,
             std::vector<int32_t>(session.context.begin(),
                                  session.context.begin() + seen_before)});
    ++stats_.reopened;
  }
  return trees;
}

void DraftSessions::Close(int64_t handle, std::vector<int32_t> accepted) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) return;
  Session& session = it->second;
  Append(&session.unreported, accepted);
  switch (session.state) {
    case State::kOpen:
      session.state = State::kClosing;
      Enqueue({/*close=*/true, handle, {}});
      break;
    case State::kOpening:
      session.state = State::kClosing;  // RunOpen finishes the close.
      break;
    case State::kClosed:
    case State::kFailed:
      Erase(it);  // Nothing on draftsvc to close.
      break;
    case State::kClosing:
      break;
  }
}

void DraftSessions::Erase(std::map<int64_t, Session>::iterator it) {
  sessions_.erase(it);
  --stats_.open_sessions;
}

absl::Status DraftSessions::Failure(int64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  return it == sessions_.end() ? absl::OkStatus() : it->second.failure;
}

bool DraftSessions::OpenAnswered(int64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  return it == sessions_.end() || it->second.state != State::kOpening;
}

void DraftSessions::WaitOpened(int64_t handle, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto answered = [this, handle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = sessions_.find(handle);
    return it == sessions_.end() || it->second.state != State::kOpening;
  };
  mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
}

DraftSessionsStats DraftSessions::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DraftSessions::WorkerLoop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DraftSessions* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // Stopping with nothing left to do.
      // Opens first: a sequence may be waiting for its answer (WaitOpened),
      // while a close only reports tokens. The tasks of one handle never
      // pass each other: a close is queued only once its open answered.
      auto next = std::find_if(tasks_.begin(), tasks_.end(),
                               [](const Task& t) { return !t.close; });
      if (next == tasks_.end()) next = tasks_.begin();
      task = std::move(*next);
      tasks_.erase(next);
    }
    if (task.close) {
      RunClose(task);
    } else {
      RunOpen(task);
    }
  }
}

void DraftSessions::RunOpen(const Task& task) {
  std::string id, name_space;
  int32_t branch_length = 0;
  size_t prompt_size = 0;
  lookahead::v1::DraftSampling sampling;
  std::vector<lookahead::v1::DraftSource> sources;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(task.handle);
    if (it == sessions_.end()) return;
    if (it->second.state == State::kClosing) {
      Erase(it);  // Finished before its open ran.
      return;
    }
    if (it->second.state != State::kOpening) return;
    id = it->second.id;
    name_space = it->second.name_space;
    branch_length = it->second.branch_length;
    sampling = it->second.sampling;
    sources = it->second.sources;
    prompt_size = it->second.prompt_size;
  }
  absl::Span<const int32_t> prompt = task.tokens;
  // A reopen's prompt ends with output an earlier session reported.
  size_t resumed =
      task.tokens.size() > prompt_size ? task.tokens.size() - prompt_size : 0;
  if (static_cast<int>(prompt.size()) > options_.max_reopen_tokens) {
    prompt.remove_prefix(prompt.size() - options_.max_reopen_tokens);
  }
  resumed = std::min(resumed, prompt.size());
  absl::Status opened = client_->OpenSession(
      id, name_space, vocab_size_, prompt, branch_length, sampling, sources,
      static_cast<int32_t>(resumed));
  // ALREADY_EXISTS: an earlier open went through after its deadline.
  const bool ok = opened.ok() || absl::IsAlreadyExists(opened);

  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(task.handle);
  if (it == sessions_.end()) return;
  Session& session = it->second;
  if (session.state == State::kClosing) {
    // Finished while opening: report its tokens and close it.
    if (ok) {
      session.applied = 0;
      Enqueue({/*close=*/true, task.handle, {}});
    } else {
      Erase(it);
    }
    return;
  }
  if (ok) {
    session.state = State::kOpen;
    session.applied = 0;  // The (re)opened session counts from here.
    stats_.available = true;
    backoff_ = absl::ZeroDuration();
    next_attempt_ = absl::InfinitePast();
    return;
  }
  if (!absl::IsUnavailable(opened) && !absl::IsDeadlineExceeded(opened)) {
    session.state = State::kFailed;
    if (absl::IsFailedPrecondition(opened) && !session.sources.empty()) {
      // Sources the session named that draftsvc cannot serve: the
      // client's configuration error, for its request to fail with (as
      // a refused Step entry in Step()).
      session.failure = absl::FailedPreconditionError(
          absl::StrCat("draftsvc: ", opened.message()));
      return;
    }
    std::fprintf(stderr, "verifysvc: draft session %s gets no drafts: %s\n",
                 id.c_str(), opened.ToString().c_str());
    return;
  }
  session.state = State::kClosed;  // Step() retries after the backoff.
  stats_.available = false;
  backoff_ =
      std::clamp(backoff_ * 2, options_.min_backoff, options_.max_backoff);
  next_attempt_ = absl::Now() + backoff_;
}

void DraftSessions::RunClose(const Task& task) {
  DraftRequest report;
  {
    absl::MutexLock lock(&mu_);
    // After the Step in flight: its tokens come back to `unreported` if it
    // failed, and the close reports them after it at the right offset.
    mu_.Await(absl::Condition(
        +[](DraftSessions* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !self->step_in_flight_;
        },
        this));
    auto it = sessions_.find(task.handle);
    if (it == sessions_.end()) return;
    report.session_id = it->second.id;
    report.accepted_tokens = std::move(it->second.unreported);
    it->second.unreported.clear();
    report.accepted_offset = it->second.applied;
  }
  if (!report.accepted_tokens.empty()) {
    report.decoding_length = 0;
    client_->Step({report}, vocab_size_).IgnoreError();
  }
  client_->CloseSession(report.session_id).IgnoreError();  // Best effort.
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(task.handle);
  if (it != sessions_.end()) Erase(it);
}

}  // namespace lookahead::verifysvc

#include "verifysvc/drafts/jacobi_window.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/torch_status.h"

namespace lookahead::verifysvc {
namespace {

absl::Status CheckRange(const char* field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is ", value, "; want it in [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JacobiWindow>> JacobiWindow::Create(
    const JacobiOptions& options, absl::Span<const int32_t> context) {
  absl::Status status =
      CheckRange("lookahead window (W)", options.window, 1, kMaxWindow);
  if (status.ok()) {
    status = CheckRange("lookahead ngram (N)", options.ngram, 2, kMaxNgram);
  }
  if (status.ok()) {
    status =
        CheckRange("lookahead guess (G)", options.max_ngrams, 0, kMaxGuess);
  }
  if (status.ok() && options.vocab_size < 1) {
    status = absl::InvalidArgumentError(
        absl::StrCat("vocab_size is ", options.vocab_size, "; want >= 1"));
  }
  if (!status.ok()) return status;
  if (context.empty()) {
    return absl::InvalidArgumentError(
        "context is empty: the window draws its tokens from it");
  }
  std::unique_ptr<JacobiWindow> window(
      new JacobiWindow(options, std::vector<int32_t>()));
  if (absl::Status s = window->CheckTokens(context, "context"); !s.ok()) {
    return s;
  }
  window->AddHistory(context);
  window->levels_.assign(window->levels(),
                         std::vector<int32_t>(options.window));
  for (std::vector<int32_t>& level : window->levels_) {
    for (int32_t& token : level) token = window->Draw();
  }
  return window;
}

JacobiWindow::JacobiWindow(const JacobiOptions& options,
                           std::vector<int32_t> history)
    : options_(options), history_(std::move(history)) {}

int JacobiWindow::ngrams_per_step() const {
  return std::min(options_.window, options_.max_ngrams);
}

absl::Status JacobiWindow::CheckTokens(absl::Span<const int32_t> tokens,
                                       const char* what) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= options_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", i, "] = ", tokens[i], " is outside [0, ",
                       options_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void JacobiWindow::AddHistory(absl::Span<const int32_t> tokens) {
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  if (history_.size() > static_cast<size_t>(kMaxHistory)) {
    history_.erase(history_.begin(), history_.end() - kMaxHistory);
  }
}

int32_t JacobiWindow::Draw() {
  const uint64_t bits = engine::CounterRandom(options_.seed, draws_++);
  return history_[bits % history_.size()];
}

void JacobiWindow::ShiftColumns(int columns) {
  columns = std::min(columns, options_.window);
  if (columns <= 0) return;
  for (std::vector<int32_t>& level : levels_) {
    level.erase(level.begin(), level.begin() + columns);
  }
  // Refill level by level, left to right (the documented draw order).
  for (std::vector<int32_t>& level : levels_) {
    for (int c = 0; c < columns; ++c) level.push_back(Draw());
  }
}

absl::Status JacobiWindow::AppendRows(engine::SequenceRows* rows) {
  if (rows == nullptr) return absl::InvalidArgumentError("rows is null");
  const int n0 = rows->size();
  if (rows->kept_rows() < 1 || rows->parents[0] != -1) {
    return absl::InvalidArgumentError(
        "rows must start with a kept root row (the verify tree's root): the "
        "window hangs off it");
  }
  if (rows->mask.rows() != n0 || rows->mask.cols() != n0 ||
      static_cast<int>(rows->positions.size()) != n0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows are malformed: ", n0, " tokens, ", rows->positions.size(),
        " positions, mask (", rows->mask.rows(), ", ", rows->mask.cols(), ")"));
  }
  if (rows->last_logits_only) {
    return absl::InvalidArgumentError(
        "rows have last_logits_only set: the window needs its rows' logits");
  }
  const int w = options_.window;
  const int n = n0 + rows_per_step();
  const int64_t root_position = rows->positions[0];
  // The old rows keep their bits; every new bit is in a window row.
  engine::PackedTreeMask mask = engine::PackedTreeMask::Zeros(n, n);
  for (int r = 0; r < n0; ++r) {
    for (int c = 0; c < n0; ++c) {
      if (rows->mask.Get(r, c)) mask.Set(r, c);
    }
  }
  rows->tokens.reserve(n);
  rows->positions.reserve(n);
  for (int l = 0; l < levels(); ++l) {
    for (int i = 0; i < w; ++i) {
      const int row = n0 + l * w + i;
      rows->tokens.push_back(levels_[l][i]);
      rows->positions.push_back(
          static_cast<int32_t>(root_position + 1 + i + l));
      mask.Set(row, 0);                                   // the root
      for (int j = 0; j < i; ++j) mask.Set(row, n0 + j);  // level 0, left
      for (int m = 0; m < l; ++m) mask.Set(row, n0 + m * w + i);  // column
      mask.Set(row, row);
    }
  }
  rows->mask = std::move(mask);
  first_row_ = n0;
  root_position_ = root_position;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JacobiNgram>> JacobiWindow::Update(
    const torch::Tensor& logits, const engine::SamplingParams& sampling,
    absl::Span<const int32_t> emitted) {
  if (first_row_ < 0) {
    return absl::FailedPreconditionError(
        "Update without AppendRows: the window's rows were not in the pass");
  }
  if (emitted.empty()) {
    return absl::InvalidArgumentError("emitted is empty: a step emits >= 1");
  }
  if (absl::Status s = CheckTokens(emitted, "emitted"); !s.ok()) return s;
  if (absl::Status s = engine::ValidateSamplingParams(sampling); !s.ok()) {
    return s;
  }
  const int w = options_.window;
  const int last = levels() - 1;
  if (!logits.defined() || logits.dim() != 2 ||
      logits.size(0) < first_row_ + rows_per_step() ||
      logits.size(1) != options_.vocab_size ||
      !torch::isFloatingType(logits.scalar_type())) {
    const std::string got =
        logits.defined() ? absl::StrCat(c10::str(logits.sizes()), " ",
                                        c10::toString(logits.scalar_type()))
                         : std::string("undefined");
    return absl::InvalidArgumentError(absl::StrCat(
        "logits are ", got, "; want float (>= ", first_row_ + rows_per_step(),
        ", ", options_.vocab_size,
        "): the rows of the pass that AppendRows extended"));
  }
  // 1. The last level's guesses at the next position of each column.
  std::vector<int32_t> predictions(w);
  absl::Status read = engine::TorchStatus("JacobiWindow::Update", [&] {
    torch::Tensor rows = logits.narrow(0, first_row_ + last * w, w)
                             .to(torch::kCPU, torch::kFloat32)
                             .contiguous();
    const float* data = rows.data_ptr<float>();
    const size_t vocab = static_cast<size_t>(options_.vocab_size);
    for (int i = 0; i < w; ++i) {
      absl::Span<const float> row(data + i * vocab, vocab);
      // Row (last, i) sits at position root + 1 + i + last.
      const int64_t next = root_position_ + 2 + i + last;
      predictions[i] = sampling.greedy()
                           ? engine::ArgMax(row)
                           : engine::SampleToken(row, sampling, next);
    }
  });
  if (!read.ok()) return read;
  // 2. Harvest once levels 1 .. N-2 are all the model's (N - 2 updates).
  std::vector<JacobiNgram> ngrams;
  if (updates_ >= levels() - 1) {
    const int cap = ngrams_per_step();
    for (int i = 0; i < w && static_cast<int>(ngrams.size()) < cap; ++i) {
      JacobiNgram gram;
      gram.reserve(options_.ngram);
      for (int l = 0; l < levels(); ++l) gram.push_back(levels_[l][i]);
      gram.push_back(predictions[i]);
      if (std::find(ngrams.begin(), ngrams.end(), gram) == ngrams.end()) {
        ngrams.push_back(std::move(gram));
      }
    }
  }
  // 3. The Jacobi step: the oldest level goes, the guesses come in.
  levels_.erase(levels_.begin());
  levels_.push_back(std::move(predictions));
  // 4. Tokens past the first one emitted are committed positions too.
  AddHistory(emitted);
  if (options_.shift_by_accepted) {
    ShiftColumns(static_cast<int>(emitted.size()) - 1);
  }
  ++updates_;
  first_row_ = -1;
  return ngrams;
}

absl::Status JacobiWindow::Skip(absl::Span<const int32_t> emitted) {
  if (emitted.empty()) {
    return absl::InvalidArgumentError("emitted is empty: a step emits >= 1");
  }
  if (absl::Status s = CheckTokens(emitted, "emitted"); !s.ok()) return s;
  AddHistory(emitted);
  if (options_.shift_by_accepted) {
    ShiftColumns(static_cast<int>(emitted.size()));
  }
  first_row_ = -1;
  return absl::OkStatus();
}

int NgramCredit(absl::Span<const JacobiNgram> ngrams, int32_t root,
                absl::Span<const int32_t> accepted) {
  int best = 0;
  for (const JacobiNgram& ngram : ngrams) {
    if (ngram.empty() || ngram[0] != root) continue;
    int k = 0;
    while (k < static_cast<int>(accepted.size()) &&
           k + 1 < static_cast<int>(ngram.size()) &&
           ngram[k + 1] == accepted[k]) {
      ++k;
    }
    best = std::max(best, k);
  }
  return best;
}

}  // namespace lookahead::verifysvc

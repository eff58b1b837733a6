#include "verifysvc/drafts/jacobi_decode.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "engine/model/acceptance.h"
#include "engine/model/batch.h"

namespace lookahead::verifysvc {
namespace {

// N-grams by key (their first token), oldest first.
using Pool = std::map<int32_t, std::vector<JacobiNgram>>;

void AddToPool(Pool* pool, const JacobiNgram& gram, int per_key) {
  std::vector<JacobiNgram>& grams = (*pool)[gram[0]];
  auto it = std::find(grams.begin(), grams.end(), gram);
  if (it != grams.end()) grams.erase(it);
  grams.push_back(gram);
  if (static_cast<int>(grams.size()) > per_key) grams.erase(grams.begin());
}

// The most recent `count` continuations of `root`, merged into a trie.
engine::DraftTree DraftFromPool(const Pool& pool, int32_t root, int count) {
  engine::DraftTree tree;
  auto it = pool.find(root);
  if (it == pool.end()) return tree;
  const std::vector<JacobiNgram>& grams = it->second;
  const int n = std::min<int>(count, grams.size());
  for (int g = static_cast<int>(grams.size()) - 1;
       g >= static_cast<int>(grams.size()) - n; --g) {
    int32_t parent = -1;
    for (size_t t = 1; t < grams[g].size(); ++t) {
      int32_t found = -1;
      for (int i = 0; i < tree.size(); ++i) {
        if (tree.parents[i] == parent && tree.tokens[i] == grams[g][t]) {
          found = i;
          break;
        }
      }
      if (found < 0) {
        found = tree.size();
        tree.tokens.push_back(grams[g][t]);
        tree.parents.push_back(parent);
      }
      parent = found;
    }
  }
  return tree;
}

int32_t Select(const torch::Tensor& row, const engine::SamplingParams& params,
               int64_t position) {
  torch::Tensor r = row.to(torch::kCPU, torch::kFloat32).contiguous();
  absl::Span<const float> logits(r.data_ptr<float>(),
                                 static_cast<size_t>(r.numel()));
  return params.greedy() ? engine::ArgMax(logits)
                         : engine::SampleToken(logits, params, position);
}

}  // namespace

absl::StatusOr<JacobiDecodeResult> JacobiDecode(
    const engine::LlamaModel& model, absl::Span<const int32_t> prompt,
    const JacobiDecodeOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache, model.NewCache());
  ASSIGN_OR_RETURN(torch::Tensor last, model.Prefill(cache.get(), prompt));
  JacobiDecodeResult result;
  result.tokens.push_back(
      Select(last, options.sampling, static_cast<int64_t>(prompt.size())));
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  context.push_back(result.tokens.back());
  JacobiOptions window_options = options.window;
  window_options.vocab_size = model.config().vocab_size;
  ASSIGN_OR_RETURN(std::unique_ptr<JacobiWindow> window,
                   JacobiWindow::Create(window_options, context));
  Pool pool;
  // (absolute position of its first token, harvested n-gram)
  std::vector<std::pair<int64_t, JacobiNgram>> guesses;
  while (static_cast<int>(result.tokens.size()) < options.max_new_tokens) {
    const int32_t root = result.tokens.back();
    engine::DraftTree draft = DraftFromPool(pool, root, options.draft_ngrams);
    const int free_slots = cache->Capacity() - cache->Length() - 1;
    const bool with_window = free_slots >= window->rows_per_step();
    engine::TrimDraft(&draft,
                      free_slots - (with_window ? window->rows_per_step() : 0));
    engine::TreeInput input = engine::MakeVerifyInput(cache.get(), root, draft);
    ASSIGN_OR_RETURN(engine::SequenceRows rows, engine::RowsFromTree(input));
    if (with_window) RETURN_IF_ERROR(window->AppendRows(&rows));
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> logits,
                     model.ForwardRows(absl::MakeConstSpan(&rows, 1)));
    const int64_t root_position = cache->Length();
    ASSIGN_OR_RETURN(
        engine::AcceptResult accepted,
        engine::AcceptLongestPath(input.tokens, input.parents,
                                  logits[0].narrow(0, 0, input.tokens.size()),
                                  options.sampling, root_position));
    RETURN_IF_ERROR(cache->CommitPath(accepted.path));
    ++result.steps;
    result.draft_tokens += draft.size();
    result.accepted_draft_tokens += accepted.path.size() - 1;
    std::vector<JacobiNgram> grams;
    if (with_window) {
      // Column i's trajectory starts at root_position + 1 + i.
      std::vector<JacobiNgram> trajectories(window->window());
      for (int i = 0; i < window->window(); ++i) {
        for (int l = 0; l < window->levels(); ++l) {
          trajectories[i].push_back(window->token(l, i));
        }
      }
      ASSIGN_OR_RETURN(
          grams, window->Update(logits[0], options.sampling, accepted.tokens));
      for (const JacobiNgram& gram : grams) {
        const JacobiNgram head(gram.begin(), gram.end() - 1);
        const auto column =
            std::find(trajectories.begin(), trajectories.end(), head);
        guesses.emplace_back(
            root_position + 1 + (column - trajectories.begin()), gram);
      }
    } else {
      RETURN_IF_ERROR(window->Skip(accepted.tokens));
    }
    if (!grams.empty()) {
      ++result.harvest_steps;
      if (grams[0][0] == accepted.tokens[0]) ++result.first_token_hits;
    }
    result.harvested += grams.size();
    for (const JacobiNgram& gram : grams) {
      AddToPool(&pool, gram, options.pool_per_key);
    }
    const int room =
        options.max_new_tokens - static_cast<int>(result.tokens.size());
    const int keep = std::min<int>(room, accepted.tokens.size());
    result.tokens.insert(result.tokens.end(), accepted.tokens.begin(),
                         accepted.tokens.begin() + keep);
  }
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), result.tokens.begin(), result.tokens.end());
  for (const auto& [position, gram] : guesses) {
    if (position + static_cast<int64_t>(gram.size()) >
        static_cast<int64_t>(all.size())) {
      continue;
    }
    ++result.ngrams_checked;
    result.ngram_first_hits += gram[0] == all[position];
    result.ngram_exact_hits +=
        std::equal(gram.begin(), gram.end(), all.begin() + position);
  }
  return result;
}

}  // namespace lookahead::verifysvc

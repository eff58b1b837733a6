#include "engine/model/form_agreement.h"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/draft_tree.h"
#include "engine/model/kv_cache.h"

namespace lookahead::engine {
namespace {

// Logits (size, vocab) of tokens[begin, begin + size) teacher-forced after
// what `cache` holds; commits them.
absl::StatusOr<torch::Tensor> ForcedLogits(const LlamaModel& model,
                                           KvCache* cache,
                                           absl::Span<const int32_t> chunk) {
  DraftTree chain;
  for (size_t i = 1; i < chunk.size(); ++i) {
    chain.tokens.push_back(chunk[i]);
    chain.parents.push_back(static_cast<int32_t>(i) - 2);  // -1: the root
  }
  ASSIGN_OR_RETURN(torch::Tensor logits,
                   model.VerifyTree(cache, chunk[0], chain));
  std::vector<int32_t> path(chunk.size());
  std::iota(path.begin(), path.end(), 0);
  RETURN_IF_ERROR(cache->CommitPath(path));
  return logits;
}

}  // namespace

absl::StatusOr<FormAgreement> CompareForms(const LlamaModel& reference,
                                           const LlamaModel& candidate,
                                           absl::Span<const int32_t> tokens,
                                           int chunk) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 || chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CompareForms needs at least 2 tokens and chunk >= 1, got ", n, " and ",
        chunk));
  }
  if (reference.config().vocab_size != candidate.config().vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabularies differ: ", reference.config().vocab_size,
                     " vs ", candidate.config().vocab_size));
  }
  c10::InferenceMode guard;
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> ref_cache,
                   reference.NewCache(static_cast<int>(n) + 1));
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cand_cache,
                   candidate.NewCache(static_cast<int>(n) + 1));
  std::vector<double> kls;
  double ref_nll = 0, cand_nll = 0;
  int64_t agree = 0;
  for (int64_t begin = 0; begin < n - 1; begin += chunk) {
    const int64_t size = std::min<int64_t>(chunk, n - 1 - begin);
    const auto piece = tokens.subspan(begin, size);
    ASSIGN_OR_RETURN(torch::Tensor ref,
                     ForcedLogits(reference, ref_cache.get(), piece));
    ASSIGN_OR_RETURN(torch::Tensor cand,
                     ForcedLogits(candidate, cand_cache.get(), piece));
    // Row i predicts tokens[begin + i + 1].
    const torch::Tensor lr = torch::log_softmax(ref.to(torch::kDouble), -1);
    const torch::Tensor lc = torch::log_softmax(cand.to(torch::kDouble), -1);
    const torch::Tensor kl = (lr.exp() * (lr - lc)).sum(-1);
    const torch::Tensor same = lr.argmax(-1) == lc.argmax(-1);
    for (int64_t i = 0; i < size; ++i) {
      kls.push_back(kl[i].item<double>());
      agree += same[i].item<bool>() ? 1 : 0;
      const int64_t next = tokens[begin + i + 1];
      ref_nll -= lr[i][next].item<double>();
      cand_nll -= lc[i][next].item<double>();
    }
  }
  FormAgreement a;
  a.positions = static_cast<int64_t>(kls.size());
  a.mean_kl = std::accumulate(kls.begin(), kls.end(), 0.0) / a.positions;
  a.max_kl = *std::max_element(kls.begin(), kls.end());
  std::sort(kls.begin(), kls.end());
  a.p99_kl = kls[static_cast<size_t>(0.99 * (a.positions - 1))];
  a.top1 = static_cast<double>(agree) / a.positions;
  a.reference_ppl = std::exp(ref_nll / a.positions);
  a.candidate_ppl = std::exp(cand_nll / a.positions);
  return a;
}

}  // namespace lookahead::engine

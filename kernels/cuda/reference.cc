#include "kernels/cuda/reference.h"

#include <cmath>
#include <limits>

#include "kernels/counter_rng.h"

namespace lookahead::kernels::cuda {
namespace {

int64_t CacheIndex(const AttentionShape& shape, int32_t capacity, int32_t layer,
                   int32_t head, int64_t slot, int32_t d) {
  return ((static_cast<int64_t>(layer) * shape.kv_heads + head) * capacity +
          slot) *
             shape.head_dim +
         d;
}

float Clean(float x) {
  return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

}  // namespace

std::vector<int32_t> TreeDepths(const std::vector<int32_t>& parents) {
  std::vector<int32_t> depths(parents.size(), 0);
  for (size_t i = 0; i < parents.size(); ++i) {
    if (parents[i] >= 0) depths[i] = depths[parents[i]] + 1;
  }
  return depths;
}

bool IsAncestorOrSelf(const std::vector<int32_t>& parents, int32_t i,
                      int32_t j) {
  for (int32_t a = i; a >= 0; a = parents[a]) {
    if (a == j) return true;
  }
  return false;
}

void ReferenceRopeAppend(std::vector<HostSequence>* seqs,
                         const AttentionShape& shape, int32_t layer,
                         const float* qkv, int64_t qkv_stride,
                         const int32_t* positions,
                         const std::vector<double>& inv_freq, int32_t rope_dim,
                         RopeStyle style, float* q_out) {
  const int H = shape.heads, KV = shape.kv_heads, hd = shape.head_dim;
  const int half = rope_dim / 2;
  int64_t t = 0;
  for (HostSequence& seq : *seqs) {
    for (size_t node = 0; node < seq.parents.size(); ++node, ++t) {
      const float* row = qkv + t * qkv_stride;
      const int64_t slot = seq.cache_len + static_cast<int64_t>(node);
      for (int head = 0; head < H + KV; ++head) {
        const float* x = row + static_cast<int64_t>(head) * hd;
        std::vector<double> y(x, x + hd);
        for (int i = 0; i < half; ++i) {
          const double angle = positions[t] * inv_freq[i];
          const int a = style == RopeStyle::kHalves ? i : 2 * i;
          const int b = style == RopeStyle::kHalves ? i + half : 2 * i + 1;
          y[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
          y[b] = x[b] * std::cos(angle) + x[a] * std::sin(angle);
        }
        for (int d = 0; d < hd; ++d) {
          if (head < H) {
            q_out[(t * H + head) * hd + d] = static_cast<float>(y[d]);
          } else {
            seq.k[CacheIndex(shape, seq.capacity, layer, head - H, slot, d)] =
                static_cast<float>(y[d]);
          }
        }
      }
      for (int g = 0; g < KV; ++g) {
        for (int d = 0; d < hd; ++d) {
          seq.v[CacheIndex(shape, seq.capacity, layer, g, slot, d)] =
              row[static_cast<int64_t>(H + KV + g) * hd + d];
        }
      }
    }
  }
}

void ReferenceTreeAttention(const std::vector<HostSequence>& seqs,
                            const AttentionShape& shape, int32_t layer,
                            const float* q, float scale, float* out) {
  const int H = shape.heads, hd = shape.head_dim;
  const int group = H / shape.kv_heads;
  int64_t t = 0;
  for (const HostSequence& seq : seqs) {
    const int n = static_cast<int>(seq.parents.size());
    for (int node = 0; node < n; ++node, ++t) {
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const float* qv = q + (t * H + h) * hd;
        std::vector<double> scores;
        std::vector<int64_t> slots;
        for (int64_t slot = 0; slot < seq.cache_len + n; ++slot) {
          const int j = static_cast<int>(slot - seq.cache_len);
          if (slot >= seq.cache_len &&
              !IsAncestorOrSelf(seq.parents, node, j)) {
            continue;
          }
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) {
            dot += static_cast<double>(qv[d]) *
                   seq.k[CacheIndex(shape, seq.capacity, layer, g, slot, d)];
          }
          scores.push_back(dot * scale);
          slots.push_back(slot);
        }
        double m = -std::numeric_limits<double>::infinity();
        for (double sc : scores) m = std::max(m, sc);
        double sum = 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - m));
        for (int d = 0; d < hd; ++d) {
          double acc = 0.0;
          for (size_t k = 0; k < slots.size(); ++k) {
            acc +=
                scores[k] *
                seq.v[CacheIndex(shape, seq.capacity, layer, g, slots[k], d)];
          }
          out[(t * H + h) * hd + d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void ReferenceCompactKv(std::vector<HostSequence>* seqs,
                        const AttentionShape& shape,
                        const std::vector<std::vector<int32_t>>& paths) {
  for (size_t s = 0; s < seqs->size(); ++s) {
    HostSequence& seq = (*seqs)[s];
    for (int l = 0; l < shape.layers; ++l) {
      for (int g = 0; g < shape.kv_heads; ++g) {
        for (size_t i = 0; i < paths[s].size(); ++i) {
          for (int d = 0; d < shape.head_dim; ++d) {
            const int64_t src = CacheIndex(shape, seq.capacity, l, g,
                                           seq.cache_len + paths[s][i], d);
            const int64_t dst =
                CacheIndex(shape, seq.capacity, l, g, seq.cache_len + i, d);
            seq.k[dst] = seq.k[src];
            seq.v[dst] = seq.v[src];
          }
        }
      }
    }
  }
}

int32_t ReferenceSelectToken(const float* row, int32_t vocab, float temperature,
                             uint64_t seed, int64_t position) {
  int32_t top = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (Clean(row[i]) > Clean(row[top])) top = i;
  }
  const double max_logit = Clean(row[top]);
  if (!(temperature > 0.0f) || std::isinf(max_logit)) return top;
  const double inv_t = 1.0 / static_cast<double>(temperature);
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < vocab; ++i) {
    const double z = (static_cast<double>(Clean(row[i])) - max_logit) * inv_t;
    const double score =
        z - std::log(-std::log(CounterUniform(seed, position, i)));
    if (best < 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

void ReferenceAcceptPath(const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& parents,
                         const std::vector<int32_t>& chosen,
                         std::vector<int32_t>* path,
                         std::vector<int32_t>* emitted) {
  path->clear();
  emitted->clear();
  int32_t node = 0;
  while (node >= 0) {
    path->push_back(node);
    emitted->push_back(chosen[node]);
    int32_t next = -1;
    for (size_t j = 0; j < tokens.size() && next < 0; ++j) {
      if (parents[j] == node && tokens[j] == chosen[node]) {
        next = static_cast<int32_t>(j);
      }
    }
    node = next;
  }
}

}  // namespace lookahead::kernels::cuda

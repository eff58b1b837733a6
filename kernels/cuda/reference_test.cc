// Checks the CPU references that kernels_test.cu holds the CUDA kernels to:
// against direct formulas, metamorphic identities of the tree mask, and
// verifysvc's own sampler and acceptance (so the device path decides
// exactly as the CPU path does).
#include "kernels/cuda/reference.h"

#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <random>

#include "engine/model/acceptance.h"
#include "engine/model/sampler.h"

namespace lookahead::kernels::cuda {
namespace {

const AttentionShape kShape = {/*layers=*/2, /*heads=*/6, /*kv_heads=*/2,
                               /*head_dim=*/8};

HostSequence RandomSequence(std::mt19937* rng, int cache_len,
                            std::vector<int32_t> parents) {
  std::normal_distribution<float> normal;
  HostSequence seq;
  seq.cache_len = cache_len;
  seq.capacity = cache_len + static_cast<int>(parents.size()) + 3;
  const size_t size = static_cast<size_t>(kShape.layers) * kShape.kv_heads *
                      seq.capacity * kShape.head_dim;
  seq.k.resize(size);
  seq.v.resize(size);
  for (float& x : seq.k) x = normal(*rng);
  for (float& x : seq.v) x = normal(*rng);
  seq.parents = std::move(parents);
  return seq;
}

std::vector<float> RandomVector(std::mt19937* rng, size_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& e : x) e = normal(*rng);
  return x;
}

int64_t Index(const HostSequence& seq, int layer, int g, int64_t slot, int d) {
  return ((static_cast<int64_t>(layer) * kShape.kv_heads + g) * seq.capacity +
          slot) *
             kShape.head_dim +
         d;
}

std::vector<float> Attend(const HostSequence& seq, const std::vector<float>& q,
                          int layer = 1) {
  std::vector<float> out(q.size());
  ReferenceTreeAttention({seq}, kShape, layer, q.data(), 0.35f, out.data());
  return out;
}

TEST(ReferenceTreeAttention, OneVisibleKeyGivesItsValue) {
  std::mt19937 rng(1);
  HostSequence seq = RandomSequence(&rng, /*cache_len=*/0, {-1});
  const int hd = kShape.head_dim;
  std::vector<float> out = Attend(seq, RandomVector(&rng, kShape.heads * hd));
  for (int h = 0; h < kShape.heads; ++h) {
    const int g = h / (kShape.heads / kShape.kv_heads);
    for (int d = 0; d < hd; ++d) {
      EXPECT_FLOAT_EQ(out[h * hd + d], seq.v[Index(seq, 1, g, 0, d)]);
    }
  }
}

TEST(ReferenceTreeAttention, EqualKeysAverageTheValues) {
  std::mt19937 rng(2);
  HostSequence seq = RandomSequence(&rng, /*cache_len=*/5, {-1});
  const int hd = kShape.head_dim;
  for (int64_t slot = 1; slot < 6; ++slot) {
    for (int g = 0; g < kShape.kv_heads; ++g) {
      for (int d = 0; d < hd; ++d) {
        seq.k[Index(seq, 1, g, slot, d)] = seq.k[Index(seq, 1, g, 0, d)];
      }
    }
  }
  std::vector<float> out = Attend(seq, RandomVector(&rng, kShape.heads * hd));
  for (int d = 0; d < hd; ++d) {
    double mean = 0.0;
    for (int64_t slot = 0; slot < 6; ++slot)
      mean += seq.v[Index(seq, 1, 0, slot, d)];
    EXPECT_NEAR(out[d], mean / 6, 1e-5);
  }
}

// Chain == causal: node i of a chain after L cached tokens equals a single
// decode after L + i cached tokens holding the chain's first i rows.
TEST(ReferenceTreeAttention, ChainEqualsCausalDecodes) {
  std::mt19937 rng(3);
  const int n = 7, len = 11, row = kShape.heads * kShape.head_dim;
  std::vector<int32_t> chain(n);
  for (int i = 0; i < n; ++i) chain[i] = i - 1;
  HostSequence seq = RandomSequence(&rng, len, chain);
  std::vector<float> q = RandomVector(&rng, n * row);
  std::vector<float> tree_out = Attend(seq, q);
  for (int i = 0; i < n; ++i) {
    HostSequence decode = seq;
    decode.cache_len = len + i;
    decode.parents = {-1};
    std::vector<float> qi(q.begin() + i * row, q.begin() + (i + 1) * row);
    std::vector<float> out = Attend(decode, qi);
    for (int e = 0; e < row; ++e) EXPECT_EQ(out[e], tree_out[i * row + e]);
  }
}

// k leaves == k decodes: leaf j (a child of the root) equals one decode
// after the root with leaf j's K/V moved to the next slot.
TEST(ReferenceTreeAttention, LeavesEqualSeparateDecodes) {
  std::mt19937 rng(4);
  const int leaves = 5, len = 9, row = kShape.heads * kShape.head_dim;
  std::vector<int32_t> star = {-1};
  for (int j = 0; j < leaves; ++j) star.push_back(0);
  HostSequence seq = RandomSequence(&rng, len, star);
  std::vector<float> q = RandomVector(&rng, (leaves + 1) * row);
  std::vector<float> tree_out = Attend(seq, q);
  for (int j = 1; j <= leaves; ++j) {
    std::vector<HostSequence> decode = {seq};
    decode[0].cache_len = len + 1;
    decode[0].parents = {-1};
    ReferenceCompactKv(&decode, kShape, {{j - 1}});  // slot len+j -> len+1
    std::vector<float> qj(q.begin() + j * row, q.begin() + (j + 1) * row);
    std::vector<float> out = Attend(decode[0], qj, 1);
    for (int e = 0; e < row; ++e) {
      EXPECT_NEAR(out[e], tree_out[j * row + e], 1e-6);
    }
  }
}

TEST(ReferenceTreeAttention, SiblingsAreInvisible) {
  std::mt19937 rng(5);
  const int row = kShape.heads * kShape.head_dim;
  HostSequence seq = RandomSequence(&rng, 4, {-1, 0, 0, 1});
  std::vector<float> q = RandomVector(&rng, 4 * row);
  std::vector<float> before = Attend(seq, q);
  for (int d = 0; d < kShape.head_dim; ++d) {  // node 2 = sibling of 1
    seq.v[Index(seq, 1, 0, 4 + 2, d)] += 10.0f;
  }
  std::vector<float> after = Attend(seq, q);
  for (int e = 0; e < row; ++e) {
    EXPECT_EQ(before[1 * row + e], after[1 * row + e]);  // sibling
    EXPECT_EQ(before[3 * row + e], after[3 * row + e]);  // nephew
  }
  EXPECT_NE(before[2 * row], after[2 * row]);  // itself
}

TEST(ReferenceCompactKv, MovesThePathToContiguousSlots) {
  std::mt19937 rng(6);
  HostSequence seq = RandomSequence(&rng, 3, {-1, 0, 1, 0, 3});
  const HostSequence original = seq;
  std::vector<HostSequence> seqs = {seq};
  ReferenceCompactKv(&seqs, kShape, {{0, 3, 4}});
  for (int l = 0; l < kShape.layers; ++l) {
    for (int g = 0; g < kShape.kv_heads; ++g) {
      for (int d = 0; d < kShape.head_dim; ++d) {
        for (int slot = 0; slot < 3; ++slot) {  // the committed cache stays
          EXPECT_EQ(seqs[0].k[Index(seq, l, g, slot, d)],
                    original.k[Index(seq, l, g, slot, d)]);
        }
        const int from[] = {0, 3, 4};
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(seqs[0].k[Index(seq, l, g, 3 + i, d)],
                    original.k[Index(seq, l, g, 3 + from[i], d)]);
          EXPECT_EQ(seqs[0].v[Index(seq, l, g, 3 + i, d)],
                    original.v[Index(seq, l, g, 3 + from[i], d)]);
        }
      }
    }
  }
}

// RoPE: a rotation (norms kept) whose query-key dot product depends only on
// the distance between positions.
TEST(ReferenceRopeAppend, RotatesByRelativePosition) {
  for (RopeStyle style : {RopeStyle::kHalves, RopeStyle::kAdjacentPairs}) {
    std::mt19937 rng(7);
    const int H = kShape.heads, KV = kShape.kv_heads, hd = kShape.head_dim;
    const int stride = (H + 2 * KV) * hd;
    std::vector<double> inv_freq = {1.0, 0.1, 0.01};  // rope_dim 6 < hd
    std::vector<float> qkv = RandomVector(&rng, stride);
    auto rotate = [&](int position, std::vector<float>* k) {
      std::vector<HostSequence> seqs = {RandomSequence(&rng, 0, {-1})};
      std::vector<float> q(H * hd);
      ReferenceRopeAppend(&seqs, kShape, 0, qkv.data(), stride, &position,
                          inv_freq, 6, style, q.data());
      k->assign(seqs[0].k.begin(), seqs[0].k.begin() + hd);  // KV head 0
      return q;
    };
    std::vector<float> k3, k5, k10, k12;
    std::vector<float> q3 = rotate(3, &k3), q5 = rotate(5, &k5);
    std::vector<float> q10 = rotate(10, &k10), q12 = rotate(12, &k12);
    double dot_a = 0, dot_b = 0, norm_q = 0, norm_x = 0;
    for (int d = 0; d < hd; ++d) {
      dot_a += q5[d] * k3[d];
      dot_b += q12[d] * k10[d];
      norm_q += q5[d] * q5[d];
      norm_x += qkv[d] * qkv[d];
      if (d >= 6) {
        EXPECT_EQ(q5[d], qkv[d]);  // beyond rope_dim: unrotated
      }
    }
    EXPECT_NEAR(dot_a, dot_b, 1e-4);
    EXPECT_NEAR(norm_q, norm_x, 1e-4);
  }
}

// The device's token choice is the CPU sampler's, greedy and seeded.
TEST(ReferenceSelectToken, EqualsTheVerifierSampler) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> row(97);
    for (float& x : row) x = normal(rng);
    if (trial % 5 == 0) row[trial % 97] = std::nanf("");
    if (trial % 7 == 0) row[3] = row[50] = 40.0f;  // a tie
    engine::SamplingParams params;
    params.temperature = trial % 3 == 0 ? 0.0f : 0.5f + (trial % 4) * 0.3f;
    params.seed = trial * 7919;
    const int64_t position = trial * 13;
    EXPECT_EQ(ReferenceSelectToken(row.data(), 97, params.temperature,
                                   params.seed, position),
              engine::SampleToken(row, params, position))
        << "trial " << trial;
  }
}

TEST(ReferenceAcceptPath, EqualsAcceptLongestPath) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 1 + trial % 12, vocab = 4;
    std::vector<int32_t> tokens(n), parents(n), chosen(n);
    torch::Tensor logits = torch::zeros({n, vocab});
    for (int i = 0; i < n; ++i) {
      parents[i] = i == 0 ? -1 : static_cast<int32_t>(rng() % i);
      tokens[i] = static_cast<int32_t>(rng() % vocab);
      chosen[i] = static_cast<int32_t>(rng() % vocab);
      logits[i][chosen[i]] = 1.0f;
    }
    std::vector<int32_t> path, emitted;
    ReferenceAcceptPath(tokens, parents, chosen, &path, &emitted);
    absl::StatusOr<engine::AcceptResult> want =
        engine::AcceptLongestPath(tokens, parents, logits, {}, 0);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(path, want->path);
    EXPECT_EQ(emitted, want->tokens);
  }
}

}  // namespace
}  // namespace lookahead::kernels::cuda

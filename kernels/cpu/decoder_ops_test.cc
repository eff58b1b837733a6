#include "kernels/cpu/decoder_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The instruction sets this CPU runs, scalar first.
std::vector<QuantIsa> Isas() {
  std::vector<QuantIsa> isas = {QuantIsa::kScalar};
  if (BestQuantIsa() >= QuantIsa::kAvx2) isas.push_back(QuantIsa::kAvx2);
  if (BestQuantIsa() >= QuantIsa::kAvx512) isas.push_back(QuantIsa::kAvx512);
  return isas;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DecoderOpsTest, RmsNormMatchesDoubleReferenceAndEveryIsaIsBitIdentical) {
  for (int64_t d : {1, 7, 16, 17, 64, 576}) {
    const int64_t m = 3;
    const std::vector<float> x = Random(m * d, d, 2.0f);
    const std::vector<float> w = Random(d, d + 1);
    std::vector<float> expected(m * d);
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += double{x[r * d + j]} * x[r * d + j];
      const double scale = 1.0 / std::sqrt(ss / d + 1e-5);
      for (int64_t j = 0; j < d; ++j) {
        expected[r * d + j] = static_cast<float>(x[r * d + j] * scale * w[j]);
      }
    }
    std::vector<float> scalar(m * d);
    RmsNorm(QuantIsa::kScalar, x.data(), m, d, w.data(), 1e-5f, scalar.data());
    for (int64_t i = 0; i < m * d; ++i) {
      ASSERT_NEAR(scalar[i], expected[i], 1e-5f * (1 + std::fabs(expected[i])))
          << "d=" << d << " i=" << i;
    }
    for (QuantIsa isa : Isas()) {
      std::vector<float> y = x;  // in place
      RmsNorm(isa, y.data(), m, d, w.data(), 1e-5f, y.data());
      EXPECT_TRUE(SameBits(y, scalar)) << "isa " << static_cast<int>(isa);
    }
  }
}

TEST(DecoderOpsTest, SiluMulIsAccurateFiniteAtExtremesAndIsaIndependent) {
  std::vector<float> gate = Random(1001, 3, 4.0f);
  gate[0] = 1000.0f;
  gate[1] = -1000.0f;
  gate[2] = 0.0f;
  gate[3] = 88.5f;
  gate[4] = -87.5f;
  const std::vector<float> up = Random(1001, 4);
  std::vector<float> scalar(gate.size());
  SiluMul(QuantIsa::kScalar, gate.data(), up.data(), gate.size(),
          scalar.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double expected = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_TRUE(std::isfinite(scalar[i])) << i;
    ASSERT_NEAR(scalar[i], expected, 2e-6 * (1 + std::fabs(expected))) << i;
  }
  for (QuantIsa isa : Isas()) {
    std::vector<float> out(gate.size());
    SiluMul(isa, gate.data(), up.data(), gate.size(), out.data());
    EXPECT_TRUE(SameBits(out, scalar)) << "isa " << static_cast<int>(isa);
  }
}

TEST(DecoderOpsTest, RopeRotatesPairsOrHalvesAndLeavesTheRestAlone) {
  const int heads = 3, head_dim = 10, rope_dim = 8;
  const std::vector<float> x = Random(heads * head_dim, 5);
  const std::vector<float> cos = {0.5f, -1.0f, 0.0f, 0.8f};
  const std::vector<float> sin = {0.25f, 0.0f, 1.0f, -0.6f};
  for (bool pairs : {true, false}) {
    std::vector<float> y = x;
    Rope(y.data(), heads, head_dim, rope_dim, pairs, cos.data(), sin.data());
    for (int h = 0; h < heads; ++h) {
      const float* xh = x.data() + h * head_dim;
      const float* yh = y.data() + h * head_dim;
      for (int i = 0; i < rope_dim / 2; ++i) {
        const int a = pairs ? 2 * i : i, b = pairs ? 2 * i + 1 : i + 4;
        EXPECT_FLOAT_EQ(yh[a], xh[a] * cos[i] - xh[b] * sin[i]);
        EXPECT_FLOAT_EQ(yh[b], xh[a] * sin[i] + xh[b] * cos[i]);
      }
      EXPECT_EQ(yh[8], xh[8]);
      EXPECT_EQ(yh[9], xh[9]);
    }
  }
}

// Softmax attention in double over `slots` of (k, v).
std::vector<double> ReferenceAttention(const std::vector<float>& q,
                                       const std::vector<float>& k,
                                       const std::vector<float>& v,
                                       const std::vector<int32_t>& slots,
                                       int hd, double scale) {
  std::vector<double> s;
  double max = -INFINITY;
  for (int32_t slot : slots) {
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += double{q[d]} * k[slot * hd + d];
    s.push_back(dot * scale);
    max = std::max(max, s.back());
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - max));
  std::vector<double> out(hd, 0.0);
  for (size_t j = 0; j < slots.size(); ++j) {
    for (int d = 0; d < hd; ++d) out[d] += s[j] / sum * v[slots[j] * hd + d];
  }
  return out;
}

TEST(DecoderOpsTest, AttendHeadMatchesReferenceOnOddShapes) {
  for (int hd : {1, 17, 64}) {
    for (int32_t prefix : {0, 1, 15, 16, 33}) {
      for (std::vector<int32_t> extra :
           {std::vector<int32_t>{}, std::vector<int32_t>{40},
            std::vector<int32_t>{36, 38, 41}}) {
        if (prefix + extra.size() == 0) continue;
        const int slots_total = 48;
        const std::vector<float> q = Random(hd, hd);
        const std::vector<float> k = Random(slots_total * hd, 7, 3.0f);
        const std::vector<float> v = Random(slots_total * hd, 8);
        AttentionKeys keys;
        keys.k = k.data();
        keys.v = v.data();
        keys.prefix = prefix;
        keys.extra = extra.data();
        keys.n_extra = static_cast<int32_t>(extra.size());
        std::vector<int32_t> slots;
        for (int32_t j = 0; j < prefix; ++j) slots.push_back(j);
        slots.insert(slots.end(), extra.begin(), extra.end());
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
        const std::vector<double> expected =
            ReferenceAttention(q, k, v, slots, hd, scale);
        std::vector<float> scores(keys.size()), scalar(hd);
        AttendHead(QuantIsa::kScalar, q.data(), hd, keys,
                   static_cast<float>(scale), scores.data(), scalar.data());
        for (int d = 0; d < hd; ++d) {
          ASSERT_NEAR(scalar[d], expected[d],
                      1e-5 * (1 + std::fabs(expected[d])))
              << "hd=" << hd << " prefix=" << prefix << " d=" << d;
        }
        for (QuantIsa isa : Isas()) {
          std::vector<float> out(hd);
          AttendHead(isa, q.data(), hd, keys, static_cast<float>(scale),
                     scores.data(), out.data());
          EXPECT_TRUE(SameBits(out, scalar)) << "isa " << static_cast<int>(isa);
        }
      }
    }
  }
}

// IEEE half bits of f (round to nearest even; f finite and within half's
// range here), written out so the test does not share the engine's.
uint16_t ToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f) {  // subnormal half: a multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(
                                             a * 16777216.0f)));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));  // 11 bits
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  return static_cast<uint16_t>(sign | (e + 14) << 10 | (mant - 1024));
}

float FromHalf(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                           : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000) ? -mag : mag;
}

// A float16 KV cache: half keys give the bits of float keys holding the
// same values, on every ISA and every path (head_dim 64 and 128 take the
// 16-key blocks, 17 the general one), subnormal halves and -0 included.
TEST(DecoderOpsTest, HalfKeysGiveTheFloatKeysBits) {
  for (int hd : {17, 64, 128}) {
    const int n = 45;
    const std::vector<float> q = Random(hd, 31);
    std::vector<float> k = Random(n * hd, 32, 3.0f), v = Random(n * hd, 33);
    k[3] = 3e-6f;    // subnormal in half
    v[5] = -0.0f;
    v[7] = -2e-7f;   // subnormal in half
    std::vector<uint16_t> kh(k.size()), vh(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      kh[i] = ToHalf(k[i]);
      k[i] = FromHalf(kh[i]);
      vh[i] = ToHalf(v[i]);
      v[i] = FromHalf(vh[i]);
    }
    std::vector<int32_t> extra = {40, 42, 44};
    AttentionKeys f32{k.data(), v.data(), 37, extra.data(), 3};
    AttentionKeys f16 = f32;
    f16.k = nullptr;
    f16.v = nullptr;
    f16.k_half = kh.data();
    f16.v_half = vh.data();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> scores(f32.size()), want(hd), got(hd);
    AttendHead(QuantIsa::kScalar, q.data(), hd, f32, scale, scores.data(),
               want.data());
    for (QuantIsa isa : Isas()) {
      AttendHead(isa, q.data(), hd, f16, scale, scores.data(), got.data());
      EXPECT_TRUE(SameBits(got, want))
          << "hd " << hd << " isa " << static_cast<int>(isa);
    }
  }
}

// A query's result depends on the sequence of keys only: the same slots
// given as the cache prefix or as tree rows give the same bits.
TEST(DecoderOpsTest, AttendHeadDependsOnTheKeySequenceOnly) {
  const int hd = 64, n = 37;
  const std::vector<float> q = Random(hd, 11);
  const std::vector<float> k = Random(n * hd, 12);
  const std::vector<float> v = Random(n * hd, 13);
  const float scale = 0.125f;
  std::vector<float> scores(n), all_prefix(hd), split(hd), all_extra(hd);
  AttentionKeys keys{k.data(), v.data(), n, nullptr, 0};
  AttendHead(BestQuantIsa(), q.data(), hd, keys, scale, scores.data(),
             all_prefix.data());
  std::vector<int32_t> tail = {30, 31, 32, 33, 34, 35, 36};
  keys = {k.data(), v.data(), 30, tail.data(), 7};
  AttendHead(BestQuantIsa(), q.data(), hd, keys, scale, scores.data(),
             split.data());
  std::vector<int32_t> every(n);
  for (int i = 0; i < n; ++i) every[i] = i;
  keys = {k.data(), v.data(), 0, every.data(), n};
  AttendHead(BestQuantIsa(), q.data(), hd, keys, scale, scores.data(),
             all_extra.data());
  EXPECT_TRUE(SameBits(all_prefix, split));
  EXPECT_TRUE(SameBits(all_prefix, all_extra));
}

// A key's score has the same bits whether it is scored among 16 at once
// (the batched path for head_dim 64 and 128) or alone (the tail): the same
// 17 keys in two orders put a different key in the tail, and each key's
// softmax weight (the scores scratch) must match across the two.
TEST(DecoderOpsTest, BatchedAndSingleKeyScoresAreBitIdentical) {
  for (int hd : {64, 128}) {
    const int n = 17;
    const std::vector<float> q = Random(hd, 31);
    const std::vector<float> k = Random(n * hd, 32, 2.0f);
    const std::vector<float> v = Random(n * hd, 33);
    std::vector<int32_t> rotated(n);  // key 16 first, then 0..15
    for (int i = 0; i < n; ++i) rotated[i] = (i + n - 1) % n;
    for (QuantIsa isa : Isas()) {
      std::vector<float> in_order(n), in_rotation(n), out(hd);
      float max_a, sum_a, max_b, sum_b;
      AttentionKeys keys{k.data(), v.data(), n, nullptr, 0};
      AttentionPartial a{out.data(), &max_a, &sum_a};
      AttendBlock(isa, q.data(), 1, hd, keys, 0, n, 0.125f, in_order.data(),
                  &a);
      keys = {k.data(), v.data(), 0, rotated.data(), n};
      AttentionPartial b{out.data(), &max_b, &sum_b};
      AttendBlock(isa, q.data(), 1, hd, keys, 0, n, 0.125f, in_rotation.data(),
                  &b);
      EXPECT_EQ(max_a, max_b);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(in_order[rotated[i]], in_rotation[i])
            << "hd " << hd << " isa " << static_cast<int>(isa) << " key "
            << rotated[i];
      }
    }
  }
}

// A group of heads sharing one key/value head gives each head the bits it
// gets alone, for groups past the kernel's 4 at a time too, on key counts
// with and without a partial batch of 16 and on odd head sizes.
TEST(DecoderOpsTest, GroupedHeadsMatchSingleHeadsBitForBit) {
  for (int hd : {17, 64, 128}) {
    for (int32_t n : {5, 16, 37}) {
      for (int heads : {1, 2, 3, 4, 5, 9}) {
        const std::vector<float> q = Random(heads * hd, 41);
        const std::vector<float> k = Random((n + 4) * hd, 42, 2.0f);
        const std::vector<float> v = Random((n + 4) * hd, 43);
        std::vector<int32_t> extra = {n + 3, n + 1};  // tree rows
        const AttentionKeys keys{k.data(), v.data(), n - 2, extra.data(), 2};
        for (QuantIsa isa : Isas()) {
          std::vector<float> scores(heads * n), out(heads * hd), maxes(heads),
              sums(heads);
          std::vector<AttentionPartial> parts;
          for (int h = 0; h < heads; ++h) {
            parts.push_back({&out[h * hd], &maxes[h], &sums[h]});
          }
          AttendBlock(isa, q.data(), heads, hd, keys, 1, n, 0.125f,
                      scores.data(), parts.data());
          for (int h = 0; h < heads; ++h) {
            std::vector<float> alone(hd), alone_scores(n);
            float max = 0, sum = 0;
            const AttentionPartial one{alone.data(), &max, &sum};
            AttendBlock(isa, q.data() + h * hd, 1, hd, keys, 1, n, 0.125f,
                        alone_scores.data(), &one);
            const std::vector<float> grouped(out.begin() + h * hd,
                                             out.begin() + (h + 1) * hd);
            EXPECT_TRUE(SameBits(grouped, alone))
                << "hd " << hd << " n " << n << " heads " << heads << " head "
                << h << " isa " << static_cast<int>(isa);
            EXPECT_EQ(max, maxes[h]);
            EXPECT_EQ(sum, sums[h]);
          }
        }
      }
    }
  }
}

// Blocks of keys merged by CombineBlocks give the one-block result (to
// rounding), and the same bits on every ISA.
TEST(DecoderOpsTest, BlocksCombineToTheWholeAttention) {
  const int hd = 64, n = 700, block = 256;
  const std::vector<float> q = Random(hd, 21);
  const std::vector<float> k = Random(n * hd, 22, 2.0f);
  const std::vector<float> v = Random(n * hd, 23);
  std::vector<int32_t> extra = {690, 695, 699};
  AttentionKeys keys{k.data(), v.data(), 650, extra.data(), 3};
  const float scale = 0.125f;
  std::vector<float> scores(keys.size()), whole(hd);
  AttendHead(QuantIsa::kScalar, q.data(), hd, keys, scale, scores.data(),
             whole.data());
  std::vector<float> reference;
  for (QuantIsa isa : Isas()) {
    const int blocks = (keys.size() + block - 1) / block;
    std::vector<float> outs(blocks * hd), maxes(blocks), sums(blocks);
    std::vector<AttentionPartial> partials;
    for (int b = 0; b < blocks; ++b) {
      partials.push_back({&outs[b * hd], &maxes[b], &sums[b]});
      AttendBlock(isa, q.data(), 1, hd, keys, b * block,
                  std::min(keys.size(), (b + 1) * block), scale, scores.data(),
                  &partials.back());
    }
    std::vector<float> out(hd);
    CombineBlocks(isa, partials.data(), blocks, hd, out.data());
    for (int d = 0; d < hd; ++d) {
      ASSERT_NEAR(out[d], whole[d], 1e-6f * (1 + std::fabs(whole[d]))) << d;
    }
    if (reference.empty()) reference = out;
    EXPECT_TRUE(SameBits(out, reference)) << "isa " << static_cast<int>(isa);
  }
}

}  // namespace
}  // namespace lookahead::kernels

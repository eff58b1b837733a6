// Single-thread AttendBlock + CombineBlocks on SmolLM2-135M's attention
// shape (9 query heads of 64 over 3 key/value heads): one row's attention in
// one layer, keys in blocks of 256 as NativeForward cuts them. Prints, per
// ISA and context length, microseconds per row and layer (the median
// call's thread CPU time) and nanoseconds per (query head, key); asserts
// nothing. A verify pass of R rows over C keys costs about
// R x 30 layers x this. "per head": one AttendBlock call per query head;
// "grouped": one per key/value head (its 3 query heads read K and V once).
//
//   bazel run -c opt //kernels/cpu:attention_bench [-- scalar|avx2|avx512]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/cpu/decoder_ops.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 256;

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// One row, one layer: every query head over every block, then the merge;
// the heads of a key/value head `together` (one AttendBlock call per
// group) or one call per head.
void AttendRow(QuantIsa isa, bool together, const std::vector<float>& q,
               const std::vector<float>& k, const std::vector<float>& v,
               int32_t keys, std::vector<float>& scores,
               std::vector<float>& part_out, std::vector<float>& part_max,
               std::vector<float>& part_sum, std::vector<float>& out) {
  const int32_t blocks = (keys + kBlock - 1) / kBlock;
  const int group = kHeads / kKvHeads;
  const int per_call = together ? group : 1;
  std::vector<AttentionPartial> parts(kHeads * blocks);
  for (int h = 0; h < kHeads; ++h) {
    for (int32_t b = 0; b < blocks; ++b) {
      const int64_t p = int64_t{h} * blocks + b;
      parts[b * kHeads + h] = {&part_out[p * kHeadDim], &part_max[p],
                               &part_sum[p]};
    }
  }
  for (int h = 0; h < kHeads; h += per_call) {
    const int64_t head_offset = int64_t{h / group} * keys * kHeadDim;
    const AttentionKeys ak{k.data() + head_offset, v.data() + head_offset, keys,
                           nullptr, 0};
    for (int32_t b = 0; b < blocks; ++b) {
      AttendBlock(isa, q.data() + h * kHeadDim, per_call, kHeadDim, ak,
                  b * kBlock, std::min(keys, (b + 1) * kBlock), 0.125f,
                  scores.data(), &parts[b * kHeads + h]);
    }
  }
  std::vector<AttentionPartial> head_parts(blocks);
  for (int h = 0; h < kHeads; ++h) {
    for (int32_t b = 0; b < blocks; ++b) head_parts[b] = parts[b * kHeads + h];
    CombineBlocks(isa, head_parts.data(), blocks, kHeadDim,
                  out.data() + h * kHeadDim);
  }
}

void Run(QuantIsa isa, const char* name) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int32_t keys : {64, 256, 1024}) {
    std::vector<float> q(kHeads * kHeadDim), k(kKvHeads * keys * kHeadDim),
        v(k.size());
    for (float& x : q) x = dist(rng);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    const int32_t blocks = (keys + kBlock - 1) / kBlock;
    std::vector<float> scores(kHeads * kBlock),
        part_out(kHeads * blocks * kHeadDim), part_max(kHeads * blocks),
        part_sum(kHeads * blocks), out(kHeads * kHeadDim);
    for (bool together : {false, true}) {
      std::vector<double> times;
      const double until = ThreadSeconds() + 0.3;
      while (times.size() < 20 || ThreadSeconds() < until) {
        const double t0 = ThreadSeconds();
        AttendRow(isa, together, q, k, v, keys, scores, part_out, part_max,
                  part_sum, out);
        times.push_back(ThreadSeconds() - t0);
      }
      std::sort(times.begin(), times.end());
      const double us = 1e6 * times[times.size() / 2];
      std::printf(
          "%-7s keys %5d  %-9s %8.2f us/row/layer  %6.2f ns/(head,key)\n", name,
          keys, together ? "grouped" : "per head", us,
          1e3 * us / (kHeads * keys));
    }
  }
}

}  // namespace
}  // namespace lookahead::kernels

int main(int argc, char** argv) {
  using lookahead::kernels::QuantIsa;
  const QuantIsa best = lookahead::kernels::BestQuantIsa();
  struct Named {
    QuantIsa isa;
    const char* name;
  };
  std::vector<Named> isas = {{QuantIsa::kScalar, "scalar"}};
  if (best >= QuantIsa::kAvx2) isas.push_back({QuantIsa::kAvx2, "avx2"});
  if (best >= QuantIsa::kAvx512) isas.push_back({QuantIsa::kAvx512, "avx512"});
  for (const Named& n : isas) {
    if (argc > 1 && std::strcmp(argv[1], n.name) != 0) continue;
    lookahead::kernels::Run(n.isa, n.name);
  }
  return 0;
}

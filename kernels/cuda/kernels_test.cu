// kernels_test: every CUDA kernel in kernels/cuda against the CPU reference
// (reference.h) on random inputs at several shapes and dtypes, plus the
// tree-mask identities on the device. Needs a GPU: built in CI, run by
// tools/gpu_check.sh on a GPU machine. Exit 0 iff every check passed; 2 if
// there is no CUDA device.
//
// Tolerances, ||out - ref|| / ||ref|| against the float64 reference on the
// same (rounded) inputs: float32 1e-5, float16 2e-3, bfloat16 1.6e-2. KV
// compaction, token selection and path acceptance must match exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kv_compact.h"
#include "kernels/cuda/reference.h"
#include "kernels/cuda/select_tokens.h"
#include "kernels/cuda/tree_attention.h"

namespace lookahead::kernels::cuda {
namespace {

int g_passed = 0, g_failed = 0;

void Check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

#define CUDA_OK(call)                                                   \
  do {                                                                  \
    cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) {                                            \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), \
                  __FILE__, __LINE__, #call);                           \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

// Host <-> device conversion of float data to a storage dtype.
size_t ElementSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

std::vector<uint8_t> Encode(const std::vector<float>& x, DType dtype) {
  std::vector<uint8_t> bytes(x.size() * ElementSize(dtype));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &x[i], 4);
    } else if (dtype == DType::kFloat16) {
      __half h = __float2half_rn(x[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
      std::memcpy(&bytes[i * 2], &b, 2);
    }
  }
  return bytes;
}

std::vector<float> Decode(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> x(bytes.size() / ElementSize(dtype));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(&x[i], &bytes[i * 4], 4);
    } else if (dtype == DType::kFloat16) {
      __half h;
      std::memcpy(&h, &bytes[i * 2], 2);
      x[i] = __half2float(h);
    } else {
      __nv_bfloat16 b;
      std::memcpy(&b, &bytes[i * 2], 2);
      x[i] = __bfloat162float(b);
    }
  }
  return x;
}

// Rounds x to dtype and back, so the reference sees the device's inputs.
std::vector<float> Rounded(const std::vector<float>& x, DType dtype) {
  return Decode(Encode(x, dtype), dtype);
}

double RelError(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;  // unwritten (poisoned)
    num += (out[i] - ref[i]) * double(out[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, host.size() * sizeof(T) + 1));
  CUDA_OK(cudaMemcpy(d, host.data(), host.size() * sizeof(T),
                     cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> host(n);
  CUDA_OK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<float> Random(std::mt19937* rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& e : x) e = normal(*rng);
  return x;
}

// A device mirror of host sequences: caches, mask, offsets. Owns its memory.
struct DeviceBatch {
  TreeBatch batch;
  std::vector<void*> allocations;
  std::vector<void*> k_ptrs, v_ptrs;
  std::vector<int32_t> offsets;

  template <typename T>
  T* Keep(T* p) {
    allocations.push_back(p);
    return p;
  }
  ~DeviceBatch() {
    for (void* p : allocations) cudaFree(p);
  }
};

void Upload(const std::vector<HostSequence>& seqs, DType dtype,
            DeviceBatch* out) {
  std::vector<int32_t> token_seq, lens, caps, mask_offsets;
  std::vector<uint64_t> masks;
  out->offsets = {0};
  out->k_ptrs.clear();
  out->v_ptrs.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const HostSequence& seq = seqs[s];
    const int n = static_cast<int>(seq.parents.size());
    out->offsets.push_back(out->offsets.back() + n);
    for (int i = 0; i < n; ++i) token_seq.push_back(static_cast<int32_t>(s));
    lens.push_back(seq.cache_len);
    caps.push_back(seq.capacity);
    mask_offsets.push_back(static_cast<int32_t>(masks.size()));
    const int words = (n + 63) / 64;
    for (int i = 0; i < n; ++i) {
      std::vector<uint64_t> row(words, 0);
      for (int j = 0; j < n; ++j) {
        if (IsAncestorOrSelf(seq.parents, i, j))
          row[j / 64] |= 1ull << (j % 64);
      }
      masks.insert(masks.end(), row.begin(), row.end());
    }
    out->k_ptrs.push_back(out->Keep(ToDevice(Encode(seq.k, dtype))));
    out->v_ptrs.push_back(out->Keep(ToDevice(Encode(seq.v, dtype))));
  }
  TreeBatch& b = out->batch;
  b.num_seqs = static_cast<int32_t>(seqs.size());
  b.num_tokens = out->offsets.back();
  b.seq_offsets = out->Keep(ToDevice(out->offsets));
  b.token_seq = out->Keep(ToDevice(token_seq));
  b.cache_lens = out->Keep(ToDevice(lens));
  b.capacities = out->Keep(ToDevice(caps));
  b.k_caches = out->Keep(ToDevice(out->k_ptrs));
  b.v_caches = out->Keep(ToDevice(out->v_ptrs));
  b.masks = out->Keep(ToDevice(masks));
  b.mask_offsets = out->Keep(ToDevice(mask_offsets));
}

// Reads sequence s's cache (K or V) back as float.
std::vector<float> CacheToHost(const DeviceBatch& d, const HostSequence& seq,
                               int s, bool keys, DType dtype) {
  const size_t n = seq.k.size();
  std::vector<uint8_t> bytes(n * ElementSize(dtype));
  CUDA_OK(cudaMemcpy(bytes.data(), keys ? d.k_ptrs[s] : d.v_ptrs[s],
                     bytes.size(), cudaMemcpyDeviceToHost));
  return Decode(bytes, dtype);
}

std::vector<int32_t> RandomTree(std::mt19937* rng, int n) {
  std::vector<int32_t> parents(n);
  for (int i = 0; i < n; ++i) {
    parents[i] = i == 0 ? -1 : static_cast<int32_t>((*rng)() % i);
  }
  return parents;
}

HostSequence RandomSequence(std::mt19937* rng, const AttentionShape& shape,
                            int cache_len, std::vector<int32_t> parents,
                            DType dtype) {
  HostSequence seq;
  seq.cache_len = cache_len;
  seq.capacity = cache_len + static_cast<int>(parents.size()) + 5;
  const size_t size =
      size_t(shape.layers) * shape.kv_heads * seq.capacity * shape.head_dim;
  seq.k = Rounded(Random(rng, size), dtype);
  seq.v = Rounded(Random(rng, size), dtype);
  seq.parents = std::move(parents);
  return seq;
}

const char* Name(DType dtype) {
  return dtype == DType::kFloat32   ? "f32"
         : dtype == DType::kFloat16 ? "f16"
                                    : "bf16";
}

double Tolerance(DType dtype) {
  return dtype == DType::kFloat32   ? 1e-5
         : dtype == DType::kFloat16 ? 2e-3
                                    : 1.6e-2;
}

// Runs tree attention on `seqs` (layer 1) and returns out (T, H, hd).
std::vector<float> DeviceAttention(const std::vector<HostSequence>& seqs,
                                   const AttentionShape& shape, DType dtype,
                                   const std::vector<float>& q, float scale) {
  DeviceBatch d;
  Upload(seqs, dtype, &d);
  const int tpt = TokensPerTile(shape);
  std::vector<int32_t> first(
      MaxTreeTiles(d.batch.num_tokens, d.batch.num_seqs, tpt));
  std::vector<int32_t> count(first.size());
  TreeTiles tiles;
  tiles.tokens_per_tile = tpt;
  tiles.num_tiles = HostTreeTiles(d.offsets.data(), d.batch.num_seqs, tpt,
                                  first.data(), count.data());
  tiles.first = d.Keep(ToDevice(first));
  tiles.count = d.Keep(ToDevice(count));
  uint8_t* q_dev = d.Keep(ToDevice(Encode(q, dtype)));
  std::vector<float> poison(q.size(), NAN);
  uint8_t* out_dev = d.Keep(ToDevice(Encode(poison, dtype)));
  CUDA_OK(LaunchTreeAttention(d.batch, tiles, shape, 1, dtype, q_dev, scale,
                              out_dev, 0));
  CUDA_OK(cudaDeviceSynchronize());
  return Decode(ToHost(out_dev, q.size() * ElementSize(dtype)), dtype);
}

void TestRopeAndAttention(std::mt19937* rng, const AttentionShape& shape,
                          DType dtype, RopeStyle style, int rope_dim) {
  const std::string where = std::string(Name(dtype)) +
                            " H=" + std::to_string(shape.heads) +
                            " KV=" + std::to_string(shape.kv_heads) +
                            " hd=" + std::to_string(shape.head_dim);
  const int lens[] = {0, 1, 31, 33, 300, 777};
  const int sizes[] = {1, 7, 64, 2, 100, 40};  // 100: masks of two words
  std::vector<HostSequence> seqs;
  for (int s = 0; s < 6; ++s) {
    seqs.push_back(
        RandomSequence(rng, shape, lens[s], RandomTree(rng, sizes[s]), dtype));
  }
  const int H = shape.heads, KV = shape.kv_heads, hd = shape.head_dim;
  const int64_t stride = (H + 2 * KV) * hd + 3;  // padded rows
  int T = 0;
  std::vector<int32_t> positions;
  for (const HostSequence& seq : seqs) {
    for (int32_t depth : TreeDepths(seq.parents)) {
      positions.push_back(seq.cache_len + depth);
      ++T;
    }
  }
  std::vector<float> qkv = Rounded(Random(rng, T * stride), dtype);
  std::vector<double> inv_freq(rope_dim / 2);
  for (int i = 0; i < rope_dim / 2; ++i) {
    inv_freq[i] = std::pow(10000.0, -2.0 * i / rope_dim);
  }
  // Reference: RoPE + append, then attention.
  std::vector<HostSequence> ref = seqs;
  std::vector<float> q_ref(size_t(T) * H * hd);
  ReferenceRopeAppend(&ref, shape, 1, qkv.data(), stride, positions.data(),
                      inv_freq, rope_dim, style, q_ref.data());
  // Device.
  DeviceBatch d;
  Upload(seqs, dtype, &d);
  uint8_t* qkv_dev = d.Keep(ToDevice(Encode(qkv, dtype)));
  int32_t* pos_dev = d.Keep(ToDevice(positions));
  double* freq_dev = d.Keep(ToDevice(inv_freq));
  std::vector<float> poison(q_ref.size(), NAN);
  uint8_t* q_dev = d.Keep(ToDevice(Encode(poison, dtype)));
  CUDA_OK(LaunchRopeAppend(d.batch, shape, 1, dtype, qkv_dev, stride, pos_dev,
                           freq_dev, rope_dim, style, q_dev, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> q_out =
      Decode(ToHost(q_dev, q_ref.size() * ElementSize(dtype)), dtype);
  Check(RelError(q_out, q_ref) < Tolerance(dtype), "rope q " + where);
  double cache_err = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    cache_err = std::max(
        cache_err, RelError(CacheToHost(d, ref[s], s, true, dtype), ref[s].k));
    cache_err = std::max(
        cache_err, RelError(CacheToHost(d, ref[s], s, false, dtype), ref[s].v));
  }
  Check(cache_err < Tolerance(dtype), "rope append cache " + where);

  // Attention on the reference's rotated inputs (rounded to dtype).
  for (HostSequence& seq : ref) {
    seq.k = Rounded(seq.k, dtype);
    seq.v = Rounded(seq.v, dtype);
  }
  std::vector<float> q_in = Rounded(q_ref, dtype);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> out_ref(q_in.size());
  ReferenceTreeAttention(ref, shape, 1, q_in.data(), scale, out_ref.data());
  std::vector<float> out = DeviceAttention(ref, shape, dtype, q_in, scale);
  const double err = RelError(out, out_ref);
  Check(err < Tolerance(dtype),
        "tree attention " + where + " rel err " + std::to_string(err));
}

// Chain == causal (bitwise: the same slots in the same tiles) and k leaves
// == k decodes (to rounding), on the device.
void TestMetamorphic(std::mt19937* rng, const AttentionShape& shape) {
  const DType dtype = DType::kFloat32;
  const int row = shape.heads * shape.head_dim, n = 12, len = 45;
  std::vector<int32_t> chain(n);
  for (int i = 0; i < n; ++i) chain[i] = i - 1;
  HostSequence seq = RandomSequence(rng, shape, len, chain, dtype);
  std::vector<float> q = Random(rng, size_t(n) * row);
  const float scale = 0.125f;
  std::vector<float> tree_out = DeviceAttention({seq}, shape, dtype, q, scale);
  bool same = true;
  for (int i = 0; i < n; ++i) {
    HostSequence decode = seq;
    decode.cache_len = len + i;
    decode.parents = {-1};
    std::vector<float> qi(q.begin() + i * row, q.begin() + (i + 1) * row);
    std::vector<float> out = DeviceAttention({decode}, shape, dtype, qi, scale);
    same = same && std::memcmp(out.data(), &tree_out[i * row], row * 4) == 0;
  }
  Check(same, "chain == causal decodes, bit for bit");

  std::vector<int32_t> star = {-1};
  for (int j = 0; j < 9; ++j) star.push_back(0);
  HostSequence tree = RandomSequence(rng, shape, len, star, dtype);
  std::vector<float> q2 = Random(rng, star.size() * row);
  std::vector<float> star_out =
      DeviceAttention({tree}, shape, dtype, q2, scale);
  double worst = 0;
  for (int j = 1; j <= 9; ++j) {
    HostSequence decode = tree;
    decode.cache_len = len + 1;
    decode.parents = {-1};
    std::vector<HostSequence> one = {decode};
    ReferenceCompactKv(&one, shape, {{j - 1}});
    std::vector<float> qj(q2.begin() + j * row, q2.begin() + (j + 1) * row);
    std::vector<float> out = DeviceAttention(one, shape, dtype, qj, scale);
    std::vector<float> leaf(star_out.begin() + j * row,
                            star_out.begin() + (j + 1) * row);
    worst = std::max(worst, RelError(out, leaf));
  }
  Check(worst < 1e-6,
        "k leaves == k decodes (rel err " + std::to_string(worst) + ")");
}

void TestCompact(std::mt19937* rng, const AttentionShape& shape, DType dtype) {
  std::vector<HostSequence> seqs;
  std::vector<std::vector<int32_t>> paths;
  for (int s = 0; s < 5; ++s) {
    std::vector<int32_t> parents = RandomTree(rng, 1 + s * 6);
    seqs.push_back(RandomSequence(rng, shape, 3 + 29 * s, parents, dtype));
    // A random root-to-node path.
    int node = static_cast<int>((*rng)() % parents.size());
    std::vector<int32_t> path;
    for (; node >= 0; node = parents[node]) path.insert(path.begin(), node);
    paths.push_back(path);
  }
  DeviceBatch d;
  Upload(seqs, dtype, &d);
  std::vector<int32_t> flat, offsets, counts;
  for (const auto& p : paths) {
    offsets.push_back(static_cast<int32_t>(flat.size()));
    counts.push_back(static_cast<int32_t>(p.size()));
    flat.insert(flat.end(), p.begin(), p.end());
  }
  CUDA_OK(LaunchCompactKv(d.batch, shape, dtype, d.Keep(ToDevice(flat)),
                          d.Keep(ToDevice(offsets)), d.Keep(ToDevice(counts)),
                          0));
  CUDA_OK(cudaDeviceSynchronize());
  ReferenceCompactKv(&seqs, shape, paths);
  bool same = true;
  for (size_t s = 0; s < seqs.size(); ++s) {
    same = same && CacheToHost(d, seqs[s], s, true, dtype) == seqs[s].k &&
           CacheToHost(d, seqs[s], s, false, dtype) == seqs[s].v;
  }
  Check(same, std::string("KV compaction ") + Name(dtype));
}

void TestSelectAndAccept(std::mt19937* rng) {
  for (int vocab : {1, 255, 49152}) {
    const int rows = 70;
    std::vector<float> logits = Random(rng, size_t(rows) * vocab, 4.0f);
    std::vector<float> temps(rows);
    std::vector<uint64_t> seeds(rows);
    std::vector<int64_t> positions(rows);
    for (int r = 0; r < rows; ++r) {
      temps[r] = r % 3 == 0 ? 0.0f : 0.3f + 0.2f * (r % 5);
      seeds[r] = (*rng)();
      positions[r] = r * 31 + 7;
      if (r % 4 == 1) logits[size_t(r) * vocab + (r % vocab)] = NAN;
      if (r % 6 == 2 && vocab > 9) {
        logits[size_t(r) * vocab + 2] = logits[size_t(r) * vocab + 9] = 30.0f;
      }
      if (r == 5)
        std::fill(&logits[size_t(r) * vocab], &logits[size_t(r + 1) * vocab],
                  -INFINITY);
    }
    float* l_dev = ToDevice(logits);
    float* t_dev = ToDevice(temps);
    uint64_t* s_dev = ToDevice(seeds);
    int64_t* p_dev = ToDevice(positions);
    int32_t* out_dev = ToDevice(std::vector<int32_t>(rows, -7));
    CUDA_OK(LaunchSelectTokens(l_dev, rows, vocab, t_dev, s_dev, p_dev, out_dev,
                               0));
    std::vector<int32_t> out = ToHost(out_dev, rows);
    int mismatches = 0;
    for (int r = 0; r < rows; ++r) {
      mismatches +=
          out[r] != ReferenceSelectToken(&logits[size_t(r) * vocab], vocab,
                                         temps[r], seeds[r], positions[r]);
    }
    Check(mismatches == 0, "select tokens vocab " + std::to_string(vocab) +
                               ": " + std::to_string(mismatches) +
                               " mismatches");
    for (void* p : {(void*)l_dev, (void*)t_dev, (void*)s_dev, (void*)p_dev,
                    (void*)out_dev})
      cudaFree(p);
  }
  // Accept paths over a batch of random trees with few distinct tokens.
  std::vector<int32_t> offsets = {0}, tokens, parents, chosen;
  std::vector<std::vector<int32_t>> trees;
  for (int s = 0; s < 40; ++s) {
    const int n = 1 + s % 23;
    std::vector<int32_t> p = RandomTree(rng, n);
    for (int i = 0; i < n; ++i) {
      tokens.push_back((*rng)() % 3);
      chosen.push_back((*rng)() % 3);
    }
    parents.insert(parents.end(), p.begin(), p.end());
    offsets.push_back(offsets.back() + n);
  }
  const int S = 40, T = offsets.back();
  int32_t* paths_dev = ToDevice(std::vector<int32_t>(T, -1));
  int32_t* emitted_dev = ToDevice(std::vector<int32_t>(T, -1));
  int32_t* counts_dev = ToDevice(std::vector<int32_t>(S, -1));
  int32_t* inputs[] = {ToDevice(offsets), ToDevice(tokens), ToDevice(parents),
                       ToDevice(chosen)};
  CUDA_OK(LaunchAcceptPaths(S, inputs[0], inputs[1], inputs[2], inputs[3],
                            paths_dev, emitted_dev, counts_dev, 0));
  std::vector<int32_t> paths = ToHost(paths_dev, T),
                       emitted = ToHost(emitted_dev, T),
                       counts = ToHost(counts_dev, S);
  bool same = true;
  for (int s = 0; s < S; ++s) {
    auto slice = [&](const std::vector<int32_t>& v) {
      return std::vector<int32_t>(v.begin() + offsets[s],
                                  v.begin() + offsets[s + 1]);
    };
    std::vector<int32_t> want_path, want_emitted;
    ReferenceAcceptPath(slice(tokens), slice(parents), slice(chosen),
                        &want_path, &want_emitted);
    same = same && counts[s] == static_cast<int32_t>(want_path.size()) &&
           std::equal(want_path.begin(), want_path.end(),
                      paths.begin() + offsets[s]) &&
           std::equal(want_emitted.begin(), want_emitted.end(),
                      emitted.begin() + offsets[s]);
  }
  Check(same, "accept paths");
  for (int32_t* p : inputs) cudaFree(p);
  for (int32_t* p : {paths_dev, emitted_dev, counts_dev}) cudaFree(p);
}

}  // namespace
}  // namespace lookahead::kernels::cuda

int main() {
  using namespace lookahead::kernels::cuda;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("kernels_test: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("kernels_test on %s (sm_%d%d)\n", prop.name, prop.major,
              prop.minor);
  std::mt19937 rng(20261124);
  const AttentionShape shapes[] = {
      {2, 9, 3, 64},    // SmolLM2-135M
      {2, 8, 8, 32},    // multi-head, small head
      {2, 32, 8, 128},  // Llama-3-8B
      {2, 14, 2, 64},   // Qwen2-0.5B, group 7
      {2, 16, 1, 64},   // multi-query, group 16 (one token per tile)
  };
  for (const AttentionShape& shape : shapes) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      TestRopeAndAttention(&rng, shape, dtype, RopeStyle::kHalves,
                           shape.head_dim);
      TestCompact(&rng, shape, dtype);
    }
    // Partial rotary dims (rope_dim < hd) in both styles.
    TestRopeAndAttention(&rng, shape, DType::kFloat32,
                         RopeStyle::kAdjacentPairs, shape.head_dim / 2);
    TestRopeAndAttention(&rng, shape, DType::kBFloat16,
                         RopeStyle::kAdjacentPairs, shape.head_dim);
    TestRopeAndAttention(&rng, shape, DType::kFloat16, RopeStyle::kHalves,
                         shape.head_dim / 2);
    TestMetamorphic(&rng, shape);
  }
  TestSelectAndAccept(&rng);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

// tree_attention_dev: the tree-attention versions side by side on a GPU.
// Each is checked against a LibTorch float64 reference on the same inputs
// (||out - ref|| / ||ref||; float32 must stay under 1e-5, bfloat16 under
// 1.6e-2) and timed with CUDA events (median of 30 after 5 warm-ups),
// beside the LibTorch attention the engine runs without the kernel (one
// masked matmul-softmax-matmul per sequence, as engine/model/attention_torch.cc).
// Built and run by tools/gpu_check.sh against the GPU machine's LibTorch.
#include "kernels/cuda/dev/tree_attention_dev.h"

#include <cuda_runtime.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cuda/tree_attention.h"

namespace lookahead::kernels::cuda::dev {
namespace {

struct Case {
  const char* model;
  AttentionShape shape;  // one layer
  int seqs, context, tree;
};

struct Batch {
  std::vector<torch::Tensor> k, v;            // (1, KV, cap, hd) per sequence
  std::vector<std::vector<int32_t>> parents;  // per sequence
  torch::Tensor q;                            // (T, H, hd)
  torch::Tensor storage;                      // device int32/int64 arrays
  TreeBatch batch;
  TreeTiles tiles;
};

torch::Tensor Int32(const std::vector<int32_t>& v) {
  return torch::tensor(v, torch::kInt32).cuda();
}

Batch MakeBatch(const Case& c, torch::Dtype dtype, std::mt19937* rng,
                std::vector<torch::Tensor>* keep) {
  const AttentionShape& s = c.shape;
  Batch b;
  std::vector<int32_t> offsets = {0}, token_seq, lens, caps, mask_offsets;
  std::vector<int64_t> masks, k_ptrs, v_ptrs;
  const auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
  for (int seq = 0; seq < c.seqs; ++seq) {
    const int n = c.tree, cap = c.context + n;
    b.k.push_back(torch::randn({1, s.kv_heads, cap, s.head_dim}, opts));
    b.v.push_back(torch::randn({1, s.kv_heads, cap, s.head_dim}, opts));
    std::vector<int32_t> parents(n);
    for (int i = 0; i < n; ++i) parents[i] = i == 0 ? -1 : (*rng)() % i;
    b.parents.push_back(parents);
    offsets.push_back(offsets.back() + n);
    lens.push_back(c.context);
    caps.push_back(cap);
    k_ptrs.push_back(reinterpret_cast<int64_t>(b.k.back().data_ptr()));
    v_ptrs.push_back(reinterpret_cast<int64_t>(b.v.back().data_ptr()));
    mask_offsets.push_back(static_cast<int32_t>(masks.size()));
    const int words = (n + 63) / 64;
    for (int i = 0; i < n; ++i) {
      token_seq.push_back(seq);
      std::vector<uint64_t> row(words, 0);
      for (int a = i; a >= 0; a = parents[a]) row[a / 64] |= 1ull << (a % 64);
      for (uint64_t w : row) masks.push_back(static_cast<int64_t>(w));
    }
  }
  const int total = offsets.back();
  b.q = torch::randn({total, s.heads, s.head_dim}, opts);
  const int tpt = TokensPerTile(s);
  std::vector<int32_t> first(MaxTreeTiles(total, c.seqs, tpt)),
      count(first.size());
  const int tiles =
      HostTreeTiles(offsets.data(), c.seqs, tpt, first.data(), count.data());
  std::vector<torch::Tensor> arrays = {
      Int32(offsets),
      Int32(token_seq),
      Int32(lens),
      Int32(caps),
      torch::tensor(k_ptrs, torch::kInt64).cuda(),
      torch::tensor(v_ptrs, torch::kInt64).cuda(),
      torch::tensor(masks, torch::kInt64).cuda(),
      Int32(mask_offsets),
      Int32(first),
      Int32(count)};
  keep->insert(keep->end(), arrays.begin(), arrays.end());
  TreeBatch& t = b.batch;
  t.num_seqs = c.seqs;
  t.num_tokens = total;
  t.seq_offsets = arrays[0].data_ptr<int32_t>();
  t.token_seq = arrays[1].data_ptr<int32_t>();
  t.cache_lens = arrays[2].data_ptr<int32_t>();
  t.capacities = arrays[3].data_ptr<int32_t>();
  t.k_caches = reinterpret_cast<void* const*>(arrays[4].data_ptr<int64_t>());
  t.v_caches = reinterpret_cast<void* const*>(arrays[5].data_ptr<int64_t>());
  t.masks = reinterpret_cast<const uint64_t*>(arrays[6].data_ptr<int64_t>());
  t.mask_offsets = arrays[7].data_ptr<int32_t>();
  b.tiles = {tiles, tpt, arrays[8].data_ptr<int32_t>(),
             arrays[9].data_ptr<int32_t>()};
  return b;
}

// Additive (n, context + n) mask of sequence `seq` in `dtype`.
torch::Tensor Mask(const Batch& b, int seq, int context, torch::Dtype dtype) {
  const auto& parents = b.parents[seq];
  const int n = static_cast<int>(parents.size());
  torch::Tensor m = torch::full({n, context + n}, -INFINITY);
  m.narrow(1, 0, context).zero_();
  for (int i = 0; i < n; ++i) {
    for (int a = i; a >= 0; a = parents[a]) m[i][context + a] = 0.0;
  }
  return m.to(torch::kCUDA, dtype);
}

// The engine's LibTorch attention (or, in float64, the reference).
torch::Tensor TorchAttention(const Batch& b, const Case& c, torch::Dtype dtype,
                             const std::vector<torch::Tensor>& masks) {
  const AttentionShape& s = c.shape;
  const int group = s.heads / s.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<torch::Tensor> outs;
  int64_t off = 0;
  for (int seq = 0; seq < c.seqs; ++seq) {
    const int64_t n = c.tree, span = c.context + n;
    torch::Tensor keys =
        b.k[seq][0].narrow(1, 0, span).to(dtype);  // (KV, L, hd)
    torch::Tensor values =
        b.v[seq][0].narrow(1, 0, span).to(dtype);  // (KV, L, hd)
    torch::Tensor qh = b.q.narrow(0, off, n)
                           .to(dtype)
                           .view({n, s.kv_heads, group, s.head_dim})
                           .permute({1, 2, 0, 3})
                           .reshape({s.kv_heads, group * n, s.head_dim});
    torch::Tensor scores = torch::matmul(qh, keys.transpose(1, 2))
                               .mul_(scale)
                               .view({s.kv_heads, group, n, span})
                               .add_(masks[seq]);
    torch::Tensor probs =
        torch::softmax(scores, -1,
                       dtype == torch::kDouble ? torch::kDouble : torch::kFloat)
            .to(dtype)
            .view({s.kv_heads, group * n, span});
    outs.push_back(torch::matmul(probs, values)
                       .view({s.kv_heads, group, n, s.head_dim})
                       .permute({2, 0, 1, 3})
                       .reshape({n, s.heads, s.head_dim}));
    off += n;
  }
  return torch::cat(outs, 0);
}

double RelError(const torch::Tensor& out, const torch::Tensor& ref) {
  torch::Tensor o = out.to(torch::kDouble);
  if (!torch::isfinite(o).all().item<bool>()) return INFINITY;
  return ((o - ref).norm() / ref.norm()).item<double>();
}

double TimeMs(const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 5; ++i) fn();
  std::vector<float> times;
  for (int i = 0; i < 30; ++i) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Check(cudaError_t e) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace
}  // namespace lookahead::kernels::cuda::dev

int main() {
  using namespace lookahead::kernels::cuda;
  using namespace lookahead::kernels::cuda::dev;
  if (!torch::cuda::is_available()) {
    std::printf("tree_attention_dev: no CUDA device\n");
    return 2;
  }
  torch::NoGradGuard no_grad;
  std::mt19937 rng(7);
  const Case cases[] = {
      {"SmolLM2-135M", {1, 9, 3, 64}, 1, 256, 1},
      {"SmolLM2-135M", {1, 9, 3, 64}, 1, 256, 16},
      {"SmolLM2-135M", {1, 9, 3, 64}, 1, 256, 64},
      {"SmolLM2-135M", {1, 9, 3, 64}, 1, 256, 256},
      {"SmolLM2-135M", {1, 9, 3, 64}, 1, 2048, 64},
      {"SmolLM2-135M", {1, 9, 3, 64}, 16, 256, 16},
      {"SmolLM2-135M", {1, 9, 3, 64}, 16, 2048, 16},
      {"Llama-3-8B", {1, 32, 8, 128}, 1, 2048, 64},
      {"Llama-3-8B", {1, 32, 8, 128}, 16, 2048, 16},
  };
  std::printf("%-13s %4s %5s %5s %5s | %9s %9s %9s | %8s %8s %8s\n", "model",
              "seqs", "ctx", "tree", "dtype", "err v1", "err v2", "err torch",
              "ms v1", "ms v2", "ms torch");
  int failures = 0;
  for (const Case& c : cases) {
    for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
      std::vector<torch::Tensor> keep;
      Batch b = MakeBatch(c, dtype, &rng, &keep);
      const DType kd =
          dtype == torch::kFloat32 ? DType::kFloat32 : DType::kBFloat16;
      const float scale =
          1.0f / std::sqrt(static_cast<float>(c.shape.head_dim));
      std::vector<torch::Tensor> masks, ref_masks;
      for (int s = 0; s < c.seqs; ++s) {
        masks.push_back(Mask(b, s, c.context, dtype));
        ref_masks.push_back(Mask(b, s, c.context, torch::kDouble));
      }
      torch::Tensor ref = TorchAttention(b, c, torch::kDouble, ref_masks);
      torch::Tensor out1 = torch::full_like(b.q, NAN),
                    out2 = torch::full_like(b.q, NAN);
      auto v1 = [&] {
        Check(LaunchTreeAttentionV1(b.batch, c.shape, 0, kd, b.q.data_ptr(),
                                    scale, out1.data_ptr(), 0));
      };
      auto v2 = [&] {
        Check(LaunchTreeAttention(b.batch, b.tiles, c.shape, 0, kd,
                                  b.q.data_ptr(), scale, out2.data_ptr(), 0));
      };
      torch::Tensor out_torch;
      auto lt = [&] { out_torch = TorchAttention(b, c, dtype, masks); };
      v1();
      v2();
      lt();
      Check(cudaDeviceSynchronize());
      const double e1 = RelError(out1, ref), e2 = RelError(out2, ref),
                   et = RelError(out_torch, ref);
      const double tol = dtype == torch::kFloat32 ? 1e-5 : 1.6e-2;
      failures += !(e1 < tol) + !(e2 < tol);
      std::printf(
          "%-13s %4d %5d %5d %5s | %9.2e %9.2e %9.2e | %8.3f %8.3f %8.3f\n",
          c.model, c.seqs, c.context, c.tree,
          dtype == torch::kFloat32 ? "f32" : "bf16", e1, e2, et, TimeMs(v1),
          TimeMs(v2), TimeMs(lt));
      std::fflush(stdout);
    }
  }
  std::printf("%d passed, %d failed\n",
              2 * 2 * static_cast<int>(std::size(cases)) - failures, failures);
  return failures == 0 ? 0 : 1;
}

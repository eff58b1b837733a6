#include "verifysvc/llama_model.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "verifysvc/threading.h"
#include "verifysvc/torch_status.h"
#include "verifysvc/tree_mask.h"
#if LOOKAHEAD_CUDA
#include "verifysvc/cuda_ops.h"
#endif

namespace lookahead {
namespace verifysvc {
namespace {

// Dequantizes tensor `name`, checks its ggml dims, and returns it as a
// contiguous torch tensor of the reversed dims (ggml [in, out] -> (out, in)).
absl::StatusOr<torch::Tensor> LoadTensor(const GgufFile& file,
                                         const std::string& name,
                                         const std::vector<int64_t>& dims,
                                         const ModelOptions& options) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor ", name, " is missing"));
  }
  if (info->dims != dims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " has ggml dims [", absl::StrJoin(info->dims, ", "),
        "], expected [", absl::StrJoin(dims, ", "), "]"));
  }
  ASSIGN_OR_RETURN(std::vector<float> values, file.DequantizeTensor(name));
  return TorchStatusOr<torch::Tensor>(absl::StrCat("loading ", name), [&] {
    std::vector<int64_t> shape(dims.rbegin(), dims.rend());
    return torch::from_blob(values.data(), shape, torch::kFloat)
        .to(options.device, options.dtype, /*non_blocking=*/false,
            /*copy=*/true)
        .contiguous();
  });
}

// x: (T, D) -> (T, D). RMSNorm computed in float32, as HF and llama.cpp do.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight,
                      float eps) {
  torch::Tensor xf = x.to(torch::kFloat);
  xf = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return xf.to(x.scalar_type()) * weight;
}

// x: (T, heads, head_dim); cos, sin: (T, R/2) with R = rope_dim.
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin, int rope_dim,
                        RopeStyle style) {
  const int64_t t = x.size(0), heads = x.size(1), head_dim = x.size(2);
  const int64_t half = rope_dim / 2;
  torch::Tensor c = cos.unsqueeze(1);  // (T, 1, R/2)
  torch::Tensor s = sin.unsqueeze(1);  // (T, 1, R/2)
  torch::Tensor rotated;               // (T, heads, R)
  torch::Tensor xr = x.narrow(2, 0, rope_dim);
  if (style == RopeStyle::kAdjacentPairs) {
    torch::Tensor pairs = xr.reshape({t, heads, half, 2});
    torch::Tensor x0 = pairs.select(3, 0), x1 = pairs.select(3, 1);
    rotated = torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1)
                  .reshape({t, heads, rope_dim});
  } else {
    torch::Tensor x1 = xr.narrow(2, 0, half), x2 = xr.narrow(2, half, half);
    rotated = torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  }
  if (rope_dim == head_dim) return rotated;
  return torch::cat({rotated, x.narrow(2, rope_dim, head_dim - rope_dim)}, -1);
}

// x: (T, in), weight: (in, out), bias: (out) or undefined -> (T, out).
torch::Tensor Linear(const torch::Tensor& x, const LinearWeight& weight,
                     kernels::PanelPool* pool, const torch::Tensor& bias = {}) {
  torch::Tensor y = weight.Apply(x, pool);
  return bias.defined() ? y + bias : y;
}

}  // namespace

void TrimDraft(DraftTree* tree, int max_nodes) {
  max_nodes = std::max(max_nodes, 0);
  if (static_cast<int>(tree->tokens.size()) <= max_nodes) return;
  tree->tokens.resize(max_nodes);
  tree->parents.resize(max_nodes);
}

SequenceInput MakeVerifyInput(KvCache* cache, int32_t root_token,
                              const DraftTree& draft) {
  SequenceInput input;
  input.cache = cache;
  input.tokens.reserve(draft.tokens.size() + 1);
  input.parents.reserve(draft.parents.size() + 1);
  input.tokens.push_back(root_token);
  input.parents.push_back(-1);
  input.tokens.insert(input.tokens.end(), draft.tokens.begin(),
                      draft.tokens.end());
  for (int32_t p : draft.parents) input.parents.push_back(p + 1);
  return input;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(
    const GgufFile& file, const ModelOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::FromGguf(file));
  if (options.max_cache_tokens < 0 || options.prefill_chunk_tokens < 1 ||
      options.matmul_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad ModelOptions: max_cache_tokens=", options.max_cache_tokens,
        " prefill_chunk_tokens=", options.prefill_chunk_tokens,
        " matmul_threads=", options.matmul_threads));
  }
  const int64_t d = c.embedding_length, v = c.vocab_size,
                f = c.feed_forward_length, qd = c.q_dim(), kvd = c.kv_dim();
  LlamaWeights w;
  ASSIGN_OR_RETURN(w.token_embd,
                   LoadTensor(file, "token_embd.weight", {d, v}, options));
  ASSIGN_OR_RETURN(w.output_norm,
                   LoadTensor(file, "output_norm.weight", {d}, options));
  // Matmul weights are input-major (in, out) LinearWeights (a tied head
  // costs a copy of the embedding: 113 MiB for SmolLM2 in fp32).
  auto linear = [&](const torch::Tensor& out_major) {
    return LinearWeight::Create(out_major.t(), options.packed_linear);
  };
  if (c.tied_output) {
    ASSIGN_OR_RETURN(w.output, linear(w.token_embd));
  } else {
    ASSIGN_OR_RETURN(torch::Tensor output,
                     LoadTensor(file, "output.weight", {d, v}, options));
    ASSIGN_OR_RETURN(w.output, linear(output));
  }
  for (int l = 0; l < c.block_count; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    LayerWeights lw;
    ASSIGN_OR_RETURN(lw.attn_norm,
                     LoadTensor(file, p + "attn_norm.weight", {d}, options));
    ASSIGN_OR_RETURN(torch::Tensor wq,
                     LoadTensor(file, p + "attn_q.weight", {d, qd}, options));
    ASSIGN_OR_RETURN(torch::Tensor wk,
                     LoadTensor(file, p + "attn_k.weight", {d, kvd}, options));
    ASSIGN_OR_RETURN(torch::Tensor wv,
                     LoadTensor(file, p + "attn_v.weight", {d, kvd}, options));
    ASSIGN_OR_RETURN(
        torch::Tensor wo,
        LoadTensor(file, p + "attn_output.weight", {qd, d}, options));
    ASSIGN_OR_RETURN(lw.ffn_norm,
                     LoadTensor(file, p + "ffn_norm.weight", {d}, options));
    ASSIGN_OR_RETURN(torch::Tensor wg,
                     LoadTensor(file, p + "ffn_gate.weight", {d, f}, options));
    ASSIGN_OR_RETURN(torch::Tensor wu,
                     LoadTensor(file, p + "ffn_up.weight", {d, f}, options));
    ASSIGN_OR_RETURN(torch::Tensor w_down,
                     LoadTensor(file, p + "ffn_down.weight", {f, d}, options));
    torch::Tensor bq, bk, bv;
    if (c.qkv_bias) {
      ASSIGN_OR_RETURN(bq, LoadTensor(file, p + "attn_q.bias", {qd}, options));
      ASSIGN_OR_RETURN(bk, LoadTensor(file, p + "attn_k.bias", {kvd}, options));
      ASSIGN_OR_RETURN(bv, LoadTensor(file, p + "attn_v.bias", {kvd}, options));
    }
    torch::Tensor qkv, gate_up;
    RETURN_IF_ERROR(TorchStatus("fusing layer weights", [&] {
      qkv = torch::cat({wq, wk, wv}, 0);
      gate_up = torch::cat({wg, wu}, 0);
      if (c.qkv_bias) lw.bqkv = torch::cat({bq, bk, bv}, 0).contiguous();
    }));
    ASSIGN_OR_RETURN(lw.wqkv, linear(qkv));
    ASSIGN_OR_RETURN(lw.wo, linear(wo));
    ASSIGN_OR_RETURN(lw.w_gate_up, linear(gate_up));
    ASSIGN_OR_RETURN(lw.w_down, linear(w_down));
    w.layers.push_back(std::move(lw));
  }
  // inv_freq[i] = base^(-2i/R) / scaling, in float64 for exact angles.
  std::vector<double> inv_freq(c.rope_dim / 2);
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    inv_freq[i] =
        std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.rope_dim);
    if (c.rope_scaling == RopeScaling::kLinear) {
      inv_freq[i] /= c.rope_scaling_factor;
    }
  }
  if (c.has_rope_freq_factors) {
    ASSIGN_OR_RETURN(std::vector<float> factors,
                     file.DequantizeTensor("rope_freqs.weight"));
    if (factors.size() != inv_freq.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_freqs.weight has ", factors.size(),
                       " elements, expected ", inv_freq.size()));
    }
    for (size_t i = 0; i < factors.size(); ++i) inv_freq[i] /= factors[i];
  }
  RETURN_IF_ERROR(TorchStatus("rope frequencies", [&] {
    w.rope_inv_freq =
        torch::tensor(inv_freq, torch::kDouble).to(options.device);
  }));
  const int threads =
      options.matmul_threads > 0 ? options.matmul_threads : AvailableCores();
  return std::unique_ptr<LlamaModel>(
      new LlamaModel(std::move(c), options, std::move(w),
                     std::make_unique<kernels::PanelPool>(threads)));
}

absl::StatusOr<std::unique_ptr<KvCache>> LlamaModel::NewCache(
    int capacity) const {
  if (capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache capacity must be >= 0, got ", capacity));
  }
  if (capacity == 0) {
    capacity = options_.max_cache_tokens > 0
                   ? options_.max_cache_tokens
                   : std::min(config_.context_length, 2048);
  }
  KvCacheShape shape;
  shape.layers = config_.block_count;
  shape.kv_heads = config_.head_count_kv;
  shape.head_dim = config_.head_dim;
  shape.capacity = capacity;
  return KvCache::Create(
      shape,
      torch::TensorOptions().dtype(options_.dtype).device(options_.device));
}

absl::Status LlamaModel::ValidateBatch(
    absl::Span<const SequenceInput> batch) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  std::vector<const KvCache*> caches;  // batches are small: linear scan
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceInput& in = batch[s];
    const std::string where = absl::StrCat("batch[", s, "]: ");
    if (in.cache == nullptr) {
      return absl::InvalidArgumentError(where + "null KV cache");
    }
    if (std::find(caches.begin(), caches.end(), in.cache) != caches.end()) {
      return absl::InvalidArgumentError(
          where + "KV cache is shared with an earlier input");
    }
    caches.push_back(in.cache);
    const KvCacheShape& shape = in.cache->shape();
    if (shape.layers != config_.block_count ||
        shape.kv_heads != config_.head_count_kv ||
        shape.head_dim != config_.head_dim ||
        in.cache->k().scalar_type() != options_.dtype ||
        in.cache->k().device() != options_.device) {
      return absl::InvalidArgumentError(
          where + "KV cache was not made for this model (use NewCache)");
    }
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(where + "no tokens");
    }
    if (in.parents.size() != in.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, in.tokens.size(), " tokens but ",
                       in.parents.size(), " parents"));
    }
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      if (in.tokens[i] < 0 || in.tokens[i] >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "token id ", in.tokens[i], " at index ", i,
            " is outside the vocabulary [0, ", config_.vocab_size, ")"));
      }
    }
    absl::StatusOr<TreeLayout> layout = TreeLayout::Build(in.parents);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, layout.status().message()));
    }
    const int64_t needed =
        static_cast<int64_t>(in.cache->Length()) + in.tokens.size();
    if (needed > in.cache->Capacity()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          where, "KV cache overflow: ", in.cache->Length(), " committed + ",
          in.tokens.size(), " new tokens > capacity ", in.cache->Capacity()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<torch::Tensor>> LlamaModel::Forward(
    absl::Span<const SequenceInput> batch) const {
  RETURN_IF_ERROR(ValidateBatch(batch));
  // The pass overwrites the provisional slots, so an older tree is void.
  for (const SequenceInput& in : batch) in.cache->DiscardPending();
  ASSIGN_OR_RETURN(
      std::vector<torch::Tensor> logits,
      (TorchStatusOr<std::vector<torch::Tensor>>("LlamaModel::Forward", [&] {
        auto result = ForwardUnchecked(batch);
        // Returns when the logits exist, so step timings mean the same
        // on a GPU as on the CPU (acceptance reads them next anyway).
        if (options_.device.is_cuda()) {
          torch::cuda::synchronize(options_.device.index());
        }
        return result;
      })));
  for (const SequenceInput& in : batch) {
    RETURN_IF_ERROR(in.cache->BeginTree(in.parents));
  }
  return logits;
}

absl::StatusOr<std::vector<torch::Tensor>> LlamaModel::ForwardUnchecked(
    absl::Span<const SequenceInput> batch) const {
  c10::InferenceMode inference_mode;
  const ModelConfig& c = config_;
  const torch::Device device = options_.device;
  const torch::Dtype dtype = options_.dtype;
  const int64_t num_seqs = static_cast<int64_t>(batch.size());
  const int64_t heads = c.head_count, kv_heads = c.head_count_kv,
                head_dim = c.head_dim, group = heads / kv_heads, qd = c.q_dim(),
                kvd = c.kv_dim(), ffn = c.feed_forward_length;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
#if LOOKAHEAD_CUDA
  const bool use_kernels = device.is_cuda() && options_.cuda_kernels &&
                           cuda_ops::SupportsTreeAttention(c, dtype);
#else
  const bool use_kernels = false;
#endif

  // Pack all sequences' tokens; positions = cache length + tree depth.
  std::vector<int64_t> offsets(num_seqs + 1, 0);
  std::vector<int64_t> token_ids, positions, logit_rows;
  std::vector<torch::Tensor> masks(num_seqs);  // (n, len + n) additive
  std::vector<TreeLayout> layouts;             // per sequence
  layouts.reserve(num_seqs);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SequenceInput& in = batch[s];
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    const int64_t len = in.cache->Length();
    offsets[s + 1] = offsets[s] + n;
    layouts.push_back(*TreeLayout::Build(in.parents));  // validated
    const TreeLayout& layout = layouts.back();
    for (int64_t i = 0; i < n; ++i) {
      token_ids.push_back(in.tokens[i]);
      positions.push_back(len + layout.depths()[i]);
    }
    if (in.last_logits_only) {
      logit_rows.push_back(offsets[s + 1] - 1);
    } else {
      for (int64_t i = 0; i < n; ++i) logit_rows.push_back(offsets[s] + i);
    }
    if (n > 1 && !use_kernels) {
      // mask: (n, len + n); 0 = may attend, -inf = may not.
      torch::Tensor allowed =
          torch::from_blob(const_cast<uint8_t*>(layout.dense().data()), {n, n},
                           torch::kUInt8)
              .to(torch::kBool);
      torch::Tensor tree_part =
          torch::zeros({n, n}, torch::kFloat)
              .masked_fill(allowed.logical_not(),
                           -std::numeric_limits<float>::infinity());
      masks[s] =
          torch::cat({torch::zeros({n, len}, torch::kFloat), tree_part}, 1)
              .to(device, dtype);
    }
  }
  const int64_t total = offsets[num_seqs];
  torch::Tensor ids = torch::tensor(token_ids, torch::kLong).to(device);
  // angles: (T, R/2), float64 so that large positions stay exact. The
  // kernels compute their own from the same positions.
  torch::Tensor cos, sin;  // (T, R/2)
  if (!use_kernels) {
    torch::Tensor angles =
        torch::tensor(positions, torch::kDouble).to(device).unsqueeze(1) *
        weights_.rope_inv_freq.unsqueeze(0);
    cos = angles.cos().to(dtype);
    sin = angles.sin().to(dtype);
  }

#if LOOKAHEAD_CUDA
  // The batch's offsets, caches and masks on the device, for every layer.
  std::optional<cuda_ops::DeviceTreeBatch> device_batch;
  if (use_kernels) {
    std::vector<cuda_ops::DeviceTreeBatch::Cache> caches;
    for (const SequenceInput& in : batch) {
      caches.push_back({&in.cache->k(), &in.cache->v(), in.cache->Length()});
    }
    ASSIGN_OR_RETURN(device_batch,
                     cuda_ops::DeviceTreeBatch::Build(c, caches, layouts));
  }
#endif

  torch::Tensor x = weights_.token_embd.index_select(0, ids);  // (T, D)
  for (int l = 0; l < c.block_count; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    torch::Tensor h = RmsNorm(x, lw.attn_norm, c.rms_norm_eps);
    torch::Tensor qkv =
        Linear(h, lw.wqkv, pool_.get(), lw.bqkv);  // (T, qd + 2 kvd)
    torch::Tensor attn;                            // (T, H*hd)
#if LOOKAHEAD_CUDA
    if (use_kernels) {
      ASSIGN_OR_RETURN(
          torch::Tensor q_rot,
          cuda_ops::RopeAppend(*device_batch, l, qkv, weights_.rope_inv_freq,
                               c.rope_dim, c.rope_style));
      ASSIGN_OR_RETURN(attn,
                       cuda_ops::TreeAttention(*device_batch, l, q_rot,
                                               static_cast<float>(scale)));
    }
#endif
    if (!use_kernels) {
      torch::Tensor q =
          ApplyRope(qkv.narrow(1, 0, qd).view({total, heads, head_dim}), cos,
                    sin, c.rope_dim, c.rope_style);
      // q: (T, H, hd); k, v: (T, KV, hd)
      torch::Tensor k =
          ApplyRope(qkv.narrow(1, qd, kvd).view({total, kv_heads, head_dim}),
                    cos, sin, c.rope_dim, c.rope_style);
      torch::Tensor v =
          qkv.narrow(1, qd + kvd, kvd).view({total, kv_heads, head_dim});
      attn = torch::empty({total, qd}, x.options());
      for (int64_t s = 0; s < num_seqs; ++s) {
        KvCache* cache = batch[s].cache;
        const int64_t off = offsets[s], n = offsets[s + 1] - offsets[s];
        const int64_t len = cache->Length(), span = len + n;
        torch::Tensor k_layer = cache->k_layer(l);  // (KV, cap, hd)
        torch::Tensor v_layer = cache->v_layer(l);  // (KV, cap, hd)
        k_layer.narrow(1, len, n).copy_(k.narrow(0, off, n).transpose(0, 1));
        v_layer.narrow(1, len, n).copy_(v.narrow(0, off, n).transpose(0, 1));
        torch::Tensor keys = k_layer.narrow(1, 0, span);    // (KV, L, hd)
        torch::Tensor values = v_layer.narrow(1, 0, span);  // (KV, L, hd)
        // qh: (KV, G*n, hd); query head h uses KV head h / G.
        torch::Tensor qh = q.narrow(0, off, n)
                               .view({n, kv_heads, group, head_dim})
                               .permute({1, 2, 0, 3})
                               .reshape({kv_heads, group * n, head_dim});
        torch::Tensor scores = torch::matmul(qh, keys.transpose(1, 2))
                                   .mul_(scale);  // (KV, G*n, L)
        if (masks[s].defined()) {
          scores = scores.view({kv_heads, group, n, span}).add_(masks[s]);
        }
        torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat)
                                  .to(dtype)
                                  .view({kv_heads, group * n, span});
        torch::Tensor out = torch::matmul(probs, values);  // (KV, G*n, hd)
        attn.narrow(0, off, n).copy_(out.view({kv_heads, group, n, head_dim})
                                         .permute({2, 0, 1, 3})
                                         .reshape({n, qd}));
      }
    }
    x = x + Linear(attn, lw.wo, pool_.get());
    h = RmsNorm(x, lw.ffn_norm, c.rms_norm_eps);
    torch::Tensor gate_up = Linear(h, lw.w_gate_up, pool_.get());  // (T, 2F)
    torch::Tensor act =
        torch::silu(gate_up.narrow(1, 0, ffn)) * gate_up.narrow(1, ffn, ffn);
    x = x + Linear(act, lw.w_down, pool_.get());
  }
  torch::Tensor rows = torch::tensor(logit_rows, torch::kLong).to(device);
  torch::Tensor h =
      RmsNorm(x.index_select(0, rows), weights_.output_norm, c.rms_norm_eps);
  torch::Tensor logits =
      Linear(h, weights_.output, pool_.get()).to(torch::kFloat);  // (rows, V)
  std::vector<torch::Tensor> result;
  int64_t row = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t count =
        batch[s].last_logits_only ? 1 : offsets[s + 1] - offsets[s];
    result.push_back(logits.narrow(0, row, count));
    row += count;
  }
  return result;
}

absl::StatusOr<torch::Tensor> LlamaModel::Prefill(
    KvCache* cache, absl::Span<const int32_t> tokens) const {
  if (tokens.empty()) return absl::InvalidArgumentError("empty prompt");
  if (cache == nullptr) return absl::InvalidArgumentError("null KV cache");
  torch::Tensor last;
  for (size_t start = 0; start < tokens.size();
       start += options_.prefill_chunk_tokens) {
    const size_t n =
        std::min<size_t>(options_.prefill_chunk_tokens, tokens.size() - start);
    SequenceInput in;
    in.cache = cache;
    in.tokens.assign(tokens.begin() + start, tokens.begin() + start + n);
    in.last_logits_only = true;
    std::vector<int32_t> path(n);
    for (size_t i = 0; i < n; ++i) {
      in.parents.push_back(static_cast<int32_t>(i) - 1);
      path[i] = static_cast<int32_t>(i);
    }
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> logits,
                     Forward(absl::MakeConstSpan(&in, 1)));
    RETURN_IF_ERROR(cache->CommitPath(path));
    last = logits[0][0];
  }
  return last;
}

absl::StatusOr<torch::Tensor> LlamaModel::VerifyTree(
    KvCache* cache, int32_t root_token, const DraftTree& draft) const {
  if (draft.parents.size() != draft.tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft has ", draft.tokens.size(), " tokens but ",
                     draft.parents.size(), " parents"));
  }
  for (size_t j = 0; j < draft.parents.size(); ++j) {
    if (draft.parents[j] < -1 || draft.parents[j] >= static_cast<int32_t>(j)) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft node ", j, " has parent ", draft.parents[j],
                       "; must be -1 (child of the root) or in [0, ", j, ")"));
    }
  }
  SequenceInput in = MakeVerifyInput(cache, root_token, draft);
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> logits,
                   Forward(absl::MakeConstSpan(&in, 1)));
  return logits[0];
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::VerifyAndAccept(
    KvCache* cache, int32_t root_token, const DraftTree& draft,
    const SamplingParams& params) const {
  RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (cache == nullptr) return absl::InvalidArgumentError("null KV cache");
  const int64_t root_position = cache->Length();
  ASSIGN_OR_RETURN(torch::Tensor logits, VerifyTree(cache, root_token, draft));
  SequenceInput in = MakeVerifyInput(cache, root_token, draft);
  ASSIGN_OR_RETURN(
      AcceptResult accepted,
      AcceptLongestPath(in.tokens, in.parents, logits, params, root_position));
  RETURN_IF_ERROR(cache->CommitPath(accepted.path));
  return std::move(accepted.tokens);
}

}  // namespace verifysvc
}  // namespace lookahead

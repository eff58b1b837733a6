#include "engine/model/llama_model.h"

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
#include "engine/model/threading.h"
#include "engine/model/torch_status.h"
#include "engine/model/tree_mask.h"

namespace lookahead::engine {
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

// x: (T, in), weight: (in, out), bias: (out) or undefined -> (T, out).
torch::Tensor Linear(const torch::Tensor& x, const LinearWeight& weight,
                     kernels::PanelPool* pool, const torch::Tensor& bias = {}) {
  torch::Tensor y = weight.Apply(x, pool);
  return bias.defined() ? y + bias : y;
}

// The LibTorch weights (WeightFormat::kF32), all but rope_inv_freq.
absl::Status LoadTorchWeights(const GgufFile& file, const ModelConfig& c,
                              const ModelOptions& options, LlamaWeights* out) {
  const int64_t d = c.embedding_length, v = c.vocab_size,
                f = c.feed_forward_length, qd = c.q_dim(), kvd = c.kv_dim();
  LlamaWeights& w = *out;
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
    const std::string p = absl::StrCat(
        "blk.", options.keep_layers.empty() ? l : options.keep_layers[l], ".");
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
  return absl::OkStatus();
}

}  // namespace

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
  if (!options.keep_layers.empty()) {
    for (size_t i = 0; i < options.keep_layers.size(); ++i) {
      const int layer = options.keep_layers[i];
      if (layer < 0 || layer >= c.block_count ||
          (i > 0 && layer <= options.keep_layers[i - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad ModelOptions: keep_layers[", i, "] = ", layer,
                         "; want strictly increasing layer indices in [0, ",
                         c.block_count, ")"));
      }
    }
    // From here on the model IS the kept layers (caches, validation, loops).
    c.block_count = static_cast<int>(options.keep_layers.size());
  }
  std::unique_ptr<NativeForward> native;
  LlamaWeights w;
  ASSIGN_OR_RETURN(std::vector<double> inv_freq, RopeInvFreq(file, c));
  const bool native_path = options.weights == WeightFormat::kNative &&
                           options.device == torch::kCPU &&
                           options.dtype == torch::kFloat32;
  if (options.kv_f16 && !native_path) {
    return absl::InvalidArgumentError(
        "a float16 KV cache needs native weights on the CPU in float32 "
        "(--weights=native, no CUDA device, float32 dtype)");
  }
  if (options.activations == LinearActivations::kInt8 && !native_path) {
    return absl::InvalidArgumentError(
        "int8 activations need native weights on the CPU in float32 "
        "(--weights=native, no CUDA device, float32 dtype)");
  }
  if (options.head_tokens < 0 || options.head_tokens > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head tokens ", options.head_tokens, ": want 0 (every id) to ",
        c.vocab_size, " (the vocabulary)"));
  }
  if (options.head_tokens > 0 && !native_path) {
    return absl::InvalidArgumentError(
        "a truncated LM head (head tokens) needs native weights on the CPU "
        "in float32 (--weights=native, no CUDA device, float32 dtype)");
  }
  if (native_path) {
    ASSIGN_OR_RETURN(
        native, NativeForward::Load(file, c, inv_freq, options.keep_layers,
                                    options.activations, options.head_tokens));
  } else {
    RETURN_IF_ERROR(LoadTorchWeights(file, c, options, &w));
  }
  RETURN_IF_ERROR(TorchStatus("rope frequencies", [&] {
    w.rope_inv_freq =
        torch::tensor(inv_freq, torch::kDouble).to(options.device);
  }));
  const int threads =
      options.matmul_threads > 0 ? options.matmul_threads : AvailableCores();
  AttentionOptions attention;
  attention.dtype = options.dtype;
  attention.device = options.device;
  attention.cuda_kernels = options.cuda_kernels;
  std::unique_ptr<AttentionBackend> backend =
      ChooseAttention(c, w.rope_inv_freq, attention);
  return std::unique_ptr<LlamaModel>(new LlamaModel(
      std::move(c), options, std::move(w), std::move(native),
      std::make_unique<kernels::PanelPool>(threads, options.pin_threads),
      std::move(backend)));
}

std::string WeightFormatName(WeightFormat format) {
  return format == WeightFormat::kNative ? "native" : "f32";
}

absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name) {
  if (name == "native") return WeightFormat::kNative;
  if (name == "f32") return WeightFormat::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weight format \"", name, "\"; use native or f32"));
}

std::string LlamaModel::DescribeWeights() const {
  if (native_) return native_->Describe();
  const char* dtype = options_.dtype == torch::kBFloat16 ? "bfloat16"
                      : options_.dtype == torch::kHalf   ? "float16"
                                                         : "float32";
  return absl::StrCat("f32: ", dtype, " on ", options_.device.str(),
                      " through LibTorch");
}

absl::Status LlamaModel::GrowCache(std::unique_ptr<KvCache>* cache,
                                   int capacity) const {
  const int length = *cache == nullptr ? 0 : (*cache)->Length();
  if (capacity < length) {
    return absl::InvalidArgumentError(absl::StrCat("cache capacity ", capacity,
                                                   " is below the ", length,
                                                   " committed tokens"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> grown, NewCache(capacity));
  if (length > 0) {
    RETURN_IF_ERROR(grown->AppendCommitted((*cache)->k().narrow(2, 0, length),
                                           (*cache)->v().narrow(2, 0, length)));
  }
  *cache = std::move(grown);
  return absl::OkStatus();
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
      torch::TensorOptions().dtype(KvDtype()).device(options_.device));
}

absl::Status LlamaModel::ValidateBatch(
    absl::Span<const SequenceRows> batch) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  std::vector<const KvCache*> caches;  // batches are small: linear scan
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& in = batch[s];
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
        in.cache->k().scalar_type() != KvDtype() ||
        in.cache->k().device() != options_.device) {
      return absl::InvalidArgumentError(
          where + "KV cache was not made for this model (use NewCache)");
    }
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(where + "no tokens");
    }
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      if (in.tokens[i] < 0 || in.tokens[i] >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "token id ", in.tokens[i], " at index ", i,
            " is outside the vocabulary [0, ", config_.vocab_size, ")"));
      }
    }
    absl::Status rows = ValidateRows(in, in.cache->Length());
    if (!rows.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, rows.message()));
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
    absl::Span<const TreeInput> batch) const {
  std::vector<SequenceRows> rows;
  rows.reserve(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    absl::StatusOr<SequenceRows> r = RowsFromTree(batch[s]);
    if (!r.ok()) {
      return absl::Status(
          r.status().code(),
          absl::StrCat("batch[", s, "]: ", r.status().message()));
    }
    rows.push_back(*std::move(r));
  }
  if (rows.empty()) return absl::InvalidArgumentError("empty batch");
  return ForwardRows(rows);
}

absl::StatusOr<std::vector<torch::Tensor>> LlamaModel::ForwardRows(
    absl::Span<const SequenceRows> batch) const {
  RETURN_IF_ERROR(ValidateBatch(batch));
  // The pass overwrites the provisional slots, so an older tree is void.
  for (const SequenceRows& in : batch) in.cache->DiscardPending();
  ASSIGN_OR_RETURN(
      std::vector<torch::Tensor> logits,
      (TorchStatusOr<std::vector<torch::Tensor>>("LlamaModel::Forward", [&] {
        auto result = native_ ? native_->Forward(batch, pool_.get())
                              : ForwardUnchecked(batch);
        // The scheduler's bookkeeping and the stream writes come next, on
        // this thread: the pool's workers need not hold a core meanwhile.
        if (pool_ != nullptr) pool_->Park();
        // Returns when the logits exist, so step timings mean the same
        // on a GPU as on the CPU (acceptance reads them next anyway).
        if (options_.device.is_cuda()) {
          torch::cuda::synchronize(options_.device.index());
        }
        return result;
      })));
  for (const SequenceRows& in : batch) {
    // Only the kept rows' tree can be committed; scratch rows are void.
    if (in.kept_rows() > 0) RETURN_IF_ERROR(in.cache->BeginTree(in.parents));
  }
  return logits;
}

absl::StatusOr<std::vector<torch::Tensor>> LlamaModel::ForwardUnchecked(
    absl::Span<const SequenceRows> batch) const {
  c10::InferenceMode inference_mode;
  const ModelConfig& c = config_;
  const int64_t ffn = c.feed_forward_length;

  // Pack every sequence's rows; pick the rows whose logits are returned.
  std::vector<int64_t> token_ids, logit_rows, counts;
  for (const SequenceRows& in : batch) {
    const int64_t first = static_cast<int64_t>(token_ids.size());
    token_ids.insert(token_ids.end(), in.tokens.begin(), in.tokens.end());
    const int64_t n = in.size();
    counts.push_back(in.last_logits_only ? 1 : n);
    for (int64_t i = in.last_logits_only ? n - 1 : 0; i < n; ++i) {
      logit_rows.push_back(first + i);
    }
  }
  torch::Tensor ids =
      torch::tensor(token_ids, torch::kLong).to(options_.device);
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionPass> attention,
                   attention_->Prepare(batch));

  torch::Tensor x = weights_.token_embd.index_select(0, ids);  // (T, D)
  for (int l = 0; l < c.block_count; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    // Attention block: x += wo(attention(rope(qkv(norm(x))))).
    torch::Tensor h = RmsNorm(x, lw.attn_norm, c.rms_norm_eps);
    torch::Tensor qkv =
        Linear(h, lw.wqkv, pool_.get(), lw.bqkv);  // (T, qd + 2 kvd)
    ASSIGN_OR_RETURN(torch::Tensor attn,
                     attention->Attend(l, qkv));  // (T, H*hd)
    x = x + Linear(attn, lw.wo, pool_.get());
    // Feed-forward block: x += down(silu(gate) * up), on norm(x).
    h = RmsNorm(x, lw.ffn_norm, c.rms_norm_eps);
    torch::Tensor gate_up = Linear(h, lw.w_gate_up, pool_.get());  // (T, 2F)
    torch::Tensor act =
        torch::silu(gate_up.narrow(1, 0, ffn)) * gate_up.narrow(1, ffn, ffn);
    x = x + Linear(act, lw.w_down, pool_.get());
  }
  // Head: logits of the picked rows, float32.
  torch::Tensor rows =
      torch::tensor(logit_rows, torch::kLong).to(options_.device);
  torch::Tensor h =
      RmsNorm(x.index_select(0, rows), weights_.output_norm, c.rms_norm_eps);
  torch::Tensor logits =
      Linear(h, weights_.output, pool_.get()).to(torch::kFloat);  // (rows, V)
  std::vector<torch::Tensor> result;
  int64_t row = 0;
  for (int64_t count : counts) {
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
    TreeInput in;
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
  TreeInput in = MakeVerifyInput(cache, root_token, draft);
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
  TreeInput in = MakeVerifyInput(cache, root_token, draft);
  ASSIGN_OR_RETURN(
      AcceptResult accepted,
      AcceptLongestPath(in.tokens, in.parents, logits, params, root_position));
  RETURN_IF_ERROR(cache->CommitPath(accepted.path));
  return std::move(accepted.tokens);
}

}  // namespace lookahead::engine

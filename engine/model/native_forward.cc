#include "engine/model/native_forward.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/gguf/dequant.h"
#include "engine/model/weight_arena.h"
#include "kernels/cpu/decoder_ops.h"

namespace lookahead::engine {
namespace {

// A 1-D float tensor of `n` values (norm weights, biases).
absl::StatusOr<std::vector<float>> LoadVector(const GgufFile& file,
                                              const std::string& name,
                                              int64_t n) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor ", name, " is missing"));
  }
  if (info->dims != std::vector<int64_t>{n}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " has ", info->num_elements, " elements in ",
        info->dims.size(), " dims, expected [", n, "]"));
  }
  std::vector<float> values(n);
  RETURN_IF_ERROR(file.DequantizeTensor(*info, absl::MakeSpan(values)));
  return values;
}

// Attention splits a query's keys every this many (by key index, so a
// query's result depends on its keys alone): a long context keeps every
// thread busy even for one row.
constexpr int32_t kKeyBlock = 256;

// Chunks of `n` items for `pool`: several per thread.
int64_t ChunkOf(int64_t n, const kernels::PanelPool* pool) {
  const int64_t threads = pool == nullptr ? 1 : pool->threads();
  return std::max<int64_t>(1, n / (4 * threads));
}

// fn(begin, end) over [0, n) on `pool`, or inline when that is one chunk.
// Passed by reference: a std::function of a std::reference_wrapper does not
// allocate, so a pass makes no heap allocation here.
template <typename F>
void RunOn(kernels::PanelPool* pool, int64_t n, int64_t chunk, const F& fn) {
  if (pool == nullptr || pool->threads() == 1 || n <= chunk) {
    fn(0, n);
  } else {
    pool->Run(n, chunk, std::cref(fn));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NativeForward>> NativeForward::Load(
    const GgufFile& file, const ModelConfig& c,
    std::vector<double> rope_inv_freq, absl::Span<const int> file_layers,
    LinearActivations activations, int64_t head_tokens) {
  std::unique_ptr<NativeForward> f(
      new NativeForward(c, std::move(rope_inv_freq)));
  const int64_t d = c.embedding_length, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t v = c.vocab_size, ffn = c.feed_forward_length;
  // Every weight in one huge-page mapping: no packed form outgrows the file
  // by more than Q8_0's 1.06x, and the tied output may be a second copy.
  f->arena_ = WeightArena::Create(2 * static_cast<int64_t>(file.file_size()));
  WeightArena* const a = f->arena_.get();
  ASSIGN_OR_RETURN(f->token_embd_,
                   NativeLinear::Create(file, {{"token_embd.weight", v}}, d,
                                        LinearActivations::kF32, a));
  ASSIGN_OR_RETURN(f->output_norm_, LoadVector(file, "output_norm.weight", d));
  const bool whole_head = head_tokens <= 0 || head_tokens >= v;
  if (c.tied_output && activations == LinearActivations::kF32 && whole_head) {
    f->output_ = f->token_embd_;  // shares the bytes
  } else {
    ASSIGN_OR_RETURN(
        f->output_, NativeLinear::Create(
                        file,
                        {{c.tied_output ? "token_embd.weight" : "output.weight",
                          v, whole_head ? -1 : head_tokens}},
                        d, activations, a));
  }
  for (int l = 0; l < c.block_count; ++l) {
    const std::string p =
        absl::StrCat("blk.", file_layers.empty() ? l : file_layers[l], ".");
    NativeLayer layer;
    ASSIGN_OR_RETURN(layer.attn_norm,
                     LoadVector(file, p + "attn_norm.weight", d));
    ASSIGN_OR_RETURN(layer.wqkv,
                     NativeLinear::Create(file,
                                          {{p + "attn_q.weight", qd},
                                           {p + "attn_k.weight", kvd},
                                           {p + "attn_v.weight", kvd}},
                                          d, activations, a));
    ASSIGN_OR_RETURN(layer.wo,
                     NativeLinear::Create(
                         file, {{p + "attn_output.weight", d}}, qd,
                         activations, a));
    ASSIGN_OR_RETURN(layer.ffn_norm,
                     LoadVector(file, p + "ffn_norm.weight", d));
    ASSIGN_OR_RETURN(
        layer.w_gate_up,
        NativeLinear::Create(
            file, {{p + "ffn_gate.weight", ffn}, {p + "ffn_up.weight", ffn}},
            d, activations, a));
    ASSIGN_OR_RETURN(
        layer.w_down,
        NativeLinear::Create(file, {{p + "ffn_down.weight", d}}, ffn,
                             activations, a));
    if (c.qkv_bias) {
      for (const auto& [name, n] :
           std::vector<std::pair<std::string, int64_t>>{{"attn_q.bias", qd},
                                                        {"attn_k.bias", kvd},
                                                        {"attn_v.bias", kvd}}) {
        ASSIGN_OR_RETURN(std::vector<float> b, LoadVector(file, p + name, n));
        layer.bqkv.insert(layer.bqkv.end(), b.begin(), b.end());
      }
    }
    f->layers_.push_back(std::move(layer));
  }
  return f;
}

int64_t NativeForward::weight_bytes() const {
  const bool shared_head = config_.tied_output && !output_.int8() &&
                           output_.out() == config_.vocab_size;
  int64_t total = token_embd_.bytes() + (shared_head ? 0 : output_.bytes()) +
                  4 * static_cast<int64_t>(output_norm_.size());
  for (const NativeLayer& l : layers_) {
    total += l.wqkv.bytes() + l.wo.bytes() + l.w_gate_up.bytes() +
             l.w_down.bytes() +
             4 * static_cast<int64_t>(l.attn_norm.size() + l.ffn_norm.size() +
                                      l.bqkv.size());
  }
  return total;
}

std::string NativeForward::Describe() const {
  return absl::StrCat(
      "native ", layers_.empty() ? "" : layers_[0].wqkv.TypeName(),
      " (embedding ", token_embd_.TypeName(), "), ", weight_bytes() / (1 << 20),
      " MiB, kernels ",
      isa_ == kernels::QuantIsa::kAvx512 ? "AVX-512"
      : isa_ == kernels::QuantIsa::kAvx2 ? "AVX2"
                                         : "scalar",
      !output_.int8()
          ? ""
          : absl::StrCat(", int8 activations (",
                         kernels::Int8IsaName(kernels::BestInt8Isa()), ")"),
      output_.out() == config_.vocab_size
          ? ""
          : absl::StrCat(", LM head ", output_.out(), " of ",
                         config_.vocab_size, " ids"),
      ", ", HugePageMiB(), " MiB in 2 MiB pages");
}

int64_t NativeForward::HugePageMiB() const {
  return arena_ == nullptr ? 0 : arena_->HugePageBytes() >> 20;
}

std::unique_ptr<NativeForward::Workspace> NativeForward::TakeWorkspace() const {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return std::make_unique<Workspace>();
  std::unique_ptr<Workspace> ws = std::move(free_.back());
  free_.pop_back();
  return ws;
}

void NativeForward::ReturnWorkspace(std::unique_ptr<Workspace> ws) const {
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(ws));
}

void NativeForward::Attend(int layer, absl::Span<const SequenceRows> batch,
                           Workspace* ws, kernels::PanelPool* pool) const {
  const ModelConfig& c = config_;
  const int heads = c.head_count, kv_heads = c.head_count_kv, hd = c.head_dim,
            group = heads / kv_heads;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), width = qd + 2 * kvd;
  const int64_t rows = static_cast<int64_t>(ws->row_seq.size());
  const int half = c.rope_dim / 2;
  const bool pairs = c.rope_style == RopeStyle::kAdjacentPairs;
  // RoPE on q and k, then every row's K/V into its slot: all before any
  // attention reads them.
  for (int64_t r = 0; r < rows; ++r) {
    float* q = ws->qkv.data() + r * width;
    kernels::Rope(q, heads + kv_heads, hd, c.rope_dim, pairs,
                  ws->cos.data() + r * half, ws->sin.data() + r * half);
    const int s = ws->row_seq[r];
    const int64_t cap = ws->seq_capacity[s];
    const int64_t slot = batch[s].cache->Length() + (r - ws->seq_first[s]);
    const int64_t layer_at = static_cast<int64_t>(layer) * kv_heads * cap * hd;
    for (int g = 0; g < kv_heads; ++g) {
      const int64_t at = layer_at + (g * cap + slot) * hd;
      const float* k = q + qd + g * hd;
      const float* v = q + qd + kvd + g * hd;
      if (ws->seq_k_half[s] != nullptr) {  // rounded to float16 here, once
        for (int i = 0; i < hd; ++i) {
          ws->seq_k_half[s][at + i] = FloatToHalf(k[i]);
          ws->seq_v_half[s][at + i] = FloatToHalf(v[i]);
        }
      } else {
        std::copy_n(k, hd, ws->seq_k[s] + at);
        std::copy_n(v, hd, ws->seq_v[s] + at);
      }
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(double{1.0} * hd));
  // Each unit: one KV head's query heads over one block of a row's keys
  // (the block's K and V are read from memory once for the group).
  const auto attend = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<kernels::AttentionPartial> partials;
    if (scores.size() < static_cast<size_t>(group) * kKeyBlock) {
      scores.resize(static_cast<size_t>(group) * kKeyBlock);
    }
    partials.resize(group);
    for (int64_t u = begin; u < end; ++u) {
      const Workspace::Unit unit = ws->units[u];
      const int64_t r = unit.row;
      const int s = ws->row_seq[r];
      const int64_t head_offset =
          ((static_cast<int64_t>(layer) * kv_heads + unit.kv_head) *
           ws->seq_capacity[s]) *
          hd;
      kernels::AttentionKeys keys;
      if (ws->seq_k_half[s] != nullptr) {
        keys.k_half = ws->seq_k_half[s] + head_offset;
        keys.v_half = ws->seq_v_half[s] + head_offset;
      } else {
        keys.k = ws->seq_k[s] + head_offset;
        keys.v = ws->seq_v[s] + head_offset;
      }
      keys.prefix = ws->row_prefix[r];
      keys.extra = ws->extra.data() + ws->extra_begin[r];
      keys.n_extra = ws->extra_begin[r + 1] - ws->extra_begin[r];
      const int32_t key_begin = unit.block * kKeyBlock;
      const int32_t key_end = std::min(keys.size(), key_begin + kKeyBlock);
      const int first = unit.kv_head * group;
      for (int g = 0; g < group; ++g) {
        const int64_t p = (ws->row_block[r] + unit.block) * heads + first + g;
        partials[g] = {&ws->part_out[p * hd], &ws->part_max[p],
                       &ws->part_sum[p]};
      }
      kernels::AttendBlock(isa_, ws->qkv.data() + r * width + first * hd, group,
                           hd, keys, key_begin, key_end, scale, scores.data(),
                           partials.data());
    }
  };
  const int64_t units = static_cast<int64_t>(ws->units.size());
  RunOn(pool, units, ChunkOf(units, pool), attend);
  // Merge each query head's blocks in order.
  const auto combine = [&](int64_t begin, int64_t end) {
    thread_local std::vector<kernels::AttentionPartial> parts;
    for (int64_t r = begin; r < end; ++r) {
      const int32_t blocks = ws->row_block[r + 1] - ws->row_block[r];
      parts.resize(blocks);
      for (int h = 0; h < heads; ++h) {
        for (int32_t b = 0; b < blocks; ++b) {
          const int64_t p = (ws->row_block[r] + b) * heads + h;
          parts[b] = {&ws->part_out[p * hd], &ws->part_max[p],
                      &ws->part_sum[p]};
        }
        kernels::CombineBlocks(isa_, parts.data(), blocks, hd,
                               ws->attn.data() + r * qd + h * hd);
      }
    }
  };
  RunOn(pool, rows, std::max<int64_t>(8, ChunkOf(rows, pool)), combine);
}

std::vector<torch::Tensor> NativeForward::Forward(
    absl::Span<const SequenceRows> batch, kernels::PanelPool* pool) const {
  const ModelConfig& c = config_;
  const int64_t d = c.embedding_length, qd = c.q_dim(), kvd = c.kv_dim(),
                ffn = c.feed_forward_length, width = qd + 2 * kvd;
  const int half = c.rope_dim / 2;
  std::unique_ptr<Workspace> ws = TakeWorkspace();

  // The rows, packed sequence after sequence; what each one sees; its
  // rotation; which rows get logits.
  ws->row_seq.clear();
  ws->row_prefix.clear();
  ws->extra.clear();
  ws->extra_begin.assign(1, 0);
  ws->seq_first.clear();
  ws->seq_k.clear();
  ws->seq_v.clear();
  ws->seq_k_half.clear();
  ws->seq_v_half.clear();
  ws->seq_capacity.clear();
  ws->cos.clear();
  ws->sin.clear();
  std::vector<int64_t>& logit_rows = ws->logit_rows;
  logit_rows.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& in = batch[s];
    const int64_t first = static_cast<int64_t>(ws->row_seq.size());
    const int32_t len = in.cache->Length();
    ws->seq_first.push_back(first);
    const bool f16 = in.cache->k().scalar_type() == torch::kHalf;
    ws->seq_k.push_back(f16 ? nullptr : in.cache->k().data_ptr<float>());
    ws->seq_v.push_back(f16 ? nullptr : in.cache->v().data_ptr<float>());
    ws->seq_k_half.push_back(
        f16 ? reinterpret_cast<uint16_t*>(in.cache->k().data_ptr()) : nullptr);
    ws->seq_v_half.push_back(
        f16 ? reinterpret_cast<uint16_t*>(in.cache->v().data_ptr()) : nullptr);
    ws->seq_capacity.push_back(in.cache->Capacity());
    for (int i = 0; i < in.size(); ++i) {
      ws->row_seq.push_back(static_cast<int32_t>(s));
      // Rows 0..run-1 visible: the same keys as a cache of len + run slots.
      int run = 0;
      while (run <= i && in.mask.Get(i, run)) ++run;
      ws->row_prefix.push_back(len + run);
      for (int j = run; j < in.size(); ++j) {
        if (in.mask.Get(i, j)) ws->extra.push_back(len + j);
      }
      ws->extra_begin.push_back(static_cast<int32_t>(ws->extra.size()));
      for (int k = 0; k < half; ++k) {
        const double angle = in.positions[i] * rope_inv_freq_[k];
        ws->cos.push_back(static_cast<float>(std::cos(angle)));
        ws->sin.push_back(static_cast<float>(std::sin(angle)));
      }
    }
    for (int64_t i = in.last_logits_only ? in.size() - 1 : 0; i < in.size();
         ++i) {
      logit_rows.push_back(first + i);
    }
  }
  const int64_t rows = static_cast<int64_t>(ws->row_seq.size());
  ws->row_block.assign(1, 0);
  ws->units.clear();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t keys =
        ws->row_prefix[r] + ws->extra_begin[r + 1] - ws->extra_begin[r];
    const int32_t blocks = (keys + kKeyBlock - 1) / kKeyBlock;
    for (int g = 0; g < c.head_count_kv; ++g) {
      for (int32_t b = 0; b < blocks; ++b) {
        ws->units.push_back({static_cast<int32_t>(r), g, b});
      }
    }
    ws->row_block.push_back(ws->row_block.back() + blocks);
  }
  const int64_t partials = int64_t{ws->row_block.back()} * c.head_count;
  ws->part_out.resize(partials * c.head_dim);
  ws->part_max.resize(partials);
  ws->part_sum.resize(partials);
  ws->x.resize(rows * d);
  ws->h.resize(rows * d);
  ws->tmp.resize(rows * d);
  ws->qkv.resize(rows * width);
  ws->attn.resize(rows * qd);
  ws->gate_up.resize(rows * 2 * ffn);
  ws->act.resize(rows * ffn);
  {
    int64_t r = 0;
    for (const SequenceRows& in : batch) {
      for (int32_t token : in.tokens) token_embd_.Row(token, &ws->x[d * r++]);
    }
  }
  const auto add_tmp = [&] {
    for (int64_t i = 0; i < rows * d; ++i) ws->x[i] += ws->tmp[i];
  };
  for (int l = 0; l < c.block_count; ++l) {
    const NativeLayer& w = layers_[l];
    kernels::RmsNorm(isa_, ws->x.data(), rows, d, w.attn_norm.data(),
                     c.rms_norm_eps, ws->h.data());
    w.wqkv.Apply(isa_, ws->h.data(), rows, ws->qkv.data(), width, pool);
    if (!w.bqkv.empty()) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < width; ++j) {
          ws->qkv[r * width + j] += w.bqkv[j];
        }
      }
    }
    Attend(l, batch, ws.get(), pool);
    w.wo.Apply(isa_, ws->attn.data(), rows, ws->tmp.data(), d, pool);
    add_tmp();
    kernels::RmsNorm(isa_, ws->x.data(), rows, d, w.ffn_norm.data(),
                     c.rms_norm_eps, ws->h.data());
    w.w_gate_up.Apply(isa_, ws->h.data(), rows, ws->gate_up.data(), 2 * ffn,
                      pool);
    RunOn(pool, rows, std::max<int64_t>(4, ChunkOf(rows, pool)),
          [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const float* g = ws->gate_up.data() + r * 2 * ffn;
              kernels::SiluMul(isa_, g, g + ffn, ffn, ws->act.data() + r * ffn);
            }
          });
    w.w_down.Apply(isa_, ws->act.data(), rows, ws->tmp.data(), d, pool);
    add_tmp();
  }
  // Head: the picked rows, normed, times the output matrix.
  const int64_t picked = static_cast<int64_t>(logit_rows.size());
  for (int64_t i = 0; i < picked; ++i) {
    kernels::RmsNorm(isa_, ws->x.data() + logit_rows[i] * d, 1, d,
                     output_norm_.data(), c.rms_norm_eps, ws->h.data() + i * d);
  }
  torch::Tensor logits = torch::empty({picked, c.vocab_size}, torch::kFloat);
  output_.Apply(isa_, ws->h.data(), picked, logits.data_ptr<float>(),
                c.vocab_size, pool);
  if (output_.out() < c.vocab_size) {  // head_tokens: the rest never wins
    logits.narrow(1, output_.out(), c.vocab_size - output_.out())
        .fill_(-std::numeric_limits<float>::infinity());
  }
  ReturnWorkspace(std::move(ws));
  std::vector<torch::Tensor> result;
  int64_t row = 0;
  for (const SequenceRows& in : batch) {
    const int64_t count = in.last_logits_only ? 1 : in.size();
    result.push_back(logits.narrow(0, row, count));
    row += count;
  }
  return result;
}

}  // namespace lookahead::engine

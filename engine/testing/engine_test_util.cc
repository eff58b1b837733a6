#include "engine/testing/engine_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/gguf/dequant.h"
#include "engine/model/device_options.h"
#include "engine/model/threading.h"
#include "engine/testing/gguf_writer.h"
#include "gtest/gtest.h"

namespace lookahead::engine {
namespace {

std::vector<float> RandomValues(std::mt19937_64& rng, int64_t n, float scale,
                                float mean = 0.0f) {
  std::normal_distribution<float> normal(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// n rows of k random `type` weights, as raw block bytes: random quants with
// scales (d, dmin) small enough for values of about +-0.2.
std::string RandomKQuantRows(GgmlType type, int64_t n, int64_t k,
                             std::mt19937_64& rng) {
  const int64_t blocks = n * k / 256, block_bytes = TypeSize(type);
  std::string out(blocks * block_bytes, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  const uint16_t d = FloatToHalf(2e-4f);
  for (int64_t b = 0; b < blocks; ++b) {
    char* p = out.data() + b * block_bytes;
    if (type == GgmlType::kQ6_K) {
      std::memcpy(p + 208, &d, 2);
    } else {  // Q4_K, Q5_K: d, then dmin
      std::memcpy(p, &d, 2);
      std::memcpy(p + 2, &d, 2);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> TinyModelGguf(const TinyModelSpec& s) {
  GgufWriter w;
  const std::string a = s.architecture + ".";
  w.AddMetadata("general.architecture", GgufValue::String(s.architecture));
  w.AddMetadata("general.name", GgufValue::String("tiny-random"));
  w.AddMetadata(a + "context_length", GgufValue::Uint32(s.context));
  w.AddMetadata(a + "embedding_length", GgufValue::Uint32(s.dim));
  w.AddMetadata(a + "block_count", GgufValue::Uint32(s.layers));
  w.AddMetadata(a + "feed_forward_length", GgufValue::Uint32(s.ffn));
  w.AddMetadata(a + "attention.head_count", GgufValue::Uint32(s.heads));
  w.AddMetadata(a + "attention.head_count_kv", GgufValue::Uint32(s.kv_heads));
  w.AddMetadata(a + "attention.layer_norm_rms_epsilon",
                GgufValue::Float32(1e-5f));
  w.AddMetadata(a + "rope.freq_base", GgufValue::Float32(s.rope_base));
  const int64_t d = s.dim, hd = s.dim / s.heads, qd = s.heads * hd,
                kvd = s.kv_heads * hd, f = s.ffn, v = s.vocab;
  w.AddMetadata(a + "rope.dimension_count", GgufValue::Uint32(hd));
  std::mt19937_64 rng(s.seed);
  const float sc = s.weight_scale;
  auto add = [&](const std::string& name, std::vector<int64_t> dims,
                 float scale, float mean = 0.0f) -> absl::Status {
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    const GgmlType type = dims.size() == 2 ? s.weight_type : GgmlType::kF32;
    if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
        type == GgmlType::kQ6_K) {
      if (dims[0] % 256 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": ", TypeName(type), " needs rows of 256k values"));
      }
      w.AddRawTensor(name, dims, static_cast<uint32_t>(type),
                     RandomKQuantRows(type, n / dims[0], dims[0], rng));
      return absl::OkStatus();
    }
    return w.AddTensor(name, std::move(dims), RandomValues(rng, n, scale, mean),
                       type);
  };
  RETURN_IF_ERROR(add("token_embd.weight", {d, v}, 1.0f));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    RETURN_IF_ERROR(add(p + "attn_norm.weight", {d}, 0.1f, 1.0f));
    RETURN_IF_ERROR(add(p + "attn_q.weight", {d, qd}, sc));
    RETURN_IF_ERROR(add(p + "attn_k.weight", {d, kvd}, sc));
    RETURN_IF_ERROR(add(p + "attn_v.weight", {d, kvd}, sc));
    if (s.architecture == "qwen2") {
      RETURN_IF_ERROR(add(p + "attn_q.bias", {qd}, sc));
      RETURN_IF_ERROR(add(p + "attn_k.bias", {kvd}, sc));
      RETURN_IF_ERROR(add(p + "attn_v.bias", {kvd}, sc));
    }
    RETURN_IF_ERROR(add(p + "attn_output.weight", {qd, d}, sc / 2));
    RETURN_IF_ERROR(add(p + "ffn_norm.weight", {d}, 0.1f, 1.0f));
    RETURN_IF_ERROR(add(p + "ffn_gate.weight", {d, f}, sc));
    RETURN_IF_ERROR(add(p + "ffn_up.weight", {d, f}, sc));
    RETURN_IF_ERROR(add(p + "ffn_down.weight", {f, d}, sc / 2));
  }
  RETURN_IF_ERROR(add("output_norm.weight", {d}, 0.1f, 1.0f));
  if (!s.tied) RETURN_IF_ERROR(add("output.weight", {d, v}, sc));
  return w.WriteToString();
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadTinyModel(
    const TinyModelSpec& spec, const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, TinyModelGguf(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                   GgufFile::FromBuffer(std::move(bytes)));
  return LlamaModel::Load(*file, options);
}

std::string ModelCachePath(absl::string_view file) {
  const char* dir = std::getenv("LOOKAHEAD_MODEL_DIR");
  std::string base;
  if (dir != nullptr && *dir != '\0') {
    base = dir;
  } else {
    const char* home = std::getenv("HOME");
    base =
        absl::StrCat(home == nullptr ? "" : home, "/.cache/lookahead/models");
  }
  return absl::StrCat(base, "/", file);
}

std::string RealModelPath() {
  return ModelCachePath("SmolLM2-135M-Instruct.Q4_1.gguf");
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenRealModel() {
  const std::string path = RealModelPath();
  if (!std::ifstream(path).good()) {
    return absl::NotFoundError(absl::StrCat(
        "model not found: ", path,
        " (run tools/setup.sh --model, or set LOOKAHEAD_MODEL_DIR)"));
  }
  return GgufFile::Open(path);
}

absl::StatusOr<ModelOptions> TestDeviceOptions() {
  const char* device = std::getenv("LOOKAHEAD_TEST_DEVICE");
  const char* dtype = std::getenv("LOOKAHEAD_TEST_DTYPE");
  const char* weights = std::getenv("LOOKAHEAD_TEST_WEIGHTS");
  ModelOptions options;
  RETURN_IF_ERROR(ParseDeviceOptions(device == nullptr ? "cpu" : device,
                                     dtype == nullptr ? "" : dtype, &options));
  if (weights != nullptr && *weights != '\0') {
    ASSIGN_OR_RETURN(options.weights, ParseWeightFormat(weights));
  }
  const char* activations = std::getenv("LOOKAHEAD_TEST_ACTIVATIONS");
  if (activations != nullptr && *activations != '\0') {
    ASSIGN_OR_RETURN(options.activations, ParseLinearActivations(activations));
  }
  const char* kv = std::getenv("LOOKAHEAD_TEST_KV_CACHE");
  if (kv != nullptr && *kv != '\0') {
    if (std::string(kv) != "f16" && std::string(kv) != "f32") {
      return absl::InvalidArgumentError(absl::StrCat(
          "LOOKAHEAD_TEST_KV_CACHE: \"", kv, "\"; use f16 or f32"));
    }
    options.kv_f16 = std::string(kv) == "f16";
  }
  return options;
}

absl::StatusOr<RealModel> LoadRealModel(const ModelOptions& options) {
  RETURN_IF_ERROR(ConfigureThreads(ThreadOptions()));
  RealModel real;
  ASSIGN_OR_RETURN(real.file, OpenRealModel());
  ASSIGN_OR_RETURN(real.model, LlamaModel::Load(*real.file, options));
  ASSIGN_OR_RETURN(real.tokenizer, Tokenizer::FromGguf(*real.file));
  return real;
}

const RealModel* SharedRealModel() {
  static const RealModel* const shared = []() -> const RealModel* {
    absl::StatusOr<ModelOptions> options = TestDeviceOptions();
    if (!options.ok()) {
      ADD_FAILURE() << options.status();
      return nullptr;
    }
    absl::StatusOr<RealModel> real = LoadRealModel(*options);
    if (!real.ok()) {
      ADD_FAILURE() << real.status();
      return nullptr;
    }
    return new RealModel(*std::move(real));  // lives as long as the process
  }();
  if (shared == nullptr) ADD_FAILURE() << "the real model did not load";
  return shared;
}

torch::Tensor ChainLogits(const LlamaModel& model,
                          const std::vector<int32_t>& tokens) {
  absl::StatusOr<std::unique_ptr<KvCache>> cache = model.NewCache(64);
  if (!cache.ok()) {
    ADD_FAILURE() << cache.status();
    return {};
  }
  TreeInput in = ChainInput(cache->get(), tokens);
  absl::StatusOr<std::vector<torch::Tensor>> rows =
      model.Forward(absl::MakeConstSpan(&in, 1));
  if (!rows.ok()) {
    ADD_FAILURE() << rows.status();
    return {};
  }
  return (*rows)[0];
}

torch::Tensor ReferenceCausalLogits(const LlamaModel& model,
                                    absl::Span<const int32_t> tokens) {
  c10::InferenceMode guard;
  const ModelConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t hd = c.head_dim, h = c.head_count, kv = c.head_count_kv;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), f = c.feed_forward_length;
  const int64_t r = c.rope_dim;
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor x = w.token_embd.to(torch::kDouble)
                        .index_select(0, torch::tensor(ids, torch::kLong));
  // rot: (n, r/2) complex unit phases e^{i * pos * inv_freq}.
  torch::Tensor pos = torch::arange(n, torch::kDouble).unsqueeze(1);
  torch::Tensor angle = pos * w.rope_inv_freq.cpu().unsqueeze(0);
  torch::Tensor rot = torch::polar(torch::ones_like(angle), angle);
  auto rope = [&](torch::Tensor t, int64_t heads) {  // t: (n, heads, hd)
    torch::Tensor head = t.narrow(2, 0, r);
    torch::Tensor z;
    if (c.rope_style == RopeStyle::kAdjacentPairs) {
      z = torch::view_as_complex(
          head.reshape({n, heads, r / 2, 2}).contiguous());
    } else {
      z = torch::complex(head.narrow(2, 0, r / 2).contiguous(),
                         head.narrow(2, r / 2, r / 2).contiguous());
    }
    z = z * rot.unsqueeze(1);
    torch::Tensor out = c.rope_style == RopeStyle::kAdjacentPairs
                            ? torch::view_as_real(z).reshape({n, heads, r})
                            : torch::cat({torch::real(z), torch::imag(z)}, -1);
    return torch::cat({out, t.narrow(2, r, hd - r)}, -1);
  };
  auto norm = [&](torch::Tensor t, const torch::Tensor& weight) {
    torch::Tensor rms = torch::sqrt(t.pow(2).mean(-1, true) + c.rms_norm_eps);
    return t / rms * weight.to(torch::kDouble);
  };
  torch::Tensor causal = torch::ones({n, n}, torch::kBool).tril();
  for (const LayerWeights& lw : w.layers) {
    torch::Tensor wqkv = lw.wqkv.Dense().to(torch::kDouble);
    torch::Tensor hn = norm(x, lw.attn_norm);
    torch::Tensor q = hn.matmul(wqkv.narrow(1, 0, qd));
    torch::Tensor k = hn.matmul(wqkv.narrow(1, qd, kvd));
    torch::Tensor v = hn.matmul(wqkv.narrow(1, qd + kvd, kvd));
    if (lw.bqkv.defined()) {
      torch::Tensor b = lw.bqkv.to(torch::kDouble);
      q = q + b.narrow(0, 0, qd);
      k = k + b.narrow(0, qd, kvd);
      v = v + b.narrow(0, qd + kvd, kvd);
    }
    q = rope(q.view({n, h, hd}), h).permute({1, 0, 2});    // (H, n, hd)
    k = rope(k.view({n, kv, hd}), kv).permute({1, 0, 2});  // (KV, n, hd)
    v = v.view({n, kv, hd}).permute({1, 0, 2});            // (KV, n, hd)
    k = k.repeat_interleave(h / kv, 0);                    // (H, n, hd)
    v = v.repeat_interleave(h / kv, 0);
    torch::Tensor scores = q.matmul(k.transpose(1, 2)) / std::sqrt(double(hd));
    scores = scores.masked_fill(causal.logical_not(),
                                -std::numeric_limits<double>::infinity());
    torch::Tensor o = scores.softmax(-1).matmul(v);  // (H, n, hd)
    o = o.permute({1, 0, 2}).reshape({n, qd});
    x = x + o.matmul(lw.wo.Dense().to(torch::kDouble));
    torch::Tensor hf = norm(x, lw.ffn_norm);
    torch::Tensor gu = lw.w_gate_up.Dense().to(torch::kDouble);
    torch::Tensor gate = hf.matmul(gu.narrow(1, 0, f));
    torch::Tensor up = hf.matmul(gu.narrow(1, f, f));
    x = x + (gate * torch::sigmoid(gate) * up)
                .matmul(lw.w_down.Dense().to(torch::kDouble));
  }
  x = norm(x, w.output_norm);
  return x.matmul(w.output.Dense().to(torch::kDouble)).to(torch::kFloat);
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  return (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble))
      .abs()
      .max()
      .item<double>();
}

double MaxCommittedCacheDiff(const KvCache& a, const KvCache& b) {
  if (a.Length() != b.Length()) return std::numeric_limits<double>::infinity();
  const int64_t len = a.Length();
  return std::max(MaxAbsDiff(a.k().narrow(2, 0, len), b.k().narrow(2, 0, len)),
                  MaxAbsDiff(a.v().narrow(2, 0, len), b.v().narrow(2, 0, len)));
}

}  // namespace lookahead::engine

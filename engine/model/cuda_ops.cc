#include "engine/model/cuda_ops.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/torch_status.h"
#include "engine/model/tree_mask.h"
#include "kernels/cuda/kv_compact.h"
#include "kernels/cuda/select_tokens.h"
#include "kernels/cuda/tree_attention.h"

namespace lookahead::engine {
namespace cuda_ops {
namespace {

namespace kc = ::lookahead::kernels::cuda;

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  if (error == cudaErrorInvalidValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": unsupported shape (", cudaGetErrorString(error), ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": CUDA error ",
                                          cudaGetErrorName(error), ": ",
                                          cudaGetErrorString(error)));
}

absl::StatusOr<kc::DType> KernelDType(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return kc::DType::kFloat32;
    case torch::kFloat16:
      return kc::DType::kFloat16;
    case torch::kBFloat16:
      return kc::DType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no CUDA kernel for dtype ", c10::toString(dtype)));
  }
}

// The current stream of `device`; launches also need a CUDAGuard on it, so
// that the kernel runs on the device that holds the tensors.
cudaStream_t Stream(const torch::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

// Host staging of several arrays in one buffer, copied to the device in
// one transfer; each array starts 8-byte aligned.
class Staging {
 public:
  template <typename T>
  size_t Add(const std::vector<T>& values) {
    const size_t offset = (bytes_.size() + 7) / 8 * 8;
    bytes_.resize(offset + values.size() * sizeof(T));
    if (!values.empty()) {
      std::memcpy(bytes_.data() + offset, values.data(),
                  values.size() * sizeof(T));
    }
    return offset;
  }
  // Returns the device copy (uint8) on `device`.
  torch::Tensor Upload(torch::Device device) const {
    torch::Tensor host = torch::empty(
        {static_cast<int64_t>(bytes_.size())},
        torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    std::memcpy(host.data_ptr<uint8_t>(), bytes_.data(), bytes_.size());
    return host.to(device, /*non_blocking=*/true);
  }

 private:
  std::vector<uint8_t> bytes_;
};

template <typename T>
const T* At(const torch::Tensor& storage, size_t offset) {
  return reinterpret_cast<const T*>(storage.data_ptr<uint8_t>() + offset);
}

// Returns true iff `t`'s dtype is the kernels' `dtype`.
bool HasDType(const torch::Tensor& t, kc::DType dtype) {
  absl::StatusOr<kc::DType> d = KernelDType(t.scalar_type());
  return d.ok() && *d == dtype;
}

absl::Status CheckCuda(const torch::Tensor& t, const char* name) {
  if (!t.defined() || !t.is_cuda() || !t.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a contiguous CUDA tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

bool SupportsTreeAttention(const ModelConfig& config, torch::Dtype dtype) {
  return kc::TreeAttentionSupports({config.block_count, config.head_count,
                                    config.head_count_kv, config.head_dim}) &&
         KernelDType(dtype).ok();
}

absl::StatusOr<DeviceTreeBatch> DeviceTreeBatch::Build(
    const ModelConfig& config, absl::Span<const Cache> caches) {
  if (caches.empty()) {
    return absl::InvalidArgumentError("DeviceTreeBatch: empty input");
  }
  DeviceTreeBatch out;
  ASSIGN_OR_RETURN(out.dtype_, KernelDType(caches[0].k->scalar_type()));
  out.shape_ = {config.block_count, config.head_count, config.head_count_kv,
                config.head_dim};
  const int32_t num_seqs = static_cast<int32_t>(caches.size());
  std::vector<int32_t> offsets = {0}, token_seq, lens, caps, mask_offsets,
                       positions;
  std::vector<uint64_t> masks, k_ptrs, v_ptrs;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const Cache& cache = caches[s];
    if (!cache.k->is_cuda() || cache.k->device() != caches[0].k->device() ||
        cache.k->scalar_type() != caches[0].k->scalar_type() ||
        !cache.k->is_contiguous() || !cache.v->is_contiguous() ||
        cache.v->device() != cache.k->device() ||
        cache.v->scalar_type() != cache.k->scalar_type() ||
        !cache.v->sizes().equals(cache.k->sizes()) || cache.k->dim() != 4 ||
        cache.k->size(0) != config.block_count ||
        cache.k->size(1) != config.head_count_kv ||
        cache.k->size(3) != config.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceTreeBatch: cache ", s,
          " must be contiguous K and V of (layers, KV, capacity, head_dim) "
          "on the batch's CUDA device and dtype"));
    }
    const int32_t n = static_cast<int32_t>(cache.positions.size());
    if (cache.mask == nullptr || cache.mask->rows() != n ||
        cache.mask->cols() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceTreeBatch: sequence ", s,
                       " needs an (n, n) mask for its ", n, " positions"));
    }
    offsets.push_back(offsets.back() + n);
    lens.push_back(cache.length);
    caps.push_back(static_cast<int32_t>(cache.k->size(2)));
    k_ptrs.push_back(reinterpret_cast<uint64_t>(cache.k->data_ptr()));
    v_ptrs.push_back(reinterpret_cast<uint64_t>(cache.v->data_ptr()));
    mask_offsets.push_back(static_cast<int32_t>(masks.size()));
    masks.insert(masks.end(), cache.mask->words().begin(),
                 cache.mask->words().end());
    for (int32_t i = 0; i < n; ++i) {
      token_seq.push_back(s);
      positions.push_back(cache.positions[i]);
    }
  }
  const int32_t total = offsets.back();
  const int32_t per_tile = kc::TokensPerTile(out.shape_);
  std::vector<int32_t> tile_first(kc::MaxTreeTiles(total, num_seqs, per_tile));
  std::vector<int32_t> tile_count(tile_first.size());
  const int32_t num_tiles = kc::HostTreeTiles(
      offsets.data(), num_seqs, per_tile, tile_first.data(), tile_count.data());

  Staging staging;
  const size_t o_offsets = staging.Add(offsets);
  const size_t o_token_seq = staging.Add(token_seq);
  const size_t o_lens = staging.Add(lens);
  const size_t o_caps = staging.Add(caps);
  const size_t o_k = staging.Add(k_ptrs);
  const size_t o_v = staging.Add(v_ptrs);
  const size_t o_masks = staging.Add(masks);
  const size_t o_mask_offsets = staging.Add(mask_offsets);
  const size_t o_positions = staging.Add(positions);
  const size_t o_first = staging.Add(tile_first);
  const size_t o_count = staging.Add(tile_count);
  out.device_ = caches[0].k->device();
  RETURN_IF_ERROR(TorchStatus("DeviceTreeBatch upload", [&] {
    out.storage_ = staging.Upload(out.device_);
  }));
  const torch::Tensor& st = out.storage_;
  kc::TreeBatch& b = out.batch_;
  b.num_seqs = num_seqs;
  b.num_tokens = total;
  b.seq_offsets = At<int32_t>(st, o_offsets);
  b.token_seq = At<int32_t>(st, o_token_seq);
  b.cache_lens = At<int32_t>(st, o_lens);
  b.capacities = At<int32_t>(st, o_caps);
  b.k_caches = reinterpret_cast<void* const*>(At<uint64_t>(st, o_k));
  b.v_caches = reinterpret_cast<void* const*>(At<uint64_t>(st, o_v));
  b.masks = At<uint64_t>(st, o_masks);
  b.mask_offsets = At<int32_t>(st, o_mask_offsets);
  out.positions_ = At<int32_t>(st, o_positions);
  out.tiles_.num_tiles = num_tiles;
  out.tiles_.tokens_per_tile = per_tile;
  out.tiles_.first = At<int32_t>(st, o_first);
  out.tiles_.count = At<int32_t>(st, o_count);
  return out;
}

absl::StatusOr<torch::Tensor> RopeAppend(const DeviceTreeBatch& batch,
                                         int layer, const torch::Tensor& qkv,
                                         const torch::Tensor& inv_freq,
                                         int rope_dim, RopeStyle style) {
  const kc::AttentionShape& shape = batch.shape();
  const int64_t width =
      static_cast<int64_t>(shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  if (!qkv.defined() || qkv.device() != batch.device() || qkv.dim() != 2 ||
      qkv.size(0) != batch.batch().num_tokens || qkv.size(1) != width ||
      qkv.stride(1) != 1 || !HasDType(qkv, batch.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RopeAppend: qkv must be (", batch.batch().num_tokens, ", ", width,
        ") with unit column stride, on the batch's device and dtype"));
  }
  RETURN_IF_ERROR(CheckCuda(inv_freq, "RopeAppend: inv_freq"));
  if (inv_freq.scalar_type() != torch::kDouble ||
      inv_freq.numel() != rope_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RopeAppend: inv_freq must be float64 of ", rope_dim / 2, " elements"));
  }
  const c10::cuda::CUDAGuard guard(batch.device());
  torch::Tensor q;
  RETURN_IF_ERROR(TorchStatus("RopeAppend", [&] {
    q = torch::empty({qkv.size(0), shape.heads, shape.head_dim}, qkv.options());
  }));
  RETURN_IF_ERROR(CudaStatus(
      kc::LaunchRopeAppend(batch.batch(), shape, layer, batch.dtype(),
                           qkv.data_ptr(), qkv.stride(0), batch.positions(),
                           inv_freq.data_ptr<double>(), rope_dim,
                           style == RopeStyle::kAdjacentPairs
                               ? kc::RopeStyle::kAdjacentPairs
                               : kc::RopeStyle::kHalves,
                           q.data_ptr(), Stream(batch.device())),
      "RopeAppend"));
  return q;
}

absl::StatusOr<torch::Tensor> TreeAttention(const DeviceTreeBatch& batch,
                                            int layer, const torch::Tensor& q,
                                            float scale) {
  const kc::AttentionShape& shape = batch.shape();
  RETURN_IF_ERROR(CheckCuda(q, "TreeAttention: q"));
  if (q.dim() != 3 || q.size(0) != batch.batch().num_tokens ||
      q.size(1) != shape.heads || q.size(2) != shape.head_dim ||
      q.device() != batch.device() || !HasDType(q, batch.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("TreeAttention: q must be (", batch.batch().num_tokens,
                     ", ", shape.heads, ", ", shape.head_dim,
                     ") on the batch's device and dtype"));
  }
  const c10::cuda::CUDAGuard guard(batch.device());
  torch::Tensor out;
  RETURN_IF_ERROR(TorchStatus("TreeAttention", [&] {
    out = torch::empty({q.size(0), shape.heads * shape.head_dim}, q.options());
  }));
  RETURN_IF_ERROR(CudaStatus(
      kc::LaunchTreeAttention(batch.batch(), batch.tiles(), shape, layer,
                              batch.dtype(), q.data_ptr(), scale,
                              out.data_ptr(), Stream(batch.device())),
      "TreeAttention"));
  return out;
}

absl::Status CompactKv(torch::Tensor& k, torch::Tensor& v, int length,
                       absl::Span<const int32_t> path) {
  RETURN_IF_ERROR(CheckCuda(k, "CompactKv: k"));
  RETURN_IF_ERROR(CheckCuda(v, "CompactKv: v"));
  if (k.dim() != 4 || !k.sizes().equals(v.sizes()) ||
      k.device() != v.device() || k.scalar_type() != v.scalar_type()) {
    return absl::InvalidArgumentError(
        "CompactKv: k and v must be alike (layers, KV, capacity, hd)");
  }
  const c10::cuda::CUDAGuard guard(k.device());
  ASSIGN_OR_RETURN(kc::DType dtype, KernelDType(k.scalar_type()));
  const kc::AttentionShape shape = {static_cast<int32_t>(k.size(0)), 1,
                                    static_cast<int32_t>(k.size(1)),
                                    static_cast<int32_t>(k.size(3))};
  // One sequence: its arrays staged like a DeviceTreeBatch's.
  Staging staging;
  const std::vector<int32_t> lens = {length},
                             caps = {static_cast<int32_t>(k.size(2))},
                             offsets = {0},
                             counts = {static_cast<int32_t>(path.size())};
  const std::vector<uint64_t> k_ptrs = {reinterpret_cast<uint64_t>(
                                  k.data_ptr())},
                              v_ptrs = {
                                  reinterpret_cast<uint64_t>(v.data_ptr())};
  const size_t o_lens = staging.Add(lens), o_caps = staging.Add(caps),
               o_k = staging.Add(k_ptrs), o_v = staging.Add(v_ptrs),
               o_offsets = staging.Add(offsets), o_counts = staging.Add(counts),
               o_path =
                   staging.Add(std::vector<int32_t>(path.begin(), path.end()));
  torch::Tensor st;
  RETURN_IF_ERROR(TorchStatus("CompactKv upload",
                              [&] { st = staging.Upload(k.device()); }));
  kc::TreeBatch b;
  b.num_seqs = 1;
  b.cache_lens = At<int32_t>(st, o_lens);
  b.capacities = At<int32_t>(st, o_caps);
  b.k_caches = reinterpret_cast<void* const*>(At<uint64_t>(st, o_k));
  b.v_caches = reinterpret_cast<void* const*>(At<uint64_t>(st, o_v));
  return CudaStatus(
      kc::LaunchCompactKv(b, shape, dtype, At<int32_t>(st, o_path),
                          At<int32_t>(st, o_offsets), At<int32_t>(st, o_counts),
                          Stream(k.device())),
      "CompactKv");
}

bool SupportsDeviceAcceptance(const SamplingParams& params) {
  return params.greedy() || (params.top_k == 0 && params.top_p >= 1.0f);
}

absl::Status AcceptOnDevice(absl::Span<const int32_t> tokens,
                            absl::Span<const int32_t> parents,
                            const torch::Tensor& logits,
                            const SamplingParams& params, int64_t root_position,
                            std::vector<int32_t>* path,
                            std::vector<int32_t>* emitted) {
  if (!SupportsDeviceAcceptance(params)) {
    return absl::InvalidArgumentError(
        "AcceptOnDevice: top-k and top-p sampling run on the host");
  }
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (!logits.defined() || !logits.is_cuda() || logits.dim() != 2 ||
      logits.size(0) != n || logits.scalar_type() != torch::kFloat32 ||
      !logits.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AcceptOnDevice: logits must be contiguous float32 CUDA (",
                     n, ", vocab)"));
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  std::vector<int32_t> depth(n, 0);
  std::vector<int64_t> positions(n);
  for (int32_t i = 0; i < n; ++i) {
    if (parents[i] >= 0) depth[i] = depth[parents[i]] + 1;
    positions[i] = root_position + depth[i] + 1;
  }
  Staging staging;
  const size_t o_temps = staging.Add(std::vector<float>(n, params.temperature));
  const size_t o_seeds = staging.Add(std::vector<uint64_t>(n, params.seed));
  const size_t o_pos = staging.Add(positions);
  const size_t o_offsets = staging.Add(std::vector<int32_t>{0, n});
  const size_t o_tokens =
      staging.Add(std::vector<int32_t>(tokens.begin(), tokens.end()));
  const size_t o_parents =
      staging.Add(std::vector<int32_t>(parents.begin(), parents.end()));
  // Outputs: chosen (n), path (n), emitted (n), count (1).
  const size_t o_out = staging.Add(std::vector<int32_t>(3 * n + 1, 0));
  torch::Tensor st, result;
  RETURN_IF_ERROR(TorchStatus("AcceptOnDevice upload",
                              [&] { st = staging.Upload(logits.device()); }));
  int32_t* out = const_cast<int32_t*>(At<int32_t>(st, o_out));
  RETURN_IF_ERROR(CudaStatus(
      kc::LaunchSelectTokens(
          logits.data_ptr<float>(), n, static_cast<int32_t>(logits.size(1)),
          At<float>(st, o_temps), At<uint64_t>(st, o_seeds),
          At<int64_t>(st, o_pos), out, Stream(logits.device())),
      "SelectTokens"));
  RETURN_IF_ERROR(CudaStatus(
      kc::LaunchAcceptPaths(1, At<int32_t>(st, o_offsets),
                            At<int32_t>(st, o_tokens),
                            At<int32_t>(st, o_parents), out, out + n,
                            out + 2 * n, out + 3 * n, Stream(logits.device())),
      "AcceptPaths"));
  RETURN_IF_ERROR(TorchStatus("AcceptOnDevice download", [&] {
    result = st.narrow(0, o_out + n * 4, (2 * n + 1) * 4).to(torch::kCPU);
  }));
  const int32_t* host =
      reinterpret_cast<const int32_t*>(result.data_ptr<uint8_t>());
  const int32_t count = host[2 * n];
  path->assign(host, host + count);
  emitted->assign(host + n, host + n + count);
  return absl::OkStatus();
}

}  // namespace cuda_ops
}  // namespace lookahead::engine

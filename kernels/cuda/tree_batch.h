// TreeBatch: the ragged batch of token trees that one verify step sends
// through the CUDA kernels, described by raw device pointers.
//
// S sequences, T tokens in all. Sequence s owns packed tokens
// [seq_offsets[s], seq_offsets[s+1]); its token i is tree node i (parents
// before children, node 0 a root). Node i's K/V go to cache slot
// cache_lens[s] + i; it attends to slots [0, cache_lens[s]) and to the tree
// nodes j whose bit is set in its mask row (its ancestors and itself).
// Plain values: the caller owns every array for the duration of a launch.
#ifndef LOOKAHEAD_KERNELS_CUDA_TREE_BATCH_H_
#define LOOKAHEAD_KERNELS_CUDA_TREE_BATCH_H_

#include <cstdint>

namespace lookahead::kernels::cuda {

// Element type of activations and KV caches. Accumulation is always float32.
enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Which dimensions RoPE rotates together (the model's convention).
enum class RopeStyle : int32_t {
  kHalves = 0,         // (x[i], x[i + R/2]): HF Llama, NeoX
  kAdjacentPairs = 1,  // (x[2i], x[2i + 1]): GPT-J, llama.cpp "normal"
};

struct AttentionShape {
  int32_t layers = 0;
  int32_t heads = 0;     // query heads H
  int32_t kv_heads = 0;  // KV heads; H % kv_heads == 0 (GQA group H/KV)
  int32_t head_dim = 0;  // hd; the attention kernel needs hd % 32 == 0, <= 128
};

struct TreeBatch {
  int32_t num_seqs = 0;    // S >= 1
  int32_t num_tokens = 0;  // T >= 1
  // Every pointer below is device memory.
  const int32_t* seq_offsets = nullptr;  // (S + 1), seq_offsets[0] == 0
  const int32_t* token_seq = nullptr;    // (T) sequence of each token
  const int32_t* cache_lens = nullptr;   // (S) committed slots
  const int32_t* capacities = nullptr;   // (S) slots per cache
  // (S) base pointers of each sequence's caches, DType elements:
  // k_caches[s], v_caches[s]: (layers, kv_heads, capacities[s], head_dim).
  void* const* k_caches = nullptr;
  void* const* v_caches = nullptr;
  // Bit-packed ancestor-or-self masks: sequence s with n nodes has
  // words = ceil(n / 64) uint64 per row; row i starts at
  // masks + mask_offsets[s] + i * words; bit j%64 of word j/64 = node j.
  const uint64_t* masks = nullptr;
  const int32_t* mask_offsets = nullptr;  // (S)
};

// Query tiles for LaunchTreeAttention (tree_attention.h): tile b covers
// count[b] consecutive tokens of one sequence, starting at packed token
// first[b].
struct TreeTiles {
  int32_t num_tiles = 0;
  int32_t tokens_per_tile = 0;     // as passed to HostTreeTiles
  const int32_t* first = nullptr;  // (num_tiles) device
  const int32_t* count = nullptr;  // (num_tiles) device
};

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_TREE_BATCH_H_

// TokenTrie: a counted trie of token windows (Ant Group's Lookahead trie).
// Inserting a path adds 1 to the count of every node on it, so counts never
// increase going down a path. Children of every non-root node are kept
// sorted by count, highest first, so retrieval can expand best-first lazily.
//
// NOT thread-safe: callers synchronize externally (const methods may run
// concurrently with each other, never with a mutating method).
//
// Memory (~20 bytes/node): a chunked arena of 16-byte nodes (no big
// reallocations), child arrays in a power-of-two block pool (a single child
// is stored inline in its parent), and a (parent, token) -> node hash set
// of 4-byte ids holding only the children of the root and of nodes with
// kIndexedFanout or more children (smaller child arrays are scanned).
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_TOKEN_TRIE_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_TOKEN_TRIE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "draftsvc/storage/trie_mutation.h"

namespace lookahead::draftsvc {

class TokenTrie {
 public:
  using NodeId = uint32_t;
  static constexpr NodeId kRoot = 0;
  static constexpr NodeId kNoNode = 0xFFFFFFFFu;
  // Counts saturate here.
  static constexpr uint32_t kMaxCount = 0xFFFFFFFFu;

  TokenTrie();
  // Not movable: the hash set's functors point into this object.
  TokenTrie(const TokenTrie&) = delete;
  TokenTrie& operator=(const TokenTrie&) = delete;

  // Adds 1 to the count of every node on `path` (creating missing ones).
  // If `mutations` is non-null, appends one kAdd (value 1) per node.
  // REQUIRES: tokens >= 0.
  void Insert(absl::Span<const int32_t> path,
              std::vector<TrieMutation>* mutations = nullptr);

  // Sets count(path) = count, creating the node. Returns FAILED_PRECONDITION
  // if the parent of `path` is missing, INVALID_ARGUMENT on an empty path,
  // a negative token or count < 1.
  absl::Status SetCount(absl::Span<const int32_t> path, int64_t count);

  // The node at `path` (kRoot for an empty path), or kNoNode.
  NodeId Find(absl::Span<const int32_t> path) const;
  // The child of `node` with `token`, or kNoNode.
  NodeId Child(NodeId node, int32_t token) const;

  int32_t token(NodeId id) const { return node(id).token; }
  uint32_t count(NodeId id) const { return node(id).count; }
  NodeId parent(NodeId id) const { return node(id).parent; }
  // Children of `node`; for non-root nodes sorted by count, highest first.
  uint32_t NumChildren(NodeId node) const;
  NodeId ChildAt(NodeId node, uint32_t i) const;

  // Nodes excluding the root.
  int64_t node_count() const { return static_cast<int64_t>(size_) - 1; }
  // Bytes held by the arena, the hash set and the child pool (capacities).
  size_t MemoryBytes() const;

  struct PruneStats {
    int64_t removed = 0;
    int64_t remaining = 0;
  };
  // Keeps the `target` best nodes by (count desc, depth asc) - a set closed
  // under ancestors - and drops the rest; then, if `halve`, sets each
  // survivor's count to ceil(count / 2) (order-preserving). Compacts the
  // arena. Appends to `mutations` (if non-null) one kDeleteSubtree per
  // dropped subtree root, then one kSetCount per changed survivor.
  // No-op if node_count() <= target. REQUIRES: target >= 0.
  PruneStats Prune(int64_t target, bool halve,
                   std::vector<TrieMutation>* mutations);

  // Calls fn(path, count) for every node except the root in key order
  // (lexicographic by tokens; parents before children).
  void ForEach(const std::function<void(absl::Span<const int32_t>, int64_t)>&
                   fn) const;

  // Checks the internal invariants (counts non-increasing down paths,
  // children sorted, index consistent). For tests.
  absl::Status CheckInvariants() const;

 private:
  struct Node {
    int32_t token;
    uint32_t count;
    NodeId parent;
    // kNoNode: leaf. High bit set: the single child's id | kInlineBit.
    // Otherwise: offset of the child block in pool_.
    uint32_t children;
  };
  static_assert(sizeof(Node) == 16, "Node must stay 16 bytes");
  static constexpr uint32_t kInlineBit = 0x80000000u;

  static constexpr int kChunkBits = 16;  // 64Ki nodes (1 MiB) per chunk.
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr uint32_t kIndexedFanout = 8;
  using Chunks = std::vector<std::vector<Node>>;

  // (parent, token) key of the hash set; ids are looked up in the chunks.
  struct Key {
    NodeId parent;
    int32_t token;
  };
  struct KeyHash {
    using is_transparent = void;
    const Chunks* chunks;
    size_t operator()(NodeId id) const;
    size_t operator()(const Key& key) const;
  };
  struct KeyEq {
    using is_transparent = void;
    const Chunks* chunks;
    bool operator()(NodeId a, NodeId b) const { return a == b; }
    bool operator()(const Key& k, NodeId id) const;
    bool operator()(NodeId id, const Key& k) const { return (*this)(k, id); }
  };
  using Index = absl::flat_hash_set<NodeId, KeyHash, KeyEq>;

  static const Node& NodeIn(const Chunks& chunks, NodeId id) {
    return chunks[id >> kChunkBits][id & (kChunkSize - 1)];
  }
  const Node& node(NodeId id) const { return NodeIn(chunks_, id); }
  Node& node(NodeId id) {
    return chunks_[id >> kChunkBits][id & (kChunkSize - 1)];
  }
  // Whether the children of `parent` (having `n` children) are indexed.
  static bool Indexed(NodeId parent, uint32_t n) {
    return parent == kRoot || n >= kIndexedFanout;
  }
  // Appends a node to `chunks` (whose total size is `*size`).
  static NodeId Append(Chunks& chunks, uint32_t* size, const Node& n);

  // Prune's view of the trie: the nodes copied in breadth-first order
  // (depth ascending, so among equal counts an ancestor always precedes its
  // descendants), indexed by BFS position so Prune's passes run
  // sequentially. The children of position i are positions
  // [first_child[i], first_child[i + 1]); parent[0] is kNoNode.
  struct BfsOrder {
    std::vector<Node> nodes;
    std::vector<uint32_t> parent;
    std::vector<uint32_t> first_child;
    // The tokens from the root to position `pos`.
    std::vector<int32_t> PathTo(uint32_t pos) const;
  };
  BfsOrder BreadthFirst() const;
  // Prune's choice: rank[i] is the new id of BFS position i, or kNoNode if
  // dropped. Keeps the `target` nodes of highest count (ties: BFS order)
  // whose ancestors are kept; sets *kept to their number and appends a
  // kDeleteSubtree per dropped subtree to `mutations` if not null.
  // REQUIRES: 0 <= target < bfs.nodes.size() - 1.
  static std::vector<NodeId> RankSurvivors(
      const BfsOrder& bfs, int64_t target,
      std::vector<TrieMutation>* mutations, NodeId* kept);
  // Replaces the arena by the ranked nodes of `bfs` (new ids are BFS ranks)
  // with fresh child blocks, halving counts >= 2 if `halve` (a kSetCount
  // each to `mutations` if not null), and rebuilds the index.
  void RebuildFrom(const BfsOrder& bfs, const std::vector<NodeId>& rank,
                   bool halve, std::vector<TrieMutation>* mutations);
  // The `children` word of BFS position i after the rebuild: its kept
  // children (in their order) inline or in a block appended to `pool`.
  static uint32_t KeptChildren(const BfsOrder& bfs,
                               const std::vector<NodeId>& rank, size_t i,
                               std::vector<uint32_t>* pool);
  // Rebuilds index_ from the arena.
  void RebuildIndex();

  NodeId AddChild(NodeId parent, int32_t token, uint32_t count);
  // Moves `node` within its parent's child array to its count-sorted place.
  void Reposition(NodeId node);
  // Child block helpers. A block of class c has 2^c words: [size, ids...].
  uint32_t AllocBlock(int size_class);
  void FreeBlock(uint32_t offset, int size_class);
  // Pointer to the child ids of `node` (size NumChildren). Invalidated by
  // any mutation.
  const NodeId* ChildIds(NodeId node) const;
  NodeId* MutableChildIds(NodeId node);

  Chunks chunks_;  // Node 0 is the root.
  uint32_t size_ = 0;  // Nodes, root included.
  std::vector<uint32_t> pool_;
  std::array<uint32_t, 32> free_blocks_;  // Per size class; kNoNode = empty.
  Index index_;
  // SetCount's cache: the last path it set and the node ids along it.
  std::vector<int32_t> set_path_;
  std::vector<NodeId> set_nodes_;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_TOKEN_TRIE_H_

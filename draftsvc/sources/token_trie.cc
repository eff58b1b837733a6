#include "draftsvc/sources/token_trie.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace lookahead::draftsvc {
namespace {

// Size class (log2 of words) of a block holding `n` >= 2 children plus its
// size word.
int SizeClass(uint32_t n) {
  int c = 1;
  while ((uint64_t{1} << c) < uint64_t{n} + 1) ++c;
  return c;
}

// Grows `v` to hold `n` elements, by 1.5x steps rather than libstdc++'s 2x,
// so that capacity slack (counted in MemoryBytes) stays below 50%.
template <typename T>
void GrowTo(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(std::max<size_t>({n, 16, v.capacity() + v.capacity() / 2}));
}

}  // namespace

size_t TokenTrie::KeyHash::operator()(NodeId id) const {
  const Node& n = NodeIn(*chunks, id);
  return (*this)(Key{n.parent, n.token});
}

size_t TokenTrie::KeyHash::operator()(const Key& key) const {
  return absl::Hash<uint64_t>{}((uint64_t{key.parent} << 32) |
                                static_cast<uint32_t>(key.token));
}

bool TokenTrie::KeyEq::operator()(const Key& k, NodeId id) const {
  const Node& n = NodeIn(*chunks, id);
  return n.parent == k.parent && n.token == k.token;
}

TokenTrie::TokenTrie() : index_(0, KeyHash{&chunks_}, KeyEq{&chunks_}) {
  Append(chunks_, &size_, Node{-1, 0, kNoNode, kNoNode});
  free_blocks_.fill(kNoNode);
}

TokenTrie::NodeId TokenTrie::Append(Chunks& chunks, uint32_t* size,
                                    const Node& n) {
  if (chunks.empty() || chunks.back().size() == kChunkSize) {
    chunks.emplace_back();
  }
  std::vector<Node>& last = chunks.back();
  if (last.size() == last.capacity()) {
    // 1.5x steps up to a full chunk: little slack, no copy of older chunks.
    last.reserve(std::min<size_t>(
        kChunkSize, std::max<size_t>(16, last.capacity() + last.capacity() / 2)));
  }
  last.push_back(n);
  return (*size)++;
}

uint32_t TokenTrie::NumChildren(NodeId id) const {
  const uint32_t c = node(id).children;
  if (c == kNoNode) return 0;
  if (c & kInlineBit) return 1;
  return pool_[c];
}

TokenTrie::NodeId TokenTrie::ChildAt(NodeId id, uint32_t i) const {
  const uint32_t c = node(id).children;
  if (c & kInlineBit) return c & ~kInlineBit;
  return pool_[c + 1 + i];
}

const TokenTrie::NodeId* TokenTrie::ChildIds(NodeId id) const {
  const uint32_t c = node(id).children;
  if (c == kNoNode) return nullptr;
  if (c & kInlineBit) return nullptr;  // Callers handle the inline case.
  return &pool_[c + 1];
}

TokenTrie::NodeId* TokenTrie::MutableChildIds(NodeId id) {
  return const_cast<NodeId*>(static_cast<const TokenTrie*>(this)->ChildIds(id));
}

uint32_t TokenTrie::AllocBlock(int size_class) {
  uint32_t off = free_blocks_[size_class];
  if (off != kNoNode) {
    free_blocks_[size_class] = pool_[off];
    return off;
  }
  off = static_cast<uint32_t>(pool_.size());
  const size_t words = size_t{1} << size_class;
  GrowTo(pool_, pool_.size() + words);
  pool_.resize(pool_.size() + words);
  return off;
}

void TokenTrie::FreeBlock(uint32_t offset, int size_class) {
  pool_[offset] = free_blocks_[size_class];
  free_blocks_[size_class] = offset;
}

TokenTrie::NodeId TokenTrie::Child(NodeId id, int32_t token) const {
  const uint32_t c = node(id).children;
  if (c == kNoNode) return kNoNode;
  const uint32_t n = (c & kInlineBit) ? 1 : pool_[c];
  if (Indexed(id, n)) {
    auto it = index_.find(Key{id, token});
    return it == index_.end() ? kNoNode : *it;
  }
  if (c & kInlineBit) {
    const NodeId only = c & ~kInlineBit;
    return node(only).token == token ? only : kNoNode;
  }
  const NodeId* ids = &pool_[c + 1];
  for (uint32_t i = 0; i < n; ++i) {
    if (node(ids[i]).token == token) return ids[i];
  }
  return kNoNode;
}

TokenTrie::NodeId TokenTrie::Find(absl::Span<const int32_t> path) const {
  NodeId cur = kRoot;
  for (int32_t t : path) {
    cur = Child(cur, t);
    if (cur == kNoNode) return kNoNode;
  }
  return cur;
}

TokenTrie::NodeId TokenTrie::AddChild(NodeId parent, int32_t token,
                                      uint32_t count) {
  const NodeId id = Append(chunks_, &size_, Node{token, count, parent, kNoNode});
  const uint32_t c = node(parent).children;
  uint32_t n = 1;
  if (c == kNoNode) {
    node(parent).children = id | kInlineBit;
  } else if (c & kInlineBit) {
    const uint32_t off = AllocBlock(SizeClass(2));
    pool_[off] = 2;
    pool_[off + 1] = c & ~kInlineBit;
    pool_[off + 2] = id;
    node(parent).children = off;
    n = 2;
  } else {
    const uint32_t old_n = pool_[c];
    const int cls = SizeClass(old_n);
    uint32_t off = c;
    if (SizeClass(old_n + 1) != cls) {
      off = AllocBlock(cls + 1);
      std::memcpy(&pool_[off], &pool_[c], (old_n + 1) * sizeof(uint32_t));
      FreeBlock(c, cls);
      node(parent).children = off;
    }
    pool_[off + 1 + old_n] = id;
    pool_[off] = n = old_n + 1;
  }
  if (Indexed(parent, n)) {
    if (parent != kRoot && n == kIndexedFanout) {
      // The parent just became indexed: index all its children.
      for (uint32_t i = 0; i < n; ++i) index_.insert(ChildAt(parent, i));
    } else {
      index_.insert(id);
    }
  }
  return id;
}

void TokenTrie::Reposition(NodeId id) {
  const NodeId p = node(id).parent;
  if (p == kRoot) return;
  const uint32_t n = NumChildren(p);
  if (n <= 1) return;
  NodeId* ids = MutableChildIds(p);
  uint32_t i = 0;
  while (ids[i] != id) ++i;
  std::memmove(ids + i, ids + i + 1, (n - 1 - i) * sizeof(NodeId));
  const uint32_t c = node(id).count;
  // First index among the n - 1 others whose count is below c.
  const NodeId* pos = std::partition_point(
      ids, ids + n - 1, [&](NodeId o) { return node(o).count >= c; });
  const uint32_t k = static_cast<uint32_t>(pos - ids);
  std::memmove(ids + k + 1, ids + k, (n - 1 - k) * sizeof(NodeId));
  ids[k] = id;
}

void TokenTrie::Insert(absl::Span<const int32_t> path,
                       std::vector<TrieMutation>* mutations) {
  NodeId cur = kRoot;
  for (size_t d = 0; d < path.size(); ++d) {
    NodeId child = Child(cur, path[d]);
    bool changed = true;
    if (child == kNoNode) {
      // Count 1 at the end keeps the array sorted: every count is >= 1.
      child = AddChild(cur, path[d], 1);
    } else if (node(child).count == kMaxCount) {
      changed = false;
    } else {
      const uint32_t c = node(child).count;
      const uint32_t n = NumChildren(cur);
      if (cur != kRoot && n > 1) {
        // Swap the child with the first sibling of equal count; after the
        // increment it still precedes the rest of that run.
        NodeId* ids = MutableChildIds(cur);
        NodeId* lo = std::partition_point(
            ids, ids + n, [&](NodeId o) { return node(o).count > c; });
        NodeId* hi = std::partition_point(
            lo, ids + n, [&](NodeId o) { return node(o).count >= c; });
        // Recently added siblings sit at the run's end: search backwards.
        NodeId* it = hi - 1;
        while (*it != child) --it;
        std::swap(*it, *lo);
      }
      node(child).count = c + 1;
    }
    if (mutations != nullptr && changed) {
      TrieMutation m;
      m.kind = TrieMutation::Kind::kAdd;
      m.path.assign(path.begin(), path.begin() + d + 1);
      m.value = 1;
      mutations->push_back(std::move(m));
    }
    cur = child;
  }
}

absl::Status TokenTrie::SetCount(absl::Span<const int32_t> path,
                                 int64_t count) {
  if (path.empty()) {
    return absl::InvalidArgumentError("SetCount: empty path");
  }
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetCount: count ", count, " < 1"));
  }
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetCount: token ", path[i], " at index ", i, " is negative"));
    }
  }
  // Restores come in key order: reuse the previous path's node ids for the
  // shared prefix instead of descending from the root.
  size_t shared = 0;
  while (shared + 1 < path.size() && shared < set_path_.size() &&
         set_path_[shared] == path[shared]) {
    ++shared;
  }
  set_path_.resize(shared);
  set_nodes_.resize(shared);
  NodeId parent = shared == 0 ? kRoot : set_nodes_[shared - 1];
  for (size_t i = shared; i + 1 < path.size(); ++i) {
    parent = Child(parent, path[i]);
    if (parent == kNoNode) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SetCount: the parent of a path of length ", path.size(),
          " is missing (restore parents before children)"));
    }
    set_path_.push_back(path[i]);
    set_nodes_.push_back(parent);
  }
  const uint32_t c = static_cast<uint32_t>(
      std::min<int64_t>(count, int64_t{kMaxCount}));
  NodeId id = Child(parent, path.back());
  if (id == kNoNode) {
    id = AddChild(parent, path.back(), c);
  } else {
    node(id).count = c;
  }
  Reposition(id);
  set_path_.push_back(path.back());
  set_nodes_.push_back(id);
  return absl::OkStatus();
}

size_t TokenTrie::MemoryBytes() const {
  size_t bytes = sizeof(*this) + chunks_.capacity() * sizeof(chunks_[0]) +
                 pool_.capacity() * sizeof(uint32_t) +
                 index_.capacity() * (sizeof(NodeId) + 1);
  for (const auto& chunk : chunks_) bytes += chunk.capacity() * sizeof(Node);
  return bytes;
}

TokenTrie::PruneStats TokenTrie::Prune(int64_t target, bool halve,
                                       std::vector<TrieMutation>* mutations) {
  const int64_t n = node_count();
  if (target < 0) target = 0;
  if (n <= target) return PruneStats{0, n};
  const BfsOrder bfs = BreadthFirst();
  NodeId kept = 0;
  const std::vector<NodeId> rank =
      RankSurvivors(bfs, target, mutations, &kept);
  RebuildFrom(bfs, rank, halve, mutations);
  return PruneStats{n - kept, kept};
}

std::vector<int32_t> TokenTrie::BfsOrder::PathTo(uint32_t pos) const {
  std::vector<int32_t> path;
  for (uint32_t u = pos; u != 0; u = parent[u]) path.push_back(nodes[u].token);
  std::reverse(path.begin(), path.end());
  return path;
}

// One random read per node; the later passes over the copy are sequential.
TokenTrie::BfsOrder TokenTrie::BreadthFirst() const {
  BfsOrder out;
  std::vector<NodeId> bfs;
  bfs.reserve(size_);
  out.parent.reserve(size_);
  out.first_child.reserve(size_ + 1);
  out.nodes.reserve(size_);
  bfs.push_back(kRoot);
  out.parent.push_back(kNoNode);
  for (uint32_t i = 0; i < bfs.size(); ++i) {
    const NodeId v = bfs[i];
    out.nodes.push_back(node(v));
    out.first_child.push_back(static_cast<uint32_t>(bfs.size()));
    const uint32_t k = NumChildren(v);
    for (uint32_t j = 0; j < k; ++j) {
      bfs.push_back(ChildAt(v, j));
      out.parent.push_back(i);
    }
  }
  out.first_child.push_back(static_cast<uint32_t>(bfs.size()));
  return out;
}

std::vector<TokenTrie::NodeId> TokenTrie::RankSurvivors(
    const BfsOrder& bfs, int64_t target, std::vector<TrieMutation>* mutations,
    NodeId* kept) {
  const std::vector<Node>& ordered = bfs.nodes;
  // c_star: the (target + 1)-th largest count. Keep all above it, then
  // nodes equal to it in BFS order while room is left.
  uint32_t c_star = 0;
  int64_t above = 0;
  {
    std::vector<uint32_t> sorted;
    sorted.reserve(ordered.size() - 1);
    for (size_t i = 1; i < ordered.size(); ++i) {
      sorted.push_back(ordered[i].count);
    }
    std::nth_element(sorted.begin(), sorted.begin() + target, sorted.end(),
                     std::greater<uint32_t>());
    c_star = sorted[static_cast<size_t>(target)];
    for (uint32_t c : sorted) above += c > c_star ? 1 : 0;
  }
  int64_t ties_left = target - above;

  const size_t total = ordered.size();
  std::vector<NodeId> rank(total, kNoNode);
  rank[0] = kRoot;
  NodeId next = 1;
  for (size_t i = 1; i < total; ++i) {
    if (rank[bfs.parent[i]] == kNoNode) continue;  // Dropped with an ancestor.
    bool keep = false;
    const uint32_t count = ordered[i].count;
    if (count > c_star) {
      keep = true;
    } else if (count == c_star && ties_left > 0) {
      --ties_left;
      keep = true;
    }
    if (keep) {
      rank[i] = next++;
    } else if (mutations != nullptr) {
      TrieMutation m;
      m.kind = TrieMutation::Kind::kDeleteSubtree;
      m.path = bfs.PathTo(static_cast<uint32_t>(i));
      mutations->push_back(std::move(m));
    }
  }
  *kept = next - 1;
  return rank;
}

// Survivors' child order is kept (halving preserves it).
void TokenTrie::RebuildFrom(const BfsOrder& bfs,
                            const std::vector<NodeId>& rank, bool halve,
                            std::vector<TrieMutation>* mutations) {
  Chunks new_chunks;
  uint32_t new_size = 0;
  std::vector<uint32_t> new_pool;
  for (size_t i = 0; i < bfs.nodes.size(); ++i) {
    if (rank[i] == kNoNode) continue;
    Node nv = bfs.nodes[i];
    nv.parent = i == 0 ? kNoNode : rank[bfs.parent[i]];
    if (halve && i != 0 && nv.count >= 2) {
      nv.count = (nv.count + 1) / 2;
      if (mutations != nullptr) {
        TrieMutation m;
        m.kind = TrieMutation::Kind::kSetCount;
        m.path = bfs.PathTo(static_cast<uint32_t>(i));
        m.value = nv.count;
        mutations->push_back(std::move(m));
      }
    }
    nv.children = KeptChildren(bfs, rank, i, &new_pool);
    Append(new_chunks, &new_size, nv);
  }
  new_pool.shrink_to_fit();
  chunks_.swap(new_chunks);
  Chunks().swap(new_chunks);
  size_ = new_size;
  pool_.swap(new_pool);
  free_blocks_.fill(kNoNode);
  set_path_.clear();  // Node ids changed.
  set_nodes_.clear();
  RebuildIndex();
}

uint32_t TokenTrie::KeptChildren(const BfsOrder& bfs,
                                 const std::vector<NodeId>& rank, size_t i,
                                 std::vector<uint32_t>* pool) {
  const uint32_t begin = bfs.first_child[i];
  const uint32_t end = bfs.first_child[i + 1];
  uint32_t num_kept = 0;
  NodeId last_kept = kNoNode;
  for (uint32_t c = begin; c < end; ++c) {
    if (rank[c] != kNoNode) {
      ++num_kept;
      last_kept = rank[c];
    }
  }
  if (num_kept == 0) return kNoNode;
  if (num_kept == 1) return last_kept | kInlineBit;
  const uint32_t off = static_cast<uint32_t>(pool->size());
  pool->resize(pool->size() + (size_t{1} << SizeClass(num_kept)));
  (*pool)[off] = num_kept;
  uint32_t w = off + 1;
  for (uint32_t c = begin; c < end; ++c) {
    if (rank[c] != kNoNode) (*pool)[w++] = rank[c];
  }
  return off;
}

void TokenTrie::RebuildIndex() {
  index_ = Index(0, KeyHash{&chunks_}, KeyEq{&chunks_});
  size_t indexed = 0;
  for (NodeId v = 1; v < size_; ++v) {
    const NodeId p = node(v).parent;
    indexed += Indexed(p, NumChildren(p)) ? 1 : 0;
  }
  index_.reserve(indexed);
  for (NodeId v = 1; v < size_; ++v) {
    const NodeId p = node(v).parent;
    if (Indexed(p, NumChildren(p))) index_.insert(v);
  }
}

void TokenTrie::ForEach(
    const std::function<void(absl::Span<const int32_t>, int64_t)>& fn) const {
  std::vector<int32_t> path;
  // Explicit DFS stack of (children sorted by token, next index).
  struct Frame {
    std::vector<NodeId> children;
    size_t next = 0;
  };
  std::vector<Frame> stack;
  auto push = [&](NodeId v) {
    Frame f;
    const uint32_t k = NumChildren(v);
    f.children.reserve(k);
    for (uint32_t j = 0; j < k; ++j) f.children.push_back(ChildAt(v, j));
    std::sort(f.children.begin(), f.children.end(), [&](NodeId a, NodeId b) {
      return node(a).token < node(b).token;
    });
    stack.push_back(std::move(f));
  };
  push(kRoot);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.children.size()) {
      stack.pop_back();
      if (!path.empty()) path.pop_back();
      continue;
    }
    const NodeId v = f.children[f.next++];
    path.push_back(node(v).token);
    fn(path, node(v).count);
    push(v);
  }
}

absl::Status TokenTrie::CheckInvariants() const {
  uint64_t child_total = 0;
  uint64_t indexed = 0;
  for (NodeId v = 0; v < size_; ++v) {
    const Node& nv = node(v);
    if (v != kRoot) {
      if (nv.parent >= size_) {
        return absl::InternalError(absl::StrCat("node ", v, ": bad parent"));
      }
      if (nv.count < 1) {
        return absl::InternalError(absl::StrCat("node ", v, ": count 0"));
      }
      if (nv.parent != kRoot && node(nv.parent).count < nv.count) {
        return absl::InternalError(
            absl::StrCat("node ", v, ": count ", nv.count,
                         " above its parent's ", node(nv.parent).count));
      }
      if (Child(nv.parent, nv.token) != v) {
        return absl::InternalError(absl::StrCat("node ", v, ": not found"));
      }
      if (Indexed(nv.parent, NumChildren(nv.parent))) {
        ++indexed;
        if (!index_.contains(Key{nv.parent, nv.token})) {
          return absl::InternalError(
              absl::StrCat("node ", v, ": missing from the index"));
        }
      }
    }
    const uint32_t k = NumChildren(v);
    child_total += k;
    for (uint32_t j = 0; j < k; ++j) {
      const NodeId c = ChildAt(v, j);
      if (c >= size_ || node(c).parent != v) {
        return absl::InternalError(
            absl::StrCat("node ", v, ": child ", j, " has another parent"));
      }
      if (v != kRoot && j > 0 && node(ChildAt(v, j - 1)).count < node(c).count) {
        return absl::InternalError(
            absl::StrCat("node ", v, ": children not sorted by count"));
      }
    }
  }
  if (child_total != size_ - 1 || index_.size() != indexed) {
    return absl::InternalError(absl::StrCat(
        "child links ", child_total, " / index ", index_.size(),
        " (expected ", indexed, ") vs nodes ", size_ - 1));
  }
  return absl::OkStatus();
}

}  // namespace lookahead::draftsvc

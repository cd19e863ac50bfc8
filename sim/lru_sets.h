// A fixed-size set-associative memo table: `Sets` sets of `Ways` entries, the
// least recently used entry of a set replaced on a miss. The closed form keeps
// its per-layout memos (a layout's layer pieces, its stage split, its DP
// collectives) in these, one per thread.
//
// Why not direct-mapped: the few keys a search's layouts share by chance in
// one slot evicted each other on every call (8% of the 405B benchmark's
// estimates recomputed their layer pieces); four ways keep them all.
//
// Not thread-safe: declare it thread_local. A reference get() returns stays
// valid until the next get() on the same table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace loom {

// The hash of a memo key of small integers (its set in an LruSets table
// below): each field folded in by a multiply (high bits folded
// down), then the whole mixed through splitmix64's finalizer, so that keys
// differing in any field spread over the sets (a linear sum of the fields
// made many layouts of a search share a slot and evict each other). One
// multiply per field: the search hashes a few keys per layout.
inline uint64_t mix_fields(std::initializer_list<int64_t> fields) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int64_t f : fields) {
    h = (h ^ uint64_t(f)) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

template <class Key, class Value, int Sets, int Ways = 4>
class LruSets {
 public:
  // The value under `key` (whose hash picks the set), made by make() on a miss.
  template <class Make>
  const Value& get(uint64_t hash, const Key& key, Make&& make) {
    const size_t s = size_t(hash % uint64_t(Sets));
    ++clock_;
    int victim = 0;
    for (int w = 0; w < Ways; ++w) {
      if (used_[s][w] != 0 && keys_[s][w] == key) {
        used_[s][w] = clock_;
        return values_[s][w];
      }
      if (used_[s][w] < used_[s][victim]) victim = w;
    }
    values_[s][victim] = make();
    keys_[s][victim] = key;
    used_[s][victim] = clock_;
    return values_[s][victim];
  }

 private:
  Key keys_[Sets][Ways];
  Value values_[Sets][Ways];
  uint64_t used_[Sets][Ways] = {};  // 0: empty
  uint64_t clock_ = 0;
};

}  // namespace loom

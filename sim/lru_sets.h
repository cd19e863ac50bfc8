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
#include <utility>

namespace loom {

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

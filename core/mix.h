// SplitMix64: the counter hash behind every deterministic stream in Loom
// (parameter initialization, sample offsets), so results depend only on
// (seed, name, index) and never on which rank computes them.
#pragma once

#include <cstdint>

namespace loom {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace loom

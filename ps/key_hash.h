// mix64: the key mixer every layer agrees on (servers partition by it, the
// worker's feature hashing builds on it).
#pragma once

#include <cstdint>

namespace parafab::ps {

// splitmix64's finalizer: a bijection on uint64 with full avalanche, so
// sequential keys spread evenly over the partition ranges.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace parafab::ps

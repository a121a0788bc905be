// Feature hashing into the 64-bit key space.
//
// A feature is (namespace, value): the namespace is the column it came from
// (Criteo: 1..13 for I1..I13, 14..39 for C1..C26), the value its token. Keys of
// different namespaces never collide by construction of the mix: the namespace
// goes into the hash input, not a prefix that would waste key bits.
//
//   uint64_t k = worker::hash_feature(14, 0x68fd1e64);   // C1 = 68fd1e64
#pragma once

#include <cstdint>
#include <string_view>

#include "ps/key_hash.h"

namespace parafab::worker {

using ps::mix64;

constexpr uint64_t hash_feature(uint32_t ns, uint64_t value) {
  return mix64(mix64(value) ^ (0x9e3779b97f4a7c15ULL * (uint64_t{ns} + 1)));
}

// Hash of an arbitrary token (e.g. a string category), by xxHash64 seeded with
// the namespace.
uint64_t hash_token(uint32_t ns, std::string_view token);

}  // namespace parafab::worker

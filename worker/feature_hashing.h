// Feature hashing into the 64-bit key space.
//
// A feature is (namespace, value): the namespace is the column it came from
// (Criteo: 1..13 for I1..I13, 14..39 for C1..C26), the value its token. The
// key's top 8 bits are the namespace (mod 256) and its low 56 bits a hash of
// (namespace, value): keys of different namespaces never collide, and a
// model that needs the field of a key (the DNN's per-field embeddings) reads
// it back with feature_namespace. 56 bits of hash leave collisions within a
// field negligible below ~10^8 distinct values per field. libsvm indices
// below 2^56 read as namespace 0.
//
//   uint64_t k = worker::hash_feature(14, 0x68fd1e64);   // C1 = 68fd1e64
#pragma once

#include <cstdint>
#include <string_view>

#include "ps/key_hash.h"

namespace parafab::worker {

using ps::mix64;

constexpr uint64_t hash_feature(uint32_t ns, uint64_t value) {
  return (uint64_t{ns & 0xffu} << 56) | (mix64(mix64(value) ^ (0x9e3779b97f4a7c15ULL * (uint64_t{ns} + 1))) >> 8);
}

// The namespace hash_feature put into the key (0 for plain libsvm indices).
constexpr uint32_t feature_namespace(uint64_t key) { return static_cast<uint32_t>(key >> 56); }

// Hash of an arbitrary token (e.g. a string category), by xxHash64 seeded with
// the namespace.
uint64_t hash_token(uint32_t ns, std::string_view token);

}  // namespace parafab::worker

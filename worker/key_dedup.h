// First occurrence of each key in a batch: the KV client merges duplicate
// keys of a push and fetches each key of a pull once. Open addressing over
// a power-of-two table twice the batch, linear probing on mix64(key):
// several times faster than std::unordered_map at 10^5 keys.
//
//   worker::KeyDedup d(keys.size());
//   for (size_t i = 0; i < keys.size(); ++i) {
//     auto [first, fresh] = d.insert(keys[i], i);   // first: index of the key's first occurrence
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace parafab::worker {

class KeyDedup {
 public:
  explicit KeyDedup(size_t expected_keys);
  // Returns (index of the first occurrence of key, true if this is it).
  std::pair<uint32_t, bool> insert(uint64_t key, uint32_t index);

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> first_;
  uint64_t mask_ = 0;
  // The key equal to the empty marker lives apart.
  bool has_empty_key_ = false;
  uint32_t empty_key_first_ = 0;
};

}  // namespace parafab::worker

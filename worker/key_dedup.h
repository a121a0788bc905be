// First occurrence of each key in a batch: the KV client merges duplicate
// keys of a push and fetches each key of a pull once. Open addressing over
// a power-of-two table twice the batch, linear probing on mix64(key), each
// slot holding its key and the index of its first occurrence (one cache
// line per probe): several times faster than std::unordered_map at 10^5
// keys.
//
// The table's memory is kept per thread from one KeyDedup to the next, and
// a slot counts as empty unless it carries the current KeyDedup's stamp: a
// new KeyDedup neither allocates (page faults on megabytes) nor clears it.
// A second KeyDedup alive on the same thread, or one for more than 2^19
// keys, gets a table of its own.
//
//   worker::KeyDedup d(keys.size());
//   std::vector<uint32_t> first;                          // indices of first occurrences
//   std::vector<std::pair<uint32_t, uint32_t>> dups;      // (index, its first occurrence)
//   d.insert_all(keys, first, dups);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace parafab::worker {

class KeyDedup {
 public:
  // Room for up to expected_keys distinct keys.
  explicit KeyDedup(size_t expected_keys);
  ~KeyDedup();
  KeyDedup(const KeyDedup&) = delete;
  KeyDedup& operator=(const KeyDedup&) = delete;

  // Returns (index of the first occurrence of key, true if this is it).
  std::pair<uint32_t, bool> insert(uint64_t key, uint32_t index);
  // insert(keys[i], i) for every i in order (at most expected_keys distinct
  // keys): appends each first occurrence's index to `first` and (i, first
  // index) of each later occurrence to `duplicates`. Home slots are
  // prefetched a few keys ahead, so successive keys' cache misses overlap.
  void insert_all(std::span<const uint64_t> keys, std::vector<uint32_t>& first,
                  std::vector<std::pair<uint32_t, uint32_t>>& duplicates);

  struct Slot {
    uint64_t key;
    uint32_t first;
    uint32_t stamp;  // the KeyDedup that wrote it; any other: empty
  };
  struct Table {
    std::vector<Slot> slots;
    uint32_t stamp = 0;
    bool in_use = false;
  };

 private:
  Table own_;       // when the thread's table is taken
  Table* table_;    // the thread's table or own_
  uint64_t mask_ = 0;
  uint32_t stamp_ = 0;
};

}  // namespace parafab::worker

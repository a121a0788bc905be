#include "worker/key_dedup.h"

#include <bit>

#include "ps/key_hash.h"

namespace parafab::worker {

KeyDedup::KeyDedup(size_t expected_keys) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, expected_keys * 2));
  keys_.assign(cap, kEmpty);
  first_.resize(cap);
  mask_ = cap - 1;
}

std::pair<uint32_t, bool> KeyDedup::insert(uint64_t key, uint32_t index) {
  if (key == kEmpty) {
    if (has_empty_key_) return {empty_key_first_, false};
    has_empty_key_ = true;
    empty_key_first_ = index;
    return {index, true};
  }
  // At most expected_keys distinct keys go in, so the load stays <= 1/2.
  for (uint64_t slot = ps::mix64(key) & mask_;; slot = (slot + 1) & mask_) {
    if (keys_[slot] == key) return {first_[slot], false};
    if (keys_[slot] == kEmpty) {
      keys_[slot] = key;
      first_[slot] = index;
      return {index, true};
    }
  }
}

}  // namespace parafab::worker

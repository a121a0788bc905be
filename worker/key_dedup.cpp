#include "worker/key_dedup.h"

#include <algorithm>
#include <bit>

#include "ps/key_hash.h"

namespace parafab::worker {

namespace {
constexpr size_t kAhead = 16;  // prefetch distance, in keys
// The largest table a thread keeps (16 MiB): a batch of more than 2^19 keys
// gets a table of its own, freed with it.
constexpr size_t kKeptSlots = size_t{1} << 20;

KeyDedup::Table& thread_table() {
  thread_local KeyDedup::Table t;
  return t;
}
}  // namespace

KeyDedup::KeyDedup(size_t expected_keys) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, expected_keys * 2));
  Table& shared = thread_table();
  table_ = shared.in_use || cap > kKeptSlots ? &own_ : &shared;
  table_->in_use = true;
  std::vector<Slot>& slots = table_->slots;
  if (++table_->stamp == 0) {  // the stamps wrapped: old ones could pass as current
    std::fill(slots.begin(), slots.end(), Slot{0, 0, 0});
    table_->stamp = 1;
  }
  stamp_ = table_->stamp;
  // Zero stamps mark never-used slots; a table bigger than needed is used
  // in part (its first cap slots).
  if (slots.size() < cap) slots.assign(cap, Slot{0, 0, 0});
  mask_ = cap - 1;
}

KeyDedup::~KeyDedup() { table_->in_use = false; }

std::pair<uint32_t, bool> KeyDedup::insert(uint64_t key, uint32_t index) {
  Slot* slots = table_->slots.data();
  // At most expected_keys distinct keys go in, so the load stays <= 1/2.
  for (uint64_t i = ps::mix64(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots[i];
    if (s.stamp != stamp_) {
      s = Slot{key, index, stamp_};
      return {index, true};
    }
    if (s.key == key) return {s.first, false};
  }
}

void KeyDedup::insert_all(std::span<const uint64_t> keys, std::vector<uint32_t>& first,
                          std::vector<std::pair<uint32_t, uint32_t>>& duplicates) {
  const Slot* slots = table_->slots.data();
  const size_t n = keys.size();
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&slots[ps::mix64(keys[i + kAhead]) & mask_], 1);
    const auto [f, fresh] = insert(keys[i], static_cast<uint32_t>(i));
    if (fresh) {
      first.push_back(f);
    } else {
      duplicates.emplace_back(static_cast<uint32_t>(i), f);
    }
  }
}

}  // namespace parafab::worker

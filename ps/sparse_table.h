// A server's shard of a sparse table: uint64 keys -> `width` floats of value
// plus the updater's optimizer state, in an open-addressing hash table.
//
//   ps::TableSchema t{.id = 3, .kind = ps::TableKind::kSparse, .width = 1};
//   t.updater.kind = ps::UpdaterKind::kAdaGrad;
//   ps::SparseTable table(t);
//   ps::PushResult r = table.push(keys, grads);   // keys unique within the call
//   table.pull(keys, values);                      // absent keys read their initial value
//
// Layout. The table is split into sub-shards, each with its own mutex, so
// several server threads apply pushes without a global lock. A key goes to the
// sub-shard picked by bits 32..47 of mix64(key): servers own ranges of
// mix64(key) (KeyPartition), which fix the top bits on one server, while bits
// 32..47 still vary within any server's range for up to 2^16 servers. Inside a
// sub-shard, linear probing over struct-of-arrays: a uint64 key array whose
// empty slots hold the sentinel ~0, and one float array with width + state
// floats per slot; the home slot comes from the low 32 bits of mix64(key)
// (independent of the sub-shard bits). The real key ~0 lives in a side slot
// of its sub-shard.
//
// Memory. A sub-shard grows when its load passes 0.85, to a capacity that puts
// the load back at 0.70 (a factor ~1.21, not 2): doubling at 0.8 would leave
// the table at load 0.4 after each growth, 40 bytes per width-1 AdaGrad key
// instead of the 16 / 0.7 = 22.9 bytes this policy never exceeds. Arrays of
// 64 KiB and more are mapped with mmap, so the arrays a growth replaces go
// back to the system at once (malloc would keep them in its heap). Growth
// rehashes one sub-shard under its lock; the other sub-shards stay available.
//
// Concurrency. pull, push, size, memory_bytes, reserve and for_each may be
// called from any number of threads at once. A push or pull takes each
// sub-shard's lock once, in increasing sub-shard order (no nested locks
// otherwise, so no lock-order cycles). Updates of one key are serialized by
// its sub-shard's lock; a pull sees each key either before or after a
// concurrent push's update, never half of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ps/table_schema.h"

namespace parafab::ps {

class ApplyPool;

struct PushResult {
  size_t applied = 0;             // keys whose gradient was applied
  size_t refused_non_finite = 0;  // keys refused: non-finite gradient or result (value untouched)
  size_t inserted = 0;            // keys that were absent and were inserted
};

class SparseTable {
 public:
  // Throws std::invalid_argument when the schema is invalid, not sparse, or
  // sub_shards is not in [1, 4096].
  explicit SparseTable(const TableSchema& schema, unsigned sub_shards = 64);
  ~SparseTable();
  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  // out: keys.size() x width floats, row i for keys[i]. Absent keys read as
  // their initial value (initialize_value) and are not inserted. Duplicate
  // keys are allowed here. With a pool, a call of many keys is split by
  // sub-shards over its threads.
  void pull(std::span<const uint64_t> keys, float* out, ApplyPool* pool = nullptr) const;

  // grads: keys.size() x width floats. Keys must be unique within one call
  // (the client merges duplicates; a duplicate is applied twice). Absent keys
  // are inserted with initialize_value + initialize_state, then every key's
  // gradient is applied with the table's updater (apply_update, or a batched
  // width-1 SGD/AdaGrad path with the same arithmetic). A key whose gradient
  // is not finite is refused and counted, and not inserted; the others of the
  // same push are applied. With a pool, a push of many keys is applied by
  // its threads side by side, each over a run of sub-shards (results are the
  // same: a key lives in one sub-shard, and its entries keep their order).
  PushResult push(std::span<const uint64_t> keys, const float* grads, ApplyPool* pool = nullptr);

  size_t size() const;          // keys held
  size_t memory_bytes() const;  // bytes of the arrays and bookkeeping the table holds
  // Grows the sub-shards so that about `keys` keys in all fit without another
  // growth (never shrinks).
  void reserve(size_t keys);
  const TableSchema& schema() const { return schema_; }
  unsigned sub_shards() const { return sub_shard_count_; }
  // Keys per sub-shard (diagnostics: how evenly one server's keys spread).
  std::vector<size_t> sub_shard_sizes() const;

  // Visits every key once with its value (width floats) and state
  // (state_floats_per_key floats), one sub-shard at a time under that
  // sub-shard's lock: the callback must not call back into this table.
  // Concurrent pushes to other sub-shards may proceed meanwhile (a checkpoint
  // taken while pushes run is consistent per key, not across keys).
  void for_each(const std::function<void(uint64_t key, const float* value, const float* state)>& visit) const;

  // Sets key's value (width floats) and state (state_floats_per_key floats),
  // inserting it if absent: a checkpoint's contents going back in.
  void restore(uint64_t key, const float* value, const float* state);
  size_t state_floats() const { return state_floats_; }

 private:
  struct SubShard;

 public:
  struct Grouping;  // a call's keys sorted by sub-shard (sparse_table.cpp)

 private:
  template <int kMode>
  void push_sub_shard(const Grouping& g, SubShard& s, size_t begin, size_t count, const float* grads,
                      PushResult& result);
  void pull_sub_shard(const Grouping& g, const SubShard& s, size_t begin, size_t count, float* out) const;
  void over_sub_shard_runs(const Grouping& g, ApplyPool* pool, unsigned parts,
                           const std::function<void(unsigned part, unsigned first, unsigned last)>& run) const;
  static uint64_t capacity_for(uint64_t keys);  // the capacity that holds keys at the target load
  void grow_to(SubShard& s, uint64_t capacity);

  TableSchema schema_;
  uint32_t width_ = 1;
  uint32_t state_floats_ = 0;
  uint32_t stride_ = 1;  // floats per slot: width + state
  unsigned sub_shard_count_ = 1;
  std::unique_ptr<SubShard[]> shards_;
};

}  // namespace parafab::ps

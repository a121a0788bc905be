// SparseTable: sub-sharded linear probing (layout and growth policy in the
// header). A push or pull runs in three steps:
//   1. counting-sort the keys by sub-shard (scratch arrays per thread,
//      reused across calls: a 10^5-key push then allocates nothing);
//   2. per sub-shard, take its lock once (with an ApplyPool, runs of
//      sub-shards go to its threads side by side);
//   3. walk that sub-shard's keys, prefetching the home slot (key and value
//      lines) kAhead keys ahead, so the cache misses of successive keys
//      overlap instead of queuing one after the other; each probe compares
//      four slots at once (probe()), and width-1 SGD/AdaGrad pushes step
//      their keys in vectorized blocks (push_sub_shard).
#include "ps/sparse_table.h"

#include <sys/mman.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ps/apply_pool.h"
#include "ps/key_hash.h"
#include "ps/updaters/batched_width1.h"

namespace parafab::ps {
namespace {

constexpr uint64_t kEmptyKey = ~uint64_t{0};  // marks a free slot; the real key lives in the side slot
constexpr double kMaxLoad = 0.85;             // a sub-shard grows when its load would pass this
constexpr double kTargetLoad = 0.70;          // ... to a capacity that puts the load back here
constexpr uint64_t kMinCapacity = 16;
constexpr uint64_t kMaxCapacity = uint64_t{1} << 32;  // home_slot maps 32 bits of the hash
constexpr size_t kAhead = 16;                         // prefetch distance, in keys
constexpr unsigned kMaxSubShards = 4096;

// Bits 32..47 of the mixed key: they vary within one server's range (see the
// header), and are disjoint from the 32 bits home_slot uses.
inline unsigned sub_shard_of(uint64_t mixed, unsigned count) {
  return static_cast<unsigned>((((mixed >> 32) & 0xFFFF) * count) >> 16);
}

// Home slot in [0, capacity): the low 32 bits of the mixed key scaled to the
// capacity (Lemire's multiply-shift), so capacities need not be powers of two.
inline uint64_t home_slot(uint64_t mixed, uint64_t capacity) {
  return ((mixed & 0xFFFFFFFFu) * capacity) >> 32;
}

// The slot holding `key` (not kEmptyKey) or else the first free slot of its
// probe sequence, starting at its home slot `pos`: {slot, key found}. The
// first four slots are compared at once (SSE2), so that the usual probe of
// one to three slots ends on a predictable branch rather than on a loop exit
// that is mispredicted about once a key.
inline std::pair<uint64_t, bool> probe(const uint64_t* ks, uint64_t cap, uint64_t pos, uint64_t key) {
#if defined(__SSE2__)
  if (pos + 4 <= cap) {
    // 64-bit equality from 32-bit compares: both halves equal.
    auto eq64 = [](__m128i x, __m128i y) {
      const __m128i c = _mm_cmpeq_epi32(x, y);
      return _mm_castsi128_pd(_mm_and_si128(c, _mm_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1))));
    };
    const __m128i want = _mm_set1_epi64x(static_cast<long long>(key));
    const __m128i empty = _mm_set1_epi64x(static_cast<long long>(kEmptyKey));
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ks + pos));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ks + pos + 2));
    const unsigned found = static_cast<unsigned>(_mm_movemask_pd(eq64(a, want)) | (_mm_movemask_pd(eq64(b, want)) << 2));
    const unsigned free = static_cast<unsigned>(_mm_movemask_pd(eq64(a, empty)) | (_mm_movemask_pd(eq64(b, empty)) << 2));
    if (const unsigned either = found | free; either != 0) [[likely]] {
      const int i = std::countr_zero(either);
      return {pos + static_cast<uint64_t>(i), ((found >> i) & 1u) != 0};
    }
    pos += 4;
    if (pos == cap) pos = 0;
  }
#endif
  for (;;) {
    const uint64_t k = ks[pos];
    if (k == key) return {pos, true};
    if (k == kEmptyKey) return {pos, false};
    if (++pos == cap) pos = 0;
  }
}

enum Mode { kGeneric = 0, kSgdWidth1 = 1, kAdaGradWidth1 = 2 };

}  // namespace

// An array of trivially copyable T. From 64 KiB on it is its own anonymous
// mapping, so freeing it (after a growth) returns the pages to the system at
// once; from 2 MiB on it asks for transparent huge pages, which cut the TLB
// misses of random probes into a large table.
template <typename T>
class MappedArray {
 public:
  MappedArray() = default;
  explicit MappedArray(size_t count) {
    bytes_ = std::max<size_t>(count * sizeof(T), sizeof(T));
    if (bytes_ >= kMapThreshold) {
      bytes_ = (bytes_ + kPage - 1) / kPage * kPage;
      // Huge-page sized arrays start on a 2 MiB boundary (map 2 MiB more,
      // unmap the ends), so transparent huge pages can back all of them.
      const size_t align = bytes_ >= kHugeThreshold ? kHuge : kPage;
      const size_t span = bytes_ + align - kPage;
      void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      auto* base = static_cast<unsigned char*>(p);
      auto* start = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(base) + align - 1) / align * align);
      if (start > base) ::munmap(base, start - base);
      if (base + span > start + bytes_) ::munmap(start + bytes_, base + span - (start + bytes_));
      if (bytes_ >= kHugeThreshold) (void)::madvise(start, bytes_, MADV_HUGEPAGE);  // a hint; failure is fine
      ptr_ = reinterpret_cast<T*>(start);
      mapped_ = true;
    } else {
      ptr_ = static_cast<T*>(::operator new(bytes_, std::align_val_t{64}));
    }
  }
  ~MappedArray() { release(); }
  MappedArray(MappedArray&& o) noexcept { *this = std::move(o); }
  MappedArray& operator=(MappedArray&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      mapped_ = std::exchange(o.mapped_, false);
    }
    return *this;
  }
  T* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kPage = 4096, kHuge = 2 * 1024 * 1024, kMapThreshold = 64 * 1024,
                          kHugeThreshold = 2 * 1024 * 1024;
  void release() {
    if (ptr_ == nullptr) return;
    if (mapped_) {
      ::munmap(ptr_, bytes_);
    } else {
      ::operator delete(ptr_, std::align_val_t{64});
    }
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
};

// One sub-shard. Invariants (under mu): capacity == 0 or keys/data hold
// capacity slots; size < grow_at < capacity, so a probe always meets a free
// slot; a key appears at most once; side_used says whether kEmptyKey itself
// is a key (its floats in side).
struct alignas(64) SparseTable::SubShard {
  mutable std::mutex mu;
  MappedArray<uint64_t> keys;
  MappedArray<float> data;  // capacity x stride: value then state per slot
  uint64_t capacity = 0;
  uint64_t size = 0;     // keys in the arrays (not counting the side slot)
  uint64_t grow_at = 0;  // the largest size allowed before a growth
  bool side_used = false;
  std::vector<float> side;
};

// Per-thread scratch for grouping a call's keys by sub-shard. Reused across
// calls (and tables) so steady-state pushes do not allocate. The sorted
// arrays hold only what the per-sub-shard loops read: their writes to
// scattered positions (megabytes at 10^5 keys) are most of the grouping's
// time. `order` is written only when gradients are not gathered.
//
// One pass: each sub-shard gets room for a little more than its fair share
// (n / count + 5 sqrt(n / count) + 16 keys: five standard deviations, so
// hashed keys overflow one of 64 rooms in fewer than 1 call in 10^4), so
// keys are placed as they are hashed, without counting first. Only when a
// sub-shard overflows its room (keys chosen to collide) is the call grouped
// again, counted first: the two passes hash each key twice. 10^5 present
// AdaGrad keys, one thread: push 1.12 -> 1.06 ms, pull 0.92 -> 0.84 ms.
struct SparseTable::Grouping {
  // Sub-shard s holds sorted positions [begin[s], end[s]); positions
  // between end[s] and begin[s + 1] hold nothing.
  std::vector<uint32_t> begin, end;
  size_t keys = 0;                   // of the call
  std::vector<uint32_t> order;       // sorted position -> input position (not for width-1 pushes)
  std::vector<uint32_t> sorted_low;  // low 32 bits of each sorted key's mix64: all home_slot needs
  std::vector<uint64_t> sorted_keys;
  std::vector<float> sorted_grads;   // width-1 pushes only

  // Sorts by sub-shard (stable). With grads (width 1), gathers them instead
  // of `order`, so the per-sub-shard loops read keys, hashes and gradients
  // sequentially.
  void build(std::span<const uint64_t> in, unsigned count, const float* grads = nullptr) {
    if (in.size() >= std::numeric_limits<uint32_t>::max()) {
      throw std::length_error("SparseTable: " + std::to_string(in.size()) + " keys in one call (at most 2^32 - 2)");
    }
    keys = in.size();
    begin.resize(count);
    end.resize(count);
    const size_t fair = keys / count;
    const size_t room = fair + 5 * static_cast<size_t>(std::sqrt(static_cast<double>(fair))) + 16;
    if (room * count < std::numeric_limits<uint32_t>::max()) {
      size_arrays(room * count, grads != nullptr);
      limit.resize(count);
      for (unsigned s = 0; s < count; ++s) {
        begin[s] = end[s] = static_cast<uint32_t>(s * room);
        limit[s] = static_cast<uint32_t>((s + 1) * room);
      }
      const bool placed =
          grads != nullptr ? place_in_rooms(in, [&](uint32_t pos, size_t i) { sorted_grads[pos] = grads[i]; })
                           : place_in_rooms(in, [&](uint32_t pos, size_t i) { order[pos] = static_cast<uint32_t>(i); });
      if (placed) return;
    }
    size_arrays(keys, grads != nullptr);
    if (shard.size() < keys) shard.resize(keys);
    std::fill(end.begin(), end.end(), 0u);
    for (size_t i = 0; i < keys; ++i) {
      const unsigned s = sub_shard_of(mix64(in[i]), count);
      shard[i] = static_cast<uint16_t>(s);
      ++end[s];
    }
    uint32_t at = 0;
    for (unsigned s = 0; s < count; ++s) {
      begin[s] = at;
      at += end[s];
      end[s] = begin[s];
    }
    if (grads != nullptr) {
      place_counted(in, [&](uint32_t pos, size_t i) { sorted_grads[pos] = grads[i]; });
    } else {
      place_counted(in, [&](uint32_t pos, size_t i) { order[pos] = static_cast<uint32_t>(i); });
    }
  }

 private:
  std::vector<uint32_t> limit;   // the end of sub-shard s's room (the one-pass grouping)
  std::vector<uint16_t> shard;   // by input position (the counted grouping only)

  // Grown, never shrunk: a resize back up would zero the difference again
  // (calls of few and of many keys alternate).
  void size_arrays(size_t n, bool gathered) {
    auto at_least = [n](auto& v) {
      if (v.size() < n) v.resize(n);
    };
    at_least(sorted_low);
    at_least(sorted_keys);
    if (gathered) {
      at_least(sorted_grads);
    } else {
      at_least(order);
    }
  }
  // false: a sub-shard has more keys than its room.
  template <typename Extra>
  bool place_in_rooms(std::span<const uint64_t> in, Extra extra) {
    const unsigned count = static_cast<unsigned>(begin.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const uint64_t m = mix64(in[i]);
      const unsigned s = sub_shard_of(m, count);
      const uint32_t pos = end[s];
      if (pos == limit[s]) [[unlikely]] return false;
      end[s] = pos + 1;
      sorted_low[pos] = static_cast<uint32_t>(m);
      sorted_keys[pos] = in[i];
      extra(pos, i);
    }
    return true;
  }
  template <typename Extra>
  void place_counted(std::span<const uint64_t> in, Extra extra) {
    for (size_t i = 0; i < in.size(); ++i) {
      const uint32_t pos = end[shard[i]]++;
      sorted_low[pos] = static_cast<uint32_t>(mix64(in[i]));
      sorted_keys[pos] = in[i];
      extra(pos, i);
    }
  }
};

namespace {

SparseTable::Grouping& thread_grouping() {
  thread_local SparseTable::Grouping g;
  return g;
}

// Parts of a call for `pool`: 1 below kParallelKeys keys (waking a helper
// costs tens of microseconds, a key well under 0.1), else one per thread.
constexpr size_t kParallelKeys = 16384;
unsigned parts_for(const ApplyPool* pool, size_t keys) {
  return pool == nullptr || keys < kParallelKeys ? 1u : pool->threads();
}

}  // namespace

// Calls run(part, first, last) for each of `parts` runs of sub-shards
// [first, last): all of them on this thread when parts is 1, else side by
// side on the pool, runs of about equal key counts so that the parts finish
// together. The pool's hand-off orders the grouping's writes before the
// helpers' reads.
void SparseTable::over_sub_shard_runs(const Grouping& g, ApplyPool* pool, unsigned parts,
                                      const std::function<void(unsigned, unsigned, unsigned)>& run) const {
  if (parts <= 1) {
    run(0, 0, sub_shard_count_);
    return;
  }
  std::vector<unsigned> first(parts + 1, sub_shard_count_);
  first[0] = 0;
  uint64_t before = 0;  // keys of the sub-shards below sh
  unsigned sh = 0;
  for (unsigned p = 1; p < parts; ++p) {
    const uint64_t target = uint64_t{g.keys} * p / parts;
    while (sh < sub_shard_count_ && before < target) {
      before += g.end[sh] - g.begin[sh];
      ++sh;
    }
    first[p] = sh;
  }
  pool->run(parts, [&](unsigned p) { run(p, first[p], first[p + 1]); });
}

SparseTable::SparseTable(const TableSchema& schema, unsigned sub_shards) : schema_(schema) {
  schema_.validate();
  const std::string who = "SparseTable (table " + std::to_string(schema_.id) + "): ";
  if (schema_.kind != TableKind::kSparse) throw std::invalid_argument(who + "schema kind is not sparse");
  if (sub_shards == 0 || sub_shards > kMaxSubShards) {
    throw std::invalid_argument(who + "sub_shards = " + std::to_string(sub_shards) + " must be in [1, " +
                                std::to_string(kMaxSubShards) + "]");
  }
  width_ = schema_.width;
  state_floats_ = static_cast<uint32_t>(state_floats_per_key(schema_.updater.kind, width_));
  stride_ = width_ + state_floats_;
  sub_shard_count_ = sub_shards;
  shards_ = std::make_unique<SubShard[]>(sub_shards);
}

SparseTable::~SparseTable() = default;

uint64_t SparseTable::capacity_for(uint64_t keys) {
  return std::max<uint64_t>(kMinCapacity, static_cast<uint64_t>(std::ceil(static_cast<double>(keys) / kTargetLoad)));
}

void SparseTable::grow_to(SubShard& s, uint64_t cap) {
  cap = std::max(cap, s.capacity + 1);
  if (cap > kMaxCapacity) {
    throw std::length_error("SparseTable (table " + std::to_string(schema_.id) + "): a sub-shard would need " +
                            std::to_string(cap) + " slots (at most 2^32); use more sub-shards");
  }
  MappedArray<uint64_t> keys(cap);
  MappedArray<float> data(cap * stride_);
  uint64_t* nk = keys.data();
  float* nd = data.data();
  std::fill(nk, nk + cap, kEmptyKey);
  // Old slots in order: home_slot is monotonic in the hash, so the writes into
  // the new arrays run nearly sequentially too.
  const uint64_t* ok = s.keys.data();
  const float* od = s.data.data();
  for (uint64_t j = 0; j < s.capacity; ++j) {
    const uint64_t key = ok[j];
    if (key == kEmptyKey) continue;
    uint64_t pos = home_slot(mix64(key), cap);
    while (nk[pos] != kEmptyKey) {
      if (++pos == cap) pos = 0;
    }
    nk[pos] = key;
    const float* from = od + j * stride_;
    float* to = nd + pos * stride_;
    for (uint32_t c = 0; c < stride_; ++c) to[c] = from[c];
  }
  s.keys = std::move(keys);
  s.data = std::move(data);
  s.capacity = cap;
  s.grow_at = std::min<uint64_t>(static_cast<uint64_t>(static_cast<double>(cap) * kMaxLoad), cap - 1);
}

// Width-1 SGD and AdaGrad keys go in blocks: the probes (and inserts) of a
// block's keys gather their value, accumulator and gradient, then the block
// is stepped at once (sgd_block_w1 / adagrad_block_w1, vectorized) and what
// fits is written back, so a mispredicted probe no longer throws away the
// square roots and divisions of the keys around it. With probe()'s
// four-slot compare: 10^5 present keys, AdaGrad, one thread, 1.59 -> 1.37
// ms a push (either change alone: <= 3%). A block ends early before a growth
// (which moves the slots) and before a key whose slot is already in it, so a
// key given twice in one call is still applied twice, in order. The block's
// slots are marked in place (kInBlock) rather than in a side table hashed by
// slot address: 1.26 -> 1.12 ms, the hash and its table's loads and stores
// gone from each key's path.
template <int kMode>
void SparseTable::push_sub_shard(const Grouping& g, SubShard& s, size_t begin, size_t count, const float* grads,
                                 PushResult& result) {
  const uint32_t* low = g.sorted_low.data() + begin;
  const uint64_t* keys = g.sorted_keys.data() + begin;
  // Width 1: the gradients were gathered in sorted order, and `order` is not kept.
  const uint32_t* order = kMode == kGeneric ? g.order.data() + begin : nullptr;
  const float* grads1 = kMode == kGeneric ? nullptr : g.sorted_grads.data() + begin;
  if (s.capacity == 0) grow_to(s, capacity_for(count));  // empty: count bounds the inserts
  const UpdaterConfig& cfg = schema_.updater;
  const updaters::Width1Params p(cfg);
  const uint32_t W = kMode == kGeneric ? width_ : 1;
  const uint32_t stride = kMode == kGeneric ? stride_ : (kMode == kSgdWidth1 ? 1 : 2);
  // Width-1 inserts with the zero initializer are written here; otherwise
  // through initialize_value / initialize_state.
  const bool inline_init = kMode != kGeneric && schema_.init.kind == InitializerKind::kZeros;
  const float initial_acc = cfg.adagrad_initial_accumulator;
  size_t applied = 0, refused = 0, inserted = 0;

  // The block of width-1 keys waiting for their step.
  constexpr size_t kBlock = updaters::kWidth1Block;
  float* where[kBlock];
  float value[kBlock], acc[kBlock], grad[kBlock];
  size_t nb = 0;
  // A slot taken into the block holds kInBlock in its value until the block
  // is written back: a key that finds it there is a key already in the
  // block, so the block ends first. (A value that is kInBlock itself, a NaN
  // only a restore can put there, ends a block early: harmless.)
  constexpr uint32_t kInBlock = 0x7FA1B10Cu;
  auto step_block = [&] {
    if (nb == 0) return;
    // A key whose result does not fit keeps its floats: writing them back
    // changes nothing.
    size_t misfits = 0;
    if constexpr (kMode == kSgdWidth1) {
      misfits = static_cast<size_t>(updaters::sgd_block_w1(p, value, grad, nb));
    } else if constexpr (kMode == kAdaGradWidth1) {
      misfits = static_cast<size_t>(updaters::adagrad_block_w1(p, value, acc, grad, nb));
    }
    for (size_t k = 0; k < nb; ++k) {
      where[k][0] = value[k];
      if constexpr (kMode == kAdaGradWidth1) where[k][1] = acc[k];
    }
    applied += nb - misfits;
    refused += misfits;
    nb = 0;
  };

  for (size_t j = 0; j < count; ++j) {
    if (j + kAhead < count) {
      const uint64_t ahead = home_slot(low[j + kAhead], s.capacity);
      __builtin_prefetch(s.keys.data() + ahead, 1);
      __builtin_prefetch(s.data.data() + ahead * stride, 1);
    }
    const uint64_t key = keys[j];
    const float* grad_row = kMode == kGeneric ? grads + static_cast<size_t>(order[j]) * W : grads1 + j;
    const bool finite = kMode == kGeneric ? all_finite(grad_row, W) : std::isfinite(*grad_row);
    if (!finite) [[unlikely]] {
      ++refused;
      continue;
    }
    float* slot;
    bool fresh = false;
    if (key == kEmptyKey) [[unlikely]] {
      if (!s.side_used) {
        s.side.assign(stride_, 0.0f);
        s.side_used = fresh = true;
      }
      slot = s.side.data();
    } else {
      uint64_t cap = s.capacity;
      uint64_t* ks = s.keys.data();
      auto [pos, found] = probe(ks, cap, home_slot(low[j], cap), key);
      if (!found) {
        if (s.size + 1 > s.grow_at) {
          step_block();  // the growth moves the block's slots
          grow_to(s, capacity_for(s.size + 1));
          cap = s.capacity;
          ks = s.keys.data();
          pos = home_slot(low[j], cap);
          while (ks[pos] != kEmptyKey) {
            if (++pos == cap) pos = 0;
          }
        }
        ks[pos] = key;
        ++s.size;
        fresh = true;
      }
      slot = s.data.data() + pos * stride;
    }
    if (fresh) {
      if (inline_init) {
        slot[0] = 0.0f;
        if constexpr (kMode == kAdaGradWidth1) slot[1] = initial_acc;
      } else {
        initialize_value(schema_.init, key, slot, W);
        initialize_state(cfg, slot, slot + W, W);
      }
      ++inserted;
    }
    if constexpr (kMode == kGeneric) {
      if (apply_update(cfg, slot, slot + W, grad_row, W) == UpdateStatus::kApplied) [[likely]] {
        ++applied;
      } else {
        ++refused;
      }
    } else {
      if (std::bit_cast<uint32_t>(slot[0]) == kInBlock) [[unlikely]] step_block();
      where[nb] = slot;
      value[nb] = slot[0];
      slot[0] = std::bit_cast<float>(kInBlock);
      if constexpr (kMode == kAdaGradWidth1) acc[nb] = slot[1];
      grad[nb] = *grad_row;
      if (++nb == kBlock) step_block();
    }
  }
  step_block();
  result.applied += applied;
  result.refused_non_finite += refused;
  result.inserted += inserted;
}

PushResult SparseTable::push(std::span<const uint64_t> keys, const float* grads, ApplyPool* pool) {
  PushResult result;
  if (keys.empty()) return result;
  int mode = kGeneric;
  if (width_ == 1 && schema_.updater.kind == UpdaterKind::kSgd) mode = kSgdWidth1;
  if (width_ == 1 && schema_.updater.kind == UpdaterKind::kAdaGrad) mode = kAdaGradWidth1;
  Grouping& g = thread_grouping();
  g.build(keys, sub_shard_count_, mode == kGeneric ? nullptr : grads);
  // Each part applies its own run of sub-shards, each under its lock.
  const unsigned parts = parts_for(pool, keys.size());
  std::vector<PushResult> results(parts);
  over_sub_shard_runs(g, pool, parts, [&](unsigned p, unsigned first, unsigned last) {
    for (unsigned sh = first; sh < last; ++sh) {
      const uint32_t begin = g.begin[sh], end = g.end[sh];
      if (begin == end) continue;
      SubShard& s = shards_[sh];
      std::lock_guard<std::mutex> lock(s.mu);
      switch (mode) {
        case kSgdWidth1: push_sub_shard<kSgdWidth1>(g, s, begin, end - begin, grads, results[p]); break;
        case kAdaGradWidth1: push_sub_shard<kAdaGradWidth1>(g, s, begin, end - begin, grads, results[p]); break;
        default: push_sub_shard<kGeneric>(g, s, begin, end - begin, grads, results[p]); break;
      }
    }
  });
  for (const PushResult& r : results) {
    result.applied += r.applied;
    result.refused_non_finite += r.refused_non_finite;
    result.inserted += r.inserted;
  }
  return result;
}

void SparseTable::pull_sub_shard(const Grouping& g, const SubShard& s, size_t begin, size_t count,
                                 float* out) const {
  const uint32_t* low = g.sorted_low.data() + begin;
  const uint64_t* keys = g.sorted_keys.data() + begin;
  const uint32_t* order = g.order.data() + begin;
  const uint32_t W = width_, stride = stride_;
  const uint64_t cap = s.capacity;
  const uint64_t* ks = s.keys.data();
  const float* data = s.data.data();
  for (size_t j = 0; j < count; ++j) {
    if (cap != 0 && j + kAhead < count) {
      const uint64_t ahead = home_slot(low[j + kAhead], cap);
      __builtin_prefetch(ks + ahead);
      __builtin_prefetch(data + ahead * stride);
    }
    const uint64_t key = keys[j];
    float* row = out + static_cast<size_t>(order[j]) * W;
    const float* found = nullptr;
    if (key == kEmptyKey) [[unlikely]] {
      if (s.side_used) found = s.side.data();
    } else if (cap != 0) {
      const auto [pos, present] = probe(ks, cap, home_slot(low[j], cap), key);
      if (present) found = data + pos * stride;
    }
    if (found != nullptr) {
      if (W == 1) {
        row[0] = found[0];
      } else {
        std::copy_n(found, W, row);
      }
    } else {
      initialize_value(schema_.init, key, row, W);
    }
  }
}

void SparseTable::pull(std::span<const uint64_t> keys, float* out, ApplyPool* pool) const {
  if (keys.empty()) return;
  Grouping& g = thread_grouping();
  g.build(keys, sub_shard_count_);
  over_sub_shard_runs(g, pool, parts_for(pool, keys.size()), [&](unsigned, unsigned first, unsigned last) {
    for (unsigned sh = first; sh < last; ++sh) {
      const uint32_t begin = g.begin[sh], end = g.end[sh];
      if (begin == end) continue;
      const SubShard& s = shards_[sh];
      std::lock_guard<std::mutex> lock(s.mu);
      pull_sub_shard(g, s, begin, end - begin, out);
    }
  });
}

size_t SparseTable::size() const {
  size_t n = 0;
  for (unsigned sh = 0; sh < sub_shard_count_; ++sh) {
    std::lock_guard<std::mutex> lock(shards_[sh].mu);
    n += shards_[sh].size + (shards_[sh].side_used ? 1 : 0);
  }
  return n;
}

std::vector<size_t> SparseTable::sub_shard_sizes() const {
  std::vector<size_t> sizes(sub_shard_count_);
  for (unsigned sh = 0; sh < sub_shard_count_; ++sh) {
    std::lock_guard<std::mutex> lock(shards_[sh].mu);
    sizes[sh] = shards_[sh].size + (shards_[sh].side_used ? 1 : 0);
  }
  return sizes;
}

size_t SparseTable::memory_bytes() const {
  size_t bytes = sizeof(*this) + sub_shard_count_ * sizeof(SubShard);
  for (unsigned sh = 0; sh < sub_shard_count_; ++sh) {
    const SubShard& s = shards_[sh];
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.capacity != 0) bytes += s.keys.bytes() + s.data.bytes();
    bytes += s.side.capacity() * sizeof(float);
  }
  return bytes;
}

void SparseTable::reserve(size_t keys) {
  // Keys spread over the sub-shards binomially: allow four standard
  // deviations above the mean in each, at the upper load.
  const double mean = static_cast<double>(keys) / sub_shard_count_;
  const auto per = static_cast<uint64_t>(std::ceil(mean + 4.0 * std::sqrt(mean)));
  const auto cap = static_cast<uint64_t>(std::ceil(static_cast<double>(per) / kMaxLoad)) + 1;
  for (unsigned sh = 0; sh < sub_shard_count_; ++sh) {
    SubShard& s = shards_[sh];
    std::lock_guard<std::mutex> lock(s.mu);
    if (per > s.grow_at) grow_to(s, cap);
  }
}

void SparseTable::for_each(
    const std::function<void(uint64_t key, const float* value, const float* state)>& visit) const {
  for (unsigned sh = 0; sh < sub_shard_count_; ++sh) {
    const SubShard& s = shards_[sh];
    std::lock_guard<std::mutex> lock(s.mu);
    const uint64_t* ks = s.keys.data();
    const float* data = s.data.data();
    for (uint64_t j = 0; j < s.capacity; ++j) {
      if (ks[j] != kEmptyKey) visit(ks[j], data + j * stride_, data + j * stride_ + width_);
    }
    if (s.side_used) visit(kEmptyKey, s.side.data(), s.side.data() + width_);
  }
}

void SparseTable::restore(uint64_t key, const float* value, const float* state) {
  const uint64_t m = mix64(key);
  SubShard& s = shards_[sub_shard_of(m, sub_shard_count_)];
  std::lock_guard<std::mutex> lock(s.mu);
  float* slot = nullptr;
  if (key == kEmptyKey) {
    s.side.assign(stride_, 0.0f);
    s.side_used = true;
    slot = s.side.data();
  } else {
    if (s.capacity == 0 || s.size + 1 > s.grow_at) grow_to(s, capacity_for(s.size + 1));
    uint64_t* ks = s.keys.data();
    uint64_t pos = home_slot(m, s.capacity);
    while (ks[pos] != kEmptyKey && ks[pos] != key) {
      if (++pos == s.capacity) pos = 0;
    }
    if (ks[pos] == kEmptyKey) {
      ks[pos] = key;
      ++s.size;
    }
    slot = s.data.data() + pos * stride_;
  }
  std::copy(value, value + width_, slot);
  std::copy(state, state + state_floats_, slot + width_);
}

}  // namespace parafab::ps

#include "worker/slot_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <stdexcept>

#include "worker/parallel_ranges.h"

namespace parafab::worker {

SlotMap SlotMap::for_data(const DatasetView& data, int hash_bits) {
  if (hash_bits < 0 || hash_bits > 31)
    throw std::invalid_argument(fmt::format("--hash-bits must be in [1, 31] (or 0 for automatic), got {}", hash_bits));
  if (hash_bits > 0) return SlotMap{SlotMode::kHashed, 1ULL << hash_bits};
  uint64_t max_key = 0;
  for (uint64_t k : data.keys) max_key = std::max(max_key, k);
  if (data.keys.empty() || max_key < kMaxAutoDirect) return SlotMap{SlotMode::kDirect, max_key + 1};
  return SlotMap{SlotMode::kHashed, 1ULL << kDefaultHashBits};
}

std::string SlotMap::describe() const {
  if (mode == SlotMode::kDirect) return fmt::format("direct, {} slots + bias", dim);
  return fmt::format("hashed, 2^{} slots + bias", std::countr_zero(dim));
}

SlotCsr SlotCsr::build(const DatasetView& data, const SlotMap& map, int threads) {
  SlotCsr out;
  const size_t n = data.rows();
  out.labels.assign(data.labels.begin(), data.labels.end());
  std::atomic<bool> values_all_ones{true};
  parallel_ranges(data.values.size(), threads, [&](size_t lo, size_t hi) {
    if (!std::all_of(data.values.begin() + static_cast<ptrdiff_t>(lo), data.values.begin() + static_cast<ptrdiff_t>(hi),
                     [](float v) { return v == 1.0f; }))
      values_all_ones.store(false, std::memory_order_relaxed);
  });
  const bool all_ones = values_all_ones.load();

  // Pass 1 (parallel over row blocks): slots of kept nonzeros per row.
  std::vector<uint64_t> kept(n + 1, 0);
  const bool direct = map.mode == SlotMode::kDirect;
  parallel_ranges(n, threads, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      uint64_t c = 0;
      if (direct) {
        for (uint64_t k : data.row_keys(i)) c += k < map.dim;
      } else {
        c = data.row_ptr[i + 1] - data.row_ptr[i];
      }
      kept[i + 1] = c;
    }
  });
  for (size_t i = 0; i < n; ++i) kept[i + 1] += kept[i];
  out.row_ptr = std::move(kept);
  out.dropped = data.nnz() - out.row_ptr[n];
  out.cols.resize(out.row_ptr[n]);
  if (!all_ones) out.vals.resize(out.row_ptr[n]);

  // Pass 2: fill.
  parallel_ranges(n, threads, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      uint64_t o = out.row_ptr[i];
      for (uint64_t p = data.row_ptr[i]; p < data.row_ptr[i + 1]; ++p) {
        const uint32_t s = map.slot(data.keys[p]);
        if (s == SlotMap::kDropped) continue;
        out.cols[o] = s;
        if (!all_ones) out.vals[o] = data.values[p];
        ++o;
      }
    }
  });
  return out;
}

}  // namespace parafab::worker

#include "worker/hot_slots.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "parafab/config.h"
#include "worker/parallel_ranges.h"

namespace parafab::worker {
namespace {

constexpr size_t kSampleRows = 8192;
constexpr uint64_t kDenseSlots = uint64_t{1} << 24;  // models up to 2^24 slots rename by a table

// Slot -> rank of the few hot slots when the model is too large for a table
// indexed by slot (below): open addressing at load <= 1/8, so the lookup of a
// cold slot (most nonzeros) stays in L1 or L2 and nearly always ends at its
// first probe; that first probe is branch-free.
class HotIndex {
 public:
  explicit HotIndex(const std::vector<uint32_t>& slots)
      : mask_(std::bit_ceil(std::max<size_t>(64, 8 * slots.size())) - 1),
        keys_(mask_ + 1, kEmpty),
        ranks_(mask_ + 1, kCold) {
    for (size_t r = 0; r < slots.size(); ++r) {
      size_t i = hash(slots[r]);
      while (keys_[i] != kEmpty) i = (i + 1) & mask_;
      keys_[i] = slots[r];
      ranks_[i] = static_cast<uint32_t>(r);
    }
  }
  // The rank of slot s, or kCold.
  uint32_t find(uint32_t s) const {
    size_t i = hash(s);
    uint32_t k = keys_[i];
    while (k != s && k != kEmpty) {
      i = (i + 1) & mask_;
      k = keys_[i];
    }
    return k == s ? ranks_[i] : kCold;
  }
  static constexpr uint32_t kCold = 0xffffffffu;

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;  // slots stay below 2^31 + 1
  size_t hash(uint32_t s) const { return (s * 0x9e3779b1u >> 7) & mask_; }
  size_t mask_;
  std::vector<uint32_t> keys_;
  std::vector<uint32_t> ranks_;
};

}  // namespace

HotSlots find_hot_slots(const SlotCsr& data, uint32_t bias_slot, uint64_t n_slots, size_t max_hot,
                        int threads) {
  if (PARAFAB_CUDA) throw std::logic_error("find_hot_slots: host backend only (it writes the columns on the host)");
  if (max_hot < 1) throw std::invalid_argument("find_hot_slots: max_hot must be >= 1");
  if (n_slots + max_hot > 0xffffffffu) {
    throw std::invalid_argument(fmt::format(
        "find_hot_slots: {} slots and {} hot copies do not fit 32-bit columns", n_slots, max_hot));
  }
  HotSlots hot;
  hot.slots.push_back(bias_slot);

  // Frequencies in a sample of evenly spaced rows.
  const size_t n = data.rows();
  const size_t step = std::max<size_t>(1, n / kSampleRows);
  std::vector<uint32_t> sample;
  for (size_t i = 0; i < n; i += step) {
    sample.insert(sample.end(), data.cols.begin() + static_cast<ptrdiff_t>(data.row_ptr[i]),
                  data.cols.begin() + static_cast<ptrdiff_t>(data.row_ptr[i + 1]));
  }
  std::sort(sample.begin(), sample.end());
  std::vector<std::pair<uint32_t, uint32_t>> counted;  // (count, slot)
  for (size_t i = 0; i < sample.size();) {
    size_t j = i;
    while (j < sample.size() && sample[j] == sample[i]) ++j;
    if (j - i >= 2 && sample[i] != bias_slot) counted.emplace_back(static_cast<uint32_t>(j - i), sample[i]);
    i = j;
  }
  const size_t take = std::min(counted.size(), max_hot - 1);
  std::partial_sort(counted.begin(), counted.begin() + static_cast<ptrdiff_t>(take), counted.end(),
                    [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (size_t r = 0; r < take; ++r) hot.slots.push_back(counted[r].second);
  if (hot.slots.size() == 1) return hot;

  // The renamed columns, the nonzeros split among the threads.
  const auto base = static_cast<uint32_t>(n_slots);
  const size_t nnz = data.cols.size();
  // Backend memory is uninitialised and, at this size, on huge pages: the
  // threads' first writes fault it in 2 MiB at a time (0.1 s less here for
  // 40M nonzeros than a zero-filled vector).
  hot.cols = kernels::DeviceArray<uint32_t>(nnz);
  uint32_t* out = hot.cols.data();
  if (n_slots <= kDenseSlots && hot.slots.size() <= 0xffff) {
    // rank + 1 by slot, 0 when cold: 2 bytes a slot (2 MiB for 2^20 slots),
    // a third faster than the hash table here (40M nonzeros: 0.07 s, 0.11 s).
    std::vector<uint16_t> rank(n_slots, 0);
    for (size_t r = 0; r < hot.slots.size(); ++r) rank[hot.slots[r]] = static_cast<uint16_t>(r + 1);
    parallel_ranges(nnz, threads, [&](size_t lo, size_t hi) {
      for (size_t k = lo; k < hi; ++k) {
        const uint32_t c = data.cols[k];
        const uint32_t r = rank[c];
        out[k] = r == 0 ? c : base + r - 1;
      }
    });
    return hot;
  }
  const HotIndex index(hot.slots);
  parallel_ranges(nnz, threads, [&](size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; ++k) {
      const uint32_t c = data.cols[k];
      const uint32_t r = index.find(c);
      out[k] = r == HotIndex::kCold ? c : base + r;
    }
  });
  return hot;
}

}  // namespace parafab::worker

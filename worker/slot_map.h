// From 64-bit feature keys to the slots of a local weight vector.
//
// Direct: slot = key, for data whose keys are small integers (libsvm indices);
// exact, no collisions. Hashed: slot = mix64(key) mod 2^bits, for hashed keys
// (Criteo) or when asked (--hash-bits), VW style. Slot `dim` is the bias.
//
//   worker::SlotMap map = worker::SlotMap::for_data(train.view(), /*hash_bits=*/0);
//   worker::SlotCsr csr = worker::SlotCsr::build(test.view(), map, threads);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/key_hash.h"
#include "worker/dataset.h"

namespace parafab::worker {

enum class SlotMode : uint32_t { kDirect = 0, kHashed = 1 };

struct SlotMap {
  SlotMode mode = SlotMode::kDirect;
  uint64_t dim = 0;  // feature slots; the bias is slot dim

  static constexpr uint32_t kDropped = UINT32_MAX;
  // Largest direct dimension chosen automatically (2^24 slots, 64 MiB of weights).
  static constexpr uint64_t kMaxAutoDirect = 1ULL << 24;
  static constexpr int kDefaultHashBits = 22;

  // hash_bits > 0: hashed with 2^hash_bits slots. hash_bits == 0: direct when
  // every key is below kMaxAutoDirect, else hashed with kDefaultHashBits.
  // Throws std::invalid_argument for hash_bits outside [0, 31].
  static SlotMap for_data(const DatasetView& data, int hash_bits);

  uint32_t slot(uint64_t key) const {
    if (mode == SlotMode::kDirect) return key < dim ? static_cast<uint32_t>(key) : kDropped;
    return static_cast<uint32_t>(ps::mix64(key) & (dim - 1));
  }
  uint32_t bias_slot() const { return static_cast<uint32_t>(dim); }
  uint64_t slots_with_bias() const { return dim + 1; }
  std::string describe() const;
};

// A data set with keys replaced by slots (keys a direct map does not cover,
// unseen in training, are dropped and counted). When every value is 1 the
// values array is left empty, which the kernels read as "all ones".
struct SlotCsr {
  std::vector<uint64_t> row_ptr;
  std::vector<uint32_t> cols;
  std::vector<float> vals;  // empty: all ones
  std::vector<float> labels;
  uint64_t dropped = 0;

  size_t rows() const { return labels.size(); }
  static SlotCsr build(const DatasetView& data, const SlotMap& map, int threads);
};

}  // namespace parafab::worker

// The most frequent slots of a training set, for Hogwild with per-thread
// copies of them (kernels::hogwild_sgd_parts): the slot list and the data's
// columns with each hot slot renamed.
//
//   worker::HotSlots hot =
//       worker::find_hot_slots(csr, map.bias_slot(), map.slots_with_bias(), /*max_hot=*/4096, threads);
//   // hot.slots[r]: hot slot r's index in the model (the bias is r = 0)
//   // hot.cols: csr.cols with every hot slot hot.slots[r] written as n_slots + r
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/device_array.h"
#include "worker/slot_map.h"

namespace parafab::worker {

struct HotSlots {
  std::vector<uint32_t> slots;  // distinct; the bias first, then by falling frequency
  kernels::DeviceArray<uint32_t> cols;  // data.cols renamed (empty when slots holds only the bias)
};

// Picks up to max_hot slots: the bias, then the slots seen most often in a
// sample of about 8192 evenly spaced rows (twice at least), and renames them
// in a copy of data.cols (4 bytes per nonzero; `threads` share the renaming).
// n_slots is the model's slot count, bias included; max_hot >= 1. Host
// backend only (std::logic_error under CUDA, where Hogwild has no copies).
HotSlots find_hot_slots(const SlotCsr& data, uint32_t bias_slot, uint64_t n_slots, size_t max_hot,
                        int threads);

}  // namespace parafab::worker

// A trained linear model and its file format (`--save-model`, `parafab predict`).
//
// File: a 64-byte little-endian header {magic "PFABLIN1", format version,
// loss, slot mode, dim, weight count, xxHash64 of the weights, xxHash64 of the
// header}, then the float weights (bias last). Written to a temp file, fsynced
// and renamed, so a crash never leaves half a model under the final name.
//
//   worker::save_linear_model("model.pfm", model);
//   worker::LinearModel m = worker::load_linear_model("model.pfm");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/csr_batch.h"
#include "worker/slot_map.h"

namespace parafab::worker {

struct LinearModel {
  kernels::Loss loss = kernels::Loss::kLogistic;
  SlotMap map;
  std::vector<float> weights;  // map.slots_with_bias() entries, bias last
};

inline constexpr uint32_t kLinearModelVersion = 1;

// Throws DataError naming the path on I/O errors.
void save_linear_model(const std::string& path, const LinearModel& model);
// Throws DataError naming the path and what is wrong: missing, bad magic,
// unsupported version, truncated, checksum mismatch.
LinearModel load_linear_model(const std::string& path);

}  // namespace parafab::worker

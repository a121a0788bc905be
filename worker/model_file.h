// A trained fm or dnn model and its file format (`--save-model`, `parafab
// predict`): the model's description, its slot map, every key of the sparse
// table that training touched with its values, and the MLP's parameters.
//
// File: a 48-byte little-endian header {magic "PFABMDL1", u32 format
// version, u32 0, u64 payload bytes, u64 xxHash64 of the payload, u64 0,
// u64 xxHash64 of the header's first 40 bytes}, then the payload: the spec
// (kind, factors, embedding dim, classes, dense inputs, fields, hidden sizes,
// the field of each key namespace, the sparse table's initializer and
// updater), the slot
// map, the keys (u64) and their values (width floats each), the MLP's flat
// parameters (kernels/mlp.h layout). Written to a temp file, fsynced and
// renamed. A key absent from the file reads as the table's initial value,
// exactly as the servers would have answered.
//
//   worker::SavedModel m = trainer.gather(train_rows, map);
//   worker::save_model_file("model.pfm", m);
//   worker::SavedModel back = worker::load_model_file("model.pfm");   // DataError when corrupt
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/model_spec.h"
#include "worker/slot_map.h"

namespace parafab::worker {

struct SavedModel {
  ModelSpec spec;
  SlotMap map;
  std::vector<uint64_t> keys;  // sorted, unique
  std::vector<float> values;   // keys.size() x spec.sparse_width()
  std::vector<float> mlp;      // dnn: kernels::mlp_parameter_count(spec.mlp_shape()) floats
};

inline constexpr uint32_t kModelFileVersion = 1;

// Throws DataError naming the path on I/O errors, std::invalid_argument when
// the arrays do not fit the spec.
void save_model_file(const std::string& path, const SavedModel& model);
// Throws DataError naming the path and what is wrong: missing, not a model
// file (a linear model file is named as such), version, truncated,
// checksum, inconsistent sizes.
SavedModel load_model_file(const std::string& path);
// True when the file starts with the fm/dnn magic (predict picks the reader).
bool is_model_file(const std::string& path);

}  // namespace parafab::worker
